"""Operators: serialize/deserialize, compress/decompress, transforms, metrics."""

"""What the fixed layouts (``layout.py``) share: their names and how each fixed-width type is stored.

The encoders (``layout_encoders.py``) and decoders (``layout_decoders.py``) are built from it once
per schema; ``layout.py`` has the layouts' table and the format itself.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable
from typing import Any

BINCODE, POSTCARD, BINCODE_VARINT = "bincode", "postcard", "bincode-varint"  # the layouts, by format name
LAYOUTS = (BINCODE, POSTCARD, BINCODE_VARINT)

Enc = Callable[[Any, list[bytes]], None]  # writes one value's bytes onto the list
Dec = Callable[[bytes, int], tuple[Any, int]]  # reads one value at a position: (value, the next position)

NP = {"int32": "<i4", "int64": "<i8", "uint32": "<u4", "float32": "<f4", "float64": "<f8"}  # numpy dtypes
ST = {"int32": struct.Struct("<i"), "int64": struct.Struct("<q"), "uint32": struct.Struct("<I"),
      "float32": struct.Struct("<f"), "float64": struct.Struct("<d")}
U64 = struct.Struct("<Q")  # bincode's lengths and counts
# The ``array`` typecodes that hold each fixed-width kind as bincode writes it (little-endian, that width), on a
# little-endian host: ``array(code, values)`` refuses a value out of the kind's range or of another type (a float,
# a str) in one C loop, as ``struct`` does record by record. Empty elsewhere (the numpy path is used).
ARRAY = {kind: code for kind, code in (("int32", "i"), ("int64", "q"), ("uint32", "I"), ("float32", "f"),
                                       ("float64", "d"))
         if sys.byteorder == "little" and array(code).itemsize == ST[kind].size}
BYTES_LIKE = (bytes, bytearray, memoryview)

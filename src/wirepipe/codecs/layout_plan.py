"""What the fixed layouts (``layout.py``) share: their names and how each fixed-width type is stored.

The encoders (``layout_encoders.py``) and decoders (``layout_decoders.py``) are built from it once
per schema; ``layout.py`` has the layouts' table and the format itself.
"""

from __future__ import annotations

import struct
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
BYTES_LIKE = (bytes, bytearray, memoryview)

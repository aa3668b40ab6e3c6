"""Fixed binary layouts from a typed schema: ``bincode`` (fixint), ``postcard`` (LEB128 varints)
and ``bincode-varint`` (bincode 2's default ``config::standard()`` varints).

These are the Python counterparts of the FlatMessage tables' bincode and postcard rows, and their
bytes are the bytes Rust writes for the same struct, so a Rust peer reads them with
``bincode::deserialize`` (bincode 1.x, or bincode 2 with ``config::legacy()``),
``postcard::from_bytes``, or bincode 2's ``decode_from_slice(.., config::standard())`` (the
tables' "bincode (schema)" row, 2 bytes for their Point). No maintained Python library writes
these layouts, hence this one. The layout, field by field in schema order, nothing between fields:

=================  ==========================  ===========================  ============================
type               bincode (fixint, LE)        postcard                     bincode-varint (LE)
=================  ==========================  ===========================  ============================
int32 / uint32     4 bytes (two's complement)  zigzag / plain LEB128 (<=5)  zigzag / plain bvarint (<=5)
int64              8 bytes                     zigzag LEB128 (<= 10 B)      zigzag bvarint (<= 9 B)
float32 / float64  4 / 8 bytes IEEE 754        4 / 8 bytes IEEE 754         4 / 8 bytes IEEE 754
bool               1 byte, 0 or 1              1 byte, 0 or 1               1 byte, 0 or 1
string, bytes      u64 length, then the bytes  LEB128 length, the bytes     bvarint length, the bytes
bytes[N]           the N bytes ([u8; N])       the N bytes                  the N bytes
list<T>            u64 count, then each item   LEB128 count, each item      bvarint count, each item
record             its fields in order         its fields in order          its fields in order
T? (optional)      1 byte 0 (None) or 1, value same                         same
=================  ==========================  ===========================  ============================

The varints (zigzag, LEB128, bincode 2's bvarint) are ``varints.py``'s: a bvarint of u is the byte
u when u < 251, else 251 then u as u16 LE (u < 2**16), 252 then u32 LE (u < 2**32), 253 then u64
LE: 250 -> ``fa``, 251 -> ``fb fb 00``, 65536 -> ``fc 00 00 01 00``. The decoder takes the longer
forms (bincode's does), and refuses 254, 255 and a tag wider than the field (253 in a 32-bit
field), as bincode's ``InvalidIntegerType``.
A record with a field the schema does not declare is refused, not written without it (one
``len`` per record: every field was read, so more keys than fields is one too many).
A message framed with several records (``pack`` before ``serialize``) is ``Vec<Record>``: the
count (u64 LE / varint) then the records. A message is one record or one Vec, never both: the
decoder is told which (``framed: true``), as a Rust peer would be by its type.

Here: the ``Layout`` (one record or a Vec per message, and the batch-at-a-time paths below);
the per-record writers and readers are ``layout_encoders.py`` and ``layout_decoders.py``.

Speed: records whose fields all have a fixed width (``point``) are packed and unpacked a batch
at a time with numpy (one structured array, one varint matrix, or for bincode-varint one numpy
step per field across the batch), not record by record; numeric lists (``large_vectors``) are
one numpy call per list (bincode-varint decodes a list of mixed widths with a Python walk over
the first bytes, ~60 ns a value, then one numpy gather).
"""

from __future__ import annotations

from array import array
from itertools import accumulate, chain
from typing import Any

from ..schema import INTS, Kind, RecordSchema, Type
from .layout_decoders import decoder, list_decoder
from .layout_encoders import encoder, length_writer, list_encoder
from .layout_plan import ARRAY, BINCODE, BINCODE_VARINT, LAYOUTS, NP, POSTCARD, U64, Dec
from .varints import (
    BVARINT_LENGTHS,
    MAX_TAG,
    VARINT_MAX,
    bad_tag,
    bvarint_matrix,
    bvarint_values,
    corrupt,
    read_varints,
    unzigzag_array,
    varint_matrix,
    zigzag_array,
)

# --- the format: one record or a Vec of records per message ------------------------------------------


class Layout:
    """One of the three layouts for one record schema: ``bincode`` (fixint), ``postcard``
    (LEB128 varints) or ``bincode-varint`` (bincode 2's ``standard()`` varints).

    ``layout`` is the format name.
    """

    def __init__(self, schema: RecordSchema, layout: str) -> None:
        fmt = layout
        if fmt not in LAYOUTS:
            raise ValueError(f"unknown layout {fmt!r}: allowed {', '.join(LAYOUTS)}")
        self.schema = schema
        self.fmt = fmt
        self.varints = fmt != BINCODE
        rec = Type(Kind.RECORD, record=schema)
        self._enc = encoder(rec, fmt)
        self._dec = decoder(rec, fmt)
        self._vec_enc = list_encoder(rec, fmt)
        self._vec_dec = list_decoder(rec, fmt)
        self._flat = all(f.type.kind in NP or f.type.kind == Kind.BOOL for f in schema.fields) and \
            not any(f.type.optional for f in schema.fields)
        self._dtype = self._struct_dtype() if self._flat else None
        # bincode rows written field by field with ``array`` (layout_plan.ARRAY): every field a number it holds
        self._arrays = [(f.name, ARRAY[f.type.kind]) for f in schema.fields] \
            if self._flat and all(f.type.kind in ARRAY for f in schema.fields) else None

    def _struct_dtype(self) -> Any:
        import numpy as np

        return np.dtype([(f.name, NP.get(f.type.kind, "u1")) for f in self.schema.fields])

    # per record -----------------------------------------------------------------------------
    def encode(self, value: Any) -> bytes:
        out: list[bytes] = []
        if type(value) is list:
            if self._flat and value and type(value[0]) is dict:
                return self._encode_framed([value])[0]  # a Vec of fixed-size records: one numpy pass
            self._vec_enc(value, out)
        else:
            self._enc(value, out)
        return b"".join(out)

    def _whole(self, dec: Dec, data: bytes) -> Any:
        if not isinstance(data, bytes):
            data = bytes(data)
        value, end = dec(data, 0)
        if end != len(data):
            raise corrupt(self.fmt, f"{len(data) - end} trailing bytes after the {self.schema.name}")
        return value

    def decode(self, data: bytes) -> Any:
        return self._whole(self._dec, data)

    def decode_framed(self, data: bytes) -> Any:
        if self._flat and not self.varints and len(data) >= 8:
            # Vec of fixed-size records: the count, then n records of one numpy dtype
            n = U64.unpack_from(data)[0]
            size = self._dtype.itemsize  # type: ignore[union-attr]
            if len(data) != 8 + n * size:
                raise corrupt(self.fmt, f"{n} records announced: expected {8 + n * size} bytes, got {len(data)}")
            return self._records(self._bincode_columns(data[8:], n))
        return self._whole(self._vec_dec, data)

    def decode_framed_column(self, payloads: list[bytes]) -> list[list[Any]]:
        """Every framed message of the batch at once (``Vec<Record>`` each): for fixed-size records one numpy
        pass over all their rows, then the records cut back into one list per message (a per-message numpy
        pass cost ~12 us of overhead per message, as much as 100 ``point`` records' dicts); raises if any
        message does not fit."""
        if not self._flat or self.varints or not payloads:
            return [self.decode_framed(p) for p in payloads]
        size = self._dtype.itemsize  # type: ignore[union-attr]
        counts = [U64.unpack_from(p)[0] for p in payloads]
        if any(len(p) != 8 + n * size for p, n in zip(payloads, counts, strict=True)):
            raise corrupt(self.fmt, "a message's length is not its announced records'")
        records = self._records(self._bincode_columns(b"".join([memoryview(p)[8:] for p in payloads]), sum(counts)))
        ends = list(accumulate(counts))
        return [records[e - n:e] for n, e in zip(counts, ends, strict=True)]

    def _records(self, cols: list[list[Any]]) -> list[dict[str, Any]]:
        names = self.schema.names
        if len(names) == 2:
            a, b = names
            return [{a: x, b: y} for x, y in zip(*cols, strict=True)]
        return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]

    # a batch at a time, for records whose fields all have a fixed width --------------------------
    def encode_column(self, values: list[Any]) -> list[bytes]:
        """Every value of the batch at once: records (dicts), or framed messages (lists of dicts, ``pack``'s);
        raises if any does not fit."""
        if not self._flat or not values:
            return [self.encode(v) for v in values]
        first = type(values[0])
        if first is list:
            return self._encode_framed(values)
        if first is not dict:
            return [self.encode(v) for v in values]
        return self._encode_varint_rows(values) if self.varints else self._encode_bincode(values)

    def _encode_framed(self, messages: list[list[Any]]) -> list[bytes]:
        """Every framed message of the batch from one numpy pass over all their records, cut back into one
        ``Vec<Record>`` per message: a numpy pass per message cost as much again as its 100 ``point``
        records (the encode side of ``decode_framed_column``)."""
        records = list(chain.from_iterable(messages)) if all(type(m) is list for m in messages) else []
        if not records or type(records[0]) is not dict:
            return [self.encode(m) for m in messages]
        counts = list(map(len, messages))
        ends = list(accumulate(counts))
        if self.varints:
            rows = self._encode_varint_rows(records)
            count = length_writer(self.fmt)
            return [count(n) + b"".join(rows[e - n:e]) for n, e in zip(counts, ends, strict=True)]
        buf = self._bincode_rows(records)
        size = self._dtype.itemsize  # type: ignore[union-attr]
        pack = U64.pack
        return [pack(n) + buf[(e - n) * size:e * size] for n, e in zip(counts, ends, strict=True)]

    def _bincode_rows(self, values: list[Any]) -> bytes:
        """The records' bincode rows, one after another. Where every field is a number ``array`` holds, each field
        is one ``array`` over the column (its C loop refuses a value of another type or out of range, as the
        record-by-record writer does) and numpy lays the fields side by side: ~2/3 of the time of numpy reading
        Python ints itself (``_columns``). ``array`` takes a bool for 1 or 0, as numpy does in a column of numbers:
        a column that starts with one keeps numpy's path, which refuses a column of bools."""
        fields = self._arrays
        if fields is None or type(values[0].get(fields[0][0])) is bool:
            return self._bincode_array(values).tobytes()
        cols = [array(code, [r[name] for r in values]) for name, code in fields]
        # every field was read from every record, so a record with more keys has one the schema does not declare
        if max(map(len, values)) != len(cols):
            raise ValueError("a field the schema does not declare")
        if len(cols) == 1:
            return cols[0].tobytes()
        import numpy as np

        arr = np.empty(len(values), dtype=self._dtype)
        for (name, _), col in zip(fields, cols, strict=True):
            arr[name] = np.frombuffer(col, arr.dtype[name])
        return arr.tobytes()

    def _bincode_array(self, values: list[Any]) -> Any:
        import numpy as np

        arr = np.empty(len(values), dtype=self._dtype)
        for f, col in zip(self.schema.fields, self._columns(values), strict=True):
            arr[f.name] = col
        return arr

    def _columns(self, values: list[Any]) -> list[Any]:
        import numpy as np

        cols = []
        for f in self.schema.fields:
            col = np.asarray([r[f.name] for r in values])
            kind = f.type.kind
            if kind == Kind.BOOL:
                if col.dtype.kind != "b":
                    raise TypeError(f"{f.name}: expected bool")
            elif kind in INTS:
                if col.dtype.kind not in "iu":
                    raise TypeError(f"{f.name}: expected {kind}")
                lo, hi = INTS[kind]
                if int(col.min()) < lo or int(col.max()) > hi:
                    raise OverflowError(f"{f.name}: out of range for {kind}")
            elif col.dtype.kind not in "iuf":
                raise TypeError(f"{f.name}: expected {kind}")
            cols.append(col)
        # every field was read from every record, so a record with more keys has one the schema does not declare
        if values and max(map(len, values)) != len(cols):
            raise ValueError("a field the schema does not declare")
        return cols

    def _encode_bincode(self, values: list[Any]) -> list[bytes]:
        n = len(values)
        buf = self._bincode_rows(values)
        size = self._dtype.itemsize  # type: ignore[union-attr]
        return [buf[i:i + size] for i in range(0, n * size, size)]

    def _field_matrix(self, f: Any, col: Any) -> tuple[Any, Any]:
        import numpy as np

        kind = f.type.kind
        if kind in INTS:
            u = zigzag_array(col, 64 if kind == Kind.INT64 else 32) if kind != Kind.UINT32 else col.astype(np.uint64)
            return varint_matrix(u, VARINT_MAX[kind]) if self.fmt == POSTCARD else bvarint_matrix(u)
        m = col.astype(NP.get(kind, "u1")).view(np.uint8).reshape(len(col), -1)
        return m, np.ones(m.shape, dtype=bool)

    def _encode_varint_rows(self, values: list[Any]) -> list[bytes]:
        """postcard or bincode-varint: each field's bytes as a matrix with a mask, all fields side by side."""
        import numpy as np

        parts = [self._field_matrix(f, c) for f, c in zip(self.schema.fields, self._columns(values), strict=True)]
        m = np.hstack([p[0] for p in parts])
        mask = np.hstack([p[1] for p in parts])
        flat = m[mask].tobytes()
        ends = np.cumsum(mask.sum(axis=1)).tolist()
        starts = [0, *ends[:-1]]
        return [flat[a:b] for a, b in zip(starts, ends, strict=True)]

    def decode_column(self, payloads: list[bytes]) -> list[Any]:
        """Every payload of the batch at once (one record each); raises if any does not fit."""
        if not self._flat or not payloads:
            return [self.decode(p) for p in payloads]
        if self.fmt == BINCODE_VARINT:
            return self._records(self._decode_bincode_varint(payloads))
        return self._records(self._decode_postcard(payloads) if self.varints else self._decode_bincode(payloads))

    def _decode_bincode(self, payloads: list[bytes]) -> list[list[Any]]:
        size = self._dtype.itemsize  # type: ignore[union-attr]
        buf = b"".join(payloads)
        if len(buf) != size * len(payloads) or any(len(p) != size for p in payloads):
            raise corrupt(self.fmt, "a message is not one record long")
        return self._bincode_columns(buf, len(payloads))

    def _bincode_columns(self, buf: bytes, n: int) -> list[list[Any]]:
        import numpy as np

        arr = np.frombuffer(buf, dtype=self._dtype, count=n)
        cols = []
        for f in self.schema.fields:
            col = arr[f.name]
            if f.type.kind == Kind.BOOL:
                if (col.view(np.uint8) > 1).any():
                    raise corrupt(self.fmt, "corrupt bool")
                col = col.astype(bool)
            cols.append(col.tolist())
        return cols

    def _decode_postcard(self, payloads: list[bytes]) -> list[list[Any]]:
        import numpy as np

        if any(f.type.kind not in INTS for f in self.schema.fields):
            return [list(col) for col in zip(*(self.decode(p).values() for p in payloads), strict=True)]
        nf = len(self.schema.fields)
        buf = b"".join(payloads)
        n = len(payloads)
        maxlen = max(VARINT_MAX[f.type.kind] for f in self.schema.fields)
        u, end = read_varints(buf, 0, n * nf, maxlen, self.fmt)
        if end != len(buf):
            raise corrupt(self.fmt, "trailing bytes after a record")
        # every message must end exactly where its record's last varint ends
        window = np.frombuffer(buf, dtype=np.uint8)
        last = np.flatnonzero(window < 0x80)[nf - 1::nf] + 1
        if not np.array_equal(last, np.cumsum([len(p) for p in payloads])):
            raise corrupt(self.fmt, "a message is not one record long")
        cols = []
        for j, f in enumerate(self.schema.fields):
            c = u[j::nf]
            v = unzigzag_array(c) if f.type.kind != Kind.UINT32 else c
            lo, hi = INTS[f.type.kind]
            if int(v.min()) < lo or int(v.max()) > hi:
                raise corrupt(self.fmt, f"{f.name}: a varint is out of range for {f.type.kind}")
            cols.append(v.tolist())
        return cols

    def _decode_bincode_varint(self, payloads: list[bytes]) -> list[list[Any]]:
        """Field by field across the batch: every message's next field read at once (a varint's width
        is in its first byte), so a record of k fields is k numpy steps whatever the batch size."""
        import numpy as np

        sizes = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(sizes)
        pos = ends - sizes
        w = np.frombuffer(b"".join(payloads) + bytes(9), dtype=np.uint8)
        cols = []
        for f in self.schema.fields:
            kind = f.type.kind
            if (pos >= ends).any():
                raise corrupt(self.fmt, f"truncated: a message ends before {f.name}")
            if kind in INTS:
                u, tag = bvarint_values(w, pos)
                width = np.frombuffer(BVARINT_LENGTHS[MAX_TAG[kind]], dtype=np.uint8)[tag]
                if not width.all():
                    bad = int(np.flatnonzero(width == 0)[0])
                    raise bad_tag(self.fmt, int(tag[bad]), int(pos[bad]), MAX_TAG[kind])
                pos = pos + width
                cols.append((unzigzag_array(u) if kind != Kind.UINT32 else u).tolist())
                continue
            size = np.dtype(NP.get(kind, "u1")).itemsize
            raw = w[pos[:, None] + np.arange(size)].copy()
            if kind == Kind.BOOL:
                if (raw > 1).any():
                    raise corrupt(self.fmt, f"corrupt bool in {f.name} (0 or 1 allowed)")
                cols.append((raw[:, 0] == 1).tolist())
            else:
                cols.append(raw.view(NP[kind])[:, 0].tolist())
            pos = pos + size
        if not np.array_equal(pos, ends):
            raise corrupt(self.fmt, "a message is not one record long")
        return cols

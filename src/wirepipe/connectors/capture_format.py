"""The capture format: messages as they were received, in Parquet files that replays can split.

A capture is a folder of Parquet files with one row per message (columns in
``CAPTURE_COLUMNS``). The ``capture`` sink (``capture_sink.py``) writes them
(``capture_table``: a batch as rows); the ``capture`` source (``capture_source.py``)
and replays read them back (``capture_files``, ``plan_row_groups``, ``batch_from_arrow``)
as batches shaped like the ones a NATS source yields (payloads as received, per record
subjects and headers, ``sent_ns``/``received_ns``/``stream_seq`` meta), so a replayed
pipeline cannot tell the difference and ``decompress: auto`` / ``deserialize: auto``
work from the captured headers.

Capture order is the order of the files' names, then of their rows; a replay splits
work by row group. Files still being written are hidden (``.NAME.PID.inprogress``) and
never read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.batch import Batch
from ..core.errors import ConfigError, WirepipeError
from ..storage.files import find_files
from ..wire import Header
from .connector import Unreadable

log = logging.getLogger("wirepipe.capture")

FORMAT_VERSION = 1

CAPTURE_COLUMNS: dict[str, str] = {
    "seq": "record number in the capture written by one sink, from 0, continuing across its rotated files",
    "subject": "NATS subject the message was received on",
    "headers": "message headers as received (map<string,string>; null when the message had none)",
    "payload": "message payload, bytes exactly as received",
    "sent_ns": "publish time from the Wirepipe-Sent-At header, ns since the Unix epoch (null if absent)",
    "received_ns": "time the consumer received the message, ns since the Unix epoch",
    "stream_seq": "JetStream stream sequence (null for core NATS)",
}


def capture_schema(metadata: dict[str, str] | None = None) -> Any:
    import pyarrow as pa

    return pa.schema([
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("subject", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("sent_ns", pa.int64()),
        pa.field("received_ns", pa.int64()),
        pa.field("stream_seq", pa.int64()),
    ], metadata=metadata)


# --- writing ---------------------------------------------------------------------------------------


def _parse_ns(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def capture_table(batch: Batch, first_seq: int, schema: Any) -> Any:
    """A batch of payloads as capture rows (a ``pyarrow.Table``); refuses decoded values."""
    import pyarrow as pa

    values = batch.values
    n = len(values)
    if n and not isinstance(values[0], (bytes, bytearray, memoryview)):
        # The pipeline's shape, not the sink's state nor a record: stop (a sink failure would be retried).
        raise ConfigError(
            f"the capture sink stores payloads as received, but got {type(values[0]).__name__} values: "
            "put it before any deserialize operator (or after serialize)")
    subject = pa.array(batch.subjects_column(), pa.string())
    headers = batch.headers
    if headers is None:
        header_array = pa.nulls(n, schema.field("headers").type)
        per_record: list[dict[str, str] | None] = [None] * n
    else:
        per_record = batch.headers_column()
        header_array = _map_array(per_record)
    meta = batch.meta
    sent = meta.get("sent_ns")
    if sent is None:
        key = Header.SENT_AT
        sent = [_parse_ns(h.get(key)) if h else None for h in per_record]
    received = meta.get("received_ns")
    if received is None:  # the source did not stamp it: the time the sink got the batch
        received = [time.time_ns()] * n
    stream_seq = meta.get("stream_seq")
    return pa.Table.from_arrays([
        pa.array(range(first_seq, first_seq + n), pa.int64()),
        subject,
        header_array,
        pa.array(values, pa.binary()),
        pa.array(sent, pa.int64()),
        pa.array(received, pa.int64()),
        pa.nulls(n, pa.int64()) if stream_seq is None else pa.array(stream_seq, pa.int64()),
    ], schema=schema)


def _map_array(headers: list[dict[str, str] | None]) -> Any:
    """Per-record header dicts as a map array, built from flat key/value columns (the fast way)."""
    import pyarrow as pa

    keys: list[str] = []
    items: list[str] = []
    offsets = [0]
    valid = []
    end = 0
    for h in headers:
        if h:
            keys.extend(h)
            items.extend(h.values())
            end += len(h)
        offsets.append(end)
        valid.append(h is not None)
    mask = None if all(valid) else pa.array([not v for v in valid])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(items, pa.string()), mask=mask)


# --- reading ---------------------------------------------------------------------------------------


def capture_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """The capture files named by files, folders (recursively, in name order) and globs, in capture order.

    Hidden files, among them the ``.inprogress`` files of a running capture, are skipped
    (``storage.find_files`` is the rule).
    """
    return find_files(paths, recursive=True, suffix=".parquet", what="capture file",
                      on_empty=lambda folder: f"{folder}: no capture files (*.parquet) in this folder")


@dataclass(frozen=True)
class RowGroup:
    """One row group of a capture file and where its first row stands in the whole capture."""

    path: str
    index: int
    rows: int
    position: int


def plan_row_groups(paths: str | Path | Iterable[str | Path],
                    unreadable: list[Unreadable] | None = None) -> list[RowGroup]:
    """Every row group of a capture, in capture order, from the file footers alone.

    A file whose footer cannot be read (truncated, not Parquet) raises ``WirepipeError``, or, given
    ``unreadable``, is added to it and left out of the plan.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: list[RowGroup] = []
    position = 0
    for path in capture_files(paths):
        try:
            meta = pq.ParquetFile(str(path)).metadata
        except (pa.ArrowInvalid, OSError) as exc:
            if unreadable is None:
                raise WirepipeError(f"{path}: not a readable Parquet file ({exc})") from None
            unreadable.append(Unreadable(str(path), None, None, f"not a readable Parquet file ({exc})"))
            log.error("%s: not a readable Parquet file (%s): replaying the other files", path, exc)
            continue
        names = set(meta.schema.to_arrow_schema().names)
        if "payload" not in names:
            raise WirepipeError(f"{path}: not a capture file (no payload column; columns: {', '.join(sorted(names))})")
        for i in range(meta.num_row_groups):
            rows = meta.row_group(i).num_rows
            out.append(RowGroup(str(path), i, rows, position))
            position += rows
    return out


def batch_from_arrow(rb: Any, position: int | list[int]) -> Batch:
    """Capture rows (an Arrow record batch or table) as a Batch like a NATS source yields; ``position`` is
    the first row's place in the capture (its ``seq``), or each row's when they are a slice.

    ``Wirepipe-Sent-At`` leaves the headers for ``meta["sent_ns"]``; headers that are the
    same for every record (the common case: one publisher) become one shared dict, so
    ``auto`` decoders pick one codec for the whole batch.
    """
    n = rb.num_rows
    names = rb.schema.names
    seqs = list(range(position, position + n)) if isinstance(position, int) else list(position)
    batch = Batch(rb.column("payload").to_pylist(), meta={"seq": seqs})
    if "subject" in names:
        batch.subjects = _subjects(rb.column("subject"))
    if "headers" in names:
        batch.headers = _headers(rb.column("headers"))
    for name in ("sent_ns", "received_ns", "stream_seq"):
        if name in names:
            col = rb.column(name)
            if name != "stream_seq" or col.null_count < n:
                batch.meta[name] = col.to_pylist()
    return batch


def _chunks(col: Any) -> Any:
    """A ChunkedArray (from a Table) as one Array; an Array as is."""
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _subjects(col: Any) -> list[str] | str | None:
    import pyarrow.compute as pc

    col = _chunks(col)
    n = len(col)
    if n == 0 or col.null_count == n:
        return None
    if col.null_count == 0 and pc.count_distinct(col).as_py() == 1:
        return col[0].as_py()
    return col.to_pylist()


def _headers(col: Any) -> list[dict[str, str] | None] | dict[str, str] | None:
    """Header maps without ``Wirepipe-Sent-At``: one shared dict when every record has the same ones."""
    import numpy as np
    import pyarrow.compute as pc

    col = _chunks(col)
    n = len(col)
    if n == 0 or col.null_count == n:
        return None
    offsets = col.offsets.to_numpy()
    base, end = int(offsets[0]), int(offsets[-1])
    offsets = offsets - base
    keys = col.keys.slice(base, end - base)
    items = col.items.slice(base, end - base)
    keep = pc.invert(pc.fill_null(pc.equal(keys, Header.SENT_AT), False))
    kept = np.concatenate([[0], np.cumsum(keep.to_numpy(zero_copy_only=False))])
    lengths = kept[offsets[1:]] - kept[offsets[:-1]]
    if col.null_count == 0 and (lengths == lengths[0]).all():
        width = int(lengths[0])
        if width == 0:
            return None
        k = keys.filter(keep)
        v = items.filter(keep)
        ki = pc.dictionary_encode(k).indices.to_numpy().reshape(n, width)
        vi = pc.dictionary_encode(v).indices.to_numpy().reshape(n, width)
        if (ki == ki[0]).all() and (vi == vi[0]).all():
            return dict(zip(k.slice(0, width).to_pylist(), v.slice(0, width).to_pylist(), strict=True))
    key_list = keys.to_pylist()
    item_list = items.to_pylist()
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
    out: list[dict[str, str] | None] = []
    sent_at = Header.SENT_AT
    for i in range(n):
        if valid is not None and not valid[i]:
            out.append(None)
            continue
        a, b = offsets[i], offsets[i + 1]
        out.append({key: val for key, val in zip(key_list[a:b], item_list[a:b], strict=True) if key != sent_at})
    return out


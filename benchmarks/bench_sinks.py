"""File sinks against hand-written loops doing the same writes, in the same process, interleaved.

    python benchmarks/bench_sinks.py [--records 100000] [--rounds 5]

The sinks pay for their guarantees: every byte goes through a ``SpoolingFile`` (a full disk
loses and duplicates nothing), Parquet records get one column per key of any record (no field
dropped) and a nesting check (a cyclic value cannot crash pyarrow), and the capture writer
writes Parquet through the spool. The baselines are what a user would write by hand:
``orjson`` lines into a buffered file, ``pa.Table.from_pylist`` + one ``ParquetWriter``, and a
``ParquetWriter`` on a path for the capture rows. Ratio > 1 means the sink is faster.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleave, print_table
from wirepipe.codecs.formats import json_default
from wirepipe.connectors.capture_format import capture_table
from wirepipe.connectors.capture_sink import CaptureWriter
from wirepipe.connectors.jsonl import JsonlSink
from wirepipe.connectors.parquet import ParquetSink
from wirepipe.core.batch import Batch
from wirepipe.datasets import get_dataset


def main() -> None:
    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    chunks = [list(c) for c in get_dataset("transaction").records(args.records, 0, args.batch_size)]
    payloads = [[os.urandom(200) for _ in range(args.batch_size)] for _ in range(args.records // args.batch_size)]
    n = sum(map(len, chunks))
    tmp = Path(tempfile.mkdtemp(prefix="bench-sinks-"))

    def sink_run(sink: object) -> int:
        async def go() -> None:
            await sink.open()  # type: ignore[attr-defined]
            for values in chunks:
                await sink.write(Batch(values))  # type: ignore[attr-defined]
            await sink.close()  # type: ignore[attr-defined]

        asyncio.run(go())
        return n

    def jsonl_by_hand() -> int:
        opt = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
        with open(tmp / "hand.jsonl", "wb") as f:
            for values in chunks:
                f.write(b"".join([orjson.dumps(v, default=json_default, option=opt) for v in values]))
        return n

    def parquet_by_hand() -> int:
        writer = None
        for values in chunks:
            table = pa.Table.from_pylist(values)
            if writer is None:
                writer = pq.ParquetWriter(str(tmp / "hand.parquet"), table.schema, compression="zstd")
            writer.write_table(table)
        assert writer is not None
        writer.close()
        return n

    def capture_sink() -> int:
        w = CaptureWriter(tmp / "cap", fsync=False)
        schema = w.schema()
        for i, values in enumerate(payloads):
            w.append(capture_table(Batch(values, subjects="s"), i * len(values), schema))
        w.close()
        return len(payloads) * args.batch_size

    def capture_by_hand() -> int:
        w = CaptureWriter(tmp / "cap", fsync=False)
        schema = w.schema()
        tables = [capture_table(Batch(values, subjects="s"), i * len(values), schema)
                  for i, values in enumerate(payloads)]
        with pq.ParquetWriter(str(tmp / "hand-capture.parquet"), schema, compression="zstd") as writer:
            writer.write_table(pa.concat_tables(tables), row_group_size=65536)
        return len(payloads) * args.batch_size

    results = interleave({"jsonl sink": lambda: sink_run(JsonlSink(tmp / "out.jsonl")),
                          "jsonl by hand": jsonl_by_hand}, rounds=args.rounds)
    print_table(f"JSONL, {n:,} transaction records", results, "jsonl by hand")
    results = interleave({"parquet sink": lambda: sink_run(ParquetSink(tmp / "out.parquet")),
                          "parquet by hand": parquet_by_hand}, rounds=args.rounds)
    print_table(f"Parquet, {n:,} transaction records", results, "parquet by hand")
    results = interleave({"capture writer": capture_sink, "capture by hand": capture_by_hand}, rounds=args.rounds)
    print_table(f"capture, {len(payloads) * args.batch_size:,} payloads of 200 B", results, "capture by hand")


if __name__ == "__main__":
    main()

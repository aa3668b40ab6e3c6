"""Replay of a capture: wirepipe's local and Beam runners vs a plain pyarrow loop doing the same work.

    python benchmarks/bench_replay.py [--count N] [--rounds R] [--batch-size B]

The capture (``block`` records, msgpack|zstd:fastest, with the headers and timings a
NATS capture has) is generated once into ``benchmarks/.cache/`` (not committed) and
reused. Each variant replays all of it through decompress -> deserialize -> null:

- plain loop: ``ParquetFile.iter_batches(columns=["payload"])`` and a comprehension of
  ``msgpack.unpackb(zstd.decompress(v))`` over each batch (what one would write by hand);
- wirepipe local: ``local.run`` of a pipeline ``decompress: auto``, ``deserialize: auto``,
  ``sink: null`` (the capture source also reads subjects, headers and timings);
- wirepipe local, 2 workers: the same split across two processes (row groups);
- wirepipe Beam: the Beam runner on FnApiRunner (one DoFn per row group; it writes
  metrics rows too).

Targets (issue 6): local >= 0.9x the plain loop; Beam >= 0.7x. Variants run
interleaved, one after the other in every round; ratios are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import interleave, print_table
from wirepipe.connectors.capture_format import capture_files, capture_table
from wirepipe.connectors.capture_sink import CaptureWriter
from wirepipe.core.batch import Batch
from wirepipe.datasets import get_dataset
from wirepipe.replay import Replay, beam, local
from wirepipe.wire import Header

CACHE = Path(__file__).parent / ".cache"
PIPELINE = """\
name: bench-replay
source: {type: generate}
operators:
  - decompress: {codec: auto}
  - deserialize: {format: auto}
sink: {type: "null"}
"""


def make_capture(count: int) -> Path:
    """The benchmark capture, generated once per record count."""
    folder = CACHE / f"replay-block-{count}"
    done = folder / ".complete"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    import msgpack
    import zstandard

    print(f"generating a capture of {count:,} block records in {folder} (once) ...", flush=True)
    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=1).compress
    writer = CaptureWriter(folder, fsync=False, max_file_size=1 << 30)
    schema = writer.schema()
    t = time.time_ns()
    seq = 0
    for records in get_dataset("block").records(count, 0, 5000):
        n = len(records)
        sent = [t + (seq + i) * 50_000 for i in range(n)]  # 20k records/s, as published
        headers = [{Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd",
                    Header.SENT_AT: str(s)} for s in sent]
        batch = Batch([compress(pack(r)) for r in records], subjects="blocks.bench", headers=headers,
                      meta={"sent_ns": sent, "received_ns": [s + 200_000 for s in sent]})
        writer.append(capture_table(batch, seq, schema))
        seq += n
    writer.close()
    done.touch()
    return folder


def plain_loop(folder: Path, batch_size: int) -> int:
    import msgpack
    import pyarrow.parquet as pq
    import zstandard

    decompress = zstandard.ZstdDecompressor().decompress
    unpackb = msgpack.unpackb
    n = 0
    for path in capture_files(folder):
        for rb in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=["payload"]):
            out = [unpackb(decompress(v), raw=False) for v in rb.column(0).to_pylist()]
            n += len(out)
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000, help="records in the capture (default 1M)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--no-beam", action="store_true", help="skip the Beam runner")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    folder = make_capture(args.count)
    tmp = Path(tempfile.mkdtemp(prefix="wirepipe-bench-replay-"))
    pipeline = tmp / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    spec = Replay(str(pipeline), [str(folder)], batch_size=args.batch_size)
    outputs = iter(range(1 << 30))

    def on_beam() -> int:
        return beam.run(spec, output=str(tmp / f"beam-{next(outputs)}")).records_in

    variants = {
        "plain pyarrow loop": lambda: plain_loop(folder, args.batch_size),
        "wirepipe local": lambda: local.run(spec).records_out,
        "wirepipe local, 2 workers": lambda: local.run(spec, workers=2).records_out,
    }
    if not args.no_beam:
        beam.import_beam()  # import time is not replay time
        variants["wirepipe Beam FnApiRunner"] = on_beam
    results = interleave(variants, rounds=args.rounds, warmup=False)
    print_table(f"replay of {args.count:,} block records (msgpack|zstd:fastest) -> decompress -> deserialize -> null, "
                f"batch {args.batch_size}, {args.rounds} rounds", results, "plain pyarrow loop")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

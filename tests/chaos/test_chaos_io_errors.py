"""An output that cannot be written is one line (what, where, the OS error) and a non-zero exit, never a traceback.

Read-only file systems are real (a read-only tmpfs: CI runs as root, and root ignores permission
bits); a file where a folder is expected is an ordinary file. Every case runs the CLI as a process.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.tmpfs import tmpfs
from tests.cli import wirepipe

GENERATE = {"type": "generate", "dataset": "point", "count": 20}


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "ro", "ro,size=1m") as folder:
        yield folder


def one_line_error(done: subprocess.CompletedProcess[str], where: str, why: str) -> None:
    assert done.returncode not in (0, 2), (done.returncode, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in done.stderr, done.stderr
    assert len(errors) == 1, done.stderr
    assert where in errors[0] and why in errors[0], errors[0]


def run_config(tmp_path: Path, **parts: Any) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps({"name": "io", "source": GENERATE, **parts}))
    return wirepipe("run", str(config))


@pytest.mark.parametrize("section", ["jsonl sink", "parquet sink", "parquet parts sink", "dead_letter", "metrics"])
def test_a_read_only_output_is_one_line(tmp_path: Path, read_only: Path, section: str) -> None:
    outputs = {
        "jsonl sink": {"sink": {"type": "jsonl", "path": str(read_only / "out.jsonl")}},
        "parquet sink": {"sink": {"type": "parquet", "path": str(read_only / "out.parquet")}},
        "parquet parts sink": {"sink": {"type": "parquet", "path": str(read_only / "p/part-{part}.parquet")}},
        "dead_letter": {"dead_letter": {"type": "jsonl", "path": str(read_only / "dead.jsonl")}},
        "metrics": {"metrics": {"path": str(read_only / "metrics")}},
    }
    one_line_error(run_config(tmp_path, **outputs[section]), str(read_only), "Read-only file system")


@pytest.mark.parametrize("section", ["jsonl sink", "parquet parts sink", "metrics"])
def test_a_file_where_a_folder_is_expected_is_one_line(tmp_path: Path, section: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("I am a file")
    outputs = {
        "jsonl sink": {"sink": {"type": "jsonl", "path": str(blocker / "out.jsonl")}},
        "parquet parts sink": {"sink": {"type": "parquet", "path": str(blocker / "part-{part}.parquet")}},
        "metrics": {"metrics": {"path": str(blocker / "metrics")}},
    }
    one_line_error(run_config(tmp_path, **outputs[section]), str(blocker), "")


def test_capture_into_a_read_only_folder_is_one_line(nats_url: str, read_only: Path) -> None:
    done = wirepipe("capture", "--url", nats_url, "--subject", "x", "--out", str(read_only / "cap"),
                    "--duration", "2s")
    one_line_error(done, str(read_only), "Read-only file system")


def test_replaying_a_capture_with_a_corrupt_data_page_is_one_line(tmp_path: Path) -> None:
    import os

    import pyarrow.parquet as pq

    from wirepipe.connectors.capture_format import capture_table
    from wirepipe.connectors.capture_sink import CaptureWriter
    from wirepipe.core.batch import Batch

    writer = CaptureWriter(tmp_path / "cap", row_group_rows=500, compression="none", fsync=False)
    payloads = [os.urandom(200) for _ in range(2000)]
    writer.append(capture_table(Batch(payloads, subjects="s"), 0, writer.schema()))
    path = writer.finish_file()
    assert path is not None
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(2).column(3)  # the payload column of the third row group
    data = bytearray(path.read_bytes())
    start = column.data_page_offset
    data[start:start + 64] = b"\xff" * 64  # the data page header: garbage
    path.write_bytes(bytes(data))
    config = tmp_path / "decode.yaml"
    config.write_text(json.dumps({"name": "decode", "source": GENERATE,
                                  "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    done = wirepipe("replay", str(path), "-p", str(config), "--stop-on-error")
    one_line_error(done, str(path), "row group 2")


SIZES = (600, 700, 800, 500, 700, 700)  # records per capture file: 4,000 in 6 files, row groups of 100


def damaged_capture(folder: Path) -> tuple[Path, Path]:
    """Six capture files of ``{"i": i}`` records; the third cut short (no footer), the fifth with the page
    header of row group 2's payload garbled. Returns (the truncated one, the corrupt one)."""
    import msgpack
    import pyarrow.parquet as pq

    from wirepipe.connectors.capture_format import capture_table
    from wirepipe.connectors.capture_sink import CaptureWriter
    from wirepipe.core.batch import Batch

    writer = CaptureWriter(folder, row_group_rows=100, compression="none", fsync=False)
    files, first = [], 0
    for size in SIZES:
        batch = Batch([msgpack.packb({"i": i}) for i in range(first, first + size)], subjects="s",
                      headers={"Content-Type": "application/msgpack"})
        writer.append(capture_table(batch, first, writer.schema()))
        path = writer.finish_file()
        assert path is not None
        files.append(path)
        first += size
    truncated, corrupt = files[2], files[4]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    column = pq.ParquetFile(corrupt).metadata.row_group(2).column(3)  # the payload column of row group 2
    data = bytearray(corrupt.read_bytes())
    data[column.data_page_offset:column.data_page_offset + 64] = b"\xff" * 64
    corrupt.write_bytes(bytes(data))
    return truncated, corrupt


@pytest.mark.parametrize("workers", [1, 2])
def test_a_damaged_capture_file_does_not_stop_a_replay(tmp_path: Path, workers: int) -> None:
    """Every readable record of the other files and row groups is replayed (4,000 - 800 - 100 = 3,100), what could
    not be read is listed (file, row group, records, reason) and the replay exits 1 with the count."""
    truncated, corrupt = damaged_capture(tmp_path / "cap")
    config = tmp_path / "decode.yaml"
    config.write_text(json.dumps({"name": "decode", "source": GENERATE,
                                  "operators": [{"deserialize": {"format": "auto"}}],
                                  "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    done = wirepipe("replay", str(tmp_path / "cap"), "-p", str(config), "--workers", str(workers),
                    "--batch-size", "64")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    replayed = [json.loads(line)["i"] for f in sorted(tmp_path.glob("out*.jsonl")) for line in f.open()]
    damaged = set(range(1300, 2100)) | set(range(2600 + 200, 2600 + 300))  # file 3, row group 2 of file 5
    assert sorted(replayed) == sorted(set(range(4000)) - damaged)  # 3,100 records, each once
    assert len(replayed) == 3100
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and re.fullmatch(
        r"error: 2 part\(s\) of the capture could not be read \(100 records and 1 whole file\(s\) of unknown size "
        rf"not read\): {re.escape(str(truncated))} \(the whole file\): not a readable Parquet file \(.+\); "
        rf"{re.escape(str(corrupt))} row group 2, 100 records: cannot be read \(a corrupt file\?\): .+", error[0]), error
    assert "replayed 3100 records" in done.stderr


def test_stop_on_error_stops_a_replay_at_the_first_damaged_file(tmp_path: Path) -> None:
    truncated, _ = damaged_capture(tmp_path / "cap")
    config = tmp_path / "decode.yaml"
    config.write_text(json.dumps({"name": "decode", "source": GENERATE,
                                  "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    done = wirepipe("replay", str(tmp_path / "cap"), "-p", str(config), "--stop-on-error")
    one_line_error(done, str(truncated), "not a readable Parquet file")
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


def test_a_pipeline_reading_a_damaged_capture_says_what_it_could_not_read(tmp_path: Path) -> None:
    """``wirepipe run`` with a ``capture`` source: the same 3,100 records, the same list, exit 1."""
    truncated, corrupt = damaged_capture(tmp_path / "cap")
    config = tmp_path / "read.yaml"
    config.write_text(json.dumps({"name": "read", "source": {"type": "capture", "path": str(tmp_path / "cap")},
                                  "operators": [{"deserialize": {"format": "auto"}}],
                                  "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}))
    done = wirepipe("run", str(config))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3100
    assert "read: 3100 records out of 3100" in done.stderr
    assert "not read: 2 part(s) of the input could not be read (100 records and 1 whole file(s)" in done.stderr
    assert f"{truncated} (the whole file)" in done.stderr and f"{corrupt} row group 2, 100 records" in done.stderr

"""An output that cannot be written is one line (what, where, the OS error) and a non-zero exit, never a traceback.

Read-only file systems are real (a read-only tmpfs: CI runs as root, and root ignores permission
bits); a file where a folder is expected is an ordinary file. Every case runs the CLI as a process.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.tmpfs import tmpfs
from tests.nats_fixtures import run_wirepipe

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
    return run_wirepipe("run", str(config))


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
    done = run_wirepipe("capture", "--url", nats_url, "--subject", "x", "--out", str(read_only / "cap"),
                        "--duration", "2s")
    one_line_error(done, str(read_only), "Read-only file system")


def test_replaying_a_capture_with_a_corrupt_data_page_is_one_line(tmp_path: Path) -> None:
    import os

    import pyarrow.parquet as pq

    from wirepipe.connectors.capture import CaptureWriter, capture_table
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
    done = run_wirepipe("replay", str(path), "-p", str(config))
    one_line_error(done, str(path), "row group 2")

"""The examples/ folders run end to end, each as its README says, against a real nats-server.

Each example's README is the script: its ```bash blocks run in order (``bash -euo pipefail``) in a copy of the
folder, with ``NATS_URL`` naming a server the test started; a block after ``<!-- example-test: skip (REASON) -->``
is left out (starting a server of one's own, a long-lived process the test drives itself). Then the test checks
what the commands made, with exact counts.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import ROOT, cli_env, invoke, start_wirepipe, wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer

EXAMPLES = ROOT / "examples"
NAMES = ["own-logs", "jetstream-archive", "capture-replay", "faust-bridge", "rust-peer", "embedded-service"]
BLOCK = re.compile(r"(?:<!-- example-test: (skip|needs) \(([^)]*)\) -->\n)?```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(name: str) -> list[tuple[str | None, str, str]]:
    """(marker, its reason or module, code) of each ```bash block of the example's README, in order."""
    text = (EXAMPLES / name / "README.md").read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), m.group(4)) for m in BLOCK.finditer(text) if m.group(3) == "bash"]


def _env(server: EmbeddedServer, **extra: str) -> dict[str, str]:
    """The environment the README's commands run in: the server's URL, this interpreter's `wirepipe` and `python`."""
    env = cli_env({"NATS_URL": server.url, **extra})
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_readme(name: str, tmp_path: Path, server: EmbeddedServer, *, beam: bool = False,
               **extra: str) -> tuple[Path, str]:
    """The example's README commands run in a copy of its folder; (the copy, their output)."""
    work = tmp_path / name
    shutil.copytree(EXAMPLES / name, work, ignore=shutil.ignore_patterns("results", "__pycache__"))
    output = []
    for marker, _reason, code in _blocks(name):
        if marker == "skip" or (marker == "needs" and not beam):
            continue
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=_env(server, **extra),
                                capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"{name}: {code}\n{result.stdout}\n{result.stderr}"
        output.append(result.stdout + result.stderr)
    return work, "\n".join(output)


def _parquet_rows(pattern: str, folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [row for f in sorted(folder.glob(pattern)) for row in pq.read_table(f).to_pylist()]


def _without_nulls(value: Any) -> Any:
    """A record as its producer wrote it: the optional fields a typed format filled with null left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_every_example_has_a_readme_with_commands_and_its_test() -> None:
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()) == sorted(NAMES)
    for name in NAMES:
        blocks = _blocks(name)
        assert [b for b in blocks if b[0] is None], f"{name}: no command the test runs"
        assert all(reason for marker, reason, _ in blocks if marker), f"{name}: a skip without its reason"
        assert f"test_{name.replace('-', '_')}" in Path(__file__).read_text(encoding="utf-8")


# --- own-logs ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_own_logs(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    work, output = run_readme("own-logs", tmp_path, nats_server)
    records = [json.loads(line) for line in (work / "logs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2000
    assert any("http" not in r for r in records) and any("http" in r for r in records)  # optional fields
    schema = yaml.safe_load((work / "log.schema.yaml").read_text(encoding="utf-8"))
    assert {"trace_id", "user_id", "tags"} <= {k for k, v in schema["fields"].items() if str(v).endswith("?")}
    assert {"http?", "error?"} <= set(schema["fields"])
    assert "smallest on the wire: avro|zstd:fastest" in output  # the pick publisher.yaml takes
    archived = _parquet_rows("*.parquet", work / "results" / "logs")
    assert [_without_nulls(r) for r in archived] == records  # every record, in order, as written
    assert (work / "results" / "logs-dead-letters.jsonl").read_text(encoding="utf-8") == ""
    assert "logs-publish" in output and "logs-archive" in output  # the report has both pipelines
    assert "logs-archive" in (work / "results" / "report.md").read_text(encoding="utf-8")


# --- jetstream-archive -------------------------------------------------------------------------------------


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _stop_once_acknowledged(proc: subprocess.Popen[str], server: EmbeddedServer, stream: str, durable: str, n: int,
                            timeout: float, what: str, drain: float) -> tuple[str, str]:
    """SIGTERM ``proc`` once ``durable`` has acknowledged all ``n`` records of ``stream`` (within ``timeout``); its
    (stdout, stderr) once it ended (within ``drain``)."""
    from tests.nats_fixtures import consumer_info

    def acknowledged() -> bool:  # every record acknowledged: each is where the sink writes it
        try:
            info = asyncio.run(consumer_info(server.url, stream, durable))
        except Exception:  # the durable is not created yet
            return False
        return info.num_pending == 0 and info.num_ack_pending == 0 and info.delivered.stream_seq == n

    try:
        _wait_for(acknowledged, timeout, what)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=drain)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_jetstream_archive(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    from tests.nats_fixtures import expected

    work, output = run_readme("jetstream-archive", tmp_path, nats_server)
    assert "tx-publish: 4000 records out of 4000" in output
    pool = start_wirepipe("run", "archive.yaml", "--workers", "2", "--no-status", cwd=work, env=_env(nats_server))
    out, err = _stop_once_acknowledged(pool, nats_server, "TX", "tx-archive", 4000, 120,
                                       "the pool to archive the stream", drain=60)
    assert pool.returncode == 0, out + err
    assert "tx-archive: 2 workers, 4000 records out of 4000" in err, out + err
    rows = _parquet_rows("part-*.parquet", work / "results" / "tx")
    assert len(rows) == 4000
    assert sorted(r["payload"] for r in rows) == sorted(r["payload"] for r in expected("transaction", 4000))
    assert {p.name.split("-")[1] for p in (work / "results" / "tx").glob("part-*.parquet")} <= {"w0", "w1"}
    for dead in (work / "results").glob("tx-dead-letters-*.jsonl"):
        assert dead.read_text(encoding="utf-8") == ""


def test_jetstream_archive_k8s_manifest(tmp_path: Path) -> None:
    from wirepipe.core.units import parse_duration
    from wirepipe.pipelines.config import read_config, validate_config
    from wirepipe.pipelines.pool import pool_config, resolve_workers

    folder = EXAMPLES / "jetstream-archive"
    docs = {d["kind"]: d for d in yaml.safe_load_all((folder / "k8s.yaml").read_text(encoding="utf-8"))}
    assert set(docs) == {"ConfigMap", "Deployment"}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["wirepipe"] and container["args"][2:] == ["--workers", "2"]
    config_path = Path(container["args"][1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    pipeline = tmp_path / config_path.name
    pipeline.write_text(docs["ConfigMap"]["data"][config_path.name], encoding="utf-8")
    env = {e["name"]: e["value"] for e in container["env"]} | {"HOSTNAME": "tx-archive-7d9f-abcde"}
    data = read_config(pipeline, env=env)
    cfg = validate_config(data, file=str(pipeline))
    assert len(cfg.source.url) == 3  # the cluster's URL list
    shared = pool_config(data, resolve_workers(container["args"][3]), file=str(pipeline))  # valid as a pool
    assert shared["source"]["durable"] == "tx-archive"
    # The same pipeline as archive.yaml's, but for the paths and the server.
    local = read_config(folder / "archive.yaml", env={"NATS_URL": env["NATS_URL"], "RESULTS": "/data/x"})
    for key in ("name", "source", "operators", "flush_interval", "shutdown_timeout"):
        assert data[key] == local[key], key
    assert pod["terminationGracePeriodSeconds"] > parse_duration(data["shutdown_timeout"])
    assert container["resources"]["requests"]["cpu"] == container["args"][3]  # one CPU per worker
    assert container["ports"][0]["containerPort"] == cfg.monitor.prometheus.port
    # The schema editors use checks the ConfigMap's pipeline too.
    from tests.test_config_schema import _errors

    assert _errors(yaml.safe_load(docs["ConfigMap"]["data"][config_path.name])) == []
    result = invoke("validate", str(pipeline), env=env)
    assert result.returncode == 0, result.stderr


# --- capture-replay ----------------------------------------------------------------------------------------


def _jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def capture_replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The capture-replay README run once for its two tests (publish, capture and the local replays are the same
    commands): with its Beam block where apache_beam is installed, after the local replays, as a user runs it."""
    import importlib.util

    folder = tmp_path_factory.mktemp("capture-replay")
    with EmbeddedServer(store_dir=folder / "jetstream") as server:
        yield run_readme("capture-replay", folder, server, beam=importlib.util.find_spec("apache_beam") is not None)


@pytest.mark.slow
def test_capture_replay(capture_replay: tuple[Path, str]) -> None:
    from tests.nats_fixtures import expected

    work, output = capture_replay
    captured = _parquet_rows("*.parquet", work / "captures" / "blocks")
    assert [r["stream_seq"] for r in captured] == list(range(1, 3001))
    published = [{"chain_id": b["chain_id"], "receipts": b["receipts"]} for b in expected("block", 3000)]
    results = work / "results"
    assert _jsonl(results / "blocks.jsonl") == published
    assert _jsonl(results / "blocks.w0.jsonl") + _jsonl(results / "blocks.w1.jsonl") == published
    assert "replayed 3000 records (local on 2 workers)" in output


@pytest.mark.slow
def test_capture_replay_on_beam(capture_replay: tuple[Path, str]) -> None:
    pytest.importorskip("apache_beam", reason="the Beam replay needs the beam extra: pip install '.[beam]' in wirepipe's clone")
    from tests.nats_fixtures import expected

    work, output = capture_replay
    published = [{"chain_id": b["chain_id"], "receipts": b["receipts"]} for b in expected("block", 3000)]
    parts = sorted((work / "results" / "beam" / "results").glob("part-*.parquet"))
    assert len(parts) == 3  # one per row group of the capture
    assert _parquet_rows("part-*.parquet", work / "results" / "beam" / "results") == published
    assert "replayed 3000 records (beam FnApiRunner)" in output


# --- rust-peer ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rust_peer(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    work, output = run_readme("rust-peer", tmp_path, nats_server)
    assert "readings-bincode: 500 records out of 500" in output
    assert "500 payloads are byte for byte what Rust's bincode 1.x writes for Reading" in output
    assert (work / "results" / "readings-dead-letters.jsonl").read_text(encoding="utf-8") == ""
    # The hand-written packer against a bincode 1.x vector worked out from the format: u32, i64, f32,
    # Option<f64> (None: one 0 byte), bool, String (u64 length + bytes), Vec<String> (u64 count + items).
    sys.path.insert(0, str(work))
    try:
        import check_bytes
    finally:
        sys.path.remove(str(work))
    reading = {"sensor_id": 1, "ts_ns": -2, "temperature": 0.5, "ok": True, "site": "a", "tags": ["b"]}
    assert check_bytes.rust_bincode(reading).hex(" ") == (
        "01 00 00 00  fe ff ff ff ff ff ff ff  00 00 00 3f  00  01  01 00 00 00 00 00 00 00 61"
        "  01 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00 62").replace("  ", " ")
    # A payload that is not what the record gives in Rust fails the check, naming the record.
    lines = (work / "readings.jsonl").read_text(encoding="utf-8").splitlines()
    changed = json.loads(lines[3]) | {"site": "elsewhere"}
    (work / "changed.jsonl").write_text("\n".join([*lines[:3], json.dumps(changed), *lines[4:]]) + "\n",
                                        encoding="utf-8")
    failed = subprocess.run([sys.executable, "check_bytes.py", "changed.jsonl"], cwd=work, env=_env(nats_server),
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and failed.stderr.startswith("record 3: "), failed.stderr


# --- embedded-service --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_embedded_service(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    from tests.nats_fixtures import expected

    work, output = run_readme("embedded-service", tmp_path, nats_server)
    assert "points-publish: 1000 records out of 1000" in output
    service = subprocess.Popen([sys.executable, "service.py"], cwd=work, env=_env(nats_server),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    out, err = _stop_once_acknowledged(service, nats_server, "POINTS", "points-service", 1000, 60,
                                       "the service to acknowledge the points", drain=30)
    assert service.returncode == 0, out + err
    assert "stopping: draining the pipeline" in out
    assert "stopped: 1000 points archived, 0 rejected, 1000 acknowledged" in out, out
    assert re.search(r"^heartbeat 1: ", out, flags=re.M)  # its own work ran beside the pipeline
    points = _jsonl(work / "results" / "points.jsonl")
    assert points == [{**p, "norm": round(math.hypot(p["x"], p["y"]), 3)} for p in expected("point", 1000)]


# --- faust-bridge ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_faust_bridge(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    pytest.importorskip("faust", reason="the bridge needs the faust extra: pip install '.[faust]' in wirepipe's clone")
    from faust.serializers import codecs

    work, output = run_readme("faust-bridge", tmp_path, nats_server)
    assert "bridged 500 orders" in output and "orders-from-kafka: 500 records out of 500" in output
    sys.path.insert(0, str(work))
    try:
        from bridge import sample_orders
    finally:
        sys.path.remove(str(work))
    sent = [order.to_representation() for order in sample_orders(500)]
    assert _jsonl(work / "results" / "orders.jsonl") == sent
    captured = tmp_path / "captured"
    result = wirepipe("capture", "--stream", "ORDERS", "--from-seq", "1", "--out", captured,
                      env={"NATS_URL": nats_server.url})
    assert result.returncode == 0, result.stderr
    on_nats = _parquet_rows("*.parquet", captured)
    assert [r["payload"] for r in on_nats] == [codecs.dumps("msgpack|zstd", o) for o in sent]  # unchanged bytes
    headers = [dict(r["headers"]) for r in on_nats]
    assert all(h["Content-Type"] == "application/msgpack" and h["Content-Encoding"] == "zstd" for h in headers)

"""The Beam replay through Beam's portability layer, as a cluster runs it.

A job service (``local_job_service_main``) and an external SDK worker pool (``worker_pool_main``) in
processes of their own, each in a folder of its own and without this checkout on ``PYTHONPATH``; the
pool starts each worker through ``tests/beam_boot.py``, a stand-in for the SDK container's boot, which
installs the packages the job staged: wirepipe as a wheel built from this checkout. The replay is
submitted as a user submits it (``--runner beam --beam-option runner=PortableRunner ...``) from a folder
where the capture, the schema file and the zstd dictionary are named by relative paths, which the
workers could not resolve: they read what the job carries. No jar, image or binary is downloaded.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from tests.cli import ROOT, start_wirepipe, wirepipe
from wirepipe.connectors.capture_format import capture_table
from wirepipe.connectors.capture_sink import CaptureWriter
from wirepipe.core.batch import Batch
from wirepipe.datasets import get_dataset
from wirepipe.replay.beam_files import place_job_files, read_job_files, restore_names
from wirepipe.schema.parsing import load_schema_file

pytestmark = pytest.mark.timeout(600)  # the module's services, a wheel and two replays on a busy machine

RECORDS = 3000
BROKEN_EVERY = 101  # a payload no zstd frame: rejected by decompress
PLAIN_EVERY = 157  # a msgpack map, compressed without the dictionary: decompresses, refused by msgpack-array


# --- the job's files ------------------------------------------------------------------------------------


def test_the_files_operators_read_travel_with_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read where the replay starts (relative paths), written in the worker's folder, recorded as written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "point.yaml").write_text("fields: {x: int32, y: int32}\n")
    (tmp_path / "point.zdict").write_bytes(b"dictionary bytes")
    config = {"operators": [
        {"decompress": {"codec": "zstd", "dictionary": "point.zdict"}},
        {"decompress": {"codec": "zstd", "dictionaries": "nats://DICTS"}},
        {"deserialize": {"format": "msgpack-array", "schema": "schemas/point.yaml"}},
        {"serialize": {"format": "msgpack-array", "schema": "point"}},  # a dataset: not a file
        {"compress": {"codec": "zstd", "dictionary": "nats://DICTS/points"}},  # fetched, not read
    ]}
    files = read_job_files(config)
    assert {value: (f.name, f.data) for value, f in files.items()} == {
        "point.zdict": ("0/point.zdict", b"dictionary bytes"),
        "schemas/point.yaml": ("1/point.yaml", b"fields: {x: int32, y: int32}\n"),
    }
    worker = tmp_path / "worker"
    worker.mkdir()
    placed, originals = place_job_files(config, files, worker)
    assert placed["operators"][0]["decompress"]["dictionary"] == str(worker / "0/point.zdict")
    assert placed["operators"][2]["deserialize"]["schema"] == str(worker / "1/point.yaml")
    assert placed["operators"][1:2] + placed["operators"][3:] == config["operators"][1:2] + config["operators"][3:]
    assert (worker / "1/point.yaml").read_bytes() == (tmp_path / "schemas" / "point.yaml").read_bytes()
    assert config["operators"][2]["deserialize"]["schema"] == "schemas/point.yaml", "the job's config is kept"
    assert load_schema_file(placed["operators"][2]["deserialize"]["schema"]).name == "Point"  # as locally: reasons match

    class Built:
        def __init__(self) -> None:
            self.params = {"format": "msgpack-array", "schema": str(worker / "1/point.yaml")}

    built = Built()
    restore_names([built], originals)
    assert built.params == {"format": "msgpack-array", "schema": "schemas/point.yaml"}


def test_a_proto_schema_travels_as_its_descriptor_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers need neither protoc nor the imported file; the message is the one the local run picks."""
    pytest.importorskip("grpc_tools")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proto").mkdir()
    (tmp_path / "proto" / "money.proto").write_text('syntax = "proto3";\nmessage Money { int64 cents = 1; }\n')
    (tmp_path / "proto" / "order.proto").write_text(
        'syntax = "proto3";\nimport "money.proto";\nmessage Order { int64 id = 1; Money total = 2; }\n')
    config = {"operators": [{"deserialize": {"format": "protobuf", "schema": "proto/order.proto"}}]}
    files = read_job_files(config)
    assert [(f.name, f.message) for f in files.values()] == [("0/order.desc", "Order")]
    worker = tmp_path / "worker"
    worker.mkdir()
    placed, originals = place_job_files(config, files, worker)
    shutil.rmtree(tmp_path / "proto")  # what the worker has: its copy alone
    from wirepipe.operators.schema_options import resolve_schema

    schema = placed["operators"][0]["deserialize"]["schema"]
    assert schema == f"{worker / '0' / 'order.desc'}#Order"
    assert [f.name for f in resolve_schema(schema).fields] == ["id", "total"]  # type: ignore[union-attr]
    assert originals == {schema: "proto/order.proto"}


# --- a job service, a worker pool, and a replay submitted to them --------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(ready: Any, what: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop(proc: subprocess.Popen[bytes]) -> None:
    """The service and every process it started (its own process group): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the group's other members (a worker the pool started) may outlive the leader
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wirepipe as a wheel built from this checkout (a copy of it: the build writes beside the sources),
    offline (the build backend of this environment)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(root / "dist"), str(tree)],
                   check=True, capture_output=True, timeout=300)
    [built] = (root / "dist").glob("wirepipe-*.whl")
    return built


def start_service(module: str, *args: str, folder: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m MODULE ARGS`` in ``folder`` (made here), logging to ``folder/service.log``, in a process
    group of its own (``stop`` ends it with what it started)."""
    folder.mkdir()
    with open(folder / "service.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def start_job_service(folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Beam's Python job service on a free port: the process and its endpoint."""
    port_file = folder.parent / f"{folder.name}.port"
    job = start_service("apache_beam.runners.portability.local_job_service_main", "--port=0",
                        f"--port_file={port_file}", folder=folder, env=env)
    try:
        wait_until(port_file.exists, "the job service", job, folder / "service.log")
    except BaseException:
        stop(job)
        raise
    return job, f"localhost:{port_file.read_text().strip()}"


@pytest.fixture(scope="module")
def beam_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A job service and an external worker pool whose workers boot as an SDK container's do; stopped
    (with every worker) whatever the tests did."""
    root = tmp_path_factory.mktemp("beam")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # wirepipe comes from the staged wheel
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["BOOT_LOG"], env["BOOT_DIR"] = str(root / "boot.jsonl"), str(root)
    boot = root / "boot"
    boot.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "beam_boot.py"}" "$@"\n')
    boot.chmod(0o755)
    started: list[subprocess.Popen[bytes]] = []
    try:
        pool_port = free_port()
        pool = start_service("apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}",
                             f"--container_executable={boot}", folder=root / "pool", env=env)
        started.append(pool)
        job, endpoint = start_job_service(root / "job", env)
        started.append(job)
        wait_until(lambda: listening(pool_port), "the worker pool", pool, root / "pool" / "service.log")
        yield {"job_endpoint": endpoint, "pool": f"localhost:{pool_port}", "env": env, "root": root,
               "boot_log": root / "boot.jsonl", "pool_dir": root / "pool",
               "logs": [root / "job" / "service.log", root / "pool" / "service.log"]}
    finally:
        for proc in reversed(started):
            stop(proc)


def msgpack_arrays(records: list[dict[str, Any]], schema: Path) -> list[bytes]:
    """The records as wirepipe's ``serialize: {format: msgpack-array, schema: ...}`` writes them."""
    from wirepipe import serialize
    from wirepipe.testing import TestingSink, TestingSource, run

    sink = TestingSink()
    run(TestingSource(records, batch_size=1000), [serialize("msgpack-array", schema=str(schema))], sink)
    return list(sink.records)


def encoded(records: list[dict[str, Any]], arrays: list[bytes], dictionary: bytes) -> list[bytes]:
    """The frames compressed with the dictionary, and some that a replay rejects."""
    with_dict = zstandard.ZstdCompressor(level=3, dict_data=zstandard.ZstdCompressionDict(dictionary))
    plain = zstandard.ZstdCompressor(level=3)
    out = []
    for i, (record, array) in enumerate(zip(records, arrays, strict=True)):
        if i % BROKEN_EVERY == BROKEN_EVERY - 1:
            out.append(b"\x28\xb5\x2f\xfd broken")
        elif i % PLAIN_EVERY == PLAIN_EVERY - 1:
            out.append(plain.compress(msgpack.packb(record)))  # a map, from a peer without the schema
        else:
            out.append(with_dict.compress(array))
    return out


@pytest.fixture(scope="module")
def submit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder a user replays from: the capture, a schema file and a dictionary, the pipeline naming
    them by relative paths."""
    folder = tmp_path_factory.mktemp("submit")
    dataset = get_dataset("block")
    records = dataset.sample(RECORDS, seed=11)
    (folder / "schemas").mkdir()
    schema = folder / "schemas" / "block.yaml"
    schema.write_text(yaml.safe_dump(dataset.schema.to_document(), sort_keys=False))
    arrays = msgpack_arrays(records, schema)
    dictionary = zstandard.train_dictionary(8192, arrays).as_bytes()
    (folder / "dicts").mkdir()
    (folder / "dicts" / "block.zdict").write_bytes(dictionary)
    writer = CaptureWriter(folder / "cap", row_group_rows=500, fsync=False)
    batch = Batch(encoded(records, arrays, dictionary), subjects="blocks.eu", headers={})
    writer.append(capture_table(batch, 0, writer.schema()))
    writer.close()
    (folder / "decode.yaml").write_bytes(orjson.dumps({
        "name": "blocks-decode",
        "source": {"type": "nats", "subject": "blocks.>"},
        "operators": [{"decompress": {"codec": "zstd", "dictionary": "dicts/block.zdict"}},
                      {"deserialize": {"format": "msgpack-array", "schema": "schemas/block.yaml"}}],
        "sink": {"type": "parquet", "path": "local/out.parquet"},
        "dead_letter": {"type": "parquet", "path": "local/dead.parquet"},
        "metrics": {"path": "local/metrics.parquet"},
    }))
    return folder


def portable_options(services: dict[str, Any], *extra: str) -> list[str]:
    options = ["runner=PortableRunner", f"job_endpoint={services['job_endpoint']}", "environment_type=EXTERNAL",
               f"environment_config={services['pool']}", *extra]
    return [arg for option in options for arg in ("--beam-option", option)]


@pytest.fixture(scope="module")
def replays(submit: Path, wheel: Path, beam_services: dict[str, Any]) -> dict[str, Any]:
    """The capture replayed locally, then on the portable runner (relative --output, as a user types it)."""
    local = wirepipe("replay", "cap", "-p", "decode.yaml", cwd=submit, timeout=300)
    assert local.returncode == 0, local.stderr
    # job_server_timeout=1: shorter than the job (each worker installs the wheel first), which Beam alone
    # would report failed at that deadline while it ran on
    portable = wirepipe("replay", "cap", "-p", "decode.yaml", "--runner", "beam", "--output", "portable",
                        *portable_options(beam_services, f"extra_package={wheel}", "job_server_timeout=1"),
                        cwd=submit, timeout=600)
    logs = "\n".join(f"{p.parent.name}:\n{p.read_text()[-3000:]}" for p in beam_services["logs"])
    assert portable.returncode == 0, f"{portable.stderr}\n{logs}"
    return {"local": local, "portable": portable}


def read_parts(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("part-*.parquet"))])


def stage_rows(files: list[Path]) -> dict[tuple[str, str, str], tuple[int, int]]:
    """Records and rejected records per stage, operator and its params (which name the pipeline's files)."""
    counts: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    for f in files:
        for row in pq.read_table(f, columns=["stage", "operator", "params", "records", "rejected"]).to_pylist():
            key = (row["stage"], row["operator"], row["params"])
            counts[key][0] += row["records"]
            counts[key][1] += row["rejected"]
    return {k: (v[0], v[1]) for k, v in counts.items()}


@pytest.mark.slow
def test_the_portable_replay_writes_counts_and_names_what_the_local_replay_does(submit: Path,
                                                                               replays: dict[str, Any]) -> None:
    """One test: its two halves share one Beam job (a spread run would start the services and the job once for
    each test, on two workers)."""
    writes_what_the_local_replay_writes(submit)
    counts_and_names_what_the_local_replay_does(submit, replays)


def writes_what_the_local_replay_writes(submit: Path) -> None:
    local = pq.read_table(submit / "local" / "out.parquet")
    portable = read_parts(submit / "portable" / "results")
    rejected = sum(1 for i in range(RECORDS) if i % BROKEN_EVERY == BROKEN_EVERY - 1
                   or i % PLAIN_EVERY == PLAIN_EVERY - 1)
    assert local.num_rows == RECORDS - rejected
    assert portable.schema == local.schema
    assert portable.to_pylist() == local.to_pylist()
    records = get_dataset("block").sample(RECORDS, seed=11)
    kept = [i for i in range(RECORDS) if i % BROKEN_EVERY != BROKEN_EVERY - 1 and i % PLAIN_EVERY != PLAIN_EVERY - 1]
    assert portable.column("chain_id").to_pylist() == [records[i]["chain_id"] for i in kept]
    local_dead = pq.read_table(submit / "local" / "dead.parquet").to_pylist()
    assert read_parts(submit / "portable" / "dead_letter").to_pylist() == local_dead
    assert len(local_dead) == rejected
    assert {d["stage"] for d in local_dead} == {"decompress", "deserialize"}


def counts_and_names_what_the_local_replay_does(submit: Path, replays: dict[str, Any]) -> None:
    from wirepipe.storage.parts import list_parts

    local = stage_rows(list_parts(submit / "local" / "metrics.parquet"))
    portable = stage_rows(sorted((submit / "portable" / "metrics").glob("*.parquet")))
    assert portable == local
    params = {json.loads(p).get("schema") for (_, _, p) in local if p}
    assert "schemas/block.yaml" in params, "metrics name the schema file as the pipeline file does"
    assert local[("read", "capture", next(p for (s, o, p) in local if s == "read"))] == (RECORDS, 0)
    summary = {name: [line.split(" (first:")[0] for line in run.stderr.splitlines() if line.startswith("  rejected")]
               for name, run in replays.items()}
    assert summary["portable"] == summary["local"] and len(summary["local"]) == 2, summary
    assert f"replayed {RECORDS} records (beam PortableRunner)" in replays["portable"].stderr


@pytest.mark.slow
def test_workers_run_the_staged_wheel_and_write_where_the_replay_was_started(
        submit: Path, wheel: Path, replays: dict[str, Any], beam_services: dict[str, Any]) -> None:
    boots = [json.loads(line) for line in beam_services["boot_log"].read_text().splitlines()]
    assert boots, "the pool started its workers through the boot program"
    for boot in boots:
        assert wheel.name in boot["staged"] and "extra_packages.txt" in boot["staged"]
        assert boot["wirepipe"] == str(Path(boot["site"]) / "wirepipe" / "__init__.py"), boot
    assert f"output: {submit / 'portable' / 'results'}/ (Parquet parts)\n" in replays["portable"].stderr
    assert not (beam_services["pool_dir"] / "portable").exists()


@pytest.mark.slow
def test_the_portable_replay_keeps_the_job_services_chatter_out(replays: dict[str, Any]) -> None:
    err = replays["portable"].stderr
    assert "Traceback" not in err
    assert not [line for line in err.splitlines() if " INFO root: " in line], err  # "starting control server"


@pytest.mark.slow
def test_a_job_service_that_does_not_answer_is_one_clear_error(submit: Path, tmp_path: Path) -> None:
    port = free_port()  # closed again: nothing listens there
    out = wirepipe("replay", "cap", "-p", "decode.yaml", "--runner", "beam", "--output", str(tmp_path / "out"),
                   "--beam-option", "runner=PortableRunner", "--beam-option", f"job_endpoint=localhost:{port}",
                   "--beam-option", "job_server_timeout=2", cwd=submit, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: no Beam job service answered at localhost:{port} (--beam-option job_endpoint) within 2s: "
        "start it first, or wait longer with --beam-option job_server_timeout=SECONDS")
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_job_service_that_goes_away_mid_job_is_one_clear_error(submit: Path, wheel: Path,
                                                                  beam_services: dict[str, Any]) -> None:
    """A second job service, killed once its job has asked the pool for a worker: the replay ends at once."""
    log = beam_services["boot_log"]
    booted = len(log.read_text().splitlines()) if log.exists() else 0
    job, endpoint = start_job_service(beam_services["root"] / "doomed-job", beam_services["env"])
    try:
        options = portable_options({**beam_services, "job_endpoint": endpoint}, f"extra_package={wheel}")
        replay = start_wirepipe("replay", "cap", "-p", "decode.yaml", "--runner", "beam", "--output", "doomed",
                                *options, cwd=submit)
        deadline = time.monotonic() + 120
        while (not log.exists() or len(log.read_text().splitlines()) == booted) and replay.poll() is None:
            assert time.monotonic() < deadline, "no worker was asked for"
            time.sleep(0.05)
        stop(job)
        _, err = replay.communicate(timeout=120)
    finally:
        stop(job)
    assert replay.returncode == 1, err
    assert err.strip().splitlines()[-1].startswith("error: the Beam pipeline failed: UNAVAILABLE: "), err
    assert "Traceback" not in err

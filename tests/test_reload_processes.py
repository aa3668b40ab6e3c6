"""Hot reload on real processes (``wirepipe run --watch``): a JetStream durable under load, the file edited as an
editor saves it, every record counted. One worker reloads its operators mid-run; an invalid edit and one that
needs a restart are refused while the records keep coming; a pool of two reloads worker by worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.cli import cli_env, start_wirepipe
from tests.nats_fixtures import consumer_info
from wirepipe.connectors.nats.server import EmbeddedServer

TESTS = Path(__file__).parent

WORKER = """
name: reloading
source:
  type: jetstream
  url: "${NATS_URL}"
  stream: NUM
  durable: reloading
  batch_size: 200
  ack_wait: 30s
operators:
  - deserialize: {format: auto}
  - map: {function: "nats_fixtures:slow_identity"}
  - select: [i]
sink: {type: jsonl, path: "${OUT}/out.jsonl"}
metrics: {path: "${OUT}/metrics.parquet"}
flush_interval: 200ms
"""
N1, N2 = 8000, 2000  # published before the edit (under load when it lands), and after it


async def publish(url: str, first: int, n: int, *, create: bool) -> None:
    """``{"i": i, "tag": "t<i>"}`` for i in first..first+n-1, msgpack, into the stream NUM (``create``: made first)."""
    import msgpack
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    if create:
        await js.add_stream(name="NUM", subjects=["num"])
    pending = []
    for i in range(first, first + n):
        pending.append(await js.publish_async("num", msgpack.packb({"i": i, "tag": f"t{i}"}),
                                              headers={"Content-Type": "application/msgpack", "Nats-Msg-Id": str(i)}))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    await nc.close()


def worker_path() -> str:
    """The worker's ``PYTHONPATH``: ``tests/`` (the config names ``nats_fixtures:slow_identity``), then the code under
    test."""
    return os.pathsep.join([str(TESTS), cli_env()["PYTHONPATH"]])


def edit(path: Path, text: str) -> None:
    """Save as an editor does: a new file renamed over the old one."""
    new = path.with_name(f".{path.name}.swp")
    new.write_text(text)
    new.replace(path)


def wait_for(condition: Callable[[], Any], proc: subprocess.Popen[str], log: Path, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"wirepipe exited ({proc.returncode}): {log.read_text()[-4000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out: {log.read_text()[-4000:]}")


def records(*files: Path) -> list[dict[str, Any]]:
    """The records of JSONL files, in the order written (a torn last line of a running writer is left out)."""
    out = []
    for file in files:
        if file.exists():
            for line in file.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    return out


@contextlib.contextmanager
def running(config: Path, env: dict[str, str], log: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``wirepipe run CONFIG --watch ARGS`` (stderr to ``log``); killed on the way out if a test failed first."""
    with open(log, "w") as err:
        proc = start_wirepipe("run", config, "--watch", "--no-status", *args, stderr=err, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def one_cut(rows: list[dict[str, Any]]) -> int:
    """Where the records, in the order written, go from the old operators' shape ({i}) to the new one ({i, tag}):
    the position of the first new one (the number of records when there is none), every record before it old and
    every one after it new."""
    new = [list(r) == ["i", "tag"] for r in rows]
    assert all(list(r) in (["i"], ["i", "tag"]) for r in rows)
    cut = new.index(True) if any(new) else len(new)
    assert not any(new[:cut]) and all(new[cut:]), "the records of the two configs are interleaved"
    assert all(r["tag"] == f"t{r['i']}" for r in rows[cut:])
    return cut


@pytest.mark.timeout(180)
@pytest.mark.slow
async def test_a_worker_reloads_its_operators_under_load_and_every_record_is_written_once(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """A worker on a JetStream durable, records flowing; the pipeline file is edited (``select: [i]`` becomes
    ``[i, tag]``) while it is busy. The worker commits, goes on with the new operators from one batch on, on the
    same durable: every record is in the sink once, those before the cut without ``tag`` and those after it with
    it (all those published after the edit), the metrics' stage rows name each batch's config, and the log and
    the summary say when the reload happened. (``--count`` is an override of ``source.count``: the new version keeps
    it, or it would be refused as a change of the source.)"""
    url, n = nats_server.url, N1 + N2
    await publish(url, 0, N1, create=True)
    config, out, log = tmp_path / "worker.yaml", tmp_path / "out", tmp_path / "worker.log"
    config.write_text(WORKER)
    env = {"NATS_URL": url, "OUT": str(out), "PYTHONPATH": worker_path()}
    with running(config, env, log, "--count", str(n)) as proc:
        await asyncio.to_thread(wait_for, lambda: len(records(out / "out.jsonl")) >= 1000, proc, log)
        edit(config, WORKER.replace("select: [i]", "select: [i, tag]"))
        reloaded = await asyncio.to_thread(wait_for, lambda: re.search(
            r"reloading: reloaded \S+ in place \(operators\): config (\w+) -> (\w+) from batch (\d+)",
            log.read_text()), proc, log)
        await publish(url, N1, N2, create=False)
        assert await asyncio.to_thread(proc.wait, 120) == 0, log.read_text()[-4000:]
    old, new, first = reloaded[1], reloaded[2], int(reloaded[3])
    rows = records(out / "out.jsonl")
    assert sorted(r["i"] for r in rows) == list(range(n))  # every record once: no loss, no duplicate
    cut = one_cut(rows)
    assert 1000 <= cut <= N1  # the edit landed while the first records were still coming
    assert {r["i"] for r in rows[cut:]} >= set(range(N1, n))  # all published after the edit: new operators
    text = log.read_text()
    summary = re.search(r"reloading: (\d+) records out of (\d+) in .*, (\d+) redelivered", text)
    assert summary is not None and summary.groups() == (str(n), str(n), "0"), text[-3000:]
    assert f"config: 1 reload; {old} ran batches 0-{first - 1}, {new} ran batches {first}-" in text
    stages = pq.read_table(out / "metrics.parquet").to_pylist()
    select = [(r["batch"], r["operator"], r["config_digest"], r["records"]) for r in stages if r["stage"] == "select"]
    assert {(b >= first, op, digest) for b, op, digest, _ in select} == {(False, "i", old), (True, "i,tag", new)}
    assert sum(r for b, _, _, r in select if b < first) == cut  # the batches before the cut: the old operators
    info = await consumer_info(url, "NUM", "reloading")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, n)


@pytest.mark.timeout(180)
@pytest.mark.slow
async def test_an_invalid_edit_and_one_that_needs_a_restart_are_refused_and_the_worker_runs_on(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """Under load, the file is saved invalid (``select: []``), then with another durable: each is refused in one
    line that names the file, the field and the values (and for the durable, why it needs a restart), and the
    worker runs on with the config it had: every record written once, each in the old shape."""
    url, n = nats_server.url, N1 + N2
    await publish(url, 0, N1, create=True)
    config, out, log = tmp_path / "worker.yaml", tmp_path / "out", tmp_path / "worker.log"
    config.write_text(WORKER)
    env = {"NATS_URL": url, "OUT": str(out), "PYTHONPATH": worker_path()}
    refusals: list[str] = []

    def next_refusal() -> str | None:
        lines = re.findall(r"ERROR wirepipe: reload refused: .*", log.read_text())
        return lines[len(refusals)] if len(lines) > len(refusals) else None

    with running(config, env, log, "--count", str(n)) as proc:
        await asyncio.to_thread(wait_for, lambda: len(records(out / "out.jsonl")) >= 1000, proc, log)
        for text in (WORKER.replace("select: [i]", "select: []"),
                     WORKER.replace("durable: reloading", "durable: another")):
            edit(config, text)
            refusals.append(await asyncio.to_thread(wait_for, next_refusal, proc, log))
        await publish(url, N1, N2, create=False)
        assert await asyncio.to_thread(proc.wait, 120) == 0, log.read_text()[-4000:]
    assert re.fullmatch(rf"ERROR wirepipe: reload refused: {re.escape(str(config))}: operators\[2\]\.select\.fields: "
                        r"List should have at least 1 item after validation, not 0 \(got \[\]\) \(the running config "
                        r"\w{12} stays\)", refusals[0]), refusals[0]
    assert re.fullmatch(rf"ERROR wirepipe: reload refused: {re.escape(str(config))}: source\.durable: 'reloading' -> "
                        r"'another' needs a restart: the source is opened once per run: another stream, durable or "
                        r"subject is a new position in a stream, which its deliver policy decides \(.*\) \(the "
                        r"running config \w{12} stays\)", refusals[1]), refusals[1]
    rows = records(out / "out.jsonl")
    assert sorted(r["i"] for r in rows) == list(range(n))
    assert all(list(r) == ["i"] for r in rows)  # the running config's operators, to the end
    text = log.read_text()
    assert re.search(r"config: 0 reloads, 2 refused \(the running config stayed\); \w{12} ran batches 0-\d+", text)
    assert re.search(rf"reloading: {n} records out of {n} in .*, 0 redelivered", text), text[-3000:]


POOL = WORKER.replace("  batch_size: 200\n", "  batch_size: 100\n")


@pytest.mark.timeout(240)
@pytest.mark.slow
async def test_a_pool_of_two_reloads_worker_by_worker(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """Two workers on one durable, records flowing; the file is edited: the supervisor validates it once and tells
    worker 0, then worker 1 only once worker 0 answered that it runs the new config. Each worker's output goes
    from the old shape to the new one at one cut; every record is written once (a redelivery would be counted);
    the summary says the reload reached every worker."""
    url, n = nats_server.url, N1 + N2
    await publish(url, 0, N1, create=True)
    config, out, log = tmp_path / "pool.yaml", tmp_path / "out", tmp_path / "pool.log"
    config.write_text(POOL)
    env = {"NATS_URL": url, "OUT": str(out), "PYTHONPATH": worker_path()}
    files = [out / "out.w0.jsonl", out / "out.w1.jsonl"]
    with running(config, env, log, "--workers", "2") as proc:
        await asyncio.to_thread(wait_for, lambda: all(len(records(f)) >= 300 for f in files), proc, log)
        edit(config, POOL.replace("select: [i]", "select: [i, tag]"))
        done = await asyncio.to_thread(wait_for, lambda: re.search(
            r"reloading: reloaded \S+: every worker runs config (\w+) \(was (\w+)\)", log.read_text()), proc, log)
        await publish(url, N1, N2, create=False)
        await asyncio.to_thread(wait_for, lambda: len({r["i"] for r in records(*files)}) >= n, proc, log)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 90) == 0, log.read_text()[-4000:]
    new, old = done[1], done[2]
    text = log.read_text()
    # One at a time: worker 0 switched and answered before worker 1 was told.
    order = [m.group(0) for m in re.finditer(r"\[w(\d)\]: reloading: reloaded .*|worker (\d) runs config \w+ \(\d of 2\)",
                                             text)]
    assert [re.sub(r" .*", "", line.replace("reloading: ", "")) for line in order] == [
        "[w0]:", "worker", "[w1]:", "worker"], order
    assert "worker 0 runs config" in order[1] and "worker 1 runs config" in order[3]
    for line in order[0::2]:
        assert f"config {old} -> {new}" in line
    per_worker = [records(f) for f in files]
    cuts = [one_cut(rows) for rows in per_worker]
    assert any(cut < len(rows) for cut, rows in zip(cuts, per_worker, strict=True))
    every = [r["i"] for rows in per_worker for r in rows]
    assert set(every) == set(range(n))
    assert all("tag" in r for rows in per_worker for r in rows if r["i"] >= N1)
    summary = re.search(r"reloading: 2 workers, (\d+) records out of (\d+) in .*, (\d+) redelivered", text)
    assert summary is not None, text[-3000:]
    duplicates = len(every) - n  # written twice: only a redelivered record can be (none expected here)
    assert duplicates <= int(summary[3])
    assert int(summary[1]) == len(every)
    assert f"config: 1 reload rolled out to every worker; the workers run {new}" in text
    info = await consumer_info(url, "NUM", "reloading")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, n)

"""The core NATS overload scenario of issue 11, as a reusable driver (tests and benchmarks/core_overload.py).

A wirepipe publisher process sends ``count`` point records (msgpack) on a subject, steadily
at ``rate`` records/s or in bursts (``burst`` records as fast as possible, then ``pause``
seconds); a wirepipe worker process consumes them through a ``map`` costing ``spin_us`` per
record (GIL held) into a null sink. When the publisher is done and the worker has been idle
for a while, the worker is stopped with SIGTERM and its run summary is read back. The
result says what was sent, what arrived, and what the worker counted as lost, so a caller
can check that ``sent == received + lost`` (core NATS may lose; it must never hide it).

    python -m tests.chaos.overload publish URL SUBJECT COUNT [--rate R] [--burst B --pause S] [--linger S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cli import cli_env, start_wirepipe

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    sent: int
    received: int
    summary: str
    counters: dict[str, int] = field(default_factory=dict)
    status_lines: list[str] = field(default_factory=list)
    server_log: str = ""

    @property
    def lost(self) -> int | None:
        return self.counters.get("lost")

    def line(self) -> str:
        c = self.counters
        return (f"sent {self.sent:,} / received {self.received:,} / counted lost {c.get('lost', 'n/a')} "
                f"(missing {c.get('missing', 'n/a')}: gap {c.get('gap', 'n/a')} + tail {c.get('tail', 'n/a')}, dropped {c.get('dropped', 'n/a')}, discarded {c.get('discarded', 'n/a')})"
                f" / duplicates {c.get('duplicates', 'n/a')} / unaccounted {self.sent - self.received - (c.get('lost') or 0):,}"
                f" / server slow-consumer events {self.server_log.count('Slow Consumer')}")


def _burst_source(count: int, rate: float | None, burst: int | None, pause: float, pad: int = 0,
                  tail: int = 0, linger: float = 0.0) -> Any:
    from wirepipe.connectors.connector import Source
    from wirepipe.core.batch import Batch
    from wirepipe.datasets import get_dataset

    class Bursts(Source):
        """Point records, paced at ``rate`` or in bursts of ``burst`` then ``pause`` seconds."""

        type = "bursts"
        stage = "generate"

        async def batches(self) -> AsyncIterator[Batch]:
            sent = 0
            t0 = time.monotonic()
            size = 1000 if not rate else max(1, min(1000, int(rate / 50)))
            filler = "p" * pad
            for values in get_dataset("point").records(count, 0, size):
                if pad:
                    values = [{**v, "pad": filler} for v in values]
                yield Batch(values, meta={"seq": range(sent, sent + len(values))})
                sent += len(values)
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                elif burst and sent % burst == 0 and sent < count:
                    await asyncio.sleep(pause)
            if tail:  # a few records after a pause: a loss at the end of the run shows as a gap
                await asyncio.sleep(pause)
                for values in get_dataset("point").records(tail, 1, 10):
                    yield Batch(values, meta={"seq": range(sent, sent + len(values))})
                    sent += len(values)
                    await asyncio.sleep(0.01)
            if linger:  # a publisher that lives on (a worker): its periodic stamps go out meanwhile
                await asyncio.sleep(linger)

    return Bursts()


def publish(url: str, subject: str, count: int, rate: float | None, burst: int | None, pause: float,
            pad: int = 0, tail: int = 0, linger: float = 0.0, stamp_interval: float = 1.0) -> int:
    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline

    sink = NatsSink(subject, url=url, stamp_interval=stamp_interval)
    stats = Pipeline(_burst_source(count, rate, burst, pause, pad, tail, linger), [Serialize("msgpack")], sink,
                     name="publisher").run()
    return stats.records_out


def run_scenario(url: str, folder: Path, *, count: int, spin_us: float, rate: float | None = None,
                 burst: int | None = None, pause: float = 1.0, pad: int = 0, tail: int = 0,
                 stop_after: float | None = None, pending_msgs_limit: int = 65536,
                 idle: float = 3.0, timeout: float = 240.0, server_log: str | None = None,
                 extra: dict[str, Any] | None = None, batch_size: int = 1000, linger: float = 0.0,
                 stamp_interval: float = 1.0) -> Outcome:
    """Run the publisher and the worker; stop the worker once it is idle after the publisher finished."""
    import yaml

    subject = "overload"
    cfg = {
        "name": "overload-consumer",
        "source": {"type": "nats", "url": url, "subject": subject, "batch_size": batch_size,
                   "pending_msgs_limit": pending_msgs_limit},
        "operators": [{"map": {"function": "tests.chaos.busy:spin"}}],
        "sink": {"type": "null"},
        "monitor": {"status_interval": "0.5s"},
        "shutdown_timeout": "300s",  # the drain finishes the batches already read: 2 ms/record is slow
        **(extra or {}),
    }
    path = folder / "consumer.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    spin = {"WIREPIPE_TEST_SPIN_US": str(spin_us), "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    worker = start_wirepipe("run", path, env=spin, cwd=ROOT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr or []), daemon=True)  # type: ignore[arg-type]
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while not any("overload-consumer:" in ln for ln in lines):  # the first status line: subscribed
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not start: " + "".join(lines[-20:]))
            time.sleep(0.1)
        args = [sys.executable, "-m", "tests.chaos.overload", "publish", url, subject, str(count)]
        if rate:
            args += ["--rate", str(rate)]
        if burst:
            args += ["--burst", str(burst), "--pause", str(pause)]
        if pad:
            args += ["--pad", str(pad)]
        if tail:
            args += ["--tail", str(tail)]
        args += ["--linger", str(linger), "--stamp-interval", str(stamp_interval)]
        pub = subprocess.run(args, capture_output=True, text=True, env=cli_env(spin), cwd=ROOT,
                             timeout=max(10.0, deadline - time.monotonic()))
        if pub.returncode != 0:
            raise RuntimeError(f"publisher failed: {pub.stderr[-2000:]}")
        sent = int(json.loads(pub.stdout.strip().splitlines()[-1])["sent"])
        # Idle: the records-out figure of the status line stops moving (or a fixed time after publishing).
        last, since = None, time.monotonic()
        if stop_after is not None:
            time.sleep(stop_after)
        while stop_after is None and time.monotonic() < deadline:
            outs = [ln for ln in lines if "overload-consumer:" in ln and " out" in ln]
            now = re.search(r"([\d,]+) out", outs[-1]).group(1) if outs else None  # type: ignore[union-attr]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > idle:
                break
            time.sleep(0.2)
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=max(5.0, deadline - time.monotonic()))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    reader.join(5)
    summary = next((ln for ln in reversed(lines) if "records out of" in ln), "")
    if not summary:
        raise RuntimeError("no run summary: " + "".join(lines[-20:]))
    received = int(re.search(r"records out of ([\d,]+)", summary).group(1).replace(",", ""))  # type: ignore[union-attr]
    counters = {k: int(v.replace(",", "")) for v, k in re.findall(
        r"([\d,]+) (lost|missing|dropped|discarded|duplicates)\b", summary)}
    split = re.search(r"\(([\d,]+) in gaps between messages, ([\d,]+) claimed by stamps", summary)
    if "missing" in counters:  # a gap is seen between messages, a tail only claimed by a stamp (shown when there is one)
        counters["gap"], counters["tail"] = ((int(split.group(1).replace(",", "")), int(split.group(2).replace(",", "")))
                                             if split else (counters["missing"], 0))
    disconnects = re.search(r"([\d,]+) disconnect\(s\)", summary)
    counters["disconnects"] = int(disconnects.group(1).replace(",", "")) if disconnects else 0
    counted = re.search(r"lost: ([\d,]+) counted", summary)  # the figure when a tail could not be counted
    if counted:
        counters["lost"] = int(counted.group(1).replace(",", ""))
        counters["unsure"] = 1
    log_text = Path(server_log).read_text(errors="replace") if server_log and Path(server_log).exists() else ""
    return Outcome(sent, received, summary.strip(), counters, [ln for ln in lines if " out" in ln], log_text)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("publish")
    p.add_argument("url")
    p.add_argument("subject")
    p.add_argument("count", type=int)
    p.add_argument("--rate", type=float)
    p.add_argument("--burst", type=int)
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--pad", type=int, default=0, help="bytes of padding per record")
    p.add_argument("--tail", type=int, default=0, help="records sent slowly after a pause at the end")
    p.add_argument("--linger", type=float, default=0.0, help="seconds the publisher stays up after its records")
    p.add_argument("--stamp-interval", type=float, default=1.0, help="the sink's stamp_interval")
    args = ap.parse_args()
    sent = publish(args.url, args.subject, args.count, args.rate, args.burst, args.pause, args.pad, args.tail,
                   args.linger, args.stamp_interval)
    print(json.dumps({"sent": sent}))


if __name__ == "__main__":
    main()

"""Which worker of a group this process is, and how a worker's copy of an output is named.

N processes running one pipeline (``wirepipe run --workers N``, ``wirepipe replay --workers N``) must
never write the same file. Each sink gives a worker of N its own copy (``Sink.for_worker``: a file's
path, a capture's file prefix; nothing for a NATS subject, shared on purpose), and every name it gives
comes from ``Worker``, one scheme:

- ``{worker}`` in a path is the worker's index where the user put it (``out-{worker}.jsonl`` ->
  ``out-3.jsonl``; 0 in a single process);
- otherwise a worker's copy carries its tag ``w<index>``, zero-padded to the width of the highest
  index so that name order is worker order (``w3`` of 4 workers, ``w03`` of 12): a file
  ``out.jsonl`` -> ``out.w3.jsonl``, a part-file template ``out/part-{part}.parquet`` ->
  ``out/part-w3-{part}.parquet``, a file prefix ``capture`` -> ``capture-w3``. A single process
  keeps the names as given.

A replay gives its workers contiguous shares of a capture in worker order, so its outputs read in
name order hold the records in capture order.

The spawner (``pipelines/spawn.py``) puts the worker's index, the number of workers and the group's
id in each worker's environment (``environment``): ``Worker.current()`` reads them back, a run's
metadata names them (``metrics/run_metadata.py``) and a default dead-letter file takes the tag
(``pipelines/dead_letters.py``).

>>> w = Worker(3, 12)
>>> w.tag, w.path("out.jsonl"), w.path("out/part-{part}.parquet"), w.path("dead-{worker}.jsonl"), w.prefix("capture")
('w03', 'out.w03.jsonl', 'out/part-w03-{part}.parquet', 'dead-3.jsonl', 'capture-w03')
>>> Worker().path("out.jsonl"), Worker().path("out-{worker}.jsonl")
('out.jsonl', 'out-0.jsonl')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePath

POOL_ENV, WORKER_ENV, WORKERS_ENV = "WIREPIPE_POOL", "WIREPIPE_WORKER", "WIREPIPE_WORKERS"


@dataclass(frozen=True)
class Worker:
    """Worker ``index`` of ``workers`` (``Worker()``: a single process)."""

    index: int = 0
    workers: int = 1

    @classmethod
    def current(cls) -> Worker:
        """This process as its spawner started it (``Worker()`` when no spawner did)."""
        try:
            return cls(int(os.environ[WORKER_ENV]), int(os.environ.get(WORKERS_ENV) or 1))
        except (KeyError, ValueError):
            return cls()

    @property
    def shared(self) -> bool:
        """True when other workers write beside this one: its outputs need names of their own."""
        return self.workers > 1

    @property
    def tag(self) -> str:
        return f"w{self.index:0{len(str(max(self.workers - 1, 0)))}d}"

    def path(self, path: str) -> str:
        """This worker's copy of the file (or part-file template) ``path`` (see the module doc)."""
        if "{worker}" in path:
            return path.replace("{worker}", str(self.index))
        if not self.shared:
            return path
        if "{part}" in path:
            return path.replace("{part}", f"{self.tag}-{{part}}")
        p = PurePath(path)
        return str(p.with_name(f"{p.stem}.{self.tag}{p.suffix}" if p.suffix else f"{p.name}.{self.tag}"))

    def prefix(self, prefix: str) -> str:
        """This worker's copy of a file-name prefix (files of several workers in one folder)."""
        return f"{prefix}-{self.tag}" if self.shared else prefix

    def environment(self, group: str) -> dict[str, str]:
        """The variables that make ``current()`` this worker in a process its spawner starts in ``group``."""
        return {WORKER_ENV: str(self.index), WORKERS_ENV: str(self.workers), POOL_ENV: group}

"""Batch replay of a capture through a pipeline's operators and sink: locally or on Apache Beam.

``Replay`` describes one replay (capture files, pipeline file, pacing); the pipeline's
own ``source`` is replaced by a ``capture`` source over the capture, before validation,
so everything else in the file (operators, sink, dead letter, metrics) is used as is.
``replay.local`` runs it in this process or in ``--workers`` processes,
``replay.beam`` on a Beam runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..connectors.connector import Unreadable
    from ..core.exit_codes import Outcome


@dataclass
class Replay:
    """One replay: what to read, which pipeline, how fast."""

    pipeline: str
    captures: list[str]
    overrides: list[str] = field(default_factory=list)
    pace: str = "max"
    speed: float = 1.0
    pace_by: str = "received"
    max_gap: float | None = None
    batch_size: int = 8192
    count: int | None = None
    stop_on_error: bool = False  # stop at the first unreadable file or row group (default: replay the rest)

    def config(self) -> dict[str, Any]:
        """The pipeline file's config (variables and overrides applied) with the capture as its source (whose
        variables need not be set: it is replaced)."""
        from ..pipelines.config import read_config, replaced_parts

        data = read_config(self.pipeline, self.overrides, replaced=replaced_parts("source"))
        data["source"] = {
            "type": "capture", "path": [str(c) for c in self.captures], "batch_size": self.batch_size,
            "count": self.count, "pace": self.pace, "speed": self.speed, "pace_by": self.pace_by,
            "max_gap": self.max_gap, "stop_on_error": self.stop_on_error,
        }
        if isinstance(data.get("metrics"), dict):
            # Latency rows (sent -> done) describe a live run; a capture already holds the recorded times.
            data["metrics"].setdefault("latency", False)
        return data

    def validated(self, data: dict[str, Any] | None = None) -> Any:
        """The validated pipeline config (``ConfigError`` naming the pipeline file on problems)."""
        from ..pipelines.config import validate_config

        return validate_config(self.config() if data is None else data, file=self.pipeline)


@dataclass
class ReplayResult:
    """What a replay did, whatever ran it."""

    pipeline: str
    runner: str
    records_in: int = 0
    records_out: int = 0
    rejected: int = 0
    elapsed: float = 0.0
    workers: int = 1
    stage_records: dict[str, int] = field(default_factory=dict)
    # Where its output, dead letters and metrics went, one line each (``monitor.run_outputs``: ``output: jsonl
    # out.jsonl (1.20 MB)``, ``metrics: m``)
    outputs: list[str] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)  # parts of the capture that could not be read
    rejections: list[Any] = field(default_factory=list)  # by stage, operator and reason (``Rejections.rows``)
    interrupted: bool = False  # a SIGINT stopped it before the end of the capture (after a clean drain)

    @property
    def records_per_second(self) -> float:
        return self.records_in / self.elapsed if self.elapsed > 0 else 0.0

    def outcome(self) -> Outcome:
        """What the replay's exit code follows (``exit_codes.verdict``), as ``wirepipe run``'s does."""
        from ..connectors.connector import describe_unreadable
        from ..core.exit_codes import Outcome

        return Outcome(records=self.records_in, rejected=self.rejected, interrupted=self.interrupted,
                       failures=[describe_unreadable(self.unreadable, "capture")] if self.unreadable else [])

    def summary(self) -> str:
        where = f" on {self.workers} workers" if self.workers > 1 else ""
        text = (f"{self.pipeline}: replayed {self.records_in} records ({self.runner}{where}) in {self.elapsed:.2f}s "
                f"({self.records_per_second:,.0f} records/s): {self.records_out} out, {self.rejected} rejected")
        if self.interrupted:
            text += ", interrupted (SIGINT) before the end of the capture"
        lines = [text]
        if self.unreadable:
            from ..connectors.connector import describe_unreadable

            lines.append(f"not replayed: {describe_unreadable(self.unreadable, 'capture')}")
        from ..pipelines.monitor import rejection_lines

        return "\n  ".join([*lines, *rejection_lines(self.rejections), *self.outputs])


__all__ = ["Replay", "ReplayResult"]

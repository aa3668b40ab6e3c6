"""What a benchmark run measures: the data, the combinations and the protocol.

The protocol is the published benchmarks': K iterations of N repetitions after a warm-up
(``bench.timing`` runs them), each figure reported over the iterations (the study: the median
with [min-max]). N scales with the payload so an iteration moves a similar amount of raw data
(the FlatMessage tables: 500000 repetitions of the 8-byte ``point``, 100 of the 388 kB
``large_vectors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ...codecs.chain import Chain
from ...codecs.compression import LEVEL_NAMES, get_codec
from ...codecs.formats import FORMATS
from ...datasets import DATASETS

if TYPE_CHECKING:
    from ...connectors.nats.connection import NatsConnectionConfig

ALL_LEVELS = LEVEL_NAMES
RAW_BYTES_PER_ITERATION = 4_000_000
MIN_REPETITIONS, MAX_REPETITIONS = 100, 500_000
SAMPLE_RECORDS = 1000  # distinct records cycled through the repetitions
# Records up to this size (mean raw bytes) are "small": a trained zstd dictionary pays most there (a message
# too short for zstd to find repeats in finds them in the dictionary), so --quick on one's own small records
# measures a +dict row without being asked.
SMALL_RECORD_BYTES = 2048


class QuickPreset(TypedDict):
    """What ``--quick`` measures (the options it sets)."""

    datasets: list[str]
    formats: list[str]
    codecs: list[str]
    levels: list[str]
    iterations: int
    scale: float


QUICK: QuickPreset = {
    "datasets": ["point", "block"],
    "formats": ["json", "orjson", "msgpack", "msgpack-array"],
    "codecs": ["none", "zstd", "lz4"],
    "levels": ["fastest", "default"],
    "iterations": 3,
    "scale": 1 / 20,
}


def default_repetitions(raw_bytes_per_record: float, scale: float = 1.0) -> int:
    """N for a payload of this raw size: about 4 MB of raw data per iteration (times ``scale``), 100..500000."""
    n = round(RAW_BYTES_PER_ITERATION * scale / max(raw_bytes_per_record, 1.0))
    return max(MIN_REPETITIONS, min(MAX_REPETITIONS, n))


@dataclass(frozen=True)
class Combo:
    """One measured configuration: format, codec at a level, options."""

    format: str
    codec: str = "none"
    level: str | int = "default"
    dictionary: bool = False
    records_per_message: int = 1

    @property
    def chain(self) -> str:
        steps = self.format if self.codec == "none" else f"{self.format}|{self.codec}:{self.level}"
        return str(Chain.parse(steps))

    @property
    def label(self) -> str:
        extra = " +dict" if self.dictionary else ""
        extra += f" x{self.records_per_message}/msg" if self.records_per_message > 1 else ""
        return f"{self.chain}{extra}"


@dataclass
class BenchPlan:
    """A validated request for ``wirepipe bench``."""

    datasets: list[str] = field(default_factory=lambda: list(DATASETS))
    inputs: list[Path] = field(default_factory=list)
    formats: list[str] = field(default_factory=lambda: list(FORMATS))
    codecs: list[str] = field(default_factory=lambda: ["none", "zstd", "zlib", "gzip", "deflate", "brotli", "bz2",
                                                       "xz", "lz4"])
    levels: list[str | int] = field(default_factory=lambda: list(ALL_LEVELS))
    transport: str = "nats"
    nats: NatsConnectionConfig | None = None  # the server to bench against (--url, --creds, --set); None: embedded
    iterations: int = 10
    repetitions: int | None = None
    scale: float = 1.0
    out: Path = Path("results/bench")
    zstd_dict: bool = False
    # --quick on --input without --zstd-dict: +dict rows (at one zstd level) for the user's datasets of small
    # records only (``dictionary_for``)
    small_dict: bool = False
    records_per_message: list[int] = field(default_factory=lambda: [1])
    seed: int = 0
    quick: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # formats and codecs not installed ("format cbor (pip ...)")

    def combos(self) -> list[Combo]:
        """Every format x codec x level (levels that resolve to the same number measured once).

        ``msgpack-array`` is not framed several records per message: its records are
        already arrays, so a list of them could not be told from one record.
        """
        out: list[Combo] = []
        for fmt in self.formats:
            for codec in self.codecs:
                levels = self.level_list(codec)
                for level in levels:
                    for k in self.records_per_message:
                        if k > 1 and FORMATS[fmt].needs_schema:
                            continue
                        out.append(Combo(fmt, codec, level, records_per_message=k))
                        if codec == "zstd" and (self.zstd_dict or (self.small_dict and level == levels[-1])):
                            out.append(Combo(fmt, codec, level, dictionary=True, records_per_message=k))
        return out

    def dictionary_for(self, dataset: str, raw_bytes: float) -> bool:
        """Whether a dataset gets +dict rows: always with --zstd-dict train; with --quick on one's own
        records (``small_dict``), when they are small."""
        return self.zstd_dict or (self.small_dict and dataset not in DATASETS and raw_bytes <= SMALL_RECORD_BYTES)

    def level_list(self, codec: str) -> list[str | int]:
        if codec == "none":
            return ["default"]
        c = get_codec(codec)
        seen: dict[int, str | int] = {}
        for level in self.levels:
            seen.setdefault(c.resolve_level(level), level)
        return list(seen.values())

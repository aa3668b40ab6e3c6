"""``wirepipe dict``: train a zstd dictionary on real traffic, measure it, share it through NATS.

``train`` reads serialized records, from a capture (its payloads decompressed by their
``Content-Encoding``, as ``decompress: auto`` does, with the bucket's own dictionaries for
frames that name one) or from a JSONL / Parquet file of records (serialized in ``--format``, as
``serialize`` does). Every ``k``-th record is held out (``--holdout``); the dictionary is trained
on the others with the trainer ``wirepipe bench --zstd-dict train`` uses, and measured on the
held-out records, each compressed on its own as the ``compress`` operator does: plain zstd at the
level against zstd with the dictionary (its 4-byte id included, as it travels). Then it is
published to the bucket (``connectors/nats/dictionary_bucket.py``) with that report as its
description. ``list`` and ``show`` read a bucket back.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.errors import ConfigError, WirepipeError

if TYPE_CHECKING:
    from .connectors.nats.connection import NatsConnectionConfig

DEFAULT_COUNT = 100_000


@dataclass
class Training:
    """A trained dictionary and what it does to records it was not trained on."""

    dictionary: bytes
    dict_id: int
    trained: int  # records it was trained on
    held_out: int  # records it was measured on
    level: int
    raw: float  # serialized bytes per held-out record
    plain: float  # with plain zstd at ``level``, bytes per record
    with_dictionary: float  # with the dictionary (frame id included), bytes per record

    @property
    def gain(self) -> float:
        """How much smaller the held-out records are with the dictionary than with plain zstd (0.288: 28.8%),
        to the 0.1% every report shows: the figure ``train`` prints is the one the bucket keeps and ``list``
        shows."""
        return round(1 - self.with_dictionary / self.plain, 3) if self.plain else 0.0

    def report(self) -> dict[str, Any]:
        return {"dictionary_id": self.dict_id, "size": len(self.dictionary), "trained_on": self.trained,
                "held_out": self.held_out, "level": self.level, "raw_bytes": round(self.raw, 1),
                "zstd_bytes": round(self.plain, 1), "dictionary_bytes": round(self.with_dictionary, 1),
                "gain": self.gain}

    def lines(self, width: int = 80) -> list[str]:
        """The training report, its note (when compressing made records larger) wrapped to ``width``."""
        from .core.table import wrap

        plain, shared = _larger(self.plain, self.raw), _larger(self.with_dictionary, self.raw)
        out = [f"trained a {len(self.dictionary):,}-byte dictionary (id {self.dict_id}) on {self.trained:,} records",
               f"held out {self.held_out:,} records (not trained on), each compressed alone at level {self.level}:",
               f"  serialized         {self.raw:9.1f} B/record",
               f"  zstd               {self.plain:9.1f} B/record" + (f"  ({plain})" if plain else ""),
               f"  zstd + dictionary  {self.with_dictionary:9.1f} B/record  ({gain_words(self.gain)})"]
        if shared:
            out += wrap(f"note: with the dictionary too, records come out {shared}: records this small gain "
                        "nothing compressed one by one (send them uncompressed, or several per message with pack)",
                        width)
        elif plain:
            out += wrap("note: plain zstd makes these records LARGER than serialized; only the dictionary shrinks "
                        "them", width)
        return out


def gain_words(gain: float) -> str:
    """A dictionary's gain as ``train`` and ``list`` say it.

    >>> gain_words(0.288), gain_words(-0.05)
    ('28.8% smaller than zstd', '5.0% LARGER than zstd')
    """
    return f"{abs(gain):.1%} {'smaller' if gain >= 0 else 'LARGER'} than zstd"


def _larger(compressed: float, serialized: float) -> str:
    """A flag when compressing made records larger than they were serialized (records too small, or too
    random, for zstd alone: its frame header costs more than it finds), else nothing."""
    return f"{compressed / serialized - 1:.1%} LARGER than serialized" if compressed > serialized else ""


def train(samples: list[bytes], *, level: str | int = "default", size: int | None = None,
          holdout: float = 0.2) -> Training:
    """Train on all but every ``1/holdout``-th sample, measure on those; ``WirepipeError`` when the
    samples are too few (or too alike) to train on."""
    import zstandard

    from .codecs.compression import get_codec
    from .codecs.zstd import dictionary_size, train_zstd_dictionary, zstd_compressor, zstd_dictionary_id

    if not 0 < holdout < 1:
        raise ConfigError(f"--holdout {holdout}: a fraction between 0 and 1 (0.2: one record in five)")
    step = max(2, round(1 / holdout))
    held = samples[::step]
    rest = [s for i, s in enumerate(samples) if i % step]
    zstd = get_codec("zstd")
    lvl = zstd.resolve_level(level)
    if not held:
        raise WirepipeError(f"no records to train on (read {len(samples)})")
    try:
        dictionary = train_zstd_dictionary(rest, size=size or dictionary_size(rest), level=lvl)
    except (ValueError, zstandard.ZstdError) as exc:
        raise WirepipeError(f"cannot train a dictionary on {len(rest)} records: {exc}") from None
    plain = zstd.compressor(lvl)
    shared = zstd_compressor(lvl, dictionary, write_dict_id=True)
    return Training(dictionary, zstd_dictionary_id(dictionary), len(rest), len(held), lvl,
                    statistics.fmean(map(len, held)), statistics.fmean(len(plain(s)) for s in held),
                    statistics.fmean(len(shared(s)) for s in held))


# --- reading records --------------------------------------------------------------------------------


def source_for(path: str, count: int | None) -> tuple[Any, bool]:
    """(the source reading ``path``, whether it is a capture): a folder or a Parquet file a capture wrote
    (its ``wirepipe.capture`` metadata) is a capture; another file holds records, read by the source its name
    says (``connectors/files.py``: .jsonl, .parquet, .csv ...)."""
    from .connectors.files import describe_file_types, file_source

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{path}: no such file or folder (a capture folder, or a file of records: "
                          f"{describe_file_types()})", path="--from")
    if p.is_dir() or (p.suffix == ".parquet" and _is_capture(p)):
        from .connectors.capture_source import CaptureSource

        return CaptureSource([path], count=count), True
    return file_source(path, "--from", count=count), False


def _is_capture(path: Path) -> bool:
    import pyarrow.parquet as pq

    meta = pq.read_schema(str(path)).metadata or {}
    return b"wirepipe.capture" in meta


async def read_samples(path: str, *, count: int | None, fmt: str, schema: Any, ref: Any,
                       nats: NatsConnectionConfig | None) -> tuple[list[bytes], list[Any]]:
    """The serialized records at ``path`` and the ones that could not be read (``Rejected``); what is read from a
    server (a capture's dictionaries, a registered ``schema``) is read through ``nats`` (None: the embedded one)."""
    from .connectors.nats.connection import NatsConnectionConfig
    from .operators.decompress import Decompress
    from .operators.serialize import Serialize
    from .pipelines.resources import Resources
    from .testing import TestingSink, run_async

    source, capture = source_for(path, count)
    if capture:  # payloads as published: decompressed by their headers, with the bucket's dictionaries
        ops: list[Any] = [Decompress("auto", dictionaries=f"nats://{ref.bucket}")]
    else:
        try:
            ops = [Serialize(fmt, schema=schema)]
        except ConfigError as exc:
            raise ConfigError(exc.detail, path="--format") from None
    sink = TestingSink()
    # the bucket's dictionaries and a registered --schema (registry/points@2) are read on the command's server
    resources = Resources(nats=nats or NatsConnectionConfig())
    await run_async(source, ops, sink, name="dict-train", resources=resources)
    return [bytes(v) for v in sink.records], sink.rejects


# --- the bucket -------------------------------------------------------------------------------------


async def with_bucket(nats: NatsConnectionConfig, bucket: str, action: Any) -> Any:
    """``await action(DictionaryBucket)`` on a connection ``nats`` configures."""
    from .connectors.nats.connection import NatsConnection
    from .connectors.nats.dictionary_bucket import DictionaryBucket

    conn = NatsConnection(nats, role="dict")
    nc = await conn.connect()
    try:
        return await action(DictionaryBucket(nc, bucket))
    finally:
        await conn.close()


async def publish(nats: NatsConnectionConfig, ref: Any, training: Training, origin: str) -> int:
    from .connectors.nats.dictionary_bucket import describe_training

    description = describe_training({**training.report(), "from": origin})
    result: int = await with_bucket(nats, ref.bucket,
                                    lambda b: b.publish(ref.name, training.dictionary, description))
    return result

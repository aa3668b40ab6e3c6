"""Chains: the canonical string of a codec chain, ``msgpack|zstd:3``.

A chain is a format followed by zero or more compression steps, each ``name[:level]``,
written in the order they are applied when encoding (the same ``|`` syntax Faust
codecs use). Parsing validates every name and level; ``str(chain)`` gives back the
canonical spelling (default levels are left out), so a chain survives a round trip
through config, metrics rows and headers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.batch import describe_error
from ..core.errors import StageError
from .compression import DEFAULT_MAX_OUTPUT, LEVEL_NAMES, get_codec
from .formats import Schema, get_format


@dataclass(frozen=True)
class Step:
    """One step of a chain: a format (``level`` is None) or a codec at a level."""

    name: str
    level: str | int | None = None

    @property
    def is_format(self) -> bool:
        from .formats import FORMATS

        return self.name in FORMATS

    def __str__(self) -> str:
        if self.level is None or self.level == "default":
            return self.name
        return f"{self.name}:{self.level}"


@dataclass(frozen=True)
class Chain:
    """A parsed chain: an optional format first, then compression steps."""

    steps: tuple[Step, ...]

    @classmethod
    def parse(cls, text: str) -> Chain:
        """Parse ``"msgpack|zstd:3"``; ``ValueError`` naming the bad part and what is allowed."""
        from .formats import FORMATS

        parts = [p.strip() for p in text.split("|")]
        if not text.strip() or any(not p for p in parts):
            raise ValueError(f"empty step in chain {text!r}: write it as format|codec[:level]|...")
        steps: list[Step] = []
        for i, part in enumerate(parts):
            name, _, level = part.partition(":")
            if name in FORMATS:
                if i != 0:
                    raise ValueError(f"format {name!r} must come first in chain {text!r}")
                if level:
                    raise ValueError(f"format {name!r} takes no level (in chain {text!r})")
                steps.append(Step(name))
                continue
            try:
                codec = get_codec(name)
            except KeyError:
                from ..core.models import did_you_mean

                raise ValueError(
                    f"unknown step {name!r} in chain {text!r}: formats are {', '.join(FORMATS)}; "
                    f"codecs are {', '.join(_codec_names())}{did_you_mean(name, [*FORMATS, *_codec_names()])}"
                ) from None
            parsed: str | int | None = level if level and level != "default" else None
            if parsed is not None and parsed not in LEVEL_NAMES:
                with contextlib.suppress(ValueError):
                    parsed = int(parsed)
            codec.resolve_level(parsed)  # raises ValueError naming the range
            steps.append(Step(codec.name, parsed))
        return cls(tuple(steps))

    def __str__(self) -> str:
        return "|".join(str(s) for s in self.steps)

    @property
    def format(self) -> str | None:
        return self.steps[0].name if self.steps and self.steps[0].is_format else None

    @property
    def codecs(self) -> tuple[Step, ...]:
        return self.steps[1:] if self.format else self.steps

    def encoder(self, schema: Schema = None, dictionary: bytes | None = None) -> Callable[[Any], bytes]:
        """One function value -> payload, composing the steps."""
        fns: list[Callable[[Any], Any]] = []
        if self.format:
            fns.append(get_format(self.format).encoder(schema))
        for step in self.codecs:
            codec = get_codec(step.name)
            fns.append(codec.compressor(step.level, dictionary if codec.supports_dictionary else None))
        return _compose(fns)

    def decoder(
        self,
        schema: Schema = None,
        *,
        max_output_size: int = DEFAULT_MAX_OUTPUT,
        allow_pickle: bool = False,
        dictionary: bytes | None = None,
    ) -> Callable[[bytes], Any]:
        """One function payload -> value, undoing the steps in reverse order."""
        fns: list[Callable[[Any], Any]] = []
        for step in reversed(self.codecs):
            codec = get_codec(step.name)
            fns.append(codec.decompressor(max_output_size, dictionary if codec.supports_dictionary else None))
        if self.format:
            fns.append(get_format(self.format).decoder(schema, allow_pickle=allow_pickle))
        inner = _compose(fns)
        name = str(self)

        def decode(data: bytes) -> Any:
            # Library errors (msgpack, json, cbor ...) become one wirepipe error naming the stage.
            try:
                return inner(data)
            except StageError:
                raise
            except Exception as exc:
                raise StageError("deserialize", name, describe_error(exc)) from None

        return decode


def _codec_names() -> list[str]:
    from .compression import CODECS

    return list(CODECS)


def _compose(fns: Sequence[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    if not fns:
        return lambda v: v
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        f, g = fns
        return lambda v: g(f(v))

    def composed(v: Any) -> Any:
        for fn in fns:
            v = fn(v)
        return v

    return composed

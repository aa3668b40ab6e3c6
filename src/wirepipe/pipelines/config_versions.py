"""A config's versions as a hot reload compares them (``reload.py`` says what it does with them).

- **What changed** (``classify``): from the running version to a new one, one ``Change`` per top-level field, in
  the config's order; a field that reloads in place (``IN_PLACE``) or one that needs a restart (``RESTART``, with
  why: for the source, what reopening this kind of source would do, ``restart_reason``), named by the first leaf
  that differs under it.
- **One version** (``Version``): the validated config as JSON data, the local files its operators name
  (``named_files``: a schema, a zstd dictionary) with the digests of their bytes, and its digest
  (``config_digest``: the config with its secrets masked, and those files), which names it in the logs, the run
  summary and the metrics' ``config_digest`` column.
- **Watching files** (``Watch``): every ``POLL`` seconds each file's bytes are hashed (portable, no dependency,
  and an edit that keeps the size and the modification time is seen too); a change counts once the files then
  stay the same for ``SETTLE`` seconds (an editor's write, rename and chmod; a file briefly missing between its
  deletion and the rename of its new copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..connectors.connector import AtLeastOnce, CountsLoss, Source
from ..core.fields import MISSING, first_difference

POLL = 0.5  # seconds between two looks at the watched files
SETTLE = 0.3  # seconds the files must stay the same before a new version is read

# The top-level fields of a pipeline that reload in place (``PipelineRun.switch_to`` says how: the operators rebuilt,
# the files they name read again; a new dead letter opened and the old one closed; the metrics rows so far written
# as they ran, a changed section a new recorder; the intervals from the next commit or stop).
IN_PLACE = frozenset({"operators", "dead_letter", "metrics", "flush_interval", "shutdown_timeout", "allow_pickle",
                      "description"})
# The ones that need a restart, and why (the source's reason depends on the source: ``restart_reason``).
RESTART: dict[str, str] = {
    "name": "the pipeline's name is its identity: the durable or queue group its workers share by default, "
            "default Nats-Msg-Ids, the default dead-letter file, the metrics' pipeline",
    "source": "the source is opened once per run",
    "sink": "the sink is opened once per run (its files or its connection): reopened elsewhere, the output "
            "would be split between two destinations",
    "queue_size": "the read-ahead queue is sized when the run starts",
    "monitor": "the status line and the Prometheus endpoint belong to the process",
    "tracing": "the tracer is set up when the run starts",
    "service": "the NATS service is registered once per run, on the connection of the source or sink",
    "resources": "the stores operators read from (a schema registry, dictionaries) are opened once per run, "
                 "before the operators",
    "restart": "a pool reads how it restarts its workers when it starts",
}
_UNKNOWN = "a hot reload does not know this field, so it is not changed in a running pipeline"
_UNSET = MISSING  # a field one config has and the other does not


def restart_reason(key: str, source: Source) -> str:
    """Why a change of ``key`` needs a restart; for the source, what reopening this kind of source would do (its
    declared capabilities, never its type name)."""
    if key != "source":
        return RESTART.get(key, _UNKNOWN)
    if isinstance(source, CountsLoss):
        return ("the source is opened once per run and cannot send again what it had read: reopening it would lose "
                "the messages in flight (core NATS is at most once)")
    if isinstance(source, AtLeastOnce):
        return ("the source is opened once per run: another stream, durable or subject is a new position in a "
                "stream, which its deliver policy decides (restarted, a durable delivers again what it had not "
                "acknowledged: nothing is lost)")
    return "the source is opened once per run (its input read from the start)"


# --- what changed ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One changed field of a config: its path (the first leaf that differs under a field that needs a restart),
    its values, and why it needs a restart (None: it reloads in place)."""

    path: str
    before: Any
    after: Any
    restart: str | None = None

    def describe(self) -> str:
        return f"{self.path}: {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    from ..core.models import short_repr
    from ..core.redact import redact_secrets

    return "(not set)" if value is _UNSET else redact_secrets(short_repr(value))


def classify(running: Mapping[str, Any], new: Mapping[str, Any], source: Source) -> list[Change]:
    """The changes from ``running`` to ``new`` (validated configs as JSON data: ``Pipeline.config``), one per
    top-level field, in the config's order; ``source`` is the running source (its reason, ``restart_reason``).

    >>> from wirepipe.connectors.generate import GenerateSource
    >>> old = {"name": "p", "operators": [{"compress": {"level": 1}}], "queue_size": 8}
    >>> new = {"name": "p", "operators": [{"compress": {"level": 9}}], "queue_size": 16}
    >>> [(c.path, c.restart is None) for c in classify(old, new, GenerateSource("point"))]
    [('operators', True), ('queue_size', False)]
    """
    changes = []
    for key in dict.fromkeys([*running, *new]):
        before, after = running.get(key, _UNSET), new.get(key, _UNSET)
        if before == after:
            continue
        if key in IN_PLACE:
            changes.append(Change(key, before, after))
            continue
        path, before, after = _first_difference(key, before, after)
        changes.append(Change(path, before, after, restart_reason(key, source)))
    return changes


def _first_difference(path: str, before: Any, after: Any) -> tuple[str, Any, Any]:
    """The first leaf under ``path`` where ``before`` and ``after`` differ (``core.fields.first_difference``)."""
    from ..core.models import field_path

    found = first_difference(before, after)
    if found is None:
        return path, before, after
    where, before, after = found
    return field_path([path, *where]), before, after


# --- one version of a config -------------------------------------------------------------------------


def named_files(config: Mapping[str, Any]) -> list[str]:
    """The local files the operators of ``config`` (validated, as JSON data) name: every string of their options
    that is the path of a file, after any ``#Message`` (a schema, a dictionary; a plugin operator's files too).
    Relative paths are from this process's folder, as the operators read them."""
    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    found = []
    for text in strings(config.get("operators") or []):
        path = text.partition("#")[0]
        if path and "://" not in path and "\n" not in path and len(path) < 4096:
            with contextlib.suppress(OSError, ValueError):
                if Path(path).is_file():
                    found.append(path)
    return list(dict.fromkeys(found))


def file_digest(path: str) -> str | None:
    """The SHA-256 of a file's bytes, None when it cannot be read (missing between an editor's delete and
    rename)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def config_digest(config: Mapping[str, Any], files: Mapping[str, str | None]) -> str:
    """12 hex digits of a SHA-256 of ``config`` (validated, as JSON data; the user info of URLs masked, as every
    secret is in a dump) and of the bytes of the ``files`` it names (their digests)."""
    from ..core.redact import redact_secrets

    text = redact_secrets(json.dumps(config, sort_keys=True, default=str))
    digest = hashlib.sha256(text.encode())
    digest.update(json.dumps(sorted(files.items())).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Version:
    """A config as it runs: validated (as JSON data), the files its operators name (their digests) and its digest."""

    config: dict[str, Any]
    files: dict[str, str | None]
    digest: str

    @classmethod
    def of(cls, config: dict[str, Any], digest: str | None = None) -> Version:
        """``config`` with the files it names read now; ``digest`` when another process computed it (a pool's)."""
        files = {path: file_digest(path) for path in named_files(config)}
        return cls(config, files, digest or config_digest(config, files))

    def changed_files(self, other: Version) -> list[str]:
        return [p for p in dict.fromkeys([*self.files, *other.files]) if self.files.get(p) != other.files.get(p)]


# --- watching files ------------------------------------------------------------------------------------


class Watch:
    """Files polled for a change (see the module doc): ``changed`` returns once they differ from what was last seen
    and then stayed the same for ``settle`` seconds. Until ``follow`` says what was read, it returns at once: the
    first look is compared with what runs."""

    def __init__(self, paths: Iterable[str], *, poll: float = POLL, settle: float = SETTLE) -> None:
        self.paths = list(dict.fromkeys(paths))
        self.poll = poll
        self.settle = settle
        self.seen: dict[str, str | None] | None = None

    def look(self) -> dict[str, str | None]:
        return {path: file_digest(path) for path in self.paths}

    def follow(self, paths: Iterable[str], seen: dict[str, str | None]) -> None:
        """Watch ``paths`` from now on, ``seen`` being what was read (a file added since is compared with it)."""
        self.paths = list(dict.fromkeys(paths))
        self.seen = {path: seen.get(path, file_digest(path)) for path in self.paths}

    async def changed(self) -> dict[str, str | None]:
        """What the files hold once they changed and settled."""
        if self.seen is None:
            return self.look()
        while True:
            now = self.look()
            if now != self.seen:
                while True:
                    await asyncio.sleep(self.settle)
                    later = self.look()
                    if later == now:
                        return now
                    now = later
            await asyncio.sleep(self.poll)

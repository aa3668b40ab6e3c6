"""The names and numbers NATS restricts, each checked by one function that every config and command calls.

A name or number the server would refuse is refused when the config is validated, with what is allowed, so
``wirepipe validate`` says what ``run`` would otherwise meet at its first request (a traceback, or the server's
``invalid JSON``):

- a JetStream **stream** or **consumer** (``durable``) name: 1 to 255 characters, none of them
  whitespace, a control character, ``.``, ``*``, ``>``, ``/`` or ``\\`` (nats-server's rule; a name
  is a token of the API's subjects and a folder of the store);
- a **bucket** (Object Store, key-value): letters, digits, ``-`` and ``_`` (nats-py's rule), short enough
  for the stream that holds it (``OBJ_`` + the name);
- a **queue group**: not empty, no whitespace or control character (it is a word of the SUB line);
- a **number** of a stream's or a consumer's config: what the server's field holds (an int64, an int32 for
  ``max_msg_size``, a uint64 for a start sequence; a duration is an int64 of nanoseconds, about 292 years).

Subjects have their own home, ``wire/subjects.py``: ``pattern_tokens`` (what a subscription takes) and
``publish_template_problem`` (what a publish takes).

>>> stream_name("POINTS")
'POINTS'
>>> stream_name("PO.INTS")
Traceback (most recent call last):
...
ValueError: stream name 'PO.INTS' contains '.' (at character 3): a stream name is 1-255 characters without whitespace, control characters, '.', '*', '>', '/' or '\\'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, Field

from ...core.errors import ConfigError
from ...core.models import Duration, Size
from ...wire import subscription_pattern

MAX_NAME = 255  # nats-server's JSMaxNameLen: streams and consumers
_NOT_IN_NAME = re.compile(r"[\x00-\x20\x7f.*>/\\]")
_NOT_IN_WORD = re.compile(r"[\x00-\x20\x7f]")
_BUCKET = re.compile(r"[a-zA-Z0-9_-]+")
_BUCKET_STREAM_PREFIX = len("OBJ_")  # the longer of an Object Store's (OBJ_) and a KV bucket's (KV_) stream
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
_SHOWN = {" ": "a space", "\t": "a tab", "\r": "a CR", "\n": "an LF"}


def _char(ch: str) -> str:
    return _SHOWN.get(ch, repr(ch))


def _jetstream_name(kind: str, name: str) -> str:
    allowed = (f"a {kind} name is 1-{MAX_NAME} characters without whitespace, control characters, "
               "'.', '*', '>', '/' or '\\'")
    if not name:
        raise ValueError(f"the {kind} name is empty: {allowed}")
    bad = _NOT_IN_NAME.search(name)
    if bad is not None:
        raise ValueError(f"{kind} name {name[:64]!r} contains {_char(bad.group())} (at character {bad.start() + 1}): "
                         f"{allowed}")
    if len(name) > MAX_NAME:
        raise ValueError(f"{kind} name {name[:64]!r}... is {len(name)} characters: {allowed}")
    return name


def stream_name(name: str) -> str:
    """``name`` when the server takes it as a stream's name; ``ValueError`` saying what is allowed."""
    return _jetstream_name("stream", name)


def consumer_name(name: str) -> str:
    """``name`` when the server takes it as a consumer's (a durable's) name; ``ValueError`` otherwise."""
    return _jetstream_name("consumer", name)


def bucket_name(name: str) -> str:
    """``name`` when the server takes it as an Object Store or key-value bucket's name; ``ValueError`` otherwise.

    >>> bucket_name("a.b")
    Traceback (most recent call last):
    ...
    ValueError: bucket name 'a.b': a bucket name is letters, digits, - and _ (1-251 characters)
    """
    longest = MAX_NAME - _BUCKET_STREAM_PREFIX
    if not _BUCKET.fullmatch(name) or len(name) > longest:
        raise ValueError(f"bucket name {name[:64]!r}: a bucket name is letters, digits, - and _ (1-{longest} characters)")
    return name


def queue_group(name: str) -> str:
    """``name`` when it can be a queue group (a word of the SUB line); ``ValueError`` otherwise."""
    bad = _NOT_IN_WORD.search(name)
    if not name or bad is not None:
        where = f" contains {_char(bad.group())} (at character {bad.start() + 1})" if bad is not None else " is empty"
        raise ValueError(f"queue group {name[:64]!r}{where}: a queue group is a word without whitespace "
                         "or control characters")
    return name


def _at_most(kind: str, limit: int) -> Callable[[int], int]:
    """A check that a number fits the server's field of type ``kind`` (``an int64``...)."""
    def check(n: int) -> int:
        if n > limit:
            raise ValueError(f"{n} is more than the server's field holds ({kind}: at most {limit})")
        return n
    return check


def server_nanoseconds(seconds: float) -> float:
    """``seconds`` when the server can hold it as int64 nanoseconds (about 292 years); ``ValueError`` otherwise.

    >>> server_nanoseconds(3600.0)
    3600.0
    >>> server_nanoseconds(99999999999 * 3600)
    Traceback (most recent call last):
    ...
    ValueError: 359999999996400s is longer than the server holds (int64 nanoseconds: at most 9223372036s, about 292 years)
    """
    if seconds * 1e9 > INT64_MAX:
        raise ValueError(f"{seconds:.0f}s is longer than the server holds (int64 nanoseconds: at most "
                         f"{INT64_MAX // 10**9}s, about 292 years)")
    return seconds


def check_flags(*flags: tuple[str, Callable[[str], str], str | None]) -> None:
    """Each ``(flag, checker, value)`` of a command's options checked before its pipeline is made, so the error
    names the flag the user typed (``--stream 'A.B'``) rather than the generated config's field."""
    for flag, check, value in flags:
        if value is not None:
            try:
                check(value)
            except ValueError as exc:
                raise ConfigError(f"{flag}: {exc}") from None


# The types config models declare their fields with.
StreamName = Annotated[str, AfterValidator(stream_name)]
ConsumerName = Annotated[str, AfterValidator(consumer_name)]
BucketName = Annotated[str, AfterValidator(bucket_name)]
QueueGroup = Annotated[str, AfterValidator(queue_group)]
SubjectPattern = Annotated[str, AfterValidator(subscription_pattern)]
Int64 = Annotated[int, AfterValidator(_at_most("an int64", INT64_MAX))]
StreamSequence = Annotated[int, Field(ge=1), AfterValidator(_at_most("a uint64", UINT64_MAX))]  # 1, 2, 3...
Nanoseconds = Annotated[Duration, AfterValidator(server_nanoseconds)]  # a duration the server keeps in int64 ns
Int64Size = Annotated[Size, AfterValidator(_at_most("an int64", INT64_MAX))]
Int32Size = Annotated[Size, AfterValidator(_at_most("an int32", INT32_MAX))]

"""Credentials never leave the process: one function redacts them from everything wirepipe shows or writes.

A NATS URL may carry user info: ``nats://user:password@host``, a token (``nats://s3cr3t@host``),
no scheme at all (``svc:password@host:4222`` connects too), an IPv6 host (``nats://u:p@[::1]:4222``),
or sit in a list (``nats://a:4222,nats://u:p@b:4222``); a password may hold ``,`` ``'`` ``:`` or
``@``. ``redact_secrets`` replaces every URL's user info in any text with ``***``: log lines
(whoever logged them, ``RedactingFormatter``), error and validation messages, status lines,
``--print-config``, the run metadata of metrics, bench and replay results. ``auth:`` secrets are
``models.Secret`` (a ``SecretStr`` whose bad values are never echoed) and ``redact_tree`` masks
them in a raw config too (``SECRET_FIELDS``).

A URL's query string may carry a token too (an OTLP endpoint's ``?token=``, which an HTTP library repeats
in its errors as the path alone: ``/v1/traces?token=...``): every ``?name=...`` in a word is shown as
``?***``. The values of ``tracing.headers`` (an exporter's ``Authorization``) are secrets as passwords are:
``models.Secret`` in the model, masked whole in a raw config (``SECRET_MAPPINGS``).

The rule errs on the side of hiding: user info runs from just after a URL's ``scheme://`` (the
last one before the ``@``) or, without a scheme, from the start of the word, to the last ``@``
that is followed by a host; commas, quotes, colons and ``@`` inside it are part of it, and so is
whitespace after a scheme on the same line. So ``nats://a:1,u:p@b:2`` without its second scheme
shows as ``nats://***@b:2``, and an e-mail address as ``***@example.com``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"
# The config fields that hold secrets (typed ``models.Secret``; tests/test_redact.py keeps the two in step),
# and the mapping that holds them: a value there that is not a mapping (``auth: "TOKEN"``) is masked whole.
SECRET_FIELDS = frozenset({"password", "token", "nkey_seed"})
SECRET_HOLDERS = frozenset({"auth"})
# (section, field) of a mapping whose every value is a secret: an exporter's HTTP headers.
SECRET_MAPPINGS = frozenset({("tracing", "headers")})

_WORD = re.compile(r"\S*@\S*")  # a run of text without whitespace that has an '@'
# A URL whose user info has whitespace in it (nats-py sends such a password as it is): from the scheme to the
# '@' before a host, on one line, not past another scheme.
_SPACED = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)((?:(?!://)[^\n@])*?)@(?=[\w\[])")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# An '@' before a host name or an IPv6 literal; not before a bare number (``points@3``: a registered schema's version).
_AT_HOST = re.compile(r"@(?=[\w\[])(?!\d+(?![\w.\[-]|:\d))")
_OPENERS = "'\"([{<"  # what may open a word before a URL without a scheme (a quoted value, a list)
_ENV_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")  # "${NATS_PASSWORD}" names a secret, holds none


# A query string in a word: '?' then name=; it runs to the end of the word (a quote or bracket ends it).
_QUERY = re.compile(r"\?(?=[\w.~%+-]*=)[^\s'\"()<>\[\]{}]*")


def redact_secrets(text: str) -> str:
    """``text`` with the user info of every URL in it replaced by ``***``, and every query string by ``?***``
    (see the module doc)."""
    if "?" in text and "=" in text:
        text = _QUERY.sub("?" + MASK, text)
    if "@" not in text:
        return text
    return _WORD.sub(_redact_word, _SPACED.sub(_redact_spaced, text))


def _redact_spaced(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    return f"{scheme}{MASK}@" if any(ch.isspace() for ch in userinfo) else match.group(0)


def _redact_word(match: re.Match[str]) -> str:
    word = match.group(0)
    starts = [m.end() for m in _SCHEME.finditer(word)]
    first = len(word) - len(word.lstrip(_OPENERS))
    ends: dict[int, int] = {}  # where user info begins -> where it ends (its last '@')
    for at in _AT_HOST.finditer(word):
        end = at.start()
        begin = max((s for s in starts if s <= end), default=first)
        if end > begin:
            ends[begin] = max(end, ends.get(begin, end))
    if not ends:
        return word
    out, pos = [], 0
    for begin, end in sorted(ends.items()):
        if end <= pos:
            continue
        out += [word[pos:max(begin, pos)], MASK]
        pos = end
    out.append(word[pos:])
    return "".join(out)


def redact_tree(value: Any, _within: Any = None) -> Any:
    """A copy of a config-like tree (dicts, lists, strings): URL user info and query strings redacted in every
    string, the values of secret fields (``SECRET_FIELDS``, a ``SecretStr``, a non-mapping ``auth``, every
    value of a ``SECRET_MAPPINGS`` mapping) masked, unless the value is a plain ``${VAR}`` (a printed config
    keeps running)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: MASK if _secret(k, v) else (_masked(v) if (_within, k) in SECRET_MAPPINGS else redact_tree(v, k))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    if type(value).__name__ == "SecretStr":
        return MASK
    return value


def _masked(mapping: Any) -> Any:
    """A mapping of secrets: its keys shown (``Authorization``), its values masked; anything else masked whole."""
    if not isinstance(mapping, dict):
        return redact_tree(mapping) if mapping is None else MASK
    return {k: v if _secret_reference(v) else MASK for k, v in mapping.items()}


def _secret_reference(value: Any) -> bool:
    return isinstance(value, str) and _ENV_REFERENCE.fullmatch(value) is not None


def _secret(key: Any, value: Any) -> bool:
    if value is None or _secret_reference(value):
        return False
    return key in SECRET_FIELDS or (key in SECRET_HOLDERS and not isinstance(value, dict))


class RedactingFormatter(logging.Formatter):
    """No log line shows a URL's credentials, whoever logged it (wirepipe, nats-py, asyncio)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_secrets(super().format(record))  # the message and its traceback


def log_redacted(level: int, fmt: str) -> None:
    """Log to stderr through ``RedactingFormatter``: every process that runs pipelines (the CLI, a pool's
    workers, a replay's workers) logs so."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])

"""Credentials never leave the process: URL user info is redacted from everything wirepipe shows or writes.

A NATS URL may carry ``user:password@`` or a token (``nats://s3cr3t@host``). ``auth:``
secrets are ``SecretStr`` and safe by construction; URLs are plain strings, so every
place that shows or stores text a user wrote (log lines, error messages, ``--print-config``,
the run metadata of metrics, bench and replay results) passes it through here.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# scheme://<anything up to an @ that is not whitespace, a list separator or a quote>@
_USERINFO = re.compile(r"(\b[A-Za-z][\w+.-]*://)[^@\s,'\"]*@")


def redact_url(url: str) -> str:
    """The URL without user info (``nats://user:secret@host`` -> ``nats://***@host``)."""
    try:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
    except ValueError:
        return "<invalid url>"
    if parts.username is None and parts.password is None:
        return redact_secrets(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def redact_secrets(text: str) -> str:
    """Every URL's user info in free text (a message nats-py, the OS or a user produced) replaced by ``***``."""
    if "@" not in text:
        return text
    return _USERINFO.sub(r"\1***@", text)


def redact_tree(value: Any) -> Any:
    """A copy of a config-like tree (dicts, lists, strings) with URL user info redacted in every string."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    return value

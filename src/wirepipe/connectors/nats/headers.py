"""NATS header blocks (``NATS/1.0\r\nKey: value\r\n...``) as dicts: one block (``parse_headers``) or a batch's
column of them, what repeats in the batch parsed once (``parse_header_column``). Plain bytes in, no nats-py."""

from __future__ import annotations

from collections.abc import Sequence

try:
    from ..._frames import parse_header_blocks
except ImportError:  # built without a compiler (the extension is optional): the Python loop
    parse_header_blocks = None  # type: ignore[assignment]

_HDR_START = len(b"NATS/1.0")
_NO_STATUS = b"NATS/1.0\r\n"  # a header block's first line without a status


def has_status(raw: bytes) -> bool:
    """A block with a status line (``NATS/1.0 409 ...``): what the server sends a pull consumer, not a message."""
    return raw[_HDR_START:_HDR_START + 1] == b" "


def parse_headers(raw: bytes | None) -> dict[str, str] | None:
    """A ``NATS/1.0`` header block as a dict (``Status``/``Description`` for a status line).

    A split and a ``partition`` per line (measured faster than a regex ``findall`` here)."""
    if not raw:
        return None
    lines = raw.decode("utf-8", "replace").split("\r\n")
    out: dict[str, str] = {}
    status = lines[0][_HDR_START:].strip()
    if status:  # "NATS/1.0 409 Batch Completed"
        code, _, desc = status.partition(" ")
        out["Status"] = code
        if desc:
            out["Description"] = desc
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
    return out


def parse_header_column(raws: Sequence[bytes | None]) -> list[dict[str, str] | None]:
    """``parse_headers`` of each of a batch's header blocks, what repeats in the batch parsed once: in one C loop
    (``wirepipe._frames.parse_header_blocks``, ~0.2 us a block against ~1 here; a block that is not ASCII is
    ``parse_headers``' there), or ``_parse_header_column_python`` where it was not built."""
    if parse_header_blocks is not None:
        return parse_header_blocks(raws if type(raws) is list else list(raws), parse_headers)
    return _parse_header_column_python(raws)


def _parse_header_column_python(raws: Sequence[bytes | None]) -> list[dict[str, str] | None]:
    """``parse_header_column`` without the C loop.

    A batch's messages mostly repeat their header lines (the content type and encoding, one ``Wirepipe-Sent-At``
    per publish batch) and differ in the last (``Nats-Msg-Id``): a block whose lines but the last were seen in
    the batch is a copy of their dict and the last line parsed; other lines are parsed once each in the batch
    (only that, once blocks differ before their last line as often as not). Same results as ``parse_headers``
    (a status line, ``NATS/1.0 409 ...``, is read by it)."""
    heads: dict[bytes, dict[str, str]] = {}  # a block's lines but the last -> their dict
    lines: dict[bytes, tuple[str, str]] = {}  # a line -> (key, value)
    out: list[dict[str, str] | None] = []
    by_head = True  # until blocks differ before their last line more often than not
    repeated = 0
    for raw in raws:
        if not raw or not raw.startswith(_NO_STATUS) or not raw.endswith(b"\r\n\r\n"):
            out.append(parse_headers(raw))  # none, a status line, or not the form nats-server writes
            continue
        if not by_head:
            out.append(_lines_into({}, raw.split(b"\r\n")[1:], lines))
            continue
        head, crlf, last = raw[:-4].rpartition(b"\r\n")
        if not crlf:  # ``NATS/1.0\r\n\r\n``: no lines
            out.append({})
            continue
        template = heads.get(head)
        if template is None:
            template = heads[head] = _lines_into({}, head.split(b"\r\n")[1:], lines)
            by_head = len(heads) <= 16 or repeated >= len(heads)
        else:
            repeated += 1
        h = template.copy()
        if last:
            k, _, v = last.decode("utf-8", "replace").partition(":")
            h[k.strip()] = v.strip()
        out.append(h)
    return out


def _lines_into(h: dict[str, str], block: list[bytes], lines: dict[bytes, tuple[str, str]]) -> dict[str, str]:
    """The ``key: value`` lines of ``block`` into ``h``; each line parsed once, kept in ``lines``."""
    for line in block:
        if line:
            kv = lines.get(line)
            if kv is None:
                k, _, v = line.decode("utf-8", "replace").partition(":")
                kv = lines[line] = (k.strip(), v.strip())
            h[kv[0]] = kv[1]
    return h

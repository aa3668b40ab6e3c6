"""The header block of a wirepipe record: the header names (``Header``), set on a batch's records
(``set_header``), and the arithmetic of a block's size on the wire (``header_size``, ``header_lines``), which
the NATS sinks keep within ``max_payload``.

Every module that reads or writes a wirepipe header takes its name from ``Header``
(docs/concepts/wire-contract.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..core.batch import Batch


class Header:
    """The header names wirepipe reads and writes: the one vocabulary, as plain ``str`` constants.

    Plain strings, not enum members: a header dict goes to nats-py, orjson, pyarrow and YAML as it is,
    and orjson refuses a ``str`` enum member as a dict key (``enum.StrEnum`` too).
    """

    CONTENT_TYPE = "Content-Type"  # set by ``serialize``; ``deserialize format: auto`` reads it
    CONTENT_ENCODING = "Content-Encoding"  # set by ``compress``; ``decompress codec: auto`` reads it
    SCHEMA = "Wirepipe-Schema"  # the fingerprint of the typed schema a record was encoded with
    DICTIONARY = "Wirepipe-Dictionary"  # the SHA-256 digest of the zstd dictionary a record was compressed with
    SENT_AT = "Wirepipe-Sent-At"  # publish time, integer ns since the Unix epoch
    PUBLISHER = "Wirepipe-Publisher"  # a publishing sink's id for one run (core NATS gap counting)
    SEQ = "Wirepipe-Seq"  # 1, 2, 3 ... per publisher
    STAGE = "Wirepipe-Stage"  # dead letters: the stage that refused the record
    ERROR = "Wirepipe-Error"  # dead letters: why
    SUBJECT = "Wirepipe-Subject"  # dead letters: the subject the record had
    STREAM_SEQ = "Wirepipe-Stream-Seq"  # dead letters: its JetStream stream sequence
    PIPELINE = "Wirepipe-Pipeline"  # dead letters on NATS: the pipeline that refused the record
    LAST_SEQ = "Wirepipe-Last-Seq"  # a publisher's stamp (on ``STAMP_PREFIX`` + subject): its last Wirepipe-Seq
    FINAL = "Wirepipe-Final"  # on the stamp a publisher sends when it closes: it publishes no more
    MSG_ID = "Nats-Msg-Id"  # JetStream deduplication id
    PENDING = "Nats-Pending-Messages"  # JetStream pull status: messages the request left undelivered
    TRACEPARENT = "traceparent"  # W3C trace context: kept as it came, or the pipeline's own with tracing on
    TRACESTATE = "tracestate"  # W3C trace context's vendor part, beside traceparent


HEADER_NAMES = frozenset(value for name, value in vars(Header).items() if name.isupper())


def set_header(batch: Batch, key: str, value: str, drop: str | None = None) -> None:
    """Set a wire header on every record of a batch, keeping the headers the records came with (a trace
    id from the source): one shared dict when the batch has one, per record otherwise (the one way
    operators add a header; they declare which in ``Operator.adds_headers``). ``drop`` names a header
    the new value makes wrong (``serialize`` writes fresh bytes: an old ``Content-Encoding`` goes).

    >>> b = Batch([b"a", b"b"], headers=[{"traceparent": "00-1"}, None])
    >>> set_header(b, "Content-Type", "application/json")
    >>> b.headers
    [{'traceparent': '00-1', 'Content-Type': 'application/json'}, {'Content-Type': 'application/json'}]
    """
    set_headers(batch, {key: value}, () if drop is None else (drop,))


def set_headers(batch: Batch, values: dict[str, str], drop: Sequence[str] = ()) -> None:
    """``set_header`` for several headers at once (each record's headers copied once), and the headers in
    ``drop`` taken away."""
    h = batch.headers
    if h is None or (not isinstance(h, dict) and not any(h)):  # no record has a header: one shared dict
        batch.headers = dict(values)
    elif isinstance(h, dict):
        batch.headers = _merged(h, values, drop)
    elif not drop:
        batch.headers = [{**d, **values} if d else dict(values) for d in h]
    else:  # a record's headers are copied once; only one that holds a header of ``drop`` pays for dropping it
        keep = frozenset(drop).isdisjoint
        batch.headers = [({**d, **values} if keep(d) else _merged(d, values, drop)) if d else dict(values)
                         for d in h]


def _merged(headers: dict[str, str], values: dict[str, str], drop: Sequence[str]) -> dict[str, str]:
    out = {**headers, **values}
    for key in drop:
        out.pop(key, None)
    return out


# --- header-block sizes ---------------------------------------------------------------------------

HDR_LINE = len(b"NATS/1.0\r\n") + 2  # status line + the blank line that ends the block
SENT_AT_SIZE = len(Header.SENT_AT) + 4 + 19  # "key: value\r\n" with a 19-digit ns timestamp
# The two gap-counting stamps: "Wirepipe-Publisher: <12 hex>\r\n" + "Wirepipe-Seq: <up to 12 digits>\r\n"
STAMP_SIZE = len(Header.PUBLISHER) + 4 + 12 + len(Header.SEQ) + 4 + 12


def header_size(headers: dict[str, str] | None) -> int:
    """Bytes nats-py puts on the wire for a header block (0 without headers)."""
    if not headers:
        return 0
    return HDR_LINE + sum(len(k.encode()) + len(str(v).encode()) + 4 for k, v in headers.items())


HDR_STATUS = b"NATS/1.0\r\n"  # the first line of every header block
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP token: the keys nats-py accepts
_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


def header_lines(headers: dict[str, str], leave_out: frozenset[str] = frozenset()) -> bytes | None:
    """The ``key: value\\r\\n`` lines nats-py writes for ``headers`` (keys and values stripped, an empty key
    skipped, a line break in a value made a space), without the keys in ``leave_out``; None when nats-py would
    refuse one (a key that is not an HTTP token, a value that is not UTF-8 text): its own publish says why.

    >>> header_lines({"Content-Type": "application/msgpack", "X": " a\\nb "})
    b'Content-Type: application/msgpack\\r\\nX: a b\\r\\n'
    """
    out = []
    token = _HEADER_KEY.fullmatch
    try:
        for k, v in headers.items():
            key = k.strip()
            if not key or k in leave_out:
                continue
            if token(key) is None:
                return None
            out.append(b"%b: %b\r\n" % (key.encode(), v.strip().translate(_VALUE_NEWLINES).encode()))
    except (AttributeError, UnicodeEncodeError):  # not a str, or a lone surrogate
        return None
    return b"".join(out)


def entry_size(key: str, value_len: int) -> int:
    """Bytes one ``key: value\\r\\n`` line takes, for a value ``value_len`` bytes long."""
    return len(key) + 4 + value_len


def sent_at_column(headers: list[dict[str, str] | None]) -> list[int | None]:
    """``Wirepipe-Sent-At`` of each record as int ns, None when absent or malformed."""
    key = Header.SENT_AT
    try:
        return [int(h[key]) if h and key in h else None for h in headers]
    except ValueError:  # a malformed value: redo record by record
        out: list[int | None] = []
        for h in headers:
            try:
                out.append(int(h[key]) if h and key in h else None)
            except ValueError:
                out.append(None)
        return out

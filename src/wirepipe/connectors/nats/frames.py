"""A batch of records as NATS protocol frames (``PUB``/``HPUB``), built a column at a time.

nats-py's ``publish`` encodes the header dict on every call (each key checked by a regex, each value
stripped and translated, a ``bytearray.extend`` per part) and queues one command per message. Profiled on
a core publish pipeline of ``point`` records carrying the wire contract's five headers, that was ~85% of the
process's CPU (cProfile: ``_send_publish`` 5.1 of 5.9 s for 200,000 records). Here the header block's
constant part (the batch's shared headers, ``Wirepipe-Publisher``, the chunk's ``Wirepipe-Sent-At``) is
encoded once per chunk, and each record adds its ``Wirepipe-Seq`` and its lengths in one ``bytes %``
format: a comprehension over the payload column. The caller hands the frames to nats-py's outbound
buffer as one command (``reader.queue_frames``). The JetStream sink's frames (``acked_frames``) carry a reply
subject per record (its ack comes there) and its ``Nats-Msg-Id``.

The bytes are the ones nats-py writes: the same header lines (``wire.header_lines`` follows its rules),
one space between the fields of the protocol line (nats-py writes two when there is no reply subject;
the server reads both).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...wire import HDR_STATUS, Header

SEQ_LINE = Header.SEQ.encode() + b": "
_END = b"\r\n\r\n"  # the Wirepipe-Seq line's end and the blank line that ends the header block
# A batch goes into nats-py's buffer in chunks of about this many bytes (a protocol line and a header block
# take at most _FRAME_ROOM per record): small records go in one chunk, large ones a few at a time.
_CHUNK_BYTES = 1 << 20
_FRAME_ROOM = 1024


def records_per_chunk(values: list[bytes]) -> int:
    """How many of these records one chunk of frames takes (at least one)."""
    return max(1, _CHUNK_BYTES // (max(map(len, values)) + _FRAME_ROOM))


def stamped_head(shared: bytes, publisher: str, sent_at: int) -> bytes:
    """The constant part of a header block: the status line, the shared headers' lines, the publisher and
    the send time (each record's ``Wirepipe-Seq`` line follows)."""
    return b"%b%b%b: %b\r\n%b: %d\r\n" % (HDR_STATUS, shared, Header.PUBLISHER.encode(), publisher.encode(),
                                          Header.SENT_AT.encode(), sent_at)


def _escaped(raw: bytes) -> bytes:
    return raw.replace(b"%", b"%%")


def _digit_runs(first: int, n: int) -> Iterator[tuple[int, int, int]]:
    """``(start, end, digits)``: the records ``start:end`` of a batch numbered from ``first`` whose numbers
    have ``digits`` digits (one run, unless the numbers cross a power of ten)."""
    i, seq = 0, first
    while i < n:
        digits = len(str(seq))
        end = min(n, i + 10 ** digits - seq)
        yield i, end, digits
        seq += end - i
        i = end


def encoded_subjects(subjects: list[str]) -> dict[str, bytes]:
    """Each distinct subject as UTF-8 (raises ``UnicodeEncodeError`` for one that is not)."""
    return {s: s.encode() for s in set(subjects)}


def stamped_frames(subjects: str | list[str], values: list[bytes], head: bytes, first_seq: int) -> list[bytes]:
    """``HPUB`` frames: every record with the header block ``head`` + ``Wirepipe-Seq: <n>``, numbered from
    ``first_seq``; ``subjects`` is one subject or one per record."""
    n = len(values)
    out: list[bytes] = []
    one = subjects.encode() if isinstance(subjects, str) else None
    enc = encoded_subjects(subjects) if not isinstance(subjects, str) else None
    for start, end, digits in _digit_runs(first_seq, n):
        hlen = len(head) + len(SEQ_LINE) + digits + len(_END)
        tail = _escaped(head + SEQ_LINE) + b"%d" + _END + b"%b\r\n"
        whole = start == 0 and end == n
        vs = values if whole else values[start:end]
        seqs = range(first_seq + start, first_seq + end)
        if one is not None:
            fmt = _escaped(b"HPUB %b %d " % (one, hlen)) + b"%d\r\n" + tail
            out += [fmt % (hlen + len(v), q, v) for q, v in zip(seqs, vs, strict=True)]
        else:
            assert enc is not None
            fmt = b"HPUB %b " + _escaped(b"%d " % hlen) + b"%d\r\n" + tail
            subs = subjects if whole else subjects[start:end]
            out += [fmt % (enc[s], hlen + len(v), q, v) for s, q, v in zip(subs, seqs, vs, strict=True)]
    return out


def block_frames(subjects: str | list[str], values: list[bytes], blocks: list[bytes]) -> list[bytes]:
    """``HPUB`` frames with a whole header block per record."""
    if isinstance(subjects, str):
        fmt = _escaped(b"HPUB %b " % subjects.encode()) + b"%d %d\r\n%b%b\r\n"
        return [fmt % (len(b), len(b) + len(v), b, v) for b, v in zip(blocks, values, strict=True)]
    enc = encoded_subjects(subjects)
    return [b"HPUB %b %d %d\r\n%b%b\r\n" % (enc[s], len(b), len(b) + len(v), b, v)
            for s, b, v in zip(subjects, blocks, values, strict=True)]


def bare_frames(subjects: str | list[str], values: list[bytes]) -> list[bytes]:
    """``PUB`` frames: payloads without headers."""
    if isinstance(subjects, str):
        fmt = _escaped(b"PUB %b " % subjects.encode()) + b"%d\r\n%b\r\n"
        return [fmt % (len(v), v) for v in values]
    enc = encoded_subjects(subjects)
    return [b"PUB %b %d\r\n%b\r\n" % (enc[s], len(v), v) for s, v in zip(subjects, values, strict=True)]


MSG_ID_LINE = Header.MSG_ID.encode() + b": "


def acked_frames(subjects: str | list[str], values: list[bytes], heads: bytes | list[bytes], ids: list[bytes],
                 reply_prefix: bytes, first_token: int) -> list[bytes]:
    """JetStream ``HPUB`` frames: record ``i`` with the reply subject ``reply_prefix`` + its token (numbered from
    ``first_token``: its ack comes there), its header block (``heads``: one shared, or one per record, without
    the blank line that ends it) and its ``Nats-Msg-Id`` (``ids``)."""
    tokens = range(first_token, first_token + len(values))
    tail = b"%b\r\n\r\n%b\r\n"  # the id, the end of the header block, the payload
    reply = _escaped(reply_prefix)
    if isinstance(heads, bytes):
        base = len(heads) + len(MSG_ID_LINE) + len(_END)
        block = _escaped(heads + MSG_ID_LINE) + tail
        if isinstance(subjects, str):
            fmt = _escaped(b"HPUB %b " % subjects.encode()) + reply + b"%d %d %d\r\n" + block
            return [fmt % (t, base + len(i), base + len(i) + len(v), i, v)
                    for t, i, v in zip(tokens, ids, values, strict=True)]
        enc = encoded_subjects(subjects)
        fmt = b"HPUB %b " + reply + b"%d %d %d\r\n" + block
        return [fmt % (enc[s], t, base + len(i), base + len(i) + len(v), i, v)
                for s, t, i, v in zip(subjects, tokens, ids, values, strict=True)]
    extra = len(MSG_ID_LINE) + len(_END)
    fmt = b"HPUB %b " + reply + b"%d %d %d\r\n%b" + _escaped(MSG_ID_LINE) + tail
    subs = [subjects] * len(values) if isinstance(subjects, str) else subjects
    enc = encoded_subjects(subs)
    return [fmt % (enc[s], t, len(h) + extra + len(i), len(h) + extra + len(i) + len(v), h, i, v)
            for s, t, h, i, v in zip(subs, tokens, heads, ids, values, strict=True)]

"""A subscription's messages cut out of a NATS read (``reader.cut_frames``), their header blocks
(``headers.parse_header_column``) and JetStream reply subjects (``jetstream_reader.parse_ack_replies``) parsed: the
C loops (``wirepipe._frames``) and the Python loops they replace where no compiler was there give one answer for
every read, whole or cut anywhere, and every block; both cutters stop at what is not theirs to read (it goes to
nats-py's parser). And a durable read through the C loops against a real nats-server, with records a dead
reader held coming back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.nats_fixtures import consumer_info, publish_numbered
from wirepipe._frames import ack_reply_columns as c_acks
from wirepipe._frames import cut_frames as c_cut  # the test command's install builds it
from wirepipe._frames import parse_header_blocks as c_headers
from wirepipe.connectors.nats import headers, jetstream_reader, reader
from wirepipe.connectors.nats.headers import _parse_header_column_python, parse_header_column, parse_headers
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.reader import _cut_frames_python as py_cut
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink

OWN = b"7"
HDR = b"NATS/1.0\r\nNats-Msg-Id: a-1\r\n\r\n"
MESSAGES = [
    b"HMSG jsc 7 $JS.ACK.JSC.c.1.5.5.1796560126942292852.10 %d %d\r\n%bone\r\n" % (len(HDR), len(HDR) + 3, HDR),
    b"MSG jsc 7 3\r\ntwo\r\n",
    b"MSG other.subject 7 _INBOX.x 0\r\n\r\n",  # an empty payload, a reply, another subject
    b"HMSG jsc 7 12 12\r\nNATS/1.0\r\n\r\n\r\n",  # headers only
    b"HMSG jsc 7 _INBOX.y 0 5\r\nfive!\r\n",  # a header size of 0: no header block
    b"MSG jsc 7 9\r\na\r\nb\r\nc\r\n\r\n",  # CRLF inside a payload
]
STOPS = [  # what the fast path leaves to nats-py: the loop stops there, whatever follows
    b"MSG jsc 8 3\r\nxyz\r\n",  # another subscription
    b"PING\r\n", b"+OK\r\n", b"-ERR 'x'\r\n", b"INFO {}\r\n",
    b"MSG jsc  7 3\r\nxyz\r\n",  # two spaces
    b"MSG jsc 7 +3\r\nxyz\r\n", b"MSG jsc 7 3_0\r\nxyz\r\n", b"MSG jsc 7 -1\r\nxyz\r\n",  # not digits only
    b"HMSG jsc 7 9 3\r\nxyz\r\n",  # a header larger than the message
    b"MSG jsc 7 a b c 3\r\nxyz\r\n", b"HMSG jsc 7 3\r\nxyz\r\n", b"MSG jsc\r\n",  # other forms
    b"MSG jsc 7 3",  # a control line not all read
]


def _both(buf: bytes) -> tuple[list[tuple[bytes, bytes, bytes | None, bytes]], int, int, bool]:
    got = c_cut(bytearray(buf), OWN)
    assert got == py_cut(bytearray(buf), OWN), buf
    return got


def test_every_message_of_a_whole_read_is_cut_with_its_parts() -> None:
    frames, pos, payload_bytes, partial = _both(b"".join(MESSAGES))
    assert frames == [(b"$JS.ACK.JSC.c.1.5.5.1796560126942292852.10", b"one", HDR, b"jsc"),
                      (b"", b"two", None, b"jsc"), (b"_INBOX.x", b"", None, b"other.subject"),
                      (b"", b"", b"NATS/1.0\r\n\r\n", b"jsc"), (b"_INBOX.y", b"five!", None, b"jsc"),
                      (b"", b"a\r\nb\r\nc\r\n", None, b"jsc")]
    assert (pos, payload_bytes, partial) == (len(b"".join(MESSAGES)), 3 + 3 + 0 + 0 + 5 + 9, False)


@pytest.mark.parametrize("stop", STOPS)
def test_the_loop_stops_at_what_it_does_not_read(stop: bytes) -> None:
    before = b"".join(MESSAGES[:2])
    frames, pos, _, partial = _both(before + stop + MESSAGES[1])
    assert (len(frames), pos, partial) == (2, len(before), False)


def test_a_message_cut_by_the_read_waits_for_the_next_one_wherever_the_cut_is() -> None:
    stream = b"".join(MESSAGES)
    ends = [sum(map(len, MESSAGES[:i + 1])) for i in range(len(MESSAGES))]
    for cut in range(len(stream) + 1):
        frames, pos, _, partial = _both(stream[:cut])
        whole = sum(1 for e in ends if e <= cut)
        assert (len(frames), pos) == (whole, ends[whole - 1] if whole else 0), cut
        # Past its control line, a message not all there is one of ours waiting (partial); before it, nats-py's
        at = ends[whole - 1] if whole else 0
        assert partial == (cut < len(stream) and b"\r\n" in stream[at:cut]), cut


@given(st.lists(st.sampled_from(MESSAGES + STOPS), max_size=12), st.integers(0, 400))
def test_the_c_loop_and_the_python_loop_agree_on_any_read(parts: list[bytes], cut: int) -> None:
    _both(b"".join(parts)[:cut])


_line_text = st.text(alphabet=st.sampled_from(list("ab:Z0 \t\x0b\x1c\x1f-é\r\n")), max_size=12)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=40),
                          st.builds(lambda status, lines: ("NATS/1.0" + status + "\r\n" + "".join(
                              f"{line}\r\n" for line in lines) + "\r\n").encode(),
                                    st.sampled_from(["", " 409 Batch Completed", "  100  Idle ", " ", "x"]),
                                    st.lists(_line_text, max_size=5))), max_size=8))
def test_the_c_header_parser_and_the_python_one_agree_with_parse_headers(blocks: list[bytes | None]) -> None:
    """Header blocks as nats-server writes them and not: a status line or none, spaces and other whitespace
    around keys and values, lines without a colon, a key twice, bytes that are not ASCII or not UTF-8; the
    blocks repeated, so the C loop's reuse of a line seen before is tried."""
    blocks = blocks + blocks[::-1]
    expected = [parse_headers(b) for b in blocks]
    assert c_headers(blocks, parse_headers) == expected
    assert _parse_header_column_python(blocks) == expected
    assert parse_header_column(tuple(blocks)) == expected


_token = st.one_of(st.integers(0, 10**12).map(str), st.sampled_from(["", "+5", "1_0", " 7", "x", "é", "00"]))


@given(st.lists(st.one_of(
    st.lists(_token, min_size=5, max_size=5).map(lambda t: "$JS.ACK.S.c." + ".".join(t)),  # v1: 9 tokens
    st.lists(_token, min_size=6, max_size=7).map(lambda t: "$JS.ACK.dom.hash.S.c." + ".".join(t)),  # v2: 11, 12
    st.sampled_from(["$JS.ACK.S.c.1.2", "$JS.ACK.a.b.S.c.1.2.3.4", "not.a.reply"])), max_size=6))
def test_the_c_reply_parser_reads_what_parse_ack_reply_reads(replies: list[str]) -> None:
    """Reply subjects of either form, digits or not, and of other forms: the C loop gives each reply's stream
    sequence, delivery count and pending as ``parse_ack_reply``, or None, and ``parse_ack_replies`` then reads
    the batch in Python (an error there is the source's to handle, as before)."""
    try:
        parsed = [jetstream_reader.parse_ack_reply(r) for r in replies]
    except (IndexError, ValueError):
        parsed = None
    got = c_acks(replies)
    if got is not None:
        assert parsed is not None and got == ([p[0] for p in parsed], [p[1] for p in parsed],
                                              parsed[-1][2] if parsed else 0)
    elif parsed is not None:  # a form the C loop leaves to Python: the batch is read there
        assert any(not r.isascii() or "+" in r or "_" in r or " " in r for r in replies)
        assert jetstream_reader.parse_ack_replies(replies) == ([p[0] for p in parsed], [p[1] for p in parsed],
                                                               parsed[-1][2])


@pytest.mark.slow
async def test_a_durable_read_through_the_c_loops_gets_every_record_once_and_counts_what_came_back(
        nats_url: str) -> None:
    """A real nats-server, the C loops in use: a reader took 400 records of a durable and died holding them
    (never acknowledged); the next reader, to the end of the stream, gets all 3,000 with their headers, stream
    sequences and delivery counts (the 400, delivered a second time after ``ack_wait``, counted as
    redelivered), acknowledges every one, and the consumer has nothing pending."""
    import nats
    from nats.js.api import ConsumerConfig

    assert (reader.cut_frames, headers.parse_header_blocks, jetstream_reader.ack_reply_columns) == (
        c_cut, c_headers, c_acks), "the C loops are the ones in use"
    n, held = 3000, 400
    await publish_numbered(nats_url, n)
    nc = await nats.connect(nats_url)
    try:  # the reader that dies: its pull consumer takes `held` records and never acknowledges them
        sub = await nc.jetstream().pull_subscribe("num", durable="c-loops", stream="NUM",
                                                  config=ConsumerConfig(ack_wait=1.0))
        taken = []
        while len(taken) < held:
            taken += await sub.fetch(held - len(taken), timeout=5)
    finally:
        await nc.close()
    assert [int(m.headers["Nats-Msg-Id"]) for m in taken] == list(range(held))

    out = TestingSink()
    source = JetStreamSource("num", stream="NUM", durable="c-loops", url=nats_url, ack_wait=1.0, stop_at_end=True,
                             batch_size=250)
    stats = await Pipeline(source, [Deserialize("msgpack")], out).run_async()
    assert sorted(r["i"] for r in out.records) == list(range(n))  # every record, once
    assert stats.records_out == n and stats.acked == n and source.redelivered == held
    by_i = {r["i"]: k for k, r in enumerate(out.records)}
    assert [out.meta["stream_seq"][by_i[i]] for i in range(n)] == list(range(1, n + 1))
    assert [out.meta["delivered"][by_i[i]] for i in range(n)] == [2] * held + [1] * (n - held)
    assert [out.headers[by_i[i]] for i in range(n)] == [
        {"Content-Type": "application/msgpack", "Nats-Msg-Id": str(i)} for i in range(n)]
    info = await consumer_info(nats_url, "NUM", "c-loops")
    assert info.num_ack_pending == 0 and info.num_pending == 0 and info.ack_floor.stream_seq == n

"""Formats, codecs and chains: round trips, levels, corrupt input, bombs, pickle refusal."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wirepipe.codecs import CODECS, FORMATS, Chain, get_codec, get_format, train_zstd_dictionary
from wirepipe.core.errors import RefusedError, StageError
from wirepipe.datasets import DATASETS
from wirepipe.operators.chain_operators import chain_operators

LEVELS = ("fastest", "default", "best")
SCHEMA = ("a", "b", "c")
# The formats that hold any value (the typed and reference-table formats are tested in test_formats.py).
ANY_VALUE_FORMATS = [f for f in FORMATS if not FORMATS[f].typed and f not in ("bson", "flexbuffers", "toml")]

# Values every format can hold: str keys (never "$base64", JSON's bytes tag), int64 ints,
# finite floats, text without lone surrogates, bytes, lists and dicts.
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | text | st.binary(max_size=64))
msgpackable = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
                           max_leaves=20)
# Arrow holds typed columns: one record is a dict of fixed fields, each of one type.
tabular = st.fixed_dictionaries({
    "a": st.integers(-(2**63), 2**63 - 1) | st.none(),
    "b": st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=10),
    "c": st.binary(max_size=64),
})
records = st.fixed_dictionaries({k: msgpackable for k in SCHEMA})


def _strategy(fmt: str) -> st.SearchStrategy:
    if fmt == "arrow":
        return tabular
    if fmt == "msgpack-array":
        return records
    return msgpackable


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("fmt", ANY_VALUE_FORMATS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_values_round_trip(fmt: str, codec: str, data: st.DataObject) -> None:
    level = data.draw(st.sampled_from(LEVELS), label="level")
    value = data.draw(_strategy(fmt), label="value")
    chain = Chain.parse(f"{fmt}|{codec}:{level}")
    payload = chain.encoder(schema=SCHEMA)(value)
    assert isinstance(payload, bytes)
    assert chain.decoder(schema=SCHEMA, allow_pickle=True)(payload) == value


def _dataset_cases() -> list[Any]:
    """Every dataset x format x codec at the default level, and every dataset x codec at the other levels in one
    format: a codec takes the format's payload as opaque bytes and a level changes only what the codec does with
    them, so crossing the levels with every format again tests nothing more. large_vectors (388 kB records) is
    slow in the slower codecs."""
    cases = [(d, f, c, "default") for d in DATASETS for f in ANY_VALUE_FORMATS for c in CODECS]
    cases += [(d, "msgpack", c, lv) for d in DATASETS for c in CODECS for lv in LEVELS if lv != "default"]
    return [pytest.param(d, f, c, lv, marks=pytest.mark.slow if d == "large_vectors" else ()) for d, f, c, lv in cases]


@pytest.mark.parametrize(("dataset", "fmt", "codec", "level"), _dataset_cases())
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_dataset_records_round_trip(dataset: str, fmt: str, codec: str, level: str, seed: int) -> None:
    ds = DATASETS[dataset]
    # large_vectors records are 388 kB each: one per example keeps the slow codecs affordable.
    sample = ds.sample(1 if dataset == "large_vectors" else 5, seed=seed)
    chain = Chain.parse(f"{fmt}|{codec}:{level}")
    encode = chain.encoder(schema=ds.fields)
    decode = chain.decoder(schema=ds.fields, allow_pickle=True)
    assert [decode(encode(r)) for r in sample] == sample


def test_bytes_stay_bytes_in_binary_formats() -> None:
    import cbor2
    import msgpack

    record = {"sig": bytes(range(64))}
    assert msgpack.unpackb(get_format("msgpack").encoder()(record), raw=False) == record
    assert cbor2.loads(get_format("cbor").encoder()(record)) == record
    # A list of ints would be 64+ bytes of array; bin8 is 2 bytes of header + 64.
    assert len(get_format("msgpack").encoder()(record)) == 1 + 4 + 2 + 64


def test_json_writes_bytes_as_base64_tag() -> None:
    payload = get_format("json").encoder()({"k": b"\x00\xff"})
    assert payload == b'{"k":{"$base64":"AP8="}}'
    assert get_format("orjson").encoder()({"k": b"\x00\xff"}) == payload
    assert get_format("orjson").decoder()(payload) == {"k": b"\x00\xff"}


# --- chains and levels ------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "canonical"), [
    ("msgpack|zstd:3", "msgpack|zstd:3"),
    ("msgpack|zstd:default", "msgpack|zstd"),
    ("json | gzip:best", "json|gzip:best"),
    ("msgpack-array|br:fastest", "msgpack-array|brotli:fastest"),
    ("zstd:-5", "zstd:-5"),
    ("cbor", "cbor"),
    ("arrow|lz4|zstd:1", "arrow|lz4|zstd:1"),
])
def test_chain_canonical_round_trip(text: str, canonical: str) -> None:
    chain = Chain.parse(text)
    assert str(chain) == canonical
    assert Chain.parse(str(chain)) == chain


def test_chain_operators_match_chain() -> None:
    encode, decode = chain_operators("msgpack|zstd:3")
    assert [(op.stage, op.name) for op in encode] == [("serialize", "msgpack"), ("compress", "zstd:3")]
    assert [(op.stage, op.name) for op in decode] == [("decompress", "zstd"), ("deserialize", "msgpack")]


@pytest.mark.parametrize(("text", "message"), [
    ("msgpack|zstd:99", "out of range for zstd"),
    ("msgpack|gzip:10", "0..9"),
    ("msgpack|bogus", "unknown step 'bogus'"),
    ("zstd|msgpack", "must come first"),
    ("msgpack|", "empty step"),
    ("msgpack:3", "takes no level"),
    ("json|zlib:fast", "'fast' is not a level for zlib"),
])
def test_chain_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Chain.parse(text)


def test_named_levels_resolve_per_codec() -> None:
    assert [get_codec("zstd").resolve_level(n) for n in LEVELS] == [1, 3, 19]
    assert [get_codec("gzip").resolve_level(n) for n in LEVELS] == [1, 6, 9]
    assert get_codec("brotli").resolve_level("7") == 7
    with pytest.raises(ValueError, match=r"0\.\.11"):
        get_codec("brotli").resolve_level(12)


@pytest.mark.parametrize("dataset", ["transaction", "feed"])
def test_zstd_dictionary_shrinks_small_messages(dataset: str) -> None:
    ds = DATASETS[dataset]
    encode = get_format("msgpack").encoder()
    dictionary = train_zstd_dictionary([encode(r) for r in ds.sample(2000, seed=1)], size=16384)
    plain = Chain.parse("msgpack|zstd").encoder()
    with_dict = Chain.parse("msgpack|zstd").encoder(dictionary=dictionary)
    decode = Chain.parse("msgpack|zstd").decoder(dictionary=dictionary)
    records = ds.sample(200, seed=99)
    assert [decode(with_dict(r)) for r in records] == records
    assert sum(len(with_dict(r)) for r in records) < 0.9 * sum(len(plain(r)) for r in records)


def test_zstd_dictionary_frames_carry_a_checksum_and_no_dictionary_id() -> None:
    """A file dictionary both ends load: the frame names no id (4 bytes saved) and carries zstd's content checksum
    (4 bytes), so the same dictionary with other bytes fails the frame instead of decoding it to other data."""
    import zstandard

    encode = get_format("msgpack").encoder()
    dictionary = train_zstd_dictionary([encode(r) for r in DATASETS["point"].sample(2000, seed=1)], size=1024)
    point = {"x": 5, "y": 7}
    with_dict = Chain.parse("msgpack|zstd").encoder(dictionary=dictionary)(point)
    plain = Chain.parse("msgpack|zstd").encoder()(point)
    frame, plain_frame = zstandard.get_frame_parameters(with_dict), zstandard.get_frame_parameters(plain)
    assert (frame.dict_id, frame.has_checksum, plain_frame.has_checksum) == (0, True, False)
    assert len(with_dict) <= len(plain) + 4


# --- corrupt input, bombs, pickle -------------------------------------------------------------

PAYLOAD = b"wirepipe payload " * 64


def _corruptions(good: bytes) -> list[bytes]:
    rnd = random.Random(len(good))
    return [good[: len(good) // 2], good[:-1], rnd.randbytes(64), b"", b"\x00", bytes(b ^ 0x5A for b in good)]


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_corrupt_input_to_every_decompressor_is_a_stage_error(codec: str) -> None:
    c = get_codec(codec)
    decompress = c.decompressor()
    good = c.compressor()(PAYLOAD)
    assert decompress(good) == PAYLOAD
    for bad in _corruptions(good):
        try:
            out = decompress(bad)
        except StageError as exc:
            assert exc.stage == "decompress" and exc.operator == codec
        else:  # a corruption that still decodes must decode to the truth, never to garbage silently
            assert out == PAYLOAD, f"{codec} accepted corrupt input {bad[:16]!r}"


@pytest.mark.parametrize("fmt", ANY_VALUE_FORMATS)
def test_corrupt_input_to_every_deserializer_is_a_stage_error(fmt: str) -> None:
    chain = Chain.parse(fmt)
    value = {"a": 1, "b": [1.5, 2.5], "c": b"xyz"}
    good = chain.encoder(schema=SCHEMA)(value)
    decode = chain.decoder(schema=SCHEMA, allow_pickle=True)
    assert decode(good) == value
    with pytest.raises(StageError) as truncated:
        decode(good[: len(good) // 2])
    assert truncated.value.stage == "deserialize"
    # Formats without checksums may read random bytes as some value; what they must
    # never do is fail with anything but a wirepipe error.
    for bad in _corruptions(good):
        try:
            decode(bad)
        except StageError as exc:
            assert exc.stage == "deserialize"


@pytest.mark.parametrize("codec", [c for c in CODECS if c != "none"])
def test_decompression_bomb_is_refused(codec: str) -> None:
    c = get_codec(codec)
    bomb = c.compressor("fastest")(bytes(4 * 1024 * 1024))  # 4 MiB of zeros, a few kB compressed
    with pytest.raises(RefusedError, match="max_output_size"):
        c.decompressor(max_output_size=1024 * 1024)(bomb)
    assert len(c.decompressor(max_output_size=8 * 1024 * 1024)(bomb)) == 4 * 1024 * 1024


def test_zstd_bomb_without_declared_size_is_refused() -> None:
    import zstandard

    cobj = zstandard.ZstdCompressor().compressobj()
    bomb = cobj.compress(bytes(4 * 1024 * 1024)) + cobj.flush()
    assert zstandard.frame_content_size(bomb) == -1
    with pytest.raises(RefusedError):
        get_codec("zstd").decompressor(max_output_size=1024 * 1024)(bomb)


def test_none_codec_refuses_oversized_payload() -> None:
    with pytest.raises(RefusedError):
        get_codec("none").decompressor(max_output_size=10)(b"x" * 11)


def test_pickle_is_refused_unless_allowed() -> None:
    with pytest.raises(RefusedError, match="allow_pickle: true"):
        get_format("pickle").decoder()
    payload = get_format("pickle").encoder()({"a": 1})
    assert get_format("pickle").decoder(allow_pickle=True)(payload) == {"a": 1}


def test_msgpack_array_needs_a_schema() -> None:
    with pytest.raises(ValueError, match="needs a schema"):
        get_format("msgpack-array").encoder()


def test_msgpack_array_schema_mismatch_is_a_stage_error() -> None:
    payload = get_format("msgpack-array").encoder(("x", "y", "z"))({"x": 1, "y": 2, "z": 3})
    with pytest.raises(StageError, match="schema mismatch"):
        get_format("msgpack-array").decoder(("x", "y"))(payload)


def _xxh32(data: bytes) -> int:
    """xxHash32 (seed 0), to forge an LZ4 frame header checksum."""
    p1, p2, p3, p4, p5, m = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    h, i = (p5 + len(data)) & m, 0
    assert len(data) < 16
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    while i < len(data):
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    return h ^ (h >> 16)


def test_lz4_frame_that_lies_about_its_size_is_refused() -> None:
    # The lz4 fast path trusts the declared content size for small frames: a forged
    # header (valid checksum, 100 declared, 10 MiB inside) must still fail, not inflate.
    frame = bytearray(get_codec("lz4").compressor()(bytes(10 << 20)))
    frame[6:14] = (100).to_bytes(8, "little")
    frame[14] = (_xxh32(bytes(frame[4:14])) >> 8) & 0xFF
    with pytest.raises(StageError):
        get_codec("lz4").decompressor(max_output_size=1 << 20)(bytes(frame))

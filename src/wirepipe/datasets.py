"""Synthetic datasets shaped like the payloads of the published benchmarks wirepipe compares itself with.

Each dataset is deterministic for a given random seed (records come from one random stream,
so the same seed gives the same records whatever the batch size), declares its typed
schema (``wirepipe.schema``: the field order positional formats use, and the types the
schema'd formats encode) and its raw size in bytes, counted the way the FlatMessage tables
count it: the bytes of the in-memory struct, before any format.

| name          | shape                                                               | raw size   |
|---------------|---------------------------------------------------------------------|------------|
| point         | {x: i32, y: i32}, values 0..127 (FlatMessage's Point table)         | 8          |
| large_vectors | 2000 i32, 10000 f32, 25000 u32, 30000 f64 (whole; its Large Vectors) | 388008     |
| transaction   | a UTXO transaction: 32-byte ids, scripts and payload as bytes       | per record |
|               | (a Rust transaction serde benchmark)                                |            |
| block         | ids, version, receipts, 32-byte asset ids, chain_id (the NATS       | per record |
|               | payload study's MyTestData)                                         |            |
| feed          | signed feed messages: 32-byte author keys, 64-byte signatures (a    | per record |
|               | feed JSON benchmark)                                                |            |
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .schema import RecordSchema, parse_schema


@dataclass(frozen=True)
class Dataset:
    """A named generator of records with a fixed field order and a raw-size rule."""

    name: str
    description: str
    fields: tuple[str, ...]
    make: Callable[[Any, int], list[Any]] = field(repr=False)
    new_rng: Callable[[int], Any] = field(repr=False)
    raw_size_of: Callable[[Any], int] = field(repr=False)
    fixed_raw_size: int | None = None
    schema_spec: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def schema(self) -> RecordSchema:
        """The dataset's typed schema (its ``fields`` in order, with their types)."""
        return _schema_of(self.name, self.schema_spec)

    def records(self, count: int, seed: int = 0, batch_size: int = 1000) -> Iterator[list[Any]]:
        """``count`` records in lists of at most ``batch_size``, from one random stream."""
        rng = self.new_rng(seed)
        left = count
        while left > 0:
            n = min(batch_size, left)
            yield self.make(rng, n)
            left -= n

    def sample(self, count: int, seed: int = 0) -> list[Any]:
        """The first ``count`` records for ``seed``, as one list."""
        return [r for chunk in self.records(count, seed, batch_size=max(count, 1)) for r in chunk]

    def raw_size(self, records: list[Any]) -> int:
        """Raw bytes of ``records`` as the FlatMessage tables count them."""
        if self.fixed_raw_size is not None:
            return self.fixed_raw_size * len(records)
        return sum(map(self.raw_size_of, records))


# --- point (FlatMessage's Point table) ---------------------------------------------------------


def _make_point(rng: random.Random, n: int) -> list[dict[str, int]]:
    bits = rng.getrandbits
    return [{"x": bits(7), "y": bits(7)} for _ in range(n)]


# --- large_vectors (FlatMessage's Large Vectors table) ---------------------------------------------


def _make_large_vectors(rng: Any, n: int) -> list[dict[str, list[Any]]]:
    """The Large Vectors table's ranges, with integer-valued floats and doubles (``523456.0``), as its sizes show.

    Its json (539,243 B) and toml (606,238 B) are only reachable with numbers spelled like
    ``523456.0`` (random doubles take ~18 characters each: ~850 kB of JSON), and its flexbuffers
    (264,099 B = 2000 x 2 + 10000 x 4 + 25000 x 4 + 30000 x 4 + 99) stores the doubles at f32
    width, which flexbuffers does only for a value f32 holds exactly: whole numbers up to 1e6 are.
    """
    import numpy as np

    out = []
    for _ in range(n):
        out.append({
            "ints": rng.integers(200, 221, 2000, dtype=np.int32).tolist(),
            "floats": rng.integers(-1_000_000, 1_000_001, 10000).astype(np.float32).tolist(),
            "uints": rng.integers(0, 1_000_001, 25000, dtype=np.uint32).tolist(),
            "doubles": rng.integers(0, 1_000_001, 30000).astype(np.float64).tolist(),
        })
    return out


def _numpy_rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


# --- transaction (a Rust transaction serde benchmark) ----------------------------------------------


def _make_transaction(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rb = rng.randbytes
    ri = rng.randrange
    out = []
    for _ in range(n):
        inputs = [
            {
                "previous_outpoint": {"transaction_id": rb(32), "index": ri(4)},
                "signature_script": rb(66),
                "sequence": ri(1 << 32),
                "sig_op_count": 1,
            }
            for _ in range(1 + ri(3))
        ]
        outputs = [
            {"value": ri(1 << 50), "script_public_key": {"version": 0, "script": b"\x20" + rb(32) + b"\xac"}}
            for _ in range(1 + ri(3))
        ]
        out.append({
            "version": 0,
            "inputs": inputs,
            "outputs": outputs,
            "lock_time": 0,
            "subnetwork_id": bytes(20),
            "gas": 0,
            "payload": rb(ri(201)),
        })
    return out


def _transaction_raw(tx: dict[str, Any]) -> int:
    # version u16, lock_time u64, subnetwork 20, gas u64; input: outpoint 32+4, sequence u64,
    # sig_op_count u8; output: value u64 + script version u16; plus every byte string.
    size = 2 + 8 + 20 + 8 + len(tx["payload"])
    for i in tx["inputs"]:
        size += 32 + 4 + 8 + 1 + len(i["signature_script"])
    for o in tx["outputs"]:
        size += 8 + 2 + len(o["script_public_key"]["script"])
    return size


# --- block (the NATS payload study's MyTestData, at realistic sizes) -----------------------------

_RECEIPTS = (
    "Call {{ id: 0x{a}, to: 0x{b}, amount: {n}, asset_id: 0x{c}, gas: {g}, pc: 11640, is: 11640 }}",
    "Return {{ id: 0x{a}, val: {n}, pc: 10368, is: 10368 }}",
    "Transfer {{ id: 0x{a}, to: 0x{b}, amount: {n}, asset_id: 0x{c}, pc: 12592, is: 11640 }}",
    "ScriptResult {{ result: Success, gas_used: {g} }}",
    "Log {{ id: 0x{a}, ra: {n}, rb: 0, rc: 0, rd: 0, pc: 10376, is: 10368 }}",
)


def _make_block(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rb = rng.randbytes
    ri = rng.randrange
    out = []
    for _ in range(n):
        ntx = 20 + ri(41)
        out.append({
            "ids": ["0x" + rb(32).hex() for _ in range(ntx)],
            "version": 1,
            "receipts": [
                _RECEIPTS[ri(len(_RECEIPTS))].format(
                    a=rb(32).hex(), b=rb(8).hex() * 4, c="00" * 32, n=ri(10**9), g=ri(10**6)
                )
                for _ in range(ntx)
            ],
            "assets": [rb(32) for _ in range(1 + ri(8))],
            "chain_id": 9889,
        })
    return out


def _block_raw(block: dict[str, Any]) -> int:
    return (sum(len(s) for s in block["ids"]) + 8 + sum(len(s) for s in block["receipts"])
            + 32 * len(block["assets"]) + 8)


# --- feed (a feed JSON benchmark) ---------------------------------------------------------------

_WORDS = ("the", "feed", "message", "signed", "author", "sequence", "nats", "stream", "payload", "hash",
          "previous", "content", "post", "reply", "vote", "channel", "gossip", "peer", "replicate", "log")


class _FeedState:
    """Random stream plus the authors' chains, so ``previous`` links each author's messages."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.authors = [self.rng.randbytes(32) for _ in range(8)]
        self.sequence = [0] * 8
        self.previous: list[bytes | None] = [None] * 8
        self.timestamp = 1_700_000_000_000


def _make_feed(state: _FeedState, n: int) -> list[dict[str, Any]]:
    rng = state.rng
    out = []
    for _ in range(n):
        a = rng.randrange(len(state.authors))
        state.sequence[a] += 1
        state.timestamp += rng.randrange(1, 5000)
        kind = rng.choice(("post", "post", "post", "vote", "contact"))
        if kind == "post":
            content: dict[str, Any] = {"type": "post", "text": " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(5, 60)))}
        elif kind == "vote":
            content = {"type": "vote", "link": rng.randbytes(32), "value": 1}
        else:
            content = {"type": "contact", "contact": state.authors[rng.randrange(len(state.authors))], "following": True}
        signature = rng.randbytes(64)
        out.append({
            "previous": state.previous[a],
            "author": state.authors[a],
            "sequence": state.sequence[a],
            "timestamp": state.timestamp,
            "hash": "sha256",
            "content": content,
            "signature": signature,
        })
        state.previous[a] = hashlib.sha256(signature).digest()
    return out


def _feed_raw(msg: dict[str, Any]) -> int:
    content = msg["content"]
    body = sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in content.values()) + len(content["type"])
    return (32 if msg["previous"] else 0) + 32 + 8 + 8 + len(msg["hash"]) + body + 64


_SCHEMAS: dict[str, RecordSchema] = {}


def _schema_of(name: str, spec: dict[str, Any]) -> RecordSchema:
    if name not in _SCHEMAS:
        _SCHEMAS[name] = parse_schema(spec, name="".join(p.title() for p in name.split("_")))
    return _SCHEMAS[name]


POINT = {"x": "int32", "y": "int32"}
LARGE_VECTORS = {"ints": "list<int32>", "floats": "list<float32>", "uints": "list<uint32>",
                 "doubles": "list<float64>"}
TRANSACTION = {
    "version": "int32",  # u16 in the study's struct; the schema language's smallest integer is 32-bit
    "inputs": [{"previous_outpoint": {"transaction_id": "bytes[32]", "index": "uint32"},
                "signature_script": "bytes", "sequence": "int64", "sig_op_count": "int32"}],
    "outputs": [{"value": "int64", "script_public_key": {"version": "int32", "script": "bytes"}}],
    "lock_time": "int64",
    "subnetwork_id": "bytes[20]",
    "gas": "int64",
    "payload": "bytes",
}
BLOCK = {"ids": "list<string>", "version": "int32", "receipts": "list<string>", "assets": "list<bytes[32]>",
         "chain_id": "int64"}
FEED = {
    "previous": "bytes[32]?",
    "author": "bytes[32]",
    "sequence": "int64",
    "timestamp": "int64",
    "hash": "string",
    # one record type for the three kinds of content: the fields a kind lacks are absent
    "content": {"type": "string", "text": "string?", "link": "bytes[32]?", "value": "int32?",
                "contact": "bytes[32]?", "following": "bool?"},
    "signature": "bytes[64]",
}

DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("point", "Point {x: i32, y: i32} with values 0..127 (FlatMessage's Point table)", ("x", "y"),
                _make_point, random.Random, lambda _r: 8, fixed_raw_size=8, schema_spec=POINT),
        Dataset("large_vectors", "2000 i32, 10000 f32, 25000 u32, 30000 f64, whole numbers (FlatMessage's Large Vectors)",
                ("ints", "floats", "uints", "doubles"), _make_large_vectors, _numpy_rng,
                lambda _r: 388008, fixed_raw_size=388008, schema_spec=LARGE_VECTORS),
        Dataset("transaction", "UTXO transaction, byte fields as bytes (a Rust transaction serde benchmark)",
                ("version", "inputs", "outputs", "lock_time", "subnetwork_id", "gas", "payload"),
                _make_transaction, random.Random, _transaction_raw, schema_spec=TRANSACTION),
        Dataset("block", "block: tx ids, version, receipts, 32-byte asset ids, chain_id (the NATS payload study)",
                ("ids", "version", "receipts", "assets", "chain_id"), _make_block, random.Random, _block_raw, schema_spec=BLOCK),
        Dataset("feed", "signed feed messages, 32-byte authors, 64-byte signatures (a feed JSON benchmark)",
                ("previous", "author", "sequence", "timestamp", "hash", "content", "signature"),
                _make_feed, _FeedState, _feed_raw, schema_spec=FEED),
    )
}


def get_dataset(name: str) -> Dataset:
    """The dataset called ``name``; ``KeyError`` listing the known ones.

    >>> point = get_dataset("point")
    >>> print(point.schema)
    Point {x: int32, y: int32}
    >>> records = point.sample(3, seed=1)
    >>> records == point.sample(3, seed=1), point.raw_size(records)  # deterministic; 8 raw bytes each
    (True, 24)
    >>> [len(chunk) for chunk in point.records(5, seed=1, batch_size=2)]
    [2, 2, 1]
    """
    ds = DATASETS.get(name)
    if ds is None:
        from .core.models import unknown_message

        raise KeyError(unknown_message("dataset", name, DATASETS))
    return ds

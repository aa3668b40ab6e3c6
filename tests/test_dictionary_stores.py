"""zstd dictionaries as a pipeline resource: the stores (a folder of ``.zdict`` files, memory, a NATS Object Store
bucket), handed to ``compress`` and ``decompress`` by the pipeline; and what that makes possible: ``wirepipe test``
and ``wirepipe replay`` with no server and no ``NATS_URL`` (a folder stands in for the bucket), and a Beam replay
that fetches the dictionaries when its job is built and runs without the server.

Which bytes a record was compressed with is checked where it is decoded, whatever store delivered them: a folder
holding other bytes under the id is refused with both digests, as a tampered bucket is (``test_dictionaries.py``).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.cli import wirepipe
from wirepipe.codecs.compression import dictionary_digest, train_zstd_dictionary, zstd_frame_dictionary_id
from wirepipe.connectors.dictionary_stores import FolderDictionaries, MemoryDictionaries
from wirepipe.core.errors import ConfigError, WirepipeError
from wirepipe.core.stores import DictionaryMissing, DictionaryStore, DictionaryUnusable


def orders(n: int, seed: int = 1) -> list[dict[str, Any]]:
    import random

    rnd = random.Random(seed)
    words = ["shipped", "pending", "delivered", "cancelled", "returned"]
    return [{"id": i, "status": rnd.choice(words), "customer": f"c{rnd.randrange(500)}",
             "note": f"order {rnd.choice(words)} on time"} for i in range(n)]


def trained(seed: int = 1, size: int = 2048) -> bytes:
    return train_zstd_dictionary([orjson.dumps(r) for r in orders(400, seed)], size=size)


def dict_id(data: bytes) -> int:
    return int.from_bytes(data[4:8], "little")


# --- the stores -------------------------------------------------------------------------------------------------


def test_a_folder_store_reads_a_dictionary_by_name_and_every_file_by_the_id_in_its_bytes(tmp_path: Path) -> None:
    tx, other, late = trained(1), trained(2), trained(3)
    (tmp_path / "tx.zdict").write_bytes(tx)
    (tmp_path / "kept-from-2024.zdict").write_bytes(other)
    (tmp_path / "notes.zdict").write_bytes(b"not a dictionary")
    (tmp_path / "README").write_text("not a .zdict file")
    store = FolderDictionaries(tmp_path)
    assert isinstance(store, DictionaryStore)

    async def reads() -> None:
        await store.open()
        assert await store.by_name("tx", 1 << 20) == tx
        assert await store.by_id(dict_id(other), 1 << 20) == other
        assert await store.ids() == sorted([dict_id(tx), dict_id(other)])
        with pytest.raises(DictionaryMissing, match=rf"^no dictionary 'nope' in folder {tmp_path} \(no file "
                                                    r"nope.zdict\)$"):
            await store.by_name("nope", 1 << 20)
        with pytest.raises(DictionaryUnusable, match=r"^dictionary notes.zdict in folder .* is damaged: it is not a "
                                                     r"trained zstd dictionary \(no magic number and id\)$"):
            await store.by_name("notes", 1 << 20)
        with pytest.raises(DictionaryUnusable, match=rf"^dictionary tx.zdict in folder .* is {len(tx)} bytes, over "
                                                     r"max_output_size \(100 bytes\): refused$"):
            await store.by_id(dict_id(tx), 100)
        with pytest.raises(DictionaryMissing, match=rf"^no dictionary with id {dict_id(late)} in folder "):
            await store.by_id(dict_id(late), 1 << 20)
        (tmp_path / "late.zdict").write_bytes(late)  # copied in while it runs: found when a frame names its id
        assert await store.by_id(dict_id(late), 1 << 20) == late

    asyncio.run(reads())


def test_a_missing_folder_stops_the_run_saying_how_to_fill_it(tmp_path: Path) -> None:
    from wirepipe.core.errors import MissingInput

    with pytest.raises(MissingInput, match=r"no such folder of zstd dictionaries \(fill it with wirepipe dict show "
                                           r"nats://BUCKET/NAME --out .*/NAME.zdict"):
        asyncio.run(FolderDictionaries(tmp_path / "absent").open())


def test_a_memory_store_refuses_what_is_not_a_dictionary() -> None:
    with pytest.raises(DictionaryUnusable, match="dictionary 'tx' is damaged: it is not a trained zstd dictionary"):
        MemoryDictionaries({"tx": b"abc"})
    store = MemoryDictionaries({"tx": trained()})
    with pytest.raises(DictionaryMissing, match=r"^no dictionary with id 7 in memory$"):
        asyncio.run(store.by_id(7, 1 << 20))


# --- handed to compress and decompress by the pipeline ------------------------------------------------------------


def roundtrip(records: list[Any], publisher: Any, consumer: Any) -> tuple[Any, Any]:
    """``records`` as JSON through compress (``publisher`` resources), then decompress (``consumer`` resources)."""
    from wirepipe import compress, decompress, deserialize, serialize
    from wirepipe.testing import TestingSink, TestingSource, run

    sent, read = TestingSink(), TestingSink()
    run(TestingSource(records), [serialize("json"), compress("zstd", dictionary="nats://DICTS/tx")], sent,
        resources=publisher)
    run(TestingSource(sent.records, headers=sent.headers),
        [decompress("auto", dictionaries="nats://DICTS"), deserialize("auto")], read, resources=consumer)
    return sent, read


def test_a_folder_stands_in_for_the_bucket_at_both_ends(tmp_path: Path) -> None:
    tx = trained()
    (tmp_path / "tx.zdict").write_bytes(tx)
    folder = {"dictionaries": {"DICTS": {"type": "folder", "path": str(tmp_path)}}}
    sent, read = roundtrip(orders(50), folder, folder)
    assert read.records == orders(50) and read.rejects == []
    assert {zstd_frame_dictionary_id(f) for f in sent.records} == {dict_id(tx)}  # every frame says which
    assert sent.headers[0]["Wirepipe-Dictionary"] == dictionary_digest(tx)


def test_the_digest_is_checked_where_records_are_decoded_whatever_store_gave_the_bytes(tmp_path: Path) -> None:
    """A folder holding other bytes under the publisher's id (same id, same magic, one word changed): every record
    is refused with both digests, none decoded to other data."""
    from wirepipe.testing import memory_dictionaries

    good = trained()
    tampered = good.replace(b"shipped", b"SHIPPED")
    assert tampered != good and dict_id(tampered) == dict_id(good)
    (tmp_path / "copied.zdict").write_bytes(tampered)
    _, read = roundtrip(orders(30), {"dictionaries": {"DICTS": memory_dictionaries({"tx": good})}},
                           {"dictionaries": {"DICTS": {"type": "folder", "path": str(tmp_path)}}})
    assert read.records == [] and len(read.rejects) == 30
    assert {(r.stage, r.error) for r in read.rejects} == {("decompress", (
        f"zstd dictionary {dict_id(good)} from folder {tmp_path} is {dictionary_digest(tampered)}, but the record's "
        f"Wirepipe-Dictionary says it was compressed with {dictionary_digest(good)}: other bytes would decode it to "
        "other data (refused)"))}


def test_a_dictionary_the_store_lacks_dead_letters_its_records_with_the_reason(tmp_path: Path) -> None:
    from wirepipe.testing import memory_dictionaries

    _, read = roundtrip(orders(5), {"dictionaries": {"DICTS": memory_dictionaries({"tx": trained()})}},
                           {"dictionaries": {"DICTS": memory_dictionaries()}})
    assert read.records == [] and [r.error for r in read.rejects] == [
        f"zstd dictionary {dict_id(trained())} from memory: no dictionary with id {dict_id(trained())} in memory"] * 5


def test_an_operator_outside_a_pipeline_says_where_its_store_comes_from() -> None:
    from wirepipe.core.batch import Batch
    from wirepipe.operators.compress import Compress
    from wirepipe.operators.decompress import Decompress

    with pytest.raises(WirepipeError, match=r"^compress: dictionary nats://DICTS/tx is fetched when the pipeline "
                                            r"starts: run the operator in a Pipeline"):
        Compress("zstd", dictionary="nats://DICTS/tx")(Batch([b"x"]))
    with pytest.raises(WirepipeError, match=r"^decompress: dictionaries nats://DICTS comes from a dictionary store "
                                            r"the pipeline hands the operator: run it in a Pipeline"):
        asyncio.run(Decompress("auto", dictionaries="nats://DICTS").prepare(Batch(
            [b"\x28\xb5\x2f\xfd\x23\x01\x00\x00\x00\x00"], headers={"Content-Encoding": "zstd"})))


def test_a_declared_nats_store_is_the_bucket_of_its_name_and_one_bucket_has_one_connection() -> None:
    from wirepipe.connectors.nats.dictionary_bucket import NatsDictionaries
    from wirepipe.operators.decompress import Decompress
    from wirepipe.pipelines.resources import Resources
    from wirepipe.testing import TestingSource

    resources = Resources({"dictionaries": {"DICTS": {"type": "nats", "nats": {"url": "nats://127.0.0.1:1"}}}})
    op = Decompress("auto", dictionaries="nats://DICTS")
    resources.bind([op], (TestingSource([]),))
    store = resources.store(op.shared.use)  # type: ignore[union-attr]
    assert isinstance(store, NatsDictionaries) and store.bucket == "DICTS" and store.where == "nats://DICTS"

    implied = Resources()
    with pytest.raises(ConfigError, match=r"DICTS is named with other `nats:` settings at operators\[0\].decompress"
                                          r".dictionaries: declare resources.dictionaries.DICTS once"):
        implied.bind([Decompress("auto", dictionaries="nats://DICTS", nats={"url": "nats://a:4222"}),
                      Decompress("auto", dictionaries="nats://DICTS", nats={"url": "nats://b:4222"})],
                     (TestingSource([]),))


# --- variables of the parts a command replaces ----------------------------------------------------------------------


def test_the_variables_of_replaced_parts_need_not_be_set(tmp_path: Path) -> None:
    from wirepipe.pipelines.config import read_config, replaced_parts

    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent("""\
        name: p
        source: {type: jetstream, url: "${NATS_URL}", stream: "${STREAM}"}
        operators: [{decompress: {codec: "${CODEC}"}}]
        sink: {type: nats, url: "${NATS_URL}", subject: "${SUBJECT}"}
        """))
    with pytest.raises(ConfigError, match=r"source.url: environment variable NATS_URL is not set"):
        read_config(path, env={})
    data = read_config(path, ["sink={type: jsonl, path: out.jsonl}"], env={"CODEC": "zstd"}, replaced=replaced_parts("source"))
    assert data["source"] == {"type": "jetstream", "url": "${NATS_URL}", "stream": "${STREAM}"}  # left as written
    assert data["sink"] == {"type": "jsonl", "path": "out.jsonl"} and data["operators"][0]["decompress"]["codec"] == "zstd"
    with pytest.raises(ConfigError, match=r"operators\[0\].decompress.codec: environment variable CODEC is not set"):
        read_config(path, ["sink={type: jsonl, path: out.jsonl}"], env={}, replaced=replaced_parts("source"))
    with pytest.raises(ConfigError, match=r"sink.subject: environment variable SUBJECT is not set"):
        read_config(path, env={"CODEC": "zstd"}, replaced=replaced_parts("source", "sink", kept=["sink.subject"]))

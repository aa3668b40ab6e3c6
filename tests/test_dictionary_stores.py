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
from wirepipe.codecs.zstd import dictionary_digest, train_zstd_dictionary, zstd_frame_dictionary_id
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


def test_frames_naming_the_local_dictionarys_id_are_never_asked_of_the_store(tmp_path: Path) -> None:
    """A consumer given the dictionary as a file and a store for the others: frames of the file's id decode with
    it, and the store (empty here) is never asked for it."""
    from wirepipe import decompress, deserialize
    from wirepipe.testing import TestingSink, TestingSource, memory_dictionaries, run

    tx = trained()
    (tmp_path / "tx.zdict").write_bytes(tx)
    sent, _ = roundtrip(orders(20), {"dictionaries": {"DICTS": memory_dictionaries({"tx": tx})}},
                        {"dictionaries": {"DICTS": memory_dictionaries({"tx": tx})}})
    asked: list[int] = []

    class Watched(MemoryDictionaries):
        async def by_id(self, dict_id: int, cap: int) -> bytes:
            asked.append(dict_id)
            return await super().by_id(dict_id, cap)

    read = TestingSink()
    unpack = decompress("auto", dictionary=str(tmp_path / "tx.zdict"), dictionaries="nats://DICTS")
    run(TestingSource(sent.records, headers=sent.headers), [unpack, deserialize("auto")], read,
        resources={"dictionaries": {"DICTS": Watched()}})
    assert read.records == orders(20) and read.rejects == []
    assert asked == []


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


def test_a_pipeline_put_together_with_a_pipe_reaches_its_bucket_through_the_sink_it_gets_last() -> None:
    from wirepipe import compress, generate_source, nats_sink, serialize

    head = generate_source("point", count=5) | serialize("msgpack") | compress("zstd", dictionary="nats://DICTS/tx")
    with pytest.raises(ConfigError, match=r"^operators\[1\].compress.dictionary: the pipeline has no NATS source or "
                                          r"sink to reach the dictionaries nats://DICTS through"):
        head.run()
    whole = head | nats_sink("points", url="nats://127.0.0.1:1")
    [bound] = whole.resources.bound()
    assert (bound.store.where, bound.store.connection.url, bound.at) == (
        "nats://DICTS", "nats://127.0.0.1:1", "operators[1].compress.dictionary")


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


# --- wirepipe test: a NATS pipeline with no server and no NATS_URL ------------------------------------------------

FLIGHTS = [{"carrier": "UA", "flight": 1545, "dep_delay": 2}, {"carrier": "AA", "flight": 1141, "dep_delay": -4},
           {"carrier": "B6", "flight": 725, "dep_delay": 0}]
FLIGHT_SCHEMA = "carrier: string\nflight: int32\ndep_delay: int32\n"
PUBLISHER = """\
name: flights-publish
source: {type: jetstream, url: "${NATS_URL}", stream: FLIGHTS, durable: publisher}
operators:
  - deserialize: {format: json}
  - serialize: {format: bincode, schema: flight.yaml}
  - compress: {codec: zstd, dictionary: nats://DICTS/flights}
sink: {type: nats, url: "${NATS_URL}", subject: flights.packed}
"""


def flights_dictionary() -> bytes:
    import random

    rnd = random.Random(3)
    carriers = ["UA", "AA", "B6", "DL", "EV", "MQ", "US", "WN"]
    samples = [orjson.dumps({"carrier": rnd.choice(carriers), "flight": rnd.randrange(5000),
                             "dep_delay": rnd.randrange(-20, 200)}) for _ in range(2000)]
    return train_zstd_dictionary(samples, size=2048)


def flights_folder(folder: Path) -> bytes:
    """A folder with the publisher pipeline, its schema and ``dicts/flights.zdict``; the dictionary's bytes."""
    dictionary = flights_dictionary()
    (folder / "dicts").mkdir(parents=True)
    (folder / "dicts" / "flights.zdict").write_bytes(dictionary)
    (folder / "flight.yaml").write_text(FLIGHT_SCHEMA)
    (folder / "flights.yaml").write_text(PUBLISHER)
    return dictionary


@pytest.mark.slow
def test_wirepipe_test_runs_a_nats_pipeline_with_a_nats_dictionary_without_a_server_or_NATS_URL(
        tmp_path: Path) -> None:
    """The source and sink are NATS (``${NATS_URL}``), compress names ``nats://DICTS/flights``: the test file's
    folder of ``.zdict`` files stands in for the bucket, and the outputs decode with the schema and that
    dictionary (named by default, or explicitly), exactly."""
    from wirepipe.codecs.formats import get_format
    from wirepipe.schema import load_schema_file, schema_fingerprint

    dictionary = flights_folder(tmp_path)
    headers = {"Content-Type": get_format("bincode").content_type,
               "Wirepipe-Schema": schema_fingerprint(load_schema_file(str(tmp_path / "flight.yaml"))),
               "Content-Encoding": "zstd", "Wirepipe-Dictionary": dictionary_digest(dictionary)}
    payloads = [json.dumps(f) for f in FLIGHTS]
    (tmp_path / "flights.test.yaml").write_text(json.dumps({
        "resources": {"dictionaries": {"DICTS": {"type": "folder", "path": "dicts"}}},
        "tests": [
            {"name": "flights go out compressed with the shared dictionary",
             "input": {"payloads": payloads},
             "expect": {"decode": {"schema": "flight.yaml"}, "rejected": 0,
                        "outputs": [{"value": f, "subject": "flights.packed", "headers": headers} for f in FLIGHTS]}},
            {"name": "the decoder names the dictionary store",
             "input": {"payloads": payloads[:1]},
             "expect": {"decode": {"schema": "flight.yaml", "dictionaries": "nats://DICTS"}, "records": FLIGHTS[:1]}},
            {"name": "a record that is not a flight is dead-lettered",
             "input": {"payloads": ['{"carrier": "UA"}']},
             "expect": {"count": 0, "rejections": [{"stage": "serialize", "seq": 0}]}}]}))
    offline = {"NATS_URL": None}
    done = wirepipe("test", "flights.test.yaml", env=offline, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:3] == [
        "flights.test.yaml::flights go out compressed with the shared dictionary PASSED",
        "flights.test.yaml::the decoder names the dictionary store PASSED",
        "flights.test.yaml::a record that is not a flight is dead-lettered PASSED"]
    assert "3 passed" in done.stdout
    checked = wirepipe("validate", "flights.test.yaml", env=offline, cwd=tmp_path)
    assert checked.returncode == 0 and checked.stdout == "ok: flights.test.yaml: 3 test case(s) (run them: " \
                                                         "wirepipe test flights.test.yaml)\n", checked.stderr


@pytest.mark.slow
def test_a_test_that_would_reach_nats_and_a_set_mapping_are_refused_by_test_and_validate_alike(
        tmp_path: Path) -> None:
    flights_folder(tmp_path)
    (tmp_path / "online.test.yaml").write_text(
        "pipeline: flights.yaml\ntests:\n  - {name: one, input: {payloads: ['{}']}, expect: {count: 0}}\n")
    (tmp_path / "mapping.test.yaml").write_text(
        "pipeline: flights.yaml\nset:\n  sink.subject: out\n  operators[0].deserialize.format: json\n"
        "tests:\n  - {name: one, input: {payloads: ['{}']}}\n")
    offline = {"NATS_URL": None}
    for command in ("test", "validate"):
        online = wirepipe(command, "online.test.yaml", env=offline, cwd=tmp_path)
        assert online.returncode == 2 and online.stdout == "", online.stdout
        assert online.stderr == (
            "error: online.test.yaml: resources: flights.yaml operators[2].compress.dictionary reads dictionaries "
            "from nats://DICTS, a NATS bucket, and a test runs without a server: declare `resources: {dictionaries: "
            "{DICTS: {type: folder, path: FOLDER}}}` in the test file (fill it: wirepipe dict show "
            "nats://DICTS/NAME --out FOLDER/NAME.zdict)\n")
        mapping = wirepipe(command, "mapping.test.yaml", env=offline, cwd=tmp_path)
        assert mapping.returncode == 2 and mapping.stderr == (
            'error: mapping.test.yaml: set: `set:` is a list of PATH=VALUE overrides, as --set takes them: write '
            'set: ["sink.subject=out", "operators[0].deserialize.format=json"]\n')


def test_a_dictionary_the_test_files_folder_lacks_refuses_the_file_before_any_case_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder stands in for the bucket the publisher's compress names (``nats://DICTS/flights``): without
    ``flights.zdict`` in it, ``wirepipe test`` and ``validate`` refuse the test file alike (exit 2, at the
    pipeline's operator, naming the folder), where validate said ok and every case ended in an error (exit 1)."""
    from wirepipe.pipetest import collect

    flights_folder(tmp_path)
    monkeypatch.chdir(tmp_path)  # where the pipeline's schema file is, as `wirepipe test` is run from
    (tmp_path / "empty").mkdir()
    (tmp_path / "flights.test.yaml").write_text(
        "resources: {dictionaries: {DICTS: {type: folder, path: empty}}}\n"
        "tests:\n  - {name: one, input: {payloads: ['{}']}, expect: {count: 0}}\n"
        "  - {name: two, input: {payloads: ['{}']}, expect: {count: 0}}\n")
    with pytest.raises(ConfigError) as refused:
        collect([str(tmp_path / "flights.test.yaml")])
    assert str(refused.value) == (  # at the pipeline's field, naming the test's folder
        f"{tmp_path / 'flights.yaml'}: compress: dictionary nats://DICTS/flights: no dictionary "
        f"'flights' in folder {tmp_path / 'empty'} (no file flights.zdict)")
    (tmp_path / "empty" / "flights.zdict").write_bytes((tmp_path / "dicts" / "flights.zdict").read_bytes())
    [loaded] = collect([str(tmp_path / "flights.test.yaml")])
    assert len(loaded.spec.tests) == 2


# --- replays of a capture: no server ----------------------------------------------------------------------------

N = 300


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Dictionary-compressed transactions as a publisher sent them through a real server, captured; the
    dictionary published as nats://DICTS/tx and copied to ``dicts/tx.zdict``; the consumer pipeline that reads
    them (NATS source, ``decompress: {dictionaries: nats://DICTS}``). The server stays up for the Beam test."""
    import yaml

    from tests.nats_fixtures import expected
    from wirepipe.connectors.nats.server import EmbeddedServer

    folder = tmp_path_factory.mktemp("captured")
    server = EmbeddedServer(store_dir=folder / "jetstream").start()
    try:
        url = server.url
        records = folder / "train.jsonl"
        records.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in orders(2000)))
        done = wirepipe("dict", "train", "--from", str(records), "--to", "nats://DICTS/tx", "--url", url,
                        "--format", "msgpack", "--out", str(folder / "dicts" / "tx.zdict"), cwd=folder)
        assert done.returncode == 0, done.stderr
        publisher = folder / "publish.yaml"
        publisher.write_text(yaml.safe_dump({
            "name": "publish", "source": {"type": "generate", "dataset": "transaction", "count": N, "batch_size": 100},
            "operators": [{"serialize": {"format": "msgpack"}},
                          {"compress": {"codec": "zstd", "dictionary": "nats://DICTS/tx"}}],
            "sink": {"type": "jetstream", "url": "${NATS_URL}", "subject": "tx.js",
                     "stream": {"name": "TX", "subjects": ["tx.js"]}}}, sort_keys=False))
        done = wirepipe("run", str(publisher), "--no-status", env={"NATS_URL": url}, cwd=folder)
        assert done.returncode == 0, done.stderr
        done = wirepipe("capture", "--url", url, "--stream", "TX", "--from-seq", "1", "--out", str(folder / "cap"))
        assert done.returncode == 0, done.stderr
        consumer = folder / "archive.yaml"
        consumer.write_text(yaml.safe_dump({
            "name": "archive", "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "TX", "durable": "a"},
            "operators": [{"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"}},
                          {"deserialize": {"format": "auto"}}],
            "sink": {"type": "jsonl", "path": "out.jsonl"}}, sort_keys=False))
        yield {"folder": folder, "server": server, "consumer": consumer, "records": expected("transaction", N)}
    finally:
        server.close()


def read_lines(path: Path) -> list[Any]:
    from wirepipe.codecs.formats import restore_bytes

    return [restore_bytes(json.loads(line)) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_wirepipe_replay_of_a_capture_needs_no_server_and_no_NATS_URL(captured: Any) -> None:
    folder, consumer = captured["folder"], captured["consumer"]
    offline = {"NATS_URL": None}
    refused = wirepipe("replay", "cap", "-p", str(consumer), env=offline, cwd=folder)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: {consumer}: operators[0].decompress.dictionaries: the pipeline has no NATS source or sink to reach "
        "the dictionaries nats://DICTS through: declare resources.dictionaries.DICTS as {type: nats, nats: {url: "
        "...}}, or as {type: folder, path: ...} (a folder of .zdict files)\n")
    done = wirepipe("replay", "cap", "-p", str(consumer), "--set",
                    "resources.dictionaries.DICTS={type: folder, path: dicts}", env=offline, cwd=folder)
    assert done.returncode == 0, done.stderr
    assert f"archive: replayed {N} records (local)" in done.stderr and f"{N} out, 0 rejected" in done.stderr
    assert read_lines(folder / "out.jsonl") == captured["records"]


@pytest.mark.slow
def test_beam_replay_fetches_the_dictionaries_when_the_job_is_built_and_runs_without_the_server(
        captured: Any) -> None:
    """The job is built while the server is up (the bucket reached through the resource's own `nats:`), then the
    server stops and the job runs: its workers read what the job carries, and the results are the local
    runner's, record for record."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wirepipe.replay import Replay, local
    from wirepipe.replay.beam import build_job

    folder, consumer, server = captured["folder"], captured["consumer"], captured["server"]
    beam_out, local_out = folder / "beam", folder / "local.parquet"
    bucket = f"resources.dictionaries.DICTS={{type: nats, nats: {{url: '{server.url}'}}}}"
    job = build_job(Replay(str(consumer), [str(folder / "cap")], [bucket, "sink={type: parquet, path: x.parquet}"]),
                    output=str(beam_out), options=["direct_num_workers=1"])
    server.stop()
    result = job.run()
    assert (result.records_in, result.records_out, result.rejected) == (N, N, 0)
    replayed = local.run(Replay(str(consumer), [str(folder / "cap")], [
        "resources.dictionaries.DICTS={type: folder, path: %s}" % (folder / "dicts"),
        f"sink={{type: parquet, path: '{local_out}'}}"]))
    assert (replayed.records_out, replayed.rejected) == (N, 0)
    parts = pa.concat_tables([pq.read_table(f) for f in sorted((beam_out / "results").glob("part-*.parquet"))])
    assert parts.to_pylist() == pq.read_table(local_out).to_pylist()


@pytest.mark.slow
def test_a_store_that_holds_nothing_rejects_on_beam_as_locally(captured: Any, tmp_path: Path) -> None:
    """An empty folder for the bucket: every frame names a dictionary it lacks, so every record is rejected with
    that reason on either runner (the job carried no folder at all, and each worker stopped with a traceback
    naming its temporary copy)."""
    from wirepipe.replay import Replay, local
    from wirepipe.replay.beam import build_job

    folder, consumer = captured["folder"], captured["consumer"]
    (tmp_path / "empty").mkdir()
    sets = [f"resources.dictionaries.DICTS={{type: folder, path: '{tmp_path / 'empty'}'}}"]
    job = build_job(Replay(str(consumer), [str(folder / "cap")], [*sets, "sink={type: parquet, path: x.parquet}"]),
                    output=str(tmp_path / "beam"), options=["direct_num_workers=1"])
    on_beam = job.run()
    locally = local.run(Replay(str(consumer), [str(folder / "cap")],
                               [*sets, f"sink={{type: jsonl, path: '{tmp_path / 'local.jsonl'}'}}"]))
    assert (on_beam.records_in, on_beam.records_out, on_beam.rejected) == (N, 0, N)
    assert (locally.records_out, locally.rejected) == (0, N)
    [(stage, _, reason, count, *_)] = locally.rejections
    assert (stage, count) == ("decompress", N) and "no .zdict file carries it" in reason, locally.rejections
    assert [r[:4] for r in on_beam.rejections] == [r[:4] for r in locally.rejections]


@pytest.mark.slow
def test_beam_replay_carries_the_registry_schemas_fetched_when_the_job_is_built(make_server: Any,
                                                                                tmp_path: Path) -> None:
    """A consumer reads each record with the schema its Wirepipe-Schema header names, from the NATS registry: the
    job fetches every registered version when it is built, and runs after the server stopped; version 1 and
    version 2 records both come out as version 2 (by field name), as in a local run."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from wirepipe.connectors.capture_format import capture_table
    from wirepipe.connectors.capture_sink import CaptureWriter
    from wirepipe.core.batch import Batch
    from wirepipe.operators.serialize import Serialize
    from wirepipe.replay import Replay
    from wirepipe.replay.beam import build_job
    from wirepipe.schema import parse_schema, schema_fingerprint

    server = make_server()
    v1, v2 = {"x": "int32", "y": "int32"}, {"y": "int32", "x": "int32", "label?": "string"}
    for version, schema in enumerate((v1, v2), 1):
        (tmp_path / f"v{version}.yaml").write_text(yaml.safe_dump(schema, sort_keys=False))
        done = wirepipe("schema", "push", str(tmp_path / f"v{version}.yaml"), "--name", "points", "--registry",
                        "nats://WIREPIPE_SCHEMAS", "--url", server.url)
        assert done.returncode == 0, done.stderr
    sent = [Serialize("bincode", schema=v1)(Batch([{"x": i, "y": -i} for i in range(5)])),
            Serialize("bincode", schema=v2)(Batch([{"y": i, "x": 10 + i, "label": f"p{i}"} for i in range(5)])),
            Serialize("bincode", schema={"x": "int64"})(Batch([{"x": i} for i in range(5)]))]  # never pushed
    writer = CaptureWriter(tmp_path / "cap", row_group_rows=5, fsync=False)
    for i, batch in enumerate(sent):
        writer.append(capture_table(Batch(batch.values, subjects="points", headers=batch.headers), 5 * i,
                                    writer.schema()))
    writer.close()
    consumer = tmp_path / "consumer.yaml"
    consumer.write_text(yaml.safe_dump({
        "name": "points-archive", "source": {"type": "nats", "url": "${NATS_URL}", "subject": "points"},
        "operators": [{"deserialize": {"format": "bincode", "schema": "registry/points"}}],
        "sink": {"type": "parquet", "path": "x.parquet"}}, sort_keys=False))
    registry = f"resources.schemas.registry={{type: nats, nats: {{url: '{server.url}'}}}}"
    # A name the registry does not hold stops the job where it is built, as a local run stops (exit 2), naming
    # the registry, not the copy a worker would read.
    with pytest.raises(ConfigError) as unknown:
        build_job(Replay(str(consumer), [str(tmp_path / "cap")], [registry, "operators[0].deserialize.schema="
                                                                            "registry/lines"]),
                  output=str(tmp_path / "refused"), options=["direct_num_workers=1"])
    assert str(unknown.value) == ("deserialize.schema: registry/lines (its latest version): no schema is registered as "
                                  "'lines' in nats://WIREPIPE_SCHEMAS (it has points)")
    job = build_job(Replay(str(consumer), [str(tmp_path / "cap")], [registry]), output=str(tmp_path / "beam"),
                    options=["direct_num_workers=1"])
    server.stop()
    result = job.run()
    assert (result.records_in, result.records_out, result.rejected) == (15, 10, 5)
    # the reason names the registry the job was built from, as a local run's does (before: the job's temporary copy)
    unknown_fingerprint = schema_fingerprint(parse_schema({"x": "int64"}))
    assert [r[2:4] for r in result.rejections] == [[
        f"written with schema {unknown_fingerprint}, which this deserialize cannot read: the schema registry "
        "nats://WIREPIPE_SCHEMAS does not hold it (wirepipe schema push registers a schema)", 5]]
    parts = pa.concat_tables([pq.read_table(f) for f in sorted((tmp_path / "beam" / "results").glob("part-*"))],
                             promote_options="permissive")
    assert parts.to_pylist() == ([{"y": -i, "x": i, "label": None} for i in range(5)]
                                 + [{"y": i, "x": 10 + i, "label": f"p{i}"} for i in range(5)])

"""zstd dictionaries shared through a NATS Object Store bucket, on a real nats-server with JetStream.

``wirepipe dict train`` publishes a dictionary trained on real records; a publisher pipeline names
it (``compress: {dictionary: nats://BUCKET/NAME}``) and a consumer pipeline finds it by the id
every frame carries (``decompress: {dictionaries: nats://BUCKET}``): the two share nothing but the
server. A dictionary trained again gets a new id and the old messages stay readable; a missing,
damaged or oversized dictionary dead-letters the records that need it, with the reason, and the
worker goes on; a bucket that does not answer holds the batch until it does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.cli import invoke, wirepipe
from tests.nats_fixtures import expected
from wirepipe.codecs.formats import json_default
from wirepipe.codecs.zstd import zstd_compressor, zstd_dictionary_id, zstd_frame_dictionary_id
from wirepipe.connectors.nats.dictionary_bucket import DictionaryBucket
from wirepipe.connectors.nats.server import EmbeddedServer

N = 600
ROOT = Path(__file__).resolve().parent.parent


def write_records(path: Path, dataset: str, n: int, seed: int = 0) -> Path:
    from wirepipe.datasets import get_dataset

    with path.open("wb") as f:
        for chunk in get_dataset(dataset).records(n, seed, 1000):
            for r in chunk:
                f.write(orjson.dumps(r, default=json_default) + b"\n")
    return path


def train(url: str, folder: Path, to: str, dataset: str = "transaction", seed: int = 0, n: int = 2000,
          *extra: str) -> str:
    """``wirepipe dict train`` on ``n`` records of ``dataset`` written to a JSONL file; its stdout."""
    folder.mkdir(parents=True, exist_ok=True)
    src = write_records(folder / f"{dataset}-{seed}.jsonl", dataset, n, seed)
    done = wirepipe("dict", "train", "--from", str(src), "--to", to, "--url", url, *extra, cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout


def pipeline(folder: Path, name: str, body: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **body}, sort_keys=False))
    return path


def publisher(folder: Path, dataset: str = "transaction", count: int = N, seed: int = 0,
              dictionary: str = "nats://DICTS/tx") -> Path:
    return pipeline(folder, "publish", {
        "source": {"type": "generate", "dataset": dataset, "count": count, "batch_size": 200, "seed": seed},
        "operators": [{"serialize": {"format": "msgpack"}},
                      {"compress": {"codec": "zstd", "dictionary": dictionary}}],
        "sink": {"type": "jetstream", "url": "${NATS_URL}", "subject": "tx.js",
                 "stream": {"name": "TX", "subjects": ["tx.js"]}}})


def consumer(folder: Path, codec: str = "auto", **decompress: Any) -> Path:
    return pipeline(folder, "archive", {
        "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "TX", "durable": "archive",
                   "batch_size": 250},
        "operators": [{"decompress": {"codec": codec, "dictionaries": "nats://DICTS", **decompress}},
                      {"deserialize": {"format": "msgpack"}}],
        "sink": {"type": "jsonl", "path": "out.jsonl"},
        "dead_letter": {"type": "jsonl", "path": "dead.jsonl"}})


def run(path: Path, url: str, *args: str) -> Any:
    done = wirepipe("run", str(path), "--no-status", *args, env={"NATS_URL": url}, cwd=path.parent)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def lines(path: Path) -> list[Any]:
    from wirepipe.codecs.formats import restore_bytes

    return [restore_bytes(json.loads(line)) for line in path.read_text().splitlines()] if path.exists() else []


async def stream_payloads(url: str, stream: str = "TX") -> list[bytes]:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.stream_info(stream)
    out = [(await js.get_msg(stream, seq)).data for seq in range(1, info.state.messages + 1)]
    await nc.close()
    return out


async def bucket_call(url: str, action: Any) -> Any:
    import nats

    nc = await nats.connect(url)
    try:
        return await action(DictionaryBucket(nc, "DICTS"))
    finally:
        await nc.close()


@pytest.mark.slow
def test_train_reports_the_gain_on_held_out_records_and_publishes_by_name_and_by_id(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    out = train(url, tmp_path, "nats://DICTS/tx", "transaction", 0, 2000, "--out", "tx.zdict")
    assert "on 1,600 records" in out and "held out 400 records" in out
    gain = float(out.split("B/record  (")[1].split("%")[0])
    assert gain > 10, out  # transactions: ~30% smaller than plain zstd, each record compressed alone
    local = (tmp_path / "tx.zdict").read_bytes()
    dict_id = zstd_dictionary_id(local)
    assert f"published nats://DICTS/tx (id {dict_id}; also as nats://DICTS/id/{dict_id})" in out

    async def read(b: DictionaryBucket) -> tuple[bytes, bytes, Any]:
        return await b.by_name("tx", 1 << 20), await b.by_id(dict_id, 1 << 20), await b.entries()

    by_name, by_id, entries = asyncio.run(bucket_call(url, read))
    assert by_name == by_id == local
    assert [(e.name, e.dict_id, e.size) for e in entries] == [("tx", dict_id, len(local))]
    assert json.loads(entries[0].description)["held_out"] == 400

    listed = wirepipe("dict", "list", "nats://DICTS", "--url", url)
    assert listed.returncode == 0 and listed.stdout.startswith(f"tx\tid {dict_id}\t{len(local):,} B\t")
    assert f"\t{gain:.1f}% smaller than zstd\n" in listed.stdout  # the figure train printed
    shown = wirepipe("dict", "show", f"nats://DICTS/id/{dict_id}", "--url", url, "--out", str(tmp_path / "s"))
    assert shown.returncode == 0, shown.stderr
    assert f"id {dict_id}, {len(local):,} bytes" in shown.stdout and "trained_on: 1600" in shown.stdout
    assert (tmp_path / "s").read_bytes() == local


@pytest.mark.slow
def test_a_publisher_and_a_consumer_share_nothing_but_the_server(nats_server: EmbeddedServer, tmp_path: Path
                                                                 ) -> None:
    """The shipped example pair, each in a folder of its own: configs/dictionaries/publish.yaml and archive.yaml."""
    import shutil

    url = nats_server.url
    train(url, tmp_path / "trainer", "nats://DICTS/tx")
    ends = {}
    for end in ("publish", "archive"):
        ends[end] = tmp_path / end / f"{end}.yaml"
        ends[end].parent.mkdir()
        shutil.copy(ROOT / "configs" / "dictionaries" / f"{end}.yaml", ends[end])
    pub = run(ends["publish"], url, "--count", str(N))
    assert pub.returncode == 0, pub.stderr
    frames = asyncio.run(stream_payloads(url))
    dict_id = asyncio.run(bucket_call(url, lambda b: b.info("tx"))).dict_id
    assert len(frames) == N and {zstd_frame_dictionary_id(f) for f in frames} == {dict_id}  # every frame says which

    con = run(ends["archive"], url, "--count", str(N))
    assert con.returncode == 0, con.stderr
    results = ends["archive"].parent / "results"
    assert lines(results / "tx.jsonl") == expected("transaction", N)
    assert lines(results / "tx-dead-letters.jsonl") == []
    assert f"fetched zstd dictionary {dict_id} from nats://DICTS" in con.stderr
    assert sorted(p.name for p in (tmp_path / "archive").rglob("*")) == ["archive.yaml", "results", "tx-dead-letters.jsonl",
                                                                         "tx.jsonl"]  # no dictionary file


@pytest.mark.slow
def test_codec_zstd_finds_the_dictionary_too(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    train(url, tmp_path / "trainer", "nats://DICTS/tx")
    assert run(publisher(tmp_path / "publisher", count=100), url).returncode == 0
    con = run(consumer(tmp_path / "consumer", codec="zstd"), url, "--count", "100")
    assert con.returncode == 0, con.stderr
    assert lines(tmp_path / "consumer" / "out.jsonl") == expected("transaction", 100)


@pytest.mark.slow
def test_a_dictionary_trained_again_gets_a_new_id_and_old_messages_stay_readable(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    train(url, tmp_path / "v1", "nats://DICTS/tx", "transaction", 0)
    assert run(publisher(tmp_path / "p1", count=300, seed=0), url).returncode == 0
    train(url, tmp_path / "v2", "nats://DICTS/tx", "feed", 0)  # other records: another dictionary, another id
    assert run(publisher(tmp_path / "p2", dataset="feed", count=300), url).returncode == 0
    ids = [zstd_frame_dictionary_id(f) for f in asyncio.run(stream_payloads(url))]
    assert len(set(ids[:300])) == len(set(ids[300:])) == 1 and ids[0] != ids[-1]

    con = run(consumer(tmp_path / "consumer"), url, "--count", "600")
    assert con.returncode == 0, con.stderr
    assert lines(tmp_path / "consumer" / "out.jsonl") == expected("transaction", 300) + expected("feed", 300)
    assert con.stderr.count("fetched zstd dictionary") == 2


async def publish_frames(url: str, frames: list[bytes], stamp: str | None = None, first: int = 0) -> None:
    """Raw messages into the TX stream, as a publisher with a dictionary sends them (``stamp``: its
    ``Wirepipe-Dictionary``)."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="TX", subjects=["tx.js"])
    headers = {"Content-Type": "application/msgpack", "Content-Encoding": "zstd"}
    if stamp is not None:
        headers["Wirepipe-Dictionary"] = stamp
    for i, f in enumerate(frames, first):
        await js.publish("tx.js", f, headers={**headers, "Nats-Msg-Id": str(i)})
    await nc.close()


def frames_with(dictionary: bytes, records: list[Any]) -> list[bytes]:
    import msgpack

    compress = zstd_compressor(3, dictionary, write_dict_id=True)
    return [compress(msgpack.packb(r)) for r in records]


@pytest.mark.slow
def test_missing_damaged_and_oversized_dictionaries_dead_letter_their_records_and_the_worker_goes_on(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    url = nats_server.url
    good_file, absent_file, big_file = tmp_path / "good.zdict", tmp_path / "absent.zdict", tmp_path / "big.zdict"
    train(url, tmp_path / "good", "nats://DICTS/tx", "transaction", 0, 2000, "--out", str(good_file))
    # trained, never published: its id is not in the bucket
    train(url, tmp_path / "absent", "nats://DICTS/unused", "feed", 0, 2000, "--dry-run", "--out", str(absent_file))
    train(url, tmp_path / "big", "nats://DICTS/big", "block", 0, 400, "--size", "64KiB", "--out", str(big_file))
    good, absent, big = good_file.read_bytes(), absent_file.read_bytes(), big_file.read_bytes()
    planted = zstd_dictionary_id(absent) + 1

    async def plant(b: DictionaryBucket) -> None:  # a damaged entry: id/<planted> holds another dictionary
        store = await b._bucket()
        await store.put(f"id/{planted}", good)

    asyncio.run(bucket_call(url, plant))
    records = expected("transaction", 40)
    wrong = [bytearray(f) for f in frames_with(absent, records[20:25])]
    for f in wrong:  # the frame header's dictionary id, rewritten to name the planted entry
        start = 5 if f[4] & 0x20 else 6
        f[start:start + 4] = planted.to_bytes(4, "little")
    frames = (frames_with(good, records[:10]) + frames_with(absent, records[10:20]) + [bytes(f) for f in wrong]
              + frames_with(big, records[25:30]) + frames_with(good, records[30:]))
    asyncio.run(publish_frames(url, frames))

    folder = tmp_path / "consumer"
    con = run(consumer(folder, max_output_size="32KiB"), url, "--count", "40")
    assert con.returncode == 0, con.stderr  # rejections are reported (exit 3 only when every record is)
    assert lines(folder / "out.jsonl") == records[:10] + records[30:]
    dead = lines(folder / "dead.jsonl")
    assert [d["stage"] for d in dead] == ["decompress"] * 20
    assert [bytes(d["payload"]) for d in dead] == frames[10:30]  # as received: a later run can decode them
    why = [d["error"] for d in dead]
    absent_id = zstd_dictionary_id(absent)
    assert all(f"zstd dictionary {absent_id} from nats://DICTS: no dictionary 'id/{absent_id}' in bucket DICTS"
               in w for w in why[:10]), why[0]
    assert all(f"'id/{planted}' in bucket DICTS is damaged: it has id {zstd_dictionary_id(good)}" in w
               for w in why[10:15]), why[10]
    assert all("over max_output_size (32768 bytes): refused" in w for w in why[15:20]), why[15]


@pytest.mark.slow
def test_a_bucket_that_does_not_answer_holds_the_batch_until_it_does(tmp_path: Path) -> None:
    """The dictionaries live on a second server, killed while the consumer runs and started again: the
    batch waits (nothing dead-lettered, nothing lost), then every record is written."""
    from wirepipe.testing import TestingSink

    with EmbeddedServer(store_dir=tmp_path / "a") as records_server, \
            EmbeddedServer(store_dir=tmp_path / "b") as dict_server:
        train(dict_server.url, tmp_path / "trainer", "nats://DICTS/tx", "transaction", 0, 2000,
              "--out", str(tmp_path / "tx.zdict"))
        dictionary = (tmp_path / "tx.zdict").read_bytes()
        records = expected("transaction", 200)

        async def scenario() -> tuple[Any, TestingSink, list[str]]:
            from wirepipe.connectors.nats.jetstream_source import JetStreamSource
            from wirepipe.operators.decompress import Decompress
            from wirepipe.operators.deserialize import Deserialize
            from wirepipe.pipelines.pipeline import Pipeline

            await publish_frames(records_server.url, [])
            sink = TestingSink()
            pipe = Pipeline(JetStreamSource(stream="TX", durable="w", url=records_server.url, count=200,
                                            batch_size=100),
                            [Decompress("auto", dictionaries="nats://DICTS", nats={"url": dict_server.url}),
                             Deserialize("msgpack")], sink, dead_letter=sink, name="held")
            run = pipe.new_run()
            task = asyncio.create_task(run.execute())
            while not run.running:
                await asyncio.sleep(0.02)
            await asyncio.to_thread(dict_server.kill)
            await publish_frames(records_server.url, frames_with(dictionary, records))
            seen: list[str] = []
            for _ in range(100):  # the loop says what it waits for, and holds the batch
                await asyncio.sleep(0.05)
                if run.sink_error:
                    seen.append(run.sink_error)
            assert sink.records == [] and sink.rejects == []
            await asyncio.to_thread(dict_server.restart)
            stats = await asyncio.wait_for(task, 60)
            return stats, sink, seen

        stats, sink, seen = asyncio.run(scenario())
    assert sink.records == records and sink.rejects == []
    assert stats.records_out == 200 and stats.rejected == 0 and stats.sink_errors >= 1
    assert seen and seen[-1].startswith("decompress (auto): NotConnected: dictionary bucket DICTS: the server "
                                         "did not answer")


@pytest.mark.slow
def test_a_publisher_whose_dictionary_is_missing_does_not_start(nats_server: EmbeddedServer, tmp_path: Path
                                                                ) -> None:
    url = nats_server.url
    done = run(publisher(tmp_path / "p", dictionary="nats://DICTS/nope"), url)
    assert done.returncode == 2  # a config error, as `validate` says: a pool does not restart its workers on it
    assert ("compress: dictionary nats://DICTS/nope: no dictionary bucket DICTS on the server (publish one: "
            "wirepipe dict train --to nats://DICTS/NAME)") in done.stderr
    train(url, tmp_path / "t", "nats://DICTS/tx")
    done = run(publisher(tmp_path / "p", dictionary="nats://DICTS/nope"), url)
    assert done.returncode == 2 and "no dictionary 'nope' in bucket DICTS" in done.stderr


@pytest.mark.parametrize(("entry", "where", "message"), [
    ({"decompress": {"codec": "auto", "dictionaries": "nats://DICTS/tx"}}, "operators[0].decompress.dictionaries",
     "'nats://DICTS/tx': a bucket alone, nats://BUCKET (the frames name their dictionary by id)"),
    ({"decompress": {"codec": "auto", "dictionary": "nats://DICTS/tx"}}, "operators[0].decompress",
     "nats://DICTS/tx: a dictionary shared through NATS is found by the id the frames carry: give the bucket as "
     "`dictionaries: nats://BUCKET`"),
    ({"compress": {"codec": "zstd", "dictionary": "nats://my dicts/tx"}}, "operators[0].compress.dictionary",
     "'nats://my dicts/tx': the bucket name is letters, digits, - and _ (nats://BUCKET/NAME)"),
    ({"compress": {"codec": "zstd", "dictionary": "nats://DICTS"}}, "operators[0].compress.dictionary",
     "give the dictionary's name, nats://BUCKET/NAME"),
    ({"compress": {"codec": "gzip", "dictionary": "nats://DICTS/tx"}}, "operators[0].compress",
     "codec gzip does not take a dictionary (only zstd does)"),
    ({"compress": {"codec": "zstd", "dictionary": "nats://DICTS/tx"}}, "operators[0].compress.dictionary",
     "the pipeline has no NATS source or sink to reach the dictionaries nats://DICTS through: declare "
     "resources.dictionaries.DICTS as {type: nats, nats: {url: ...}}, or as {type: folder, path: ...} (a folder of "
     ".zdict files)"),
    ({"compress": {"codec": "zstd", "dictionary": "nats://DICTS/tx", "nats": {"url": "http://h:4222"}}},
     "operators[0].compress.nats.url", "'http://h:4222': a NATS url's scheme is nats, tls, ws, wss"),
    ({"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"}, "resources": {"DICTS": {"type": "redis"}}},
     "resources.dictionaries.DICTS", "unknown type 'redis': allowed nats, folder"),
    ({"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"}, "resources": {"DICTS": {"type": "folder"}}},
     "resources.dictionaries.DICTS.path", "required field is missing"),
    ({"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"},
      "resources": {"DICTS": {"type": "nats", "bucket": "a.b"}}},
     "resources.dictionaries.DICTS.bucket", "bucket name 'a.b': a bucket name is letters, digits, - and _"),
    # a dictionary file: read bounded, as every file a config names (/dev/zero took 13 GB before the error)
    ({"compress": {"codec": "zstd", "dictionary": "/nonexistent/tx.zdict"}}, "operators[0].compress",
     "zstd dictionary file /nonexistent/tx.zdict: no such file"),
    ({"decompress": {"codec": "zstd", "dictionary": "/"}}, "operators[0].decompress",
     "zstd dictionary file /: a folder, not a file"),
    ({"compress": {"codec": "zstd", "dictionary": "/dev/zero"}}, "operators[0].compress",
     "zstd dictionary file /dev/zero is larger than 64 MiB, the most a zstd dictionary may be"),
])
def test_a_bad_dictionary_reference_is_a_config_error_naming_file_field_and_value(
        tmp_path: Path, entry: dict[str, Any], where: str, message: str) -> None:
    declared = entry.pop("resources", {})
    path = pipeline(tmp_path, "bad", {"source": {"type": "jsonl", "path": "in.jsonl"}, "operators": [entry],
                                      "sink": {"type": "null"}, "resources": {"dictionaries": declared}})
    done = invoke("validate", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{path}: {where}: " in done.stderr and message in done.stderr, done.stderr


def test_frames_that_name_a_dictionary_the_decompressor_lacks_say_which() -> None:
    from wirepipe.core.batch import Batch
    from wirepipe.operators.decompress import Decompress

    samples = [orjson.dumps(r, default=json_default) for r in expected("transaction", 200)]
    from wirepipe.codecs.zstd import train_zstd_dictionary

    d = train_zstd_dictionary(samples, size=4096)
    out = Decompress("zstd")(Batch(frames_with(d, expected("transaction", 1))))
    assert f"compressed with zstd dictionary {zstd_dictionary_id(d)}, which this decompressor does not have" in \
        out.rejected[0].error


@pytest.mark.slow
def test_train_from_a_capture_of_dictionary_compressed_traffic(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """What production sent, as captured: the payloads are decompressed by their headers (with the bucket's
    own dictionary for frames that name one) and a new dictionary is trained on the records."""
    url = nats_server.url
    train(url, tmp_path / "v1", "nats://DICTS/tx", "transaction", 0, 2000, "--out", str(tmp_path / "v1.zdict"))
    assert run(publisher(tmp_path / "p", count=1000, seed=5), url).returncode == 0
    cap = wirepipe("capture", "--url", url, "--stream", "TX", "--from-seq", "1", "--out", str(tmp_path / "cap"))
    assert cap.returncode == 0, cap.stderr
    done = wirepipe("dict", "train", "--from", str(tmp_path / "cap"), "--to", "nats://DICTS/tx", "--url", url,
                    "--out", str(tmp_path / "v2.zdict"))
    assert done.returncode == 0, done.stderr
    assert "on 800 records" in done.stdout and "held out 200 records" in done.stdout
    v1, v2 = (tmp_path / "v1.zdict").read_bytes(), (tmp_path / "v2.zdict").read_bytes()
    assert zstd_dictionary_id(v1) != zstd_dictionary_id(v2)
    import msgpack

    from wirepipe.datasets import get_dataset
    from wirepipe.dictionaries import train as train_on

    # the capture's payloads decoded to exactly the records published: training on those gives the same bytes
    published = [msgpack.packb(r) for chunk in get_dataset("transaction").records(1000, 5, 1000) for r in chunk]
    assert train_on(published).dictionary == v2

    # a replay of that capture: no NATS part any more, so the consumer names its connection
    con = consumer(tmp_path / "replay")
    env = {"NATS_URL": url}  # the pipeline's own source names it; the replay reads the capture instead
    done = wirepipe("replay", str(tmp_path / "cap"), "--pipeline", str(con), cwd=con.parent, env=env)
    assert done.returncode == 2 and ("operators[0].decompress.dictionaries: the pipeline has no NATS source or sink "
                                     "to reach the dictionaries nats://DICTS through: declare "
                                     "resources.dictionaries.DICTS as {type: nats, nats: {url: ...}}") in done.stderr
    done = wirepipe("replay", str(tmp_path / "cap"), "--pipeline", str(con), "--runner", "beam", "--output", "beam",
                    "--set", f"operators[0].decompress.nats.url={url}", "--set", "sink={type: parquet, path: x}",
                    "--beam-option", "direct_num_workers=1", cwd=con.parent, env=env)
    assert done.returncode == 0, done.stderr  # the dictionaries fetched when the job was built, carried by it
    assert "replayed 1000 records (beam FnApiRunner) in" in done.stderr and "1000 out, 0 rejected" in done.stderr
    done = wirepipe("replay", str(tmp_path / "cap"), "--pipeline", str(con),
                    "--set", f"operators[0].decompress.nats.url={url}", cwd=con.parent, env=env)
    assert done.returncode == 0, done.stderr
    assert [msgpack.packb(r) for r in lines(con.parent / "out.jsonl")] == published


def test_publish_repairs_a_damaged_entry_and_refuses_another_dictionary_with_the_same_id(
        nats_server: EmbeddedServer) -> None:
    import zstandard

    from wirepipe.core.stores import DictionaryUnusable

    samples = [orjson.dumps(r, default=json_default) for r in expected("transaction", 400)]
    mine = zstandard.train_dictionary(4096, samples).as_bytes()
    dict_id = zstd_dictionary_id(mine)
    other = zstandard.train_dictionary(4096, [orjson.dumps(r) for r in expected("point", 2000)],
                                       dict_id=dict_id).as_bytes()  # another dictionary that claims the same id
    assert zstd_dictionary_id(other) == dict_id and other != mine

    async def scenario(b: DictionaryBucket) -> tuple[bytes, str]:
        store = await b._bucket(create=True)
        await store.put(f"id/{dict_id}", b"not a dictionary")
        with pytest.raises(DictionaryUnusable, match="is damaged: it is not a trained zstd dictionary"):
            await b.by_id(dict_id, 1 << 20)
        assert await b.publish("tx", mine) == dict_id  # the same id, the right bytes: repaired
        repaired = await b.by_id(dict_id, 1 << 20)
        await store.put(f"id/{dict_id}", other)
        try:
            await b.publish("tx", mine)
        except Exception as exc:
            return repaired, str(exc)
        return repaired, ""

    repaired, refusal = asyncio.run(bucket_call(nats_server.url, scenario))
    assert repaired == mine
    assert refusal == (f"bucket DICTS already holds another dictionary with id {dict_id}: train again (other "
                       "samples give another id)")


@pytest.mark.slow
def test_tap_decodes_frames_that_name_a_shared_dictionary(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """``wirepipe tap --dictionaries nats://BUCKET`` fetches the dictionary a frame names, as a consumer does;
    without it the frames are named undecoded with the option to give."""
    url = nats_server.url
    train(url, tmp_path / "trainer", "nats://DICTS/tx")
    assert run(publisher(tmp_path / "pub", count=50), url).returncode == 0
    tap = ("tap", "--stream", "TX", "--deliver", "all", "--limit", "50", "--url", url)
    seen = wirepipe(*tap, "--dictionaries", "nats://DICTS", timeout=60)
    assert seen.returncode == 0 and "Traceback" not in seen.stderr, seen.stderr
    assert [json.loads(line) for line in seen.stdout.splitlines()] == json.loads(
        orjson.dumps(expected("transaction", 50), default=json_default))
    blind = wirepipe(*tap[:-2], "--url", url, "--raw", "--limit", "1", timeout=60)
    assert blind.returncode == 0, blind.stderr
    assert "dictionar" in blind.stderr and blind.stdout.count("\n") == 1


# --- which bytes: the publisher's digest stamp, the frames' checksum -------------------------------------------


def orders(n: int) -> list[dict[str, Any]]:
    """Order records whose words a dictionary learns: the tampering below upper-cases one of them."""
    import random

    rnd = random.Random(1)
    words = ["shipped", "pending", "delivered", "cancelled", "returned"]
    return [{"id": i, "status": rnd.choice(words), "customer": f"c{rnd.randrange(500)}",
             "note": f"order {rnd.choice(words)} on time"} for i in range(n)]


def trained(url: str, folder: Path) -> bytes:
    """A dictionary trained on transactions and published as nats://DICTS/tx: its bytes."""
    train(url, folder / "trainer", "nats://DICTS/tx", "transaction", 0, 2000, "--out", str(folder / "tx.zdict"))
    return (folder / "tx.zdict").read_bytes()


async def replace_object(url: str, name: str, data: bytes) -> None:
    """What an adversary with write access to the bucket does: the object rewritten, its Object Store digest
    with it (the id header kept, so it looks filed where it was)."""
    import nats
    from nats.js.api import ObjectMeta

    nc = await nats.connect(url)
    try:
        store = await DictionaryBucket(nc, "DICTS")._bucket()
        info = await store.get_info(name)
        await store.put(name, data, meta=ObjectMeta(name=name, headers=info.headers))
    finally:
        await nc.close()


@pytest.mark.slow
def test_a_tampered_dictionary_rejects_every_record_stamped_with_the_publishers_digest(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """The bucket's id/<id> replaced by the same dictionary with one word upper-cased (same id, same magic, a
    fresh Object Store digest): before, 4,000 out, 0 rejected and 1,403 records changed; now every record is
    rejected with both digests, none is decoded to other data."""
    from wirepipe.codecs.zstd import dictionary_digest

    url, n = nats_server.url, 4000
    records = orders(n)
    source = tmp_path / "orders.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    done = wirepipe("dict", "train", "--from", str(source), "--to", "nats://DICTS/orders", "--url", url,
                    "--out", str(tmp_path / "orders.zdict"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    good = (tmp_path / "orders.zdict").read_bytes()
    dict_id = zstd_dictionary_id(good)
    pub = run(pipeline(tmp_path / "pub", "pub", {
        "source": {"type": "jsonl", "path": str(source)},
        "operators": [{"serialize": {"format": "json"}},
                      {"compress": {"codec": "zstd", "dictionary": "nats://DICTS/orders"}}],
        "sink": {"type": "jetstream", "url": "${NATS_URL}", "subject": "tx.js",
                 "stream": {"name": "TX", "subjects": ["tx.js"]}}}), url)
    assert pub.returncode == 0, pub.stderr
    tampered = good.replace(b"shipped", b"SHIPPED")
    assert tampered != good and zstd_dictionary_id(tampered) == dict_id and tampered[:4] == good[:4]
    asyncio.run(replace_object(url, f"id/{dict_id}", tampered))

    folder = tmp_path / "consumer"
    con = run(pipeline(folder, "archive", {
        "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "TX", "durable": "archive",
                   "batch_size": 500},
        "operators": [{"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"}},
                      {"deserialize": {"format": "json"}}],
        "sink": {"type": "jsonl", "path": "out.jsonl"},
        "dead_letter": {"type": "jsonl", "path": "dead.jsonl"}}), url, "--count", str(n))
    assert con.returncode == 3, con.stderr  # every record rejected
    assert "4,000 of 4,000 records rejected" in con.stderr
    out, dead = lines(folder / "out.jsonl"), lines(folder / "dead.jsonl")
    assert (len(out), len(dead)) == (0, n)  # 0 changed: nothing decoded with the other bytes
    assert {(d["stage"], d["error"]) for d in dead} == {("decompress", (
        f"zstd dictionary {dict_id} from nats://DICTS is {dictionary_digest(tampered)}, but the record's "
        f"Wirepipe-Dictionary says it was compressed with {dictionary_digest(good)}: other bytes would decode it "
        "to other data (refused)"))}
    assert con.stderr.count(f"records stamped {dictionary_digest(good)} were compressed with other bytes") == 1
    assert con.stderr.count("fetched zstd dictionary") == 1  # 8 batches: one fetch, one comparison per stamp

    # the consumer's own copy repaired: the same messages decode to exactly what was published
    asyncio.run(replace_object(url, f"id/{dict_id}", good))
    again = run(pipeline(tmp_path / "again", "again", {
        "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "TX", "durable": "again", "batch_size": 500},
        "operators": [{"decompress": {"codec": "auto", "dictionaries": "nats://DICTS"}},
                      {"deserialize": {"format": "json"}}],
        "sink": {"type": "jsonl", "path": "out.jsonl"}}), url, "--count", str(n))
    assert again.returncode == 0, again.stderr
    assert lines(tmp_path / "again" / "out.jsonl") == records


@pytest.mark.slow
def test_a_publisher_whose_dictionary_is_not_the_pinned_digest_does_not_start(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    from wirepipe.codecs.zstd import dictionary_digest

    url = nats_server.url
    good = trained(url, tmp_path)
    path = publisher(tmp_path / "p", count=50)
    pinned = yaml.safe_load(path.read_text())
    pinned["operators"][1]["compress"]["digest"] = dictionary_digest(good)
    path.write_text(yaml.safe_dump(pinned, sort_keys=False))
    assert run(path, url).returncode == 0
    frames = asyncio.run(stream_payloads(url))
    assert len(frames) == 50

    tampered = good.replace(b"version", b"VERSION")  # both copies rewritten: a consumer could not tell
    assert tampered != good
    asyncio.run(replace_object(url, "tx", tampered))
    done = run(path, url)
    assert done.returncode == 1
    assert (f"compress: dictionary nats://DICTS/tx is {dictionary_digest(tampered)}, not the pinned digest "
            f"{dictionary_digest(good)}: refused (the dictionary is not the bytes this config names)") in done.stderr
    assert len(asyncio.run(stream_payloads(url))) == 50  # nothing published


def _dictionary_and_frames(n: int) -> tuple[bytes, Any]:
    from wirepipe.codecs.zstd import train_zstd_dictionary
    from wirepipe.core.batch import Batch
    from wirepipe.operators.compress import Compress

    samples = [orjson.dumps(r) for r in orders(400)]
    good = train_zstd_dictionary(samples, size=2048)
    return good, Compress("zstd", 3, dictionary=good)(Batch(samples[:n]))


def test_a_dictionary_file_is_checked_against_each_records_stamp() -> None:
    from wirepipe.codecs.zstd import dictionary_digest
    from wirepipe.core.batch import Batch
    from wirepipe.operators.decompress import Decompress

    good, packed = _dictionary_and_frames(20)
    stamp = dictionary_digest(good)
    assert packed.headers == {"Content-Encoding": "zstd", "Wirepipe-Dictionary": stamp}
    tampered = good.replace(b"shipped", b"SHIPPED")
    assert tampered != good

    ok = Decompress("auto", dictionary=good)(Batch(list(packed.values), headers=[dict(packed.headers)] * 20))
    assert ok.values == [orjson.dumps(r) for r in orders(20)] and ok.rejected == []
    bad = Decompress("auto", dictionary=tampered)(Batch(list(packed.values), headers=packed.headers))
    assert (len(bad.values), len(bad.rejected)) == (0, 20)
    assert bad.rejected[0].error == (f"the zstd dictionary file is {dictionary_digest(tampered)}, but the record's "
                                     f"Wirepipe-Dictionary says it was compressed with {stamp}: other bytes would "
                                     "decode it to other data (refused)")
    other = "sha256:" + "0" * 64  # records of one batch stamped alike, otherwise, or not at all
    mixed = Decompress("auto", dictionary=good)(Batch(list(packed.values[:6]), headers=[
        dict(packed.headers), {**packed.headers, "Wirepipe-Dictionary": other}, {"Content-Encoding": "zstd"}] * 2))
    assert mixed.values == [orjson.dumps(r) for i, r in enumerate(orders(6)) if i % 3 != 1]
    assert [r.value for r in mixed.rejected] == [packed.values[1], packed.values[4]]
    assert mixed.rejected[0].error.endswith(f"says it was compressed with {other}: other bytes would decode it to "
                                            "other data (refused)")
    forged = Decompress("zstd", dictionary=good)(Batch(list(packed.values[:3]),
                                                       headers={"Wirepipe-Dictionary": "sha256:12"}))
    assert [r.error for r in forged.rejected] == ["Wirepipe-Dictionary: 'sha256:12' is not a dictionary digest: "
                                                  "sha256: and the 64 hex digits of the dictionary's SHA-256: the "
                                                  "record cannot be checked against its dictionary (refused)"] * 3


def test_an_unstamped_frame_decoded_with_other_bytes_fails_its_checksum_never_gives_other_data() -> None:
    from wirepipe.core.batch import Batch
    from wirepipe.operators.decompress import Decompress

    good, packed = _dictionary_and_frames(200)
    tampered = good.replace(b"shipped", b"SHIPPED")
    out = Decompress("zstd", dictionary=tampered)(Batch(list(packed.values)))  # a peer that does not stamp
    originals = [orjson.dumps(r) for r in orders(200)]
    kept = [originals[i] for i in range(200) if packed.values[i] not in {r.value for r in out.rejected}]
    assert out.values == kept  # what decodes is exactly what was compressed: 0 changed
    assert len(out.values) + len(out.rejected) == 200 and out.rejected
    assert {r.error for r in out.rejected} == {
        "decompression error: Restored data doesn't match checksum: the frame was decompressed with other dictionary "
        "bytes than it was compressed with (or it is damaged): refused rather than decoded to other data"}


def test_compress_without_a_dictionary_drops_the_stamp_of_an_earlier_one() -> None:
    from wirepipe.core.batch import Batch
    from wirepipe.operators.compress import Compress

    _, packed = _dictionary_and_frames(2)
    again = Compress("gzip")(Batch([b"a", b"b"], headers=[{**packed.headers, "traceparent": "00-1"}, None]))
    assert again.headers == [{"Content-Encoding": "gzip", "traceparent": "00-1"}, {"Content-Encoding": "gzip"}]


@pytest.mark.parametrize(("entry", "where", "message"), [
    ({"codec": "zstd", "dictionary": "{dir}/d.zdict", "digest": "sha256:" + "0" * 64}, "operators[0].compress",
     "dictionary {dir}/d.zdict is sha256:"),
    ({"codec": "zstd", "dictionary": "{dir}/d.zdict", "digest": "md5:00"}, "operators[0].compress.digest",
     "'md5:00' is not a dictionary digest: sha256: and the 64 hex digits of the dictionary's SHA-256"),
    ({"codec": "zstd", "digest": "sha256:" + "0" * 64}, "operators[0].compress.digest",
     "digest pins the bytes of a dictionary: give `dictionary:` beside it"),
])
def test_a_pinned_digest_is_checked_at_validation(tmp_path: Path, entry: dict[str, Any], where: str,
                                                  message: str) -> None:
    from tests.cli import invoke

    good, _ = _dictionary_and_frames(1)
    (tmp_path / "d.zdict").write_bytes(good)
    entry = {k: v.replace("{dir}", str(tmp_path)) for k, v in entry.items()}
    path = pipeline(tmp_path, "pinned", {"source": {"type": "jsonl", "path": "in.jsonl"},
                                         "operators": [{"compress": entry}], "sink": {"type": "null"}})
    done = invoke("validate", str(path))
    assert done.returncode == 2 and "Traceback" not in done.output, done.output
    assert f"{path}: {where}: " in done.stderr and message.replace("{dir}", str(tmp_path)) in done.stderr, done.stderr


@pytest.mark.slow
def test_a_running_consumer_asks_again_for_a_disowned_dictionary_and_decodes_once_it_is_repaired(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    from wirepipe.codecs.zstd import dictionary_digest
    from wirepipe.testing import TestingSink

    url = nats_server.url
    good = trained(url, tmp_path)
    dict_id = zstd_dictionary_id(good)
    records = expected("transaction", 200)
    frames = frames_with(good, records)
    tampered = good.replace(b"version", b"VERSION")
    asyncio.run(replace_object(url, f"id/{dict_id}", tampered))

    async def scenario() -> tuple[Any, TestingSink, Any]:
        from wirepipe.connectors.nats.jetstream_source import JetStreamSource
        from wirepipe.operators.decompress import Decompress
        from wirepipe.operators.deserialize import Deserialize
        from wirepipe.pipelines.pipeline import Pipeline

        await publish_frames(url, frames[:100], dictionary_digest(good))
        sink = TestingSink()
        decompress = Decompress("auto", dictionaries="nats://DICTS")
        pipe = Pipeline(JetStreamSource(stream="TX", durable="w", url=url, count=200, batch_size=100),
                        [decompress, Deserialize("msgpack")], sink, dead_letter=sink, name="repaired",
                        resources={"dictionaries": {"DICTS": {"type": "nats", "retry_after": 0.2}}})
        task = asyncio.create_task(pipe.run_async())
        for _ in range(500):
            if len(sink.rejects) == 100:
                break
            await asyncio.sleep(0.02)
        await replace_object(url, f"id/{dict_id}", good)
        await asyncio.sleep(0.3)  # past retry_after: the next batch asks the bucket again
        await publish_frames(url, frames[100:], dictionary_digest(good), first=100)
        return await asyncio.wait_for(task, 60), sink, decompress.shared

    stats, sink, shared = asyncio.run(scenario())
    assert (len(sink.rejects), sink.records) == (100, records[100:])
    assert {r.error for r in sink.rejects} == {
        f"zstd dictionary {dict_id} from nats://DICTS is {dictionary_digest(tampered)}, but the record's "
        f"Wirepipe-Dictionary says it was compressed with {dictionary_digest(good)}: other bytes would decode it "
        "to other data (refused)"}
    assert (stats.records_out, stats.rejected, shared.fetched) == (100, 100, 2)


def test_train_takes_a_registered_schema_from_the_commands_server(nats_server: EmbeddedServer,
                                                                   tmp_path: Path) -> None:
    """``dict train --schema`` takes what a serialize takes: a registered version is read from the registry on the
    ``--url`` server (a file of records has no NATS source to reach it through); one it does not hold is a usage
    error naming it."""
    from tests.cli import invoke

    url = nats_server.url
    (tmp_path / "v1.yaml").write_text(yaml.safe_dump({"x": "int32", "y": "int32"}))
    assert invoke("schema", "push", str(tmp_path / "v1.yaml"), "--name", "points", "--url", url).returncode == 0
    (tmp_path / "points.jsonl").write_text("".join(json.dumps({"x": i, "y": i * 7}) + "\n" for i in range(200)))
    for schema in ("registry/points@1", "nats://WIREPIPE_SCHEMAS/points", str(tmp_path / "v1.yaml")):
        done = invoke("dict", "train", "--from", str(tmp_path / "points.jsonl"), "--format", "bincode", "--schema",
                      schema, "--to", "nats://DICTS/points", "--url", url, "--dry-run", "--size", "1KiB")
        assert done.returncode == 0, (schema, done.output)
        assert "on 160 records" in done.stdout and "held out 40 records" in done.stdout, done.stdout
    refused = invoke("dict", "train", "--from", str(tmp_path / "points.jsonl"), "--format", "bincode", "--schema",
                     "registry/points@2", "--to", "nats://DICTS/points", "--url", url, "--dry-run")
    assert refused.returncode == 2
    assert refused.stderr == ("error: serialize.schema: registry/points version 2: points has version 1 in "
                              "nats://WIREPIPE_SCHEMAS: no version 2\n")

"""Auth and TLS on the NATS connectors: the right credentials work, wrong ones fail clearly, secrets stay secret."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import nkeys
import pytest

from tests.cli import wirepipe
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.server import EmbeddedServer, ServerTLS, User
from wirepipe.core.errors import ConfigError, WirepipeError
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.config import validate_config
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink

PASSWORD = "s3cret-Pa55word-xyz"
TOKEN = "t0ken-abcdef-123456"
_streams = itertools.count()


def new_nkey() -> tuple[str, str]:
    """(seed, public key) of a fresh user nkey."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    kp = nkeys.from_seed(bytearray(seed))
    return seed.decode(), kp.public_key.decode()


async def round_trip(opts: dict[str, Any], n: int = 50) -> int:
    """Publish n records to a new stream and consume them back with the same connection options."""
    name = f"AUTH{next(_streams)}"
    sink = JetStreamSink(f"auth.{name}", **opts, stream={"name": name})
    await Pipeline(GenerateSource("point", count=n), [Serialize("msgpack")], sink).run_async()
    out = TestingSink()
    source = JetStreamSource(f"auth.{name}", durable="auth", **opts, count=n)
    await Pipeline(source, [Deserialize("msgpack")], out).run_async()
    return len(out.records)


async def refused(opts: dict[str, Any]) -> str:
    with pytest.raises(WirepipeError) as info:
        await Pipeline(GenerateSource("point", count=1), [Serialize("msgpack")],
                       NatsSink("auth.test", **opts)).run_async()
    return str(info.value)


async def test_user_password_and_nkey_users(tmp_path: Path) -> None:
    seed, public = new_nkey()
    other_seed, _ = new_nkey()
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(seed)
    users = [User(user="alice", password=PASSWORD), User(nkey=public)]
    with EmbeddedServer(users=users, store_dir=tmp_path / "js") as srv:
        ok = dict(url=srv.url, auth={"user": "alice", "password": PASSWORD})
        assert await round_trip(ok) == 50
        assert await round_trip(dict(url=srv.url, auth={"nkey_seed": seed})) == 50
        assert await round_trip(dict(url=srv.url, auth={"nkey_seed_file": str(seed_file)})) == 50

        wrong = await refused(dict(url=srv.url, auth={"user": "alice", "password": "nope-" + PASSWORD},
                                                connect_timeout=5))
        assert "refused the connection with user 'alice'" in wrong and "check auth" in wrong
        assert PASSWORD not in wrong
        wrong = await refused(dict(url=srv.url, auth={"nkey_seed": other_seed}, connect_timeout=5))
        assert "an nkey" in wrong and other_seed not in wrong
        missing = await refused(dict(url=srv.url, connect_timeout=5))
        assert "no credentials" in missing
        # Credentials in the url, wrong: the message says those were tried, never the password.
        in_url = srv.url.replace("nats://", f"nats://alice:nope-{PASSWORD}@")
        wrong = await refused(dict(url=in_url, connect_timeout=5))
        assert "refused the connection with the credentials in the url" in wrong, wrong
        assert "no credentials" not in wrong and PASSWORD not in wrong and "nats://***@127.0.0.1" in wrong


async def test_token(tmp_path: Path) -> None:
    with EmbeddedServer(token=TOKEN, store_dir=tmp_path / "js") as srv:
        assert await round_trip(dict(url=srv.url, auth={"token": TOKEN})) == 50
        wrong = await refused(dict(url=srv.url, auth={"token": TOKEN[::-1]}, connect_timeout=5))
        assert "a token" in wrong and TOKEN[::-1] not in wrong and TOKEN not in wrong


async def test_mutual_tls(tmp_path: Path, tls_files: dict[str, str]) -> None:
    tls = ServerTLS(cert=tls_files["server"], key=tls_files["server-key"], ca=tls_files["ca"], verify=True)
    with EmbeddedServer(tls=tls, store_dir=tmp_path / "js") as srv:
        assert srv.url.startswith("tls://")
        good = {"ca": tls_files["ca"], "cert": tls_files["client"], "key": tls_files["client-key"]}
        assert await round_trip(dict(url=srv.url, tls=good)) == 50
        # No client certificate: the server refuses the handshake; the error says what to check.
        msg = await refused(dict(url=srv.url, tls={"ca": tls_files["ca"]}, connect_timeout=3))
        assert "NATS at tls://127.0.0.1" in msg
        # A CA that did not sign the server certificate: verification fails, clearly.
        other_ca = tmp_path / "other-ca.pem"
        from tests.nats_fixtures import make_tls_files

        other_ca.write_text(Path(make_tls_files(tmp_path / "other")["ca"]).read_text())
        msg = await refused(dict(url=srv.url, tls={**good, "ca": str(other_ca)}, connect_timeout=3))
        assert "certificate" in msg.lower()


@pytest.mark.slow
def test_cli_wrong_password_is_a_clear_error_without_the_secret(tmp_path: Path) -> None:
    with EmbeddedServer(users=[User(user="alice", password=PASSWORD)], store_dir=tmp_path / "js") as srv:
        cfg = tmp_path / "p.yaml"
        cfg.write_text("""
name: auth
source: {type: generate, dataset: point, count: 10}
operators: [{serialize: {format: msgpack}}]
sink:
  type: nats
  url: "${NATS_URL}"
  subject: secret.test
  connect_timeout: 5s
  auth: {user: alice, password: "${NATS_PASSWORD}"}
""")
        bad = wirepipe("run", "-v", str(cfg), env={"NATS_URL": srv.url, "NATS_PASSWORD": "wrong-" + PASSWORD})
        assert bad.returncode == 1
        assert "refused the connection with user 'alice'" in bad.stderr
        assert PASSWORD not in bad.stderr and PASSWORD not in bad.stdout
        assert "Traceback" not in bad.stderr
        good = wirepipe("run", str(cfg), env={"NATS_URL": srv.url, "NATS_PASSWORD": PASSWORD})
        assert good.returncode == 0, good.stderr
        assert PASSWORD not in good.stderr


def test_auth_config_is_validated_and_secrets_are_not_echoed() -> None:
    base = {"name": "x", "source": {"type": "generate"}}
    with pytest.raises(ConfigError) as info:
        validate_config({**base, "sink": {"type": "nats", "url": "nats://h:4222", "subject": "s",
                                          "auth": {"user": "a", "password": PASSWORD, "token": TOKEN}}})
    assert "choose one auth method" in str(info.value)
    assert PASSWORD not in str(info.value) and TOKEN not in str(info.value)
    with pytest.raises(ConfigError) as info:
        validate_config({**base, "sink": {"type": "nats", "url": "embedded", "subject": "s",
                                          "auth": {"token": TOKEN}}})
    assert "embedded" in str(info.value) and TOKEN not in str(info.value)
    cfg = validate_config({**base, "sink": {"type": "nats", "url": "nats://h:4222", "subject": "s",
                                            "auth": {"user": "a", "password": PASSWORD}}})
    assert PASSWORD not in repr(cfg) and PASSWORD not in str(cfg.model_dump(mode="json"))


async def test_first_connect_has_its_own_timeout_and_a_clear_error() -> None:
    from wirepipe.connectors.nats.server import free_port

    url = f"nats://user:{PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens there
    msg = await refused(dict(url=url, connect_timeout=1))
    assert "cannot connect to NATS at nats://***@127.0.0.1:" in msg and "within 1s" in msg
    assert PASSWORD not in msg


# --- bench and plan against a server of one's own, with its credentials ----------------------------------------


def _bench(url: str, out: Path, *auth: str, transport: str = "nats", env: dict[str, str] | None = None) -> Any:
    return wirepipe("bench", "--dataset", "point", "--format", "msgpack", "--codec", "none", "--level", "fastest",
                    "--repetitions", "200", "--iterations", "1", "--transport", transport, "--url", url, *auth,
                    "--out", str(out), env=env, columns=100, timeout=300)


def _measured_over_nats(out: Path) -> dict[str, int]:
    """Records each wire stage of bench.parquet counted, the connection the run metadata names."""
    import json

    import pyarrow.parquet as pq

    table = pq.read_table(out / "bench.parquet")
    rows = [r for r in table.to_pylist() if r["stage"] in ("publish", "consume")]
    config = json.loads(table.schema.metadata[b"wirepipe.config"])
    return {**{r["stage"]: r["records"] for r in rows}, "nats": config["nats"]}


@pytest.mark.slow
def test_bench_crosses_a_server_with_a_token_or_a_user_and_password(tmp_path: Path) -> None:
    """``wirepipe bench --url`` with ``--set``: every connection it makes (the probes, the publisher, the consumer,
    a JetStream stream's deletion) takes the credentials; the secret is in no output and no file; none is an
    authorization error, exit 1, that says what to check."""
    runs = {}
    with EmbeddedServer(token=TOKEN, store_dir=tmp_path / "js-token") as srv:
        runs["token"] = _bench(srv.url, tmp_path / "token", "--set", f"auth.token={TOKEN}")
        assert runs["token"].returncode == 0, runs["token"].stderr
        assert _measured_over_nats(tmp_path / "token") == {  # how it connected, never a secret
            "publish": 200, "consume": 200, "nats": {"url": srv.url, "auth": "***"}}
        refused = _bench(srv.url, tmp_path / "none")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "refused the connection with no credentials" in refused.stderr, refused.stderr
    with EmbeddedServer(users=[User(user="alice", password=PASSWORD)], store_dir=tmp_path / "js-user") as srv:
        runs["user"] = _bench(srv.url, tmp_path / "user", "--set", "auth.user=alice",
                              "--set", "auth.password=${NATS_PASSWORD}", transport="jetstream",
                              env={"NATS_PASSWORD": PASSWORD})
        assert runs["user"].returncode == 0, runs["user"].stderr
        assert _measured_over_nats(tmp_path / "user") == {
            "publish": 200, "consume": 200, "nats": {"url": srv.url, "auth": "***"}}
    for out, run in runs.items():
        assert TOKEN not in run.stdout + run.stderr and PASSWORD not in run.stdout + run.stderr
        assert not any(TOKEN.encode() in f.read_bytes() or PASSWORD.encode() in f.read_bytes()
                       for f in (tmp_path / out).iterdir())


@pytest.mark.slow
def test_plan_calibrates_on_a_server_with_a_user_and_password_and_leaves_nothing_there(tmp_path: Path) -> None:
    """``wirepipe plan --url --set auth...``: the stream filled, the pool's workers and the clean-up all connect with
    the credentials; the plan says where it calibrated, and the server keeps no stream of it."""
    import asyncio

    import nats

    with EmbeddedServer(users=[User(user="alice", password=PASSWORD)], store_dir=tmp_path / "js") as srv:
        done = wirepipe("plan", "--rate", "1k", "--dataset", "point", "--chain", "msgpack", "--replicas", "1",
                        "--url", srv.url, "--set", "auth.user=alice", "--set", "auth.password=${NATS_PASSWORD}",
                        env={"NATS_PASSWORD": PASSWORD}, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "calibrated: the consume pipeline ran " in done.stdout and f" on {srv.url}: a worker spent" \
            in done.stdout, done.stdout
        assert PASSWORD not in done.stdout + done.stderr

        async def streams() -> list[str]:
            nc = await nats.connect(srv.url, user="alice", password=PASSWORD)
            try:
                return [s.config.name for s in await nc.jetstream().streams_info()]
            finally:
                await nc.close()

        assert asyncio.run(streams()) == []


def test_credentials_without_a_server_are_a_usage_error() -> None:
    """bench and plan start a server of their own unless --url: --creds and --set need --url (exit 2, no
    traceback), and a bad --set names the field."""
    from tests.cli import invoke

    for command in (["bench", "--quick"], ["plan", "--rate", "1k"]):
        done = invoke(*command, "--set", "auth.token=x")
        assert done.returncode == 2, done.output
        assert f"--set need --url: without it, {command[0]} starts a NATS server of its own" in done.stderr
        assert "Traceback" not in done.output
    bad = invoke("bench", "--quick", "--url", "nats://127.0.0.1:1", "--creds", "u.creds", "--set", "auth.user=alice")
    assert bad.returncode == 2 and "auth: choose one auth method, got user/password, creds" in bad.stderr, bad.stderr


# The commands that work on the buckets a deployment's pipelines use, each with what it is given besides the server
ON_A_SERVER = {
    "dict train": ["dict", "train", "--from", "RECORDS", "--to", "nats://DICTS/tx"],
    "dict list": ["dict", "list", "nats://DICTS"],
    "dict show": ["dict", "show", "nats://DICTS/tx"],
    "schema push": ["schema", "push", "point", "--name", "points"],
    "schema list": ["schema", "list"],
    "schema show": ["schema", "show", "points"],
    "schema compatibility": ["schema", "compatibility", "points"],
}


def _on_a_server(command: str, records: Path, *more: str) -> list[str]:
    return [str(records) if a == "RECORDS" else a for a in ON_A_SERVER[command]] + list(more)


def test_a_command_on_the_pipelines_buckets_needs_their_server(tmp_path: Path) -> None:
    """``dict`` and ``schema`` work on a bucket that outlives them: without --url (or $NATS_URL), with ``embedded``
    (a server of their own, gone with what they wrote when they end) or with a url that is not NATS, each is a
    usage error naming what to give, exit 2, before any server is started or asked."""
    from tests.cli import invoke

    records = tmp_path / "records.jsonl"
    records.write_text("".join(f'{{"id": {i}, "who": "u{i % 7}"}}\n' for i in range(200)))
    for command in ON_A_SERVER:
        for url, says in ((None, f"give --url (or set NATS_URL): {command} "),
                          ("embedded", "--url embedded starts a server of the command's own, gone when it ends"),
                          ("http://127.0.0.1:4222", "a NATS url's scheme is nats, tls, ws, wss")):
            done = invoke(*_on_a_server(command, records, *(["--url", url] if url else [])))
            assert done.returncode == 2 and says in done.stderr, (command, url, done.output)
            assert "Traceback" not in done.output and not isinstance(done.exception, Exception), (command, url)
    # `dict train --dry-run` publishes nothing and needs no server: the exit-codes table's ok cell runs it so


@pytest.mark.slow
def test_dict_and_schema_commands_reach_a_server_with_a_user_and_password(tmp_path: Path) -> None:
    """``--set auth.user=... --set 'auth.password=${NATS_PASSWORD}'`` (or ``--creds``) reach the buckets on a server
    that asks for them, as ``ps`` and ``bench --url`` do; without them the server's refusal is said, exit 1."""
    from tests.cli import invoke

    records = tmp_path / "records.jsonl"
    records.write_text("".join(f'{{"id": {i}, "who": "u{i % 7}", "amount": {i * 1.5}}}\n' for i in range(2000)))
    env = {"NATS_PASSWORD": PASSWORD}
    with EmbeddedServer(users=[User(user="alice", password=PASSWORD)], store_dir=tmp_path / "js") as srv:
        auth = ["--url", srv.url, "--set", "auth.user=alice", "--set", "auth.password=${NATS_PASSWORD}"]
        done = {command: invoke(*_on_a_server(command, records, *auth), env=env) for command in ON_A_SERVER}
        assert {c: d.returncode for c, d in done.items()} == dict.fromkeys(ON_A_SERVER, 0), \
            {c: d.output for c, d in done.items() if d.returncode}
        [listed] = done["dict list"].stdout.splitlines()
        assert listed.startswith("tx\tid ") and done["dict show"].stdout.startswith("nats://DICTS/tx: id ")
        assert done["schema push"].stdout.startswith("points@1: registered in nats://WIREPIPE_SCHEMAS")
        assert done["schema list"].stdout.splitlines()[-1].split()[:2] == ["points", "1"]
        assert done["schema show"].stdout.startswith("# points version 1 in nats://WIREPIPE_SCHEMAS: fingerprint ")
        refused = invoke(*_on_a_server("dict list", records, "--url", srv.url, "--set", "connect_timeout=5"))
        assert refused.returncode == 1 and "Authorization Violation" in refused.stderr, refused.output
        assert all(PASSWORD not in d.output for d in [*done.values(), refused])

"""Credentials never reach an output.

Servers with user/password, nkey and token auth; commands are given secrets in every field
(``auth.password``, ``auth.token``, ``auth.nkey_seed``, a URL's user info or token) and every URL
shape (with and without a scheme, a list, IPv6; passwords holding ``,`` ``'`` ``:`` ``@``), good
values and bad ones (a number, a list, a mapping, a bare ``auth: "..."``). Every file they write
(metrics and bench Parquet, their metadata, outputs, reports, logs, the temporary folder of a
worker pool while it runs and after its supervisor was SIGKILLed) and everything they print
(``--print-config``, validation errors, connection errors, status lines, summaries) is searched
for every secret.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.test_nats_auth import new_nkey
from wirepipe.connectors.nats.server import EmbeddedServer, User, free_port

SECRET = "Sup3r-s3cret-pw"


def _grep_tree(root: Path) -> list[str]:
    """Files under ``root`` whose bytes contain the secret (Parquet metadata included: it is in the bytes)."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and SECRET.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


@pytest.mark.timeout(240)
def test_no_output_contains_a_url_password(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with EmbeddedServer(users=[User(user="wp", password=SECRET)], store_dir=tmp_path / "js") as server:
        url = f"nats://wp:{SECRET}@127.0.0.1:{server.port}"
        bad_url = f"nats://wp:{SECRET}@127.0.0.1:1"  # nothing listens: a connection error
        printed: list[str] = []

        def run(*args: str, ok: bool = True) -> None:
            done = wirepipe(*args, timeout=180, cwd=tmp_path)
            printed.extend([done.stdout, done.stderr])
            if ok:
                assert done.returncode == 0, done.stderr[-3000:]
            else:
                assert done.returncode != 0, done.stdout[-2000:]

        publish = {
            "name": "secret-pub",
            "source": {"type": "generate", "dataset": "point", "count": 2000},
            "operators": [{"serialize": {"format": "msgpack"}}],
            "sink": {"type": "jetstream", "url": url, "subject": "sec", "stream": {"name": "SEC"}},
            "metrics": {"path": str(out / "pub-metrics.parquet")},
            "monitor": {"status_interval": "0.2s"},
        }
        consume = {
            "name": "secret-consume",
            "source": {"type": "jetstream", "url": [url, url], "stream": "SEC", "durable": "sec", "count": 2000},
            "operators": [{"deserialize": {"format": "msgpack"}}],
            "sink": {"type": "jsonl", "path": str(out / "records.jsonl")},
            "metrics": {"path": str(out / "consume-metrics.parquet")},
            "monitor": {"status_interval": "0.2s"},
        }
        unreachable = {**publish, "name": "secret-unreachable", "metrics": None,
                       "sink": {**publish["sink"], "url": bad_url, "connect_timeout": "2s"}}
        invalid = {**publish, "name": "secret-invalid", "sink": {**publish["sink"], "window": url}}
        for name, cfg in (("pub", publish), ("consume", consume), ("unreachable", unreachable),
                          ("invalid", invalid)):
            (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        run("run", str(tmp_path / "pub.yaml"))
        run("run", str(tmp_path / "consume.yaml"))
        run("run", str(tmp_path / "unreachable.yaml"), ok=False)
        run("run", str(tmp_path / "invalid.yaml"), ok=False)
        run("validate", str(tmp_path / "invalid.yaml"), ok=False)
        run("capture", "--out", str(out / "capture"), "--subject", "sec.>", "--url", url, "--print-config")
        run("bench", "--dataset", "point", "--format", "msgpack", "--codec", "zstd", "--level", "fastest",
            "-k", "1", "-n", "200", "--url", url, "--out", str(out / "bench"))
        run("report", str(out / "pub-metrics.parquet"), str(out / "bench"), "--markdown", str(out / "report.md"),
            "--html", str(out / "report.html"))
    assert (out / "records.jsonl").read_text().count("\n") == 2000  # the runs did work with the password
    assert "***@127.0.0.1" in "".join(printed)  # the URL is still shown, without its credentials
    leaks = [text[max(0, text.find(SECRET) - 200):text.find(SECRET) + 50] for text in printed if SECRET in text]
    assert not leaks, leaks
    assert not _grep_tree(tmp_path / "out"), _grep_tree(tmp_path / "out")
    assert list((out / "bench").rglob("*.parquet")) and list(out.rglob("pub-metrics.parquet/*.parquet"))


PASSWORD = "Alpha7Kq,Bravo9Zx'Charlie3Mv:Delta5Wp@Echo1Ty"  # what a URL parser may split on, in one password
TOKEN = "Tango4Lk,Uniform8Rs'Victor2Np@Xray3Qc"  # a token in a URL has no ':' (that would make it user:password)
NUMBER = 98765432101  # a secret YAML reads as a number: refused, never echoed


def _pieces(secret: str) -> list[str]:
    """What must not appear: every run of the secret between the characters a parser may split on."""
    return [p for p in re.split(r"[,':@]", secret) if p]


def _tree_hits(root: Path, secrets: list[str]) -> list[str]:
    return [f"{path}: {s}" for path in root.rglob("*") if path.is_file()
            for s in secrets if s.encode() in path.read_bytes()]


def _cmdlines(pids: list[int]) -> str:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return "\n".join(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.timeout(420)
def test_secrets_in_every_field_and_url_shape_reach_no_output(tmp_path: Path) -> None:
    seed, public = new_nkey()
    secrets = [*_pieces(PASSWORD), *_pieces(TOKEN), seed, str(NUMBER)]
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    printed: list[str] = []
    env = {"TMPDIR": str(tmp), "NATS_PASSWORD": PASSWORD, "NATS_TOKEN": TOKEN, "NKEY_SEED": seed}

    def run(name: str, args: list[str], cfg: dict | None = None, ok: bool = True, code: int | None = None,
            in_process: bool = False) -> str:
        """``wirepipe ARGS [NAME.yaml]``: a process of its own, or (``in_process``, for a command refused or
        answered before it connects anywhere: the same output, without an interpreter to start) this one."""
        if cfg is not None:
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
            args = [*args, str(path)]
        done = invoke(*args, env=env) if in_process else wirepipe(*args, timeout=120, env=env, cwd=tmp_path)
        printed.extend([done.stdout, done.stderr])
        if ok:
            assert done.returncode == 0, (name, done.stderr[-3000:])
        else:
            assert done.returncode == (code or done.returncode) and done.returncode != 0, (name, done.stdout[-2000:])
        assert "Traceback" not in done.stderr, (name, done.stderr[-3000:])
        return done.stderr

    def publish(name: str, sink: dict) -> dict:
        return {"name": name, "source": {"type": "generate", "dataset": "point", "count": 300},
                "operators": [{"serialize": {"format": "msgpack"}}],
                "sink": {"type": "jetstream", "subject": f"sec.{name}", "connect_timeout": "3s", **sink},
                "metrics": {"path": str(out / f"{name}-metrics.parquet")}, "monitor": {"status_interval": "0.2s"}}

    users = [User(user="svc", password=PASSWORD), User(nkey=public)]
    with EmbeddedServer(users=users, store_dir=tmp_path / "js") as server, \
            EmbeddedServer(token=TOKEN, store_dir=tmp_path / "js-token") as token_server:
        host, dead = f"127.0.0.1:{server.port}", f"127.0.0.1:{free_port()}"
        shapes = {
            "scheme": f"nats://svc:{PASSWORD}@{host}",
            "schemeless": f"svc:{PASSWORD}@{host}",
            "list": f"nats://svc:{PASSWORD}@{dead},nats://svc:{PASSWORD}@{host}",
            "yaml-list": [f"svc:{PASSWORD}@{dead}", f"nats://svc:{PASSWORD}@{host}"],
        }
        stream = {"name": "SEC", "subjects": ["sec.>"]}
        run("field-password", ["run", "-v"], publish("field-password", {
            "url": server.url, "auth": {"user": "svc", "password": "${NATS_PASSWORD}"}, "stream": stream}))
        run("field-nkey", ["run"], publish("field-nkey", {"url": server.url, "auth": {"nkey_seed": "${NKEY_SEED}"}}))
        for shape, url in shapes.items():
            run(f"url-{shape}", ["run", "-v"], publish(f"url-{shape}", {"url": url}))
        run("url-ipv6", ["run"], publish("url-ipv6", {"url": f"nats://svc:{PASSWORD}@[::1]:{server.port}"}), ok=False)
        run("url-wrong-user", ["run"], publish("url-wrong-user", {"url": f"nobody:{PASSWORD}@{host}"}), ok=False)
        tstream = {"name": "TOK", "subjects": ["sec.>"]}
        run("field-token", ["run"], publish("field-token", {"url": token_server.url, "auth": {"token": "${NATS_TOKEN}"},
                                                            "stream": tstream}))
        run("url-token", ["run", "-v"], publish("url-token", {"url": f"nats://{TOKEN}@127.0.0.1:{token_server.port}"}))

        for i, auth in enumerate([{"user": "svc", "password": NUMBER}, {"token": NUMBER}, {"token": [NUMBER]},
                                  {"user": "svc", "password": {"v": NUMBER}}, {"nkey_seed": NUMBER}, str(NUMBER),
                                  f"svc:{PASSWORD}"]):
            bad = publish(f"bad-{i}", {"url": server.url, "auth": auth})
            for command in ("validate", "run"):  # the first in a process of its own, the others in this one
                stderr = run(f"bad-{i}", [command], bad, ok=False, code=2, in_process=i > 0)
                assert "sink.auth" in stderr and "not shown: it may be a secret" in stderr, stderr

        capture = ["capture", "--out", str(out / "capture"), "--subject", "sec.>", "--print-config"]
        run("print-url", [*capture, "--url", shapes["schemeless"]])
        run("print-set", [*capture, "--url", server.url, "--set", "source.auth.user=svc",
                          "--set", f"source.auth.password={PASSWORD}"], in_process=True)
        run("print-token", [*capture, "--url", server.url, "--set", f"source.auth={TOKEN}"], in_process=True)

        # A pool: its workers get their config (NATS_URL expanded, passwords and all) while the supervisor
        # lives and after it was SIGKILLed; nothing of it is on disk at any time.
        pool_cfg = tmp_path / "pool.yaml"
        pool_cfg.write_text(yaml.safe_dump({
            "name": "secret-pool",
            "source": {"type": "jetstream", "url": "${NATS_URL}", "stream": "SEC", "batch_size": 100},
            "operators": [{"deserialize": {"format": "msgpack"}}],
            "sink": {"type": "parquet", "path": str(out / "pool" / "part-{part}.parquet")},
            "metrics": {"path": str(out / "pool-metrics.parquet")},
            "flush_interval": "200ms", "monitor": {"status_interval": "0.3s"}}), encoding="utf-8")
        log = tmp_path / "pool.log"
        with open(log, "w") as err:
            proc = start_wirepipe("run", pool_cfg, "--workers", "2", stderr=err, cwd=tmp_path,
                                  env={**env, "NATS_URL": shapes["list"]})
        try:
            deadline = time.monotonic() + 90
            pids: list[int] = []
            while time.monotonic() < deadline and (len(pids) < 2 or not list(out.glob("pool/part-*.parquet"))):
                pids = [int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", log.read_text())]
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.1)
            assert len(pids) == 2, log.read_text()[-3000:]
            during = _tree_hits(tmp, secrets) + [s for s in secrets if s in _cmdlines([proc.pid, *pids])]
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            deadline = time.monotonic() + 60
            while any(_alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not any(_alive(p) for p in pids), "the workers of a SIGKILLed supervisor drain and exit"
            after = _tree_hits(tmp, secrets)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        printed.append(log.read_text())

    assert not during, during
    assert not after, after
    text = "".join(printed)
    assert "***@127.0.0.1" in text and "not shown: it may be a secret" in text  # the runs did show their URLs
    leaks = [f"{s}: ...{t[max(0, t.find(s) - 200):t.find(s) + 50]}" for t in printed for s in secrets if s in t]
    assert not leaks, leaks
    assert not _tree_hits(out, secrets), _tree_hits(out, secrets)
    assert len(list(out.glob("*-metrics.parquet/*.parquet"))) >= 8  # every good run wrote its metrics
    assert list(out.glob("pool/part-*.parquet"))  # the pool consumed with the URL list's password

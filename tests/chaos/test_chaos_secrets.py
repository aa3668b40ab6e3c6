"""Issue 11, defect 10: credentials in NATS URLs never reach an output.

A server with user/password auth; every command is given ``nats://user:PASSWORD@host`` and
every file it writes (metrics and bench Parquet, their metadata, reports, logs) and everything
it prints (``--print-config``, validation errors, connection errors, status lines, summaries)
is searched for the password.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.nats_fixtures import run_wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer, User

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
            done = run_wirepipe(*args, timeout=180, cwd=tmp_path)
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

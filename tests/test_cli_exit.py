"""The command line a script can trust: exit codes, --version, help words, live status, where output went."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.nats_fixtures import publish_numbered
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.exit_codes import ExitCode, RejectLimit

ROOT = Path(__file__).parent.parent


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_version_and_help_placeholders_read_as_words() -> None:
    out = wirepipe("--version", columns=100)
    assert out.returncode == 0 and re.fullmatch(r"wirepipe \d+\.\d+\.\d+\S*\n", out.stdout)
    for command in ("run", "bench", "capture", "replay", "report", "validate", "server"):
        text = invoke(command, "--help", columns=100).stdout
        assert "Usage:" in text, command
        assert not re.search(r"<(bool|int|str|float|path|list\[[a-z]+\])>", text), (command, text)
    run_help = invoke("run", "--help", columns=100).stdout
    assert "PATH=VALUE" in run_help and "N|P%" in run_help and "{PIPELINE}" in run_help


@pytest.mark.parametrize(("text", "rejected", "records", "fails"), [
    (None, 0, 100, False), (None, 3, 100, False), (None, 100, 100, True), ("100%", 100, 100, True),
    ("2", 3, 100, True), ("3", 3, 100, False), ("2.5%", 3, 100, True), ("5%", 3, 100, False), ("0", 1, 10, True),
])
def test_reject_limit(text: str | None, rejected: int, records: int, fails: bool) -> None:
    assert (RejectLimit.parse(text).verdict(rejected, records) is not None) is fails


@pytest.mark.parametrize("bad", ["-1", "x", "120%", "%"])
def test_bad_max_rejected_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    config = write(tmp_path / "p.yaml", "name: p\nsource: {type: generate, dataset: point, count: 10}\nsink: {type: \"null\"}\n")
    out = invoke("run", str(config), "--max-rejected", bad, columns=100)
    assert out.returncode == ExitCode.CONFIG and "--max-rejected" in out.stderr and out.exception is not None


def _rejecting(tmp_path: Path) -> Path:
    return write(tmp_path / "odd.yaml", f"""name: odd
source: {{type: generate, dataset: point, count: 400, batch_size: 100}}
operators:
  - map: {{function: "tests.records:fail_odd_x"}}
sink: {{type: "null"}}
dead_letter: {{type: jsonl, path: "{tmp_path / 'dead.jsonl'}"}}
""")


def test_rejections_are_reported_and_limited(tmp_path: Path) -> None:
    config = _rejecting(tmp_path)
    out = wirepipe("run", str(config), cwd=ROOT, columns=100)
    assert out.returncode == ExitCode.OK, out.stderr
    rejected = int(re.search(r"([\d,]+) rejected", out.stderr).group(1).replace(",", ""))
    assert 0 < rejected < 400
    out = wirepipe("run", str(config), "--max-rejected", "10", cwd=ROOT, columns=100)
    assert out.returncode == ExitCode.REJECTED and "more than --max-rejected 10" in out.stderr
    out = wirepipe("run", str(config), "--max-rejected", "90%", cwd=ROOT, columns=100)
    assert out.returncode == ExitCode.OK, out.stderr


def test_every_record_rejected_is_never_success(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a null sink: the rejects go to results/all-bad.dead.jsonl, here
    config = write(tmp_path / "all.yaml", """name: all-bad
source: {type: generate, dataset: point, count: 300}
operators:
  - serialize: {format: msgpack}
  - deserialize: {format: json}
sink: {type: "null"}
""")
    out = invoke("run", str(config), "--max-rejected", "100%", "--no-status", columns=100)
    assert out.returncode == ExitCode.REJECTED and "every record was rejected" in out.stderr
    assert len((tmp_path / "results" / "all-bad.dead.jsonl").read_text().splitlines()) == 300


@pytest.mark.parametrize("command", ["run", "replay"])
def test_missing_capture_is_a_usage_error_and_leaves_nothing(command: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "replay.yaml", """name: r
source: {type: capture, path: no-such-capture/}
sink: {type: jsonl, path: out/records.jsonl}
metrics: {path: out/metrics.parquet}
""")
    args = ["run", str(config)] if command == "run" else ["replay", "no-such-capture/", "-p", str(config)]
    monkeypatch.chdir(tmp_path)
    out = invoke(*args, columns=100)
    assert out.returncode == ExitCode.CONFIG, out.stderr
    # run names the config file and its field; replay was given the capture on its command line
    where = f"{config}: source.path: " if command == "run" else ""
    assert out.stderr.strip() == f"error: {where}no-such-capture: no such file or folder"
    assert not (tmp_path / "out").exists()  # no empty sink file, no 0-row metrics


@pytest.mark.parametrize("command", ["run", "replay", "bench", "report"])
def test_a_missing_input_file_exits_2_in_every_command(command: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One exit code for one mistake: the input file is not there (exit_codes.exit_code)."""
    config = write(tmp_path / "read.yaml", "name: r\nsource: {type: jsonl, path: missing.jsonl}\n"
                                           "sink: {type: jsonl, path: out/records.jsonl}\n")
    args = {"run": ["run", str(config)], "replay": ["replay", "missing.parquet", "-p", str(config)],
            "bench": ["bench", "--input", "missing.jsonl", "--transport", "none", "--out", "out"],
            "report": ["report", "missing.parquet"]}[command]
    monkeypatch.chdir(tmp_path)
    out = invoke(*args, columns=100)
    assert out.returncode == ExitCode.CONFIG, out.stderr
    assert "missing." in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow
def test_run_status_shows_file_sink_mb_per_s_and_says_where_output_went(tmp_path: Path) -> None:
    config = write(tmp_path / "slow.yaml", """name: to-file
source: {type: generate, dataset: block, count: 2400, batch_size: 100, rate: 800}
sink: {type: jsonl, path: blocks.jsonl}
metrics: {path: metrics.parquet}
""")
    out = wirepipe("run", str(config), "--status", cwd=tmp_path, columns=100)
    assert out.returncode == 0, out.stderr
    status = [line for line in out.stderr.splitlines() if "rec/s" in line]
    assert status, out.stderr
    rates = [float(m.group(1).replace(",", "")) for line in status if (m := re.search(r"([\d,.]+) MB/s", line))]
    assert rates and max(rates) > 0  # a file sink's MB/s is measured on disk, not 0.00
    size = (tmp_path / "blocks.jsonl").stat().st_size
    assert re.search(rf"output: jsonl blocks\.jsonl \({size / 1e6:,.2f} MB\)", out.stderr), out.stderr
    assert "metrics: metrics.parquet" in out.stderr
    assert pq.read_table(tmp_path / "metrics.parquet").num_rows > 0


def test_status_line_shows_every_counter_it_is_given() -> None:
    from wirepipe.pipelines.monitor import status_line

    now = {"records_out": 1000, "bytes_out": 2_000_000, "lag": 5, "rejected": 2, "sink_errors": 0, "dropped": 0,
           "acked": 0, "reconnects": 0, "disconnects": 0, "running": True, "connected": True,
           "lost": 7}  # a counter added later by a connector shows up by its name
    line = status_line("p", now, {"records_out": 0, "bytes_out": 0}, 1.0)
    assert line == "p: 1,000 rec/s, 2.00 MB/s, 1,000 out, lag 5, 2 rejected, 7 lost"


def test_capture_from_a_position_stops_at_the_end_of_the_stream(tmp_path: Path) -> None:
    with EmbeddedServer(store_dir=tmp_path / "js") as server:
        asyncio.run(publish_numbered(server.url, 500))
        out = wirepipe("capture", "--stream", "NUM", "--from-seq", "1", "--out", str(tmp_path / "cap"),
                       "--url", server.url, timeout=120, columns=100)
    assert out.returncode == 0, out.stderr
    # the log says every rotation that happens: by size, by age, and at each commit of the run loop
    assert re.search(r"a file is complete at about [\d,]+ bytes, 60s after its first record, or every [\d,]+ records",
                     out.stderr), out.stderr
    files = sorted((tmp_path / "cap").glob("*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) == 500


@pytest.mark.slow
def test_run_on_a_terminal_shows_a_live_status_line_by_default(tmp_path: Path) -> None:
    import pty

    config = write(tmp_path / "live.yaml", """name: live
source: {type: generate, dataset: point, count: 3000, batch_size: 100, rate: 1000}
sink: {type: jsonl, path: points.jsonl}
""")
    master, slave = pty.openpty()  # stderr is a terminal, as in a shell
    proc = start_wirepipe("run", config, cwd=tmp_path, columns=100, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0
    text = seen.decode(errors="replace")
    live = re.findall(r"\r(live: [^\r\n]*?)\x1b\[K", text)  # one line, rewritten in place
    assert live and all("rec/s" in s and "MB/s" in s for s in live), text
    assert "output: jsonl points.jsonl" in text


@pytest.mark.slow
def test_run_and_bench_say_at_once_what_they_wait_for_and_wait_alike(tmp_path: Path) -> None:
    """A refused connection: `run` logs what it waits for the moment the server refuses, and its status line
    says so while it waits; `bench --url` waits through the same connection, with the same words and the
    same connect_timeout (the connector's default, 10 s, unless set), and both exit 1 with the same error."""
    from wirepipe.cli.connection import own_server
    from wirepipe.connectors.nats.connection import NatsConnectionConfig
    from wirepipe.connectors.nats.server import free_port

    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = write(tmp_path / "pub.yaml", f"name: pub\nsource: {{type: generate, dataset: point, count: 10}}\n"
                f"operators: [{{serialize: {{format: msgpack}}}}]\n"
                f"sink: {{type: nats, url: '{url}', subject: s, connect_timeout: 3s}}\n")
    # both wait at once (3 s each, set alike), not one after the other and bench for its default 10 s
    bench = start_wirepipe("bench", "--quick", "--url", url, "--set", "connect_timeout=3s",
                           "--out", str(tmp_path / "bench"), columns=100)
    ran = wirepipe("run", str(cfg), "--status", columns=100)
    waiting = f"waiting for NATS at {url} (connection refused), up to 3s (connect_timeout)"
    lines = ran.stderr.splitlines()
    assert ran.returncode == ExitCode.RUNTIME, ran.stderr
    assert waiting in lines[0], ran.stderr  # the first thing it says
    assert re.search(rf"^pub: 0 rec/s, .*waiting for NATS at {url} \(connection refused\)$", ran.stderr, re.M)
    error = f"error: cannot connect to NATS at {url} within 3s (connect_timeout): connection refused"
    assert error in ran.stderr
    _, bench_stderr = bench.communicate(timeout=120)
    assert bench.returncode == ExitCode.RUNTIME, bench_stderr
    assert bench_stderr.splitlines()[0].endswith(waiting), bench_stderr
    assert error in bench_stderr
    # without --set, bench's connection waits the connector's default, as a pipeline's does
    default = own_server(url, None, None, "bench")
    assert default is not None and default.connect_timeout == NatsConnectionConfig(url=url).connect_timeout == 10


# --- what a summary says is what happened ----------------------------------------------------------------


@pytest.mark.slow
def test_a_packing_publisher_counts_records_and_names_its_messages_apart(tmp_path: Path) -> None:
    """10 records a message: the summary counts records (and the rate of records), the messages beside them; the
    metrics' `records` are records on every row, `messages` the values each stage gave, the file says its
    version; `report` reads it and a file of version 1 (no `messages`: its `records` counted the messages)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from wirepipe.metrics.columns import METRICS_VERSION_KEY
    from wirepipe.study.report import load_results

    config = write(tmp_path / "pack.yaml", """name: packer
source: {type: generate, dataset: point, count: 1000, batch_size: 250}
operators:
  - pack: {records: 10}
  - serialize: {format: msgpack}
sink: {type: jsonl, path: out.jsonl}
metrics: {path: m}
""")
    out = wirepipe("run", config, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.match(r"packer: 1000 records out of 1000 in [\d.]+s \([\d,]+ records/s; 100 messages, [\d,]+ messages/s\), "
                    r"0 rejected\n", out.stderr), out.stderr
    files = sorted((tmp_path / "m").glob("*.parquet"))
    table = pq.read_table(files)
    by_stage = {s: (int(pc.sum(t.column("records")).as_py()), int(pc.sum(t.column("messages")).as_py()))
                for s in ("generate", "pack", "serialize", "write")
                for t in [table.filter(pc.equal(table.column("stage"), s))]}
    assert by_stage == {"generate": (1000, 1000), "pack": (1000, 100), "serialize": (1000, 100),
                        "write": (1000, 100)}
    assert pq.read_schema(files[0]).metadata[METRICS_VERSION_KEY.encode()] == b"4"
    # A file as version 1 wrote it: no `messages`, no version, `records` counting the values (messages).
    old = tmp_path / "v1"
    old.mkdir()
    v1 = table.set_column(table.column_names.index("records"), "records", table.column("messages")) \
        .set_column(table.column_names.index("run_id"), "run_id", pa.repeat("old-run", table.num_rows)) \
        .drop_columns(["messages"])
    meta = {k: v for k, v in (pq.read_schema(files[0]).metadata or {}).items()
            if k != METRICS_VERSION_KEY.encode()}
    pq.write_table(v1.replace_schema_metadata({**meta, b"wirepipe.run_id": b"old-run"}), old / "part-0.parquet")
    both = load_results([tmp_path / "m", old])
    stages = both.stages
    for run, records in (("old-run", 100), (table.column("run_id")[0].as_py(), 1000)):
        rows = stages.filter(pc.and_(pc.equal(stages.column("run_id"), run), pc.equal(stages.column("stage"),
                                                                                      "write")))
        assert (pc.sum(rows.column("records")).as_py(), pc.sum(rows.column("messages")).as_py()) == (records, 100)
    assert wirepipe("report", tmp_path / "m", old, "--quiet").returncode == 0


def test_no_summary_leaves_a_template_unfilled(tmp_path: Path) -> None:
    """A subject template, a part-file template nothing was written to, a pipeline without operators: what the
    summaries and `validate` say reads as what happened."""
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.connectors.parquet import ParquetSink
    from wirepipe.pipelines.monitor import describe_sink

    url = "nats://127.0.0.1:4222"
    assert describe_sink(JetStreamSink("{subject}", url=url)) == "jetstream on the subject each record was read from"
    assert describe_sink(JetStreamSink("out.{region}", url=url)) == \
        "jetstream a subject per record from region (template out.{region})"
    assert describe_sink(JetStreamSink("points", url=url)) == "jetstream subject points"
    idle = ParquetSink(str(tmp_path / "archive" / "part-w1-{part}.parquet"))
    assert describe_sink(idle) == f"parquet {tmp_path}/archive/part-w1-*.parquet: nothing written"
    out = invoke("validate", ROOT / "configs" / "capture-points.yaml", env={"NATS_URL": url})
    assert out.returncode == 0, out.output
    assert "Pipeline('points-capture': jetstream | capture)" in out.stdout, out.stdout


@pytest.mark.slow
def test_the_default_dead_letters_stay_out_of_a_parquet_folder_and_a_replay_keeps_its_own(tmp_path: Path) -> None:
    """Rejects of a pipeline writing Parquet parts go beside the folder (pyarrow.dataset reads the folder whole);
    replaying a capture through the same pipeline appends to a file of its own, and its summary names its output,
    dead letters and metrics each on its own line."""
    import pyarrow.dataset as ds

    config = write(tmp_path / "odd.yaml", """name: odd
source: {type: generate, dataset: point, count: 400, batch_size: 100}
operators:
  - map: {function: "tests.records:fail_odd_x"}
sink: {type: parquet, path: "archive/part-{part}.parquet"}
metrics: {path: m}
""")
    out = wirepipe("run", config, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rejected = int(re.search(r"(\d+) rejected", out.stderr).group(1))  # type: ignore[union-attr]
    assert ds.dataset(tmp_path / "archive").to_table().num_rows == 400 - rejected
    live = tmp_path / "archive.part.dead.jsonl"
    assert len(live.read_text().splitlines()) == rejected
    capture = write(tmp_path / "cap.yaml", """name: cap
source: {type: generate, dataset: point, count: 400, batch_size: 100}
operators: [{serialize: {format: msgpack}}]
sink: {type: capture, dir: cap}
""")
    assert wirepipe("run", capture, cwd=tmp_path).returncode == 0
    decode = write(tmp_path / "decode.yaml", config.read_text().replace(
        "operators:\n", "operators:\n  - deserialize: {format: msgpack}\n"))
    replayed = wirepipe("replay", "cap", "-p", decode, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert len(live.read_text().splitlines()) == rejected  # the live run's file is untouched
    own = tmp_path / "archive.part.replay.dead.jsonl"
    assert len(own.read_text().splitlines()) == rejected
    lines = replayed.stderr.splitlines()
    summary = lines[lines.index(next(x for x in lines if x.startswith("odd: replayed 400 records"))):]
    assert "; output" not in summary[0] and summary[1].startswith(f"  rejected: {rejected} × map"), summary
    assert summary[2].startswith("  output: parquet archive/part-"), summary
    assert summary[3].startswith(f"  dead letters: {own.relative_to(tmp_path)} ({rejected} appended"), summary
    assert summary[4:] == ["  metrics: m"], summary  # the metrics are not called the output


# --- the one verdict -------------------------------------------------------------------------------------------


def test_the_verdict_names_every_reason_and_the_first_of_1_5_6_3_130_wins() -> None:
    from wirepipe.core.exit_codes import LossLimit, Outcome, verdict

    everything = Outcome(records=100, rejected=100, lost=2, outstanding=7, interrupted=True, failures=["input cut"])
    assert [code for code, _ in verdict(everything)] == [1, 5, 6, 3, 130]
    assert [code for code, _ in verdict(Outcome(records=100, rejected=3, outstanding=7, interrupted=True))] == [6, 130]
    assert verdict(Outcome(records=100, lost=2), lost=LossLimit.parse("2")) == []
    assert verdict(Outcome(records=98, lost=2), lost=LossLimit.parse("1%"))[0][1] == \
        "2 of 100 records lost (2%), more than --max-lost 1%"
    unsure = verdict(Outcome(records=10, unsure=1))  # an unknown number lost fails, unless 100% is accepted
    assert unsure[0][0] == ExitCode.LOST and "1 publisher(s) not heard from since a disconnect" in unsure[0][1]
    assert verdict(Outcome(records=10, unsure=1), lost=LossLimit.parse("100%")) == []
    assert verdict(Outcome(records=10)) == []


@pytest.mark.parametrize("bad", ["-1", "x", "101%"])
def test_bad_max_lost_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    config = write(tmp_path / "p.yaml", "name: p\nsource: {type: generate, dataset: point, count: 10}\nsink: {type: \"null\"}\n")
    out = invoke("run", str(config), "--max-lost", bad, columns=100)
    assert out.returncode == ExitCode.CONFIG and f"--max-lost {bad!r}: give a count" in out.stderr


def test_records_awaiting_redelivery_are_in_the_summary_and_exit_6(tmp_path: Path) -> None:
    """What the JetStream source sets at the end of a bounded run (``RunStats.outstanding``) reaches the summary
    and the one verdict."""
    from wirepipe import generate_source, null_sink
    from wirepipe.core.exit_codes import verdict
    from wirepipe.pipelines.monitor import run_summary

    pipe = generate_source("point", count=10) | null_sink()
    stats = pipe.run()
    stats.outstanding = 3000
    assert ", 3000 records awaiting redelivery" in run_summary(pipe.last_run, stats).splitlines()[0]
    assert verdict(stats.outcome()) == [(ExitCode.INCOMPLETE, "3,000 records awaiting redelivery when the run "
                                         "ended (not acknowledged: the stream delivers them again to the next "
                                         "reader)")]

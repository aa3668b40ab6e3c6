"""``wirepipe test``: the shipped test files pass, a failing case names the field path, a broken test file is
a config error, snapshots, JUnit, inputs from files and from a real capture of a real server."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.cli import invoke, start_wirepipe, wirepipe
from tests.test_capture_nats import wait_for_line
from wirepipe import nats_sink, subject
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.operators.compress import Compress
from wirepipe.operators.serialize import Serialize

ROOT = Path(__file__).parent.parent
DECODER = """name: decoder
source: {type: nats, url: "${NATS_URL:-embedded}", subject: "orders.>"}
operators:
  - decompress: {codec: auto}
  - deserialize: {format: auto}
  - select: [id, region]
sink: {type: jsonl, path: out.jsonl}
dead_letter: {type: jsonl, path: dead.jsonl}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow
def test_the_test_files_shipped_with_configs_pass() -> None:
    cases = sum(len(json.loads(json.dumps(__import__("yaml").safe_load(p.read_text())))["tests"])
                for p in (ROOT / "configs").glob("*.test.yaml"))
    result = wirepipe("test", "configs", cwd=ROOT)  # relative paths as CI gives them (configs/points.proto)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" PASSED\n") == cases >= 10
    assert f"{cases} passed" in result.stdout.splitlines()[-1]


def test_a_failing_case_shows_the_field_path_and_both_records(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    write(tmp_path, "decoder.test.yaml", """\
        tests:
          - name: regions survive
            input: {records: [{id: 1, region: eu, x: 0}, {id: 2, region: us}], encode: json|gzip}
            expect: {records: [{id: 1, region: eu}, {id: 2, region: asia}]}
          - name: right
            input: {records: [{id: 1, region: eu}], encode: msgpack}
            expect: {records: [{id: 1, region: eu}]}
        """)
    result = invoke("test", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    out = result.stdout
    assert f"{tmp_path / 'decoder.test.yaml'}::regions survive FAILED" in out
    assert f"{tmp_path / 'decoder.test.yaml'}::right PASSED" in out
    assert 'records[1].region: expected "asia", got "us"' in out
    assert '  expected records[1]: {"id": 2, "region": "asia"}' in out
    assert '  got      records[1]: {"id": 2, "region": "us"}' in out
    assert out.splitlines()[-1].startswith("======== 1 failed, 1 passed in ")


def test_outputs_subjects_headers_conditions_and_rejections_are_each_checked(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    write(tmp_path, "decoder.test.yaml", """\
        tests:
          - name: everything that can differ
            input:
              payloads: ['{"id": 1, "region": "eu"}', "garbage", '{"id": 3, "region": "us"}']
              subjects: [orders.eu, orders.x, orders.us]
              headers: {Content-Type: application/json}
            expect:
              count: 3
              outputs:
                - {value: {id: 1, region: eu}, subject: orders.eu, headers: {Content-Type: application/json}}
                - {subject: orders.uk, headers: {Content-Type: text/json}, where: [{field: id, equals: 4}]}
              each:
                - {field: region, matches: "^(eu|uk)$"}
                - {field: id, max: 2}
              rejections: [{stage: decompress, error: "not JSON", seq: 2}]
        """)
    result = invoke("test", str(tmp_path / "decoder.test.yaml"))
    assert result.returncode == 1, result.stderr
    failures = result.stdout.split("________\n", 1)[1].split("\n========")[0].splitlines()
    assert failures[:8] == [
        "count: expected 3 outputs, got 2",
        'outputs[1].subject: expected "orders.uk", got "orders.us"',
        'outputs[1].headers.Content-Type: expected "text/json", got "application/json"',
        '  expected outputs[1].headers: {"Content-Type": "text/json"}',
        '  got      outputs[1].headers: {"Content-Type": "application/json"}',
        "outputs[1]: id == 4 is false (id is 3)",
        "each: outputs[1]: region matches '^(eu|uk)$' is false (region is \"us\")",
        "each: outputs[1]: id <= 2 is false (id is 3)",
    ]
    assert failures[8].startswith('rejections[0].stage: expected "decompress", got "deserialize" (deserialize (auto): ')
    assert failures[9].startswith("rejections[0].seq: expected 2, got 1 (")
    assert failures[10].startswith('rejections[0].error: expected a reason containing "not JSON", got ')
    assert len(failures) == 11


def test_unexpected_rejections_fail_a_case(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    write(tmp_path, "decoder.test.yaml", """\
        tests:
          - name: only counts
            input: {payloads: ["not json"], headers: {Content-Type: application/json}}
            expect: {count: 0}
        """)
    result = invoke("test", str(tmp_path / "decoder.yaml"))  # a pipeline: its test file beside it
    assert result.returncode == 1
    assert "rejected: expected none, got 1: deserialize (auto): " in result.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("tests:\n  - name: a\n    input: {records: [1]}\n    expect: {count: -1}\n",
     "decoder.test.yaml: tests[0].expect.count: Input should be greater than or equal to 0 (got -1)"),
    ("tests:\n  - name: a\n    input: {records: [1], capture: x}\n",
     "decoder.test.yaml: tests[0].input: give one of records, payloads, file, capture (got records and capture)"),
    ("tests:\n  - name: a\n    input: {records: [1]}\n    expect: {rejections: [{stag: map}]}\n",
     "decoder.test.yaml: tests[0].expect.rejections[0]: unknown field 'stag': allowed error, operator, seq, stage"),
    ("tests:\n  - name: a\n    input: {records: [1], subject: 'a.b'}\n",
     "decoder.test.yaml: tests[0].input: `subject` slices a capture; inline records take `subjects`"),
    ("tests:\n  - name: a\n    input: {capture: nowhere}\n",
     "decoder.test.yaml: tests[0].input.capture: "),
    ("tests:\n  - name: a\n    input: {records: [1]}\n    set: ['operators[0].decompress.codec=zzz']\n",
     "decoder.yaml: operators[0].decompress.codec: unknown codec 'zzz'"),
    ("tests:\n  - name: a\n    input: {records: [1]}\n  - name: a\n    input: {records: [2]}\n",
     "decoder.test.yaml: tests[1].name: 'a' names an earlier case too"),
    ("tests: [\n", "decoder.test.yaml: line 2, column 1: not valid YAML"),
    ("tests: [{name: a, input: {records: [1]}, expect: {count: 1, decode: {dictionary: /dev/zero}}}]\n",
     "tests[0].expect.decode: zstd dictionary file /dev/zero is larger than 64 MiB"),  # read bounded, not to 17 GB
])
def test_a_broken_test_file_exits_2_naming_the_file_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    (tmp_path / "decoder.test.yaml").write_text(text)
    result = invoke("test", str(tmp_path))
    assert result.returncode == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.stderr and "PASSED" not in result.stdout  # nothing ran
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr


def test_no_test_file_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    result = invoke("test", str(tmp_path / "decoder.yaml"))
    assert result.returncode == 2 and "no test file beside it (write decoder.test.yaml)" in result.stderr
    result = invoke("test", str(tmp_path))
    assert result.returncode == 2 and "no test files (*.test.yaml) in this folder" in result.stderr


@pytest.mark.slow
def test_update_records_a_snapshot_in_place_and_then_passes(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    test_file = write(tmp_path, "decoder.test.yaml", """\
        # kept: a comment before the cases
        tests:
          - name: new case   # kept: a comment on the name
            input:
              records: [{id: 1, region: eu, extra: true}, {id: 2, region: us}]
              encode: cbor|brotli
              subjects: [orders.eu, orders.us]
          - name: stale case
            input: {payloads: ["{]"], headers: {Content-Type: application/json}}
            expect: {count: 1}
          # kept: a comment between the cases
          - name: right case
            input: {records: [{id: 7, region: eu}], encode: json}
            expect: {count: 1, each: [{field: id, equals: 7}]}
        """)
    result = wirepipe("test", str(test_file), "--update")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.rsplit(" ", 1)[1] for line in result.stdout.splitlines()[:3]] == ["UPDATED", "UPDATED", "PASSED"]
    text = test_file.read_text()
    for comment in ("# kept: a comment before the cases", "# kept: a comment on the name",
                    "# kept: a comment between the cases"):
        assert comment in text
    import yaml

    cases = yaml.safe_load(text)["tests"]
    assert cases[0]["expect"] == {
        "count": 2, "rejected": 0,
        "outputs": [{"value": {"id": 1, "region": "eu"}, "subject": "orders.eu",
                     "headers": {"Content-Type": "application/cbor", "Content-Encoding": "br"}},
                    {"value": {"id": 2, "region": "us"}, "subject": "orders.us",
                     "headers": {"Content-Type": "application/cbor", "Content-Encoding": "br"}}]}
    assert cases[1]["expect"]["count"] == 0 and cases[1]["expect"]["rejections"][0]["stage"] == "deserialize"
    assert cases[2]["expect"] == {"count": 1, "each": [{"field": "id", "equals": 7}]}  # untouched
    again = wirepipe("test", str(test_file))
    assert again.returncode == 0 and again.stdout.count(" PASSED\n") == 3, again.stdout


def test_junit_xml(tmp_path: Path) -> None:
    write(tmp_path, "decoder.yaml", DECODER)
    write(tmp_path, "decoder.test.yaml", """\
        tests:
          - name: passes
            input: {records: [{id: 1, region: eu}], encode: json}
            expect: {count: 1}
          - name: fails
            input: {records: [{id: 1, region: eu}], encode: json}
            expect: {records: [{id: 2, region: eu}]}
        """)
    report = tmp_path / "junit.xml"
    assert invoke("test", str(tmp_path), "--junit", str(report)).returncode == 1
    root = ET.parse(report).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["passes"].find("failure") is None
    failure = cases["fails"].find("failure")
    assert failure is not None and failure.get("message") == "records[0].id: expected 2, got 1"


def test_inputs_from_jsonl_and_parquet_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write(tmp_path, "select.yaml", """\
        name: select
        source: {type: generate, dataset: point, count: 1}
        operators: [{select: [id]}]
        """)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.jsonl").write_text('{"id": 1, "x": 2}\n{"id": 2}\nnot json\n{"id": 3}\n')
    pq.write_table(pa.table({"id": [10, 11, 12], "x": [0, 0, 0]}), tmp_path / "data" / "in.parquet")
    write(tmp_path, "select.test.yaml", """\
        tests:
          - name: jsonl, a line that is not JSON rejected where the source reads it
            input: {file: data/in.jsonl}
            expect:
              records: [{id: 1}, {id: 2}, {id: 3}]
              rejections: [{stage: read, error: "not a JSON line", seq: 2}]
          - name: parquet, the first two
            input: {file: data/in.parquet, count: 2}
            expect: {records: [{id: 10}, {id: 11}]}
        """)
    result = invoke("test", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_case_fed_by_a_real_capture_sliced_by_subject_time_and_count(nats_server: EmbeddedServer,
                                                                       tmp_path: Path) -> None:
    """A publisher pipeline on a real server, ``wirepipe capture`` writing what flows, then ``wirepipe test``
    on slices of that capture through a decoding pipeline."""
    url = nats_server.url
    capture_dir = tmp_path / "captures" / "orders"
    capture = start_wirepipe("capture", "--url", url, "--subject", "orders.>", "--out", str(capture_dir),
                             "--count", "60", "--max-file-age", "1s")
    lines = wait_for_line(capture, "capturing into")  # subscribed: the source opens before the sink
    records = [{"id": i, "region": ("eu", "us", "asia")[i % 3]} for i in range(60)]
    from wirepipe.testing import TestingSource

    started = dt.datetime.now(dt.timezone.utc)
    (TestingSource(records, batch_size=10) | subject("orders.{region}.{id}") | Serialize("msgpack") | Compress("zstd")
     | nats_sink("{subject}", url=url)).run()
    assert capture.wait(timeout=60) == 0, "".join(lines)
    assert "60 records captured" in "".join(lines)
    write(tmp_path, "decoder.yaml", DECODER)
    eu = [r for r in records if r["region"] == "eu"]
    write(tmp_path, "decoder.test.yaml", f"""\
        tests:
          - name: the eu orders of the capture
            input: {{capture: captures/orders, subject: "orders.eu.>"}}
            expect:
              records: {json.dumps(eu)}
          - name: the first five us orders
            input: {{capture: captures/orders, subject: "orders.us.*", count: 5}}
            expect:
              outputs: {json.dumps([{"value": r, "subject": f"orders.us.{r['id']}"} for r in records
                                    if r["region"] == "us"][:5])}
              each: [{{header: Content-Encoding, equals: zstd}}]
          - name: everything received since the publisher started, and nothing after now
            input: {{capture: captures/orders, since: "{started.isoformat()}",
                     until: "{(dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=1)).isoformat()}"}}
            expect: {{count: 60}}
          - name: nothing was received before the publisher started
            input: {{capture: captures/orders, until: "{started.isoformat()}"}}
            expect: {{count: 0}}
          - name: a wrong expectation on captured traffic names the record and field
            input: {{capture: captures/orders, subject: "orders.asia.>", count: 2}}
            expect: {{records: [{{id: 2, region: asia}}, {{id: 5, region: eu}}]}}
        """)
    result = wirepipe("test", str(tmp_path / "decoder.test.yaml"))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines[:5]] == ["PASSED"] * 4 + ["FAILED"]
    assert 'records[1].region: expected "eu", got "asia"' in result.stdout


@pytest.mark.slow
def test_a_snapshot_of_payloads_is_recorded_decoded_by_their_headers(tmp_path: Path) -> None:
    write(tmp_path, "publish.yaml", """\
        name: publish
        source: {type: generate, dataset: point, count: 1}
        operators: [{serialize: {format: cbor}}, {compress: {codec: xz}}]
        sink: {type: nats, url: "nats://127.0.0.1:1", subject: "out.{seq}"}
        """)
    test_file = write(tmp_path, "publish.test.yaml", """\
        tests:
          - name: points as cbor + xz
            input: {records: [{x: 1, y: 2}, {x: 3, y: 4}]}
        """)
    assert wirepipe("test", str(test_file), "--update").returncode == 0
    import yaml

    expect = yaml.safe_load(test_file.read_text())["tests"][0]["expect"]
    headers = {"Content-Type": "application/cbor", "Content-Encoding": "xz"}
    assert expect == {"decode": True, "count": 2, "rejected": 0, "outputs": [
        {"value": {"x": 1, "y": 2}, "subject": "out.0", "headers": headers},
        {"value": {"x": 3, "y": 4}, "subject": "out.1", "headers": headers}]}
    assert wirepipe("test", str(test_file)).returncode == 0
    test_file.write_text(test_file.read_text().replace("x: 3, y: 4}\n", "x: 3, y: 5}\n"))
    result = wirepipe("test", str(test_file))
    assert result.returncode == 1 and "outputs[1].value.y: expected 5, got 4" in result.stdout


def test_inline_records_carry_the_schema_the_pipelines_source_attaches(tmp_path: Path) -> None:
    """A positional format without `schema:` reads the generate dataset's; inline records get the same."""
    write(tmp_path, "arr.yaml", """\
        name: arr
        source: {type: generate, dataset: point, count: 10}
        operators: [{serialize: {format: msgpack-array}}, {deserialize: {format: msgpack-array}}]
        """)
    write(tmp_path, "arr.test.yaml", """\
        tests:
          - name: positional
            input: {records: [{x: 1, y: 2}]}
            expect: {records: [{x: 1, y: 2}]}
        """)
    result = invoke("test", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("capture", ["/**", "/", "../**/*.parquet", "../cap", "cap/../../x", "*/../../**", "out/**",
                                     ["cap/", "/tmp"]])
def test_a_capture_stays_inside_the_test_files_folder(tmp_path: Path, capture: Any) -> None:
    """A capture (file, folder or glob) outside the test file's folder, or through a link that leads out,
    is refused before anything is walked."""
    from wirepipe.core.errors import ConfigError
    from wirepipe.pipetest.cases import load

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "cap").mkdir()
    (tests / "out").symlink_to(tmp_path)  # a link inside that leads out
    write(tests, "decoder.yaml", DECODER)
    (tests / "decoder.test.yaml").write_text(f"tests:\n  - name: a\n    input: {{capture: {json.dumps(capture)}}}\n")
    with pytest.raises(ConfigError) as info:
        load(tests / "decoder.test.yaml")
    text = str(info.value)
    assert "decoder.test.yaml: tests[0].input.capture: " in text and "stays inside its folder" in text, text


def test_a_capture_inside_the_folder_is_taken(tmp_path: Path) -> None:
    from wirepipe.core.errors import ConfigError
    from wirepipe.pipetest.cases import load

    write(tmp_path, "decoder.yaml", DECODER)
    (tmp_path / "decoder.test.yaml").write_text("tests:\n  - name: a\n    input: {capture: 'cap/**/*.parquet'}\n")
    with pytest.raises(ConfigError, match=r"cap/\*\*/\*.parquet: no file matches this pattern"):  # taken: looked for
        load(tmp_path / "decoder.test.yaml")


PASS_THROUGH = """name: copy
source: {type: jsonl, path: in.jsonl}
sink: {type: jsonl, path: out.jsonl}
"""


@pytest.mark.parametrize(("records", "reason"), [
    ([{"n": i} for i in range(1001)], "--update records at most 1,000 outputs and rejections in a test file; "
                                      "this case made 1,001 and 0"),
    ([{"text": "x" * 300_000} for _ in range(4)], "--update records at most 1,024 KiB of outputs in a test file; "
                                                   "this case's 4 outputs are larger"),
])
def test_update_refuses_to_record_what_no_one_would_review(tmp_path: Path, records: list[Any], reason: str) -> None:
    """The case fails with the reason; the test file is left as it was."""
    from wirepipe.pipetest import collect, run_files

    write(tmp_path, "copy.yaml", PASS_THROUGH)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    test_file = write(tmp_path, "copy.test.yaml", "tests:\n  - name: all of it\n    input: {file: in.jsonl}\n")
    before = test_file.read_text()
    session = run_files(collect([str(test_file)]), update=True, echo=lambda line: None)
    assert session.rewritten == [] and test_file.read_text() == before
    [result] = session.results
    assert not result.passed and result.failures[-1].startswith(reason), result.failures


def test_a_matches_condition_re2_cannot_take_is_refused_when_the_file_is_read(tmp_path: Path) -> None:
    from wirepipe.core.errors import ConfigError
    from wirepipe.pipetest.model import load_test_file

    (tmp_path / "x.test.yaml").write_text(
        "tests:\n  - name: a\n    input: {records: [{s: aa}]}\n"
        "    expect: {each: [{field: s, matches: '(a)\\1'}]}\n")
    with pytest.raises(ConfigError) as info:
        load_test_file(tmp_path / "x.test.yaml")
    assert ("x.test.yaml: tests[0].expect.each[0].matches: '(a)\\\\1': not a pattern the linear-time engine (RE2) "
            "takes: invalid escape sequence: \\1 (no backreferences or lookarounds)") in str(info.value), str(info.value)


@pytest.mark.slow
def test_ctrl_c_drains_the_running_case_and_stops_the_session(tmp_path: Path) -> None:
    """SIGINT while a case reads a 2,000,000-record fixture: the case drains and errors as interrupted, the
    next case does not run, exit 130 (without it: the case ran to its end and the session passed)."""
    import signal

    write(tmp_path, "copy.yaml", PASS_THROUGH)
    with (tmp_path / "in.jsonl").open("w") as f:
        f.writelines(f'{{"n": {i}}}\n' for i in range(2_000_000))
    write(tmp_path, "copy.test.yaml", """\
        tests:
          - name: big
            input: {file: in.jsonl}
            expect: {count: 2000000}
          - name: after
            input: {records: [{n: 1}]}
            expect: {count: 1}
        """)
    proc = start_wirepipe("test", str(tmp_path / "copy.test.yaml"))

    def cpu_ticks() -> int:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    import time

    # 1.2 s of CPU: imports done (~0.5 s), the big case reading (~2 s more: a check holds none of its outputs)
    while proc.poll() is None and cpu_ticks() < 120:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "copy.test.yaml::big ERROR" in out and "interrupted (Ctrl-C): the case drained and stopped" in out
    assert "::after" not in out and "1 error" in out, out
    assert err.strip() == "error: interrupted (Ctrl-C): the cases after it did not run", err


@pytest.mark.parametrize(("values", "batch", "held", "reason"), [
    ([{"n": i} for i in range(5000)], 100, 1000,
     "--update records at most 1,000 outputs and rejections in a test file; this case made 5,000 and 0: check it "
     "with `count:` and `each:` conditions, or record a slice of its input (`count:`)"),
    ([{"text": "x" * 100_000} for _ in range(200)], 10, 40,
     "--update records at most 1,024 KiB of outputs in a test file; the first 50 of this case's 200 outputs passed "
     "4,096 KiB as the pipeline wrote them: check it with `count:` and `each:` conditions, or record a slice of its "
     "input (`count:`)"),
])
def test_update_holds_no_more_of_a_large_case_than_a_test_file_records(values: list[Any], batch: int, held: int,
                                                                       reason: str) -> None:
    """A case ``--update`` records runs through a sink that keeps what a test file can hold and only counts the
    rest, so refusing a large case costs no memory for its outputs (before: every output held, 402 MB peak for a
    47 MB fixture of 197,011 records; after: 59 MB)."""
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.pipetest.snapshot import RecordingSink
    from wirepipe.testing import TestingSource

    most: list[int] = []

    class Watched(RecordingSink):
        async def write(self, b: Any) -> None:
            await super().write(b)
            most.append(len(self.records))

    sink = Watched()
    Pipeline(TestingSource(values, batch_size=batch), [], sink).run()
    assert sink.count == len(values) and max(most) == held and sink.records == [] and most[-1] == 0
    assert sink.why_not() == reason


def test_update_says_how_a_case_failed_and_why_it_is_not_recorded(tmp_path: Path) -> None:
    from wirepipe.pipetest import collect, run_files

    write(tmp_path, "copy.yaml", PASS_THROUGH)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(1001)))
    test_file = write(tmp_path, "copy.test.yaml",
                      "tests:\n  - name: all of it\n    input: {file: in.jsonl}\n    expect: {count: 5}\n")
    session = run_files(collect([str(test_file)]), update=True, echo=lambda line: None)
    [result] = session.results
    assert session.rewritten == [] and result.failures == [
        "count: expected 5 outputs, got 1001",
        "--update records at most 1,000 outputs and rejections in a test file; this case made 1,001 and 0: check it "
        "with `count:` and `each:` conditions, or record a slice of its input (`count:`)"]


def test_a_check_holds_no_more_outputs_than_its_expect_names(tmp_path: Path) -> None:
    """A case is checked as the pipeline writes: of a fixture's 4,500 outputs and 500 rejections it keeps the
    outputs ``records`` compares and the one after them (3), and three rejections, and counts the rest; ``each``
    is checked on every output as it comes (before: every output and rejection held to the end: 4,500 and 500 here,
    a 502 MB peak for a 47 MB fixture checked with ``decode: true``; after: 59 MB)."""
    from wirepipe.pipetest import collect
    from wirepipe.pipetest.cases import run_case

    write(tmp_path, "copy.yaml", PASS_THROUGH)
    (tmp_path / "in.jsonl").write_text("".join("garbage\n" if i % 10 == 9 else json.dumps({"n": i}) + "\n"
                                               for i in range(5000)))
    test_file = write(tmp_path, "copy.test.yaml", """\
        tests:
          - name: big
            input: {file: in.jsonl, batch_size: 100}
            expect:
              records: [{n: 0}, {n: 1}]
              each: [{field: n, max: 4000}]
              rejections: [{stage: read}]
        """)
    [loaded] = collect([str(test_file)])
    result = run_case(loaded, 0)
    assert (len(result.outputs), len(result.rejects)) == (3, 3)
    assert [o.value for o in result.outputs] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert result.failures == [
        'records: expected 2, got 4500; first unexpected records[2]: {"n": 2}',
        "each: outputs[3601]: n <= 4000 is false (n is 4001)",
        "each: outputs[3602]: n <= 4000 is false (n is 4002)",
        "each: outputs[3603]: n <= 4000 is false (n is 4003)",
        "each: ... and 896 more",
        f"rejections: expected 1, got 500; first: read (jsonl): {tmp_path / 'in.jsonl'}:10: not a JSON line (unexpected "
        "character, expected a JSON value: line 1 column 1 (char 0)) [seq 9]"]


def test_an_output_that_does_not_decode_errors_its_case_naming_it(tmp_path: Path) -> None:
    """``decode: true`` and an output that does not decode by its headers: the case errors with its position among
    all outputs (checked as the pipeline writes, in its third batch), and the session goes on."""
    from wirepipe.pipetest import collect, run_files

    write(tmp_path, "copy.yaml", PASS_THROUGH)
    payloads = [json.dumps({"n": i}) for i in range(7)]
    payloads[5] = "garbage"
    test_file = write(tmp_path, "copy.test.yaml", f"""\
        tests:
          - name: decoded
            input: {{payloads: {json.dumps(payloads)}, headers: {{Content-Type: application/json}}, batch_size: 2}}
            expect: {{decode: true, count: 7}}
          - name: after
            input: {{records: [{{n: 1}}]}}
            expect: {{count: 1}}
        """)
    session = run_files(collect([str(test_file)]), echo=lambda line: None)
    first, after = session.results
    assert first.error is not None and first.error.startswith(
        "outputs[5] does not decode by its headers (deserialize: ") and first.error.endswith(
        "compare it as bytes (decode: false)"), first.error
    assert after.passed

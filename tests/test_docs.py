"""The docs: generated parts current (`make docs`), every relative link resolving, the measurements file
valid, and scripts/record_measurement.py (`make bench`'s rows: tests/test_bench_rows.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench import measurements
from bench.machine import Machine
from bench.measurements import MEASUREMENTS, Measurement, load, render
from evals.reporting.leaderboard import (
    COLUMN_TABLE_END,
    COLUMN_TABLE_START,
    COLUMNS,
    column_table,
    replace_column_table,
)
from kqe.core.errors import UserError
from tests.helpers.doc_links import anchors, broken_links, links, slug

REPO = Path(__file__).resolve().parents[1]
LINKED = ["README.md", "CHANGELOG.md", "evals/tasks/ko_rag/README.md"]
"""Markdown files whose links must resolve, besides docs/*.md."""
MACHINE = Machine(
    date="2026-12-06", cpu="AMD EPYC (AVX2 only), 2 cores", cpu_flags="avx2", load="1.5", commit="abc1234"
)


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kqe_script_{name}", REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(**fields: Any) -> Measurement:
    base: dict[str, Any] = {
        **MACHINE.model_dump(),
        "date": "2026-12-02",
        "topic": "first-run",
        "what": "`make eval` default matrix, first run",
        "value": 48.2,
        "unit": "min",
        "runs": 1,
    }
    return Measurement(**(base | fields))


# --- (a) generated files are current ------------------------------------------------------------------


def test_performance_page_is_rendered_from_the_measurements() -> None:
    """docs/performance.md is what `make docs` renders from results/measurements.jsonl."""
    page = REPO / measurements.PERFORMANCE_PAGE
    expected = render(load(REPO / MEASUREMENTS))
    assert page.is_file() and page.read_text(encoding="utf-8") == expected, (
        "docs/performance.md is out of date: run `make docs`"
    )


def test_leaderboard_column_table_is_the_schema() -> None:
    """docs/leaderboard.md documents every column the code writes; `make docs` regenerates the table."""
    page = (REPO / "docs" / "leaderboard.md").read_text(encoding="utf-8")
    assert replace_column_table(page, column_table(), "docs/leaderboard.md") == page, "run `make docs`"
    for name in COLUMNS:
        assert f"| `{name}` |" in page


def test_docs_check_agrees() -> None:
    assert script("docs").stale(REPO) == []


def test_docs_check_names_each_stale_file_and_make_docs_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = script("docs")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "leaderboard.md"
    page.write_text(f"# Leaderboard\n\n{COLUMN_TABLE_START}\nold\n{COLUMN_TABLE_END}\n", encoding="utf-8")
    measurements.append(tmp_path / MEASUREMENTS, [row()])

    assert docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.split("\n")[:2] == [
        "docs/leaderboard.md is out of date: run `make docs`",
        "docs/performance.md is out of date: run `make docs`",
    ]
    assert not (tmp_path / "docs" / "performance.md").exists()  # --check writes nothing
    assert docs.main(["--root", str(tmp_path)]) == 0
    assert docs.main(["--check", "--root", str(tmp_path)]) == 0
    assert column_table() in page.read_text(encoding="utf-8")
    assert "## First runs of `make eval`" in (tmp_path / "docs" / "performance.md").read_text(
        encoding="utf-8"
    )

    capsys.readouterr()
    page.write_text("# Leaderboard\n", encoding="utf-8")
    assert docs.main(["--check", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("docs/leaderboard.md has no <!-- columns:start")


# --- (b) links ------------------------------------------------------------------------------------------


def test_every_relative_link_resolves() -> None:
    files = [REPO / name for name in LINKED if (REPO / name).exists()] + sorted((REPO / "docs").glob("*.md"))
    assert REPO / "README.md" in files
    problems = broken_links(files, REPO)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_slugs_follow_github() -> None:
    assert slug("What `make eval` does") == "what-make-eval-does"
    assert slug("Schemes, recipes and pre-quantized checkpoints: `kqe quantize`") == (
        "schemes-recipes-and-pre-quantized-checkpoints-kqe-quantize"
    )
    assert slug("ko_rag: 한국어 RAG — F1 & recall") == "ko_rag-한국어-rag--f1--recall"
    assert slug("[CPU kinds](cpu.md) and <b>AMX</b>") == "cpu-kinds-and-amx"
    assert slug("Any task: `lm-eval:<task>` and `kqe tasks`") == "any-task-lm-evaltask-and-kqe-tasks"
    assert slug("A & B &amp; C") == "a--b--c"
    text = '# Setup\n\n## Setup\n\n```\n# not a heading\n```\n\nSetup\n---\n\n<a id="first-run"></a>\n'
    assert anchors(text) == {"setup", "setup-1", "setup-2", "first-run"}


def test_the_link_checker_reports_every_broken_link_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "cpu.md").write_text(
        '# CPU kinds\n\n## Threads\n\n<a id="amx"></a>\n', encoding="utf-8"
    )
    (tmp_path / "kqe.py").write_text("x = 1\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](cpu.md) [ok](cpu.md#threads) [ok](cpu.md#amx) [ok](#page) [ok](../kqe.py#L1)\n"
        "[missing](nothing.md) and [bad anchor](cpu.md#thread)\n"
        "`[in code](nothing.md)` [web](https://example.com/x.md) [mail](mailto:a@b.c)\n"
        "```\n[fenced](nothing.md)\n```\n"
        "<!-- [commented](nothing.md) -->\n"
        "[a link\nover two lines](gone.md#x) and [self](#nowhere)\n\n"
        '[ref]: missing-too.md\n<a href="../nope.md">html</a>\n',
        encoding="utf-8",
    )
    assert broken_links([page], tmp_path) == [
        "docs/page.md:4: nothing.md: no such file",
        "docs/page.md:4: cpu.md#thread: no heading or <a id> #thread in cpu.md",
        "docs/page.md:11: gone.md#x: no such file",
        "docs/page.md:11: #nowhere: no heading or <a id> #nowhere in page.md",
        "docs/page.md:13: missing-too.md: no such file",
        "docs/page.md:14: ../nope.md: no such file",
    ]
    assert (3, "cpu.md") in links(page.read_text(encoding="utf-8"))


# --- (c) the measurements file ----------------------------------------------------------------------------


def test_the_measurements_file_loads_and_every_row_validates() -> None:
    path = REPO / MEASUREMENTS
    assert path.is_file()
    rows = load(path)  # a bad row fails here, one line per bad row
    assert len(rows) == sum(1 for line in path.read_text(encoding="utf-8").split("\n") if line.strip())


def test_a_bad_file_names_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    good = row().to_json()
    bad_topic = good.replace('"first-run"', '"first-runs"')
    no_unit = json.dumps({k: v for k, v in json.loads(good).items() if k != "unit"})
    path.write_text(
        "\n".join([good, bad_topic, "{not json", no_unit, good.replace("48.2", "NaN"), "[1]"]) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError) as caught:
        load(path)
    lines = str(caught.value).split("\n")
    assert [line.split(": ")[0] for line in lines] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6)]
    assert "topic: 'first-runs' is not a topic: use one of setup, first-run," in lines[0]
    assert lines[2] == f"{path}:4: unit: Field required"


def test_rows_keep_the_schema_order_and_text() -> None:
    line = row(note="한국어 | pipe", low=40, high=50, spread="min-max").to_json()
    assert list(json.loads(line)) == [
        "schema", "date", "topic", "what", "value", "unit", "low", "high", "spread", "runs", "cpu",
        "cpu_flags", "load", "commit", "note", "source",
    ]  # fmt: skip
    assert "한국어" in line and Measurement(**json.loads(line)).to_json() == line
    assert json.loads(row(value=3).to_json())["value"] == 3  # an int stays an int


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"low": 1}, "low, high and spread go together"),
        ({"low": 50, "high": 60, "spread": "min-max"}, "outside its min-max"),
        ({"low": 9, "high": 1, "spread": "95% CI"}, "low 9 is above high 1"),
        ({"date": "2026-13-01"}, "not a date"),
        ({"cpu_flags": "avx2 sse4"}, "sse4 not among"),
        ({"runs": 0}, "at least 1"),
        ({"value": True}, "value"),
        ({"spread": "iqr", "low": 1, "high": 50}, "spread"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_rows_are_refused(fields: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        row(**fields)


def test_append_and_merge(tmp_path: Path) -> None:
    path = tmp_path / "results" / "measurements.jsonl"
    measurements.append(path, [row(topic="bench")])
    fragment = tmp_path / "d9.measurements.jsonl"
    rows = [row(topic="doctor", date="2026-12-03"), row(topic="setup", date="2026-12-05"), row(topic="setup")]
    fragment.write_text(measurements.dump([*rows, row(topic="bench")]), encoding="utf-8")

    added = measurements.merge(path, [fragment])

    assert added == [rows[2], rows[1], rows[0]]  # topic order, then date; the bench row was there
    assert [r.topic for r in load(path)] == ["bench", "setup", "setup", "doctor"]
    assert measurements.merge(path, [fragment]) == []
    fragment.write_text("{}\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"d9.measurements.jsonl:1: "):
        measurements.merge(path, [fragment])
    assert len(load(path)) == 4


def test_render() -> None:
    rows = [
        row(topic="doctor", what="kqe doctor | 50 MB", value=2.82, unit="s", low=2.78, high=2.95,
            spread="min-max", runs=3, source="results/bench.csv"),
        row(date="2026-12-05", what="later"),
        row(date="2026-12-01", what="earlier", value=1.5, unit="x", load=None, runs=None, note="a\nb"),
        row(date="2026-12-05", what="later, second in the file", value=1234567, unit="count", commit=""),
    ]  # fmt: skip
    page = render(rows)

    assert page.startswith("# Performance: what was measured\n")
    assert "generated by `make docs`" in page and "scripts/record_measurement.py" in page
    assert page.index('<a id="first-run"></a>\n\n## First runs of `make eval`') < page.index(
        '<a id="doctor">'
    )
    assert "## Setup" not in page  # a topic without rows is left out
    assert "Topics: [First runs of make eval](#first-run) · [kqe doctor](#doctor)" in page
    lines = page.split("\n")
    first = lines.index("| date | what | value | runs | CPU | load | commit | note |")
    assert [line.split(" | ")[1] for line in lines[first + 2 : first + 5]] == [
        "earlier",
        "later",
        "later, second in the file",
    ]
    assert (
        lines[first + 2]
        == "| 2026-12-01 | earlier | 1.5x | — | AMD EPYC (AVX2 only), 2 cores | — | `abc1234` | a b |"
    )
    assert "| 1,234,567 count | 1 |" in lines[first + 4] and "| 1.5 |  |" in lines[first + 4]
    doctor = next(line for line in lines if "50 MB" in line)
    assert doctor.startswith("| 2026-12-02 | kqe doctor \\| 50 MB | 2.82 s (2.78–2.95, min-max) | 3 |")
    assert doctor.endswith("| data: `results/bench.csv` |")
    assert render([]).count("## ") == 0


# --- (d) record_measurement ---------------------------------------------------------------------------------


def _record(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "scripts" / "record_measurement.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)


def test_record_measurement_appends_one_row_with_this_machine(tmp_path: Path) -> None:
    path = tmp_path / "measurements.jsonl"
    path.write_text((REPO / MEASUREMENTS).read_text(encoding="utf-8"), encoding="utf-8")
    before = load(path)

    done = _record(
        "--file",
        str(path),
        "--topic",
        "tests",
        "--what",
        "make test-fast, two workers",
        "--value",
        "270",
        "--unit",
        "s",
        "--low",
        "260",
        "--high",
        "280",
        "--spread",
        "min-max",
        "--runs",
        "3",
        "--note",
        "x | y",
    )

    assert done.returncode == 0, done.stderr
    after = load(path)
    assert after[:-1] == before
    added = after[-1]
    assert (added.topic, added.value, added.low, added.runs, added.note) == ("tests", 270, 260, 3, "x | y")
    assert added.date == datetime.now(UTC).date().isoformat()
    assert added.cpu.endswith(" cores") or added.cpu.endswith(" core")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert added.commit == head.stdout.strip()
    float(added.load or "")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--topic", "nope", "--what", "w", "--value", "1", "--unit", "s"], "--topic: 'nope' is not a topic"),
        (["--topic", "tests", "--what", "w", "--value", "fast", "--unit", "s"], "--value"),
        (["--topic", "tests", "--what", "w", "--value", "1"], "--unit: required"),
        (
            ["--topic", "tests", "--what", "w", "--value", "1", "--unit", "s", "--low", "0"],
            "--low/--high/--spread",
        ),
        (["--topic", "tests", "--what", " ", "--value", "1", "--unit", "s"], "--what: must not be empty"),
    ],
)
def test_record_measurement_refuses_bad_input_with_one_line(
    tmp_path: Path, args: list[str], option: str
) -> None:
    path = tmp_path / "measurements.jsonl"
    done = _record("--file", str(path), *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and option in done.stderr, done.stderr
    assert not path.exists()


def test_record_measurement_merges_fragments(tmp_path: Path) -> None:
    path, fragment = tmp_path / "measurements.jsonl", tmp_path / "d1.measurements.jsonl"
    fragment.write_text(measurements.dump([row(topic="bench"), row(topic="setup")]), encoding="utf-8")
    done = _record("--file", str(path), "--merge", str(fragment))
    assert done.returncode == 0, done.stderr
    assert [r.topic for r in load(path)] == ["setup", "bench"]
    fragment.write_text('{"schema": 1}\n', encoding="utf-8")
    done = _record("--file", str(path), "--merge", str(fragment))
    assert done.returncode == 2 and done.stderr.startswith(f"{fragment}:1: date: Field required")

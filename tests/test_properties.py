"""Property-based tests of the readers and parsers that take outside input: whatever the bytes or
text, each returns a value that satisfies its contract or raises a one-line UserError; nothing else.

Hypothesis draws the inputs (derandomized, so CI sees the same ones each run); the hand-written
cases in test_hostile_input.py name the findings these generalise.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evals.capacity.session import local_base_url
from evals.reporting.leaderboard import read_leaderboard, write_leaderboard
from evals.serving.doctor.diagnose import diagnose
from evals.statistics.stats import compare_files
from kqe.commands.load import parse_concurrency
from kqe.core.errors import UserError
from kqe.core.eval_config import split_mixes
from kqe.core.text import markdown_cell, printable
from quantize.calibration import parse_mix
from quantize.recipes import parse_options
from tests.helpers.leaderboard_rows import rows

PROPERTY = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


def one_line(error: UserError) -> None:
    assert str(error).strip() and "\n" not in str(error).strip(), str(error)


@pytest.fixture(scope="module")
def good_csv(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("board") / "leaderboard.csv"
    write_leaderboard(path, rows())
    return path.read_bytes()


def read_board(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "leaderboard.csv"
        path.write_bytes(data)
        try:
            board = read_leaderboard(path)
        except UserError as error:
            one_line(error)
            return
        keys = [(row.model, row.checkpoint) for row in board]
        assert len(keys) == len(set(keys))  # what reads back holds no duplicate and no NaN
        for row in board:
            for name, value in row:
                assert not (isinstance(value, float) and not math.isfinite(value)), name


@PROPERTY
@given(st.binary(max_size=400))
def test_any_bytes_as_a_leaderboard(data: bytes) -> None:
    read_board(data)


@PROPERTY
@given(st.data())
def test_a_leaderboard_with_one_cell_replaced(good_csv: bytes, data: st.DataObject) -> None:
    text = good_csv.decode("utf-8")
    cells = [match.span() for match in re.finditer(r"[^,\n]+", text)]
    start, end = data.draw(st.sampled_from(cells))
    read_board((text[:start] + data.draw(TEXT) + text[end:]).encode("utf-8"))


ITEM_LINE = st.one_of(
    TEXT,
    st.fixed_dictionaries(
        {
            "task": st.sampled_from(["mmlu", "kmmlu", ""]),
            "item_id": TEXT,
            "correct": st.one_of(st.booleans(), TEXT),
        },
        optional={
            "subject": TEXT,
            "gold": st.integers(-2, 5),
            "choice_logprobs": st.lists(st.floats(), max_size=5),
        },
    ).map(json.dumps),
)


@PROPERTY
@given(st.lists(ITEM_LINE, max_size=6), st.lists(ITEM_LINE, max_size=6))
def test_any_lines_as_per_item_files(base: list[str], cand: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / "base.jsonl", Path(folder) / "cand.jsonl"]
        for path, lines in zip(paths, (base, cand), strict=True):
            path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")
        try:
            results = compare_files(*paths)
        except UserError as error:
            one_line(error)
            return
        for comparison in results.values():
            assert -1 <= comparison.delta <= 1 and comparison.ci_low <= comparison.ci_high


@PROPERTY
@given(st.one_of(TEXT, st.text(alphabet="koen=0.123456789,-+ infa", max_size=24)))
def test_any_calibration_mix(text: str) -> None:
    try:
        mixes = split_mixes(text)
        shares = [parse_mix(mix) for mix in mixes]
    except UserError as error:
        one_line(error)
        return
    for mix in shares:
        assert all(share >= 0 for share in mix.values()) and math.isclose(sum(mix.values()), 1, abs_tol=1e-6)


@PROPERTY
@given(
    st.lists(
        st.one_of(TEXT, st.text(alphabet="group_size=symetric[]'\"0123456789.,", max_size=24)), max_size=4
    )
)
def test_any_recipe_options(pairs: list[str]) -> None:
    try:
        options = parse_options(pairs)
    except UserError as error:
        one_line(error)
        return
    assert set(options) <= {pair.partition("=")[0].strip() for pair in pairs}


@PROPERTY
@given(st.one_of(TEXT, st.text(alphabet="0123456789,-+. ²١x", max_size=12)))
@example("²")  # a digit to str.isdigit, not to int()
def test_any_concurrency_levels(text: str) -> None:
    try:
        levels = parse_concurrency(text)
    except UserError as error:
        one_line(error)
        return
    assert levels and all(isinstance(level, int) and level > 0 for level in levels)


@PROPERTY
@given(TEXT)
def test_any_server_url(text: str) -> None:
    try:
        url = local_base_url(text)
    except UserError as error:
        one_line(error)
        return
    assert url.startswith(("http://", "https://"))


@PROPERTY
@given(st.text(max_size=2000))
def test_any_text_as_a_vllm_log(text: str) -> None:
    diagnosis = diagnose(text)
    assert diagnosis.pattern in {"A", "B", "C", "D", None}
    assert (diagnosis.pattern is None) == (diagnosis.evidence is None)


@PROPERTY
@given(st.text(max_size=200))
def test_shown_text_carries_no_control_sequence_and_cells_stay_one_cell(text: str) -> None:
    shown = printable(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    cell = markdown_cell(text)
    assert "\n" not in cell and "<" not in cell and re.search(r"(?<!\\)\|", cell) is None


OPTION_VALUES = st.one_of(
    TEXT, st.sampled_from(["0", "-1", "nan", "inf", "1e309", "2", "rtx4090", "bf16", ""])
)
COMMANDS = {
    "plan": ["--model", "--scheme", "--gpu", "--gpu-gib", "--count", "--max-model-len", "--max-num-seqs",
             "--gpu-memory-utilization", "--kv-cache-dtype", "--kv-cache-gib", "--profile"],
    "choose": ["--gpu", "--count", "--max-loss", "--min-concurrency", "--task", "--profile", "--model"],
    "compare": ["--margin"],
}  # fmt: skip


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_any_options_exit_0_or_2_never_an_internal_error(good_csv: bytes, data: st.DataObject) -> None:
    from click.testing import CliRunner

    from kqe.cli import main

    command = data.draw(st.sampled_from(sorted(COMMANDS)))
    options = data.draw(st.lists(st.tuples(st.sampled_from(COMMANDS[command]), OPTION_VALUES), max_size=4))
    with tempfile.TemporaryDirectory() as folder:
        board = Path(folder) / "leaderboard.csv"
        board.write_bytes(good_csv)
        items = Path(folder) / "items.jsonl"
        items.write_text('{"task": "mmlu", "item_id": "q1", "correct": true}\n', encoding="utf-8")
        fixed = {
            "plan": ["--model", "gemma3-270m", "--gpu", "rtx4090"],
            "choose": ["--leaderboard", str(board), "--gpu", "rtx4090"],
            "compare": [str(items), str(items)],
        }[command]
        args = [command, *fixed, *(part for pair in options for part in pair)]
        result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    if result.exit_code == 2:
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("kqe: error:"), (args, result.output)

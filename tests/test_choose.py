"""`kqe choose` and `kqe diff`: the decision on constructed leaderboards (real planner, real registry
model, real GPU table and serve profiles), and one-line errors through the click commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.planning.candidates import Deployment
from evals.planning.choose import choose, measured_applies, profile_for_gpu
from evals.planning.placement import target_from
from evals.planning.vllm_memory import gpu_named, load_gpus
from evals.reporting.diff import diff
from evals.reporting.leaderboard import COLUMNS, write_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.serving.serve import load_profile, serve_profiles
from kqe.commands.choose import choose_command
from kqe.commands.diff import diff_command, render
from kqe.core.records import SCHEMA_VERSION, MemoryReport, ServeProfile
from kqe.core.registry import load_registry
from kqe.core.results import RunSummary
from tests.helpers.cli import assert_one_line_error

NO_LOSS = "no loss detected within margin"
SIGNIFICANT = "significant loss"
INCONCLUSIVE = "inconclusive — n too small (MDE 3.0 points)"


def row(
    checkpoint: str, scheme: str, delta: float, low: float, high: float, **cells: object
) -> LeaderboardRow:
    """A leaderboard row of qwen2.5-14b; KMMLU Δ and CI as given (fractions), MMLU unchanged."""
    values: dict[str, object] = {name: None for name in COLUMNS if name != "schema_version"}
    values.update(
        model="qwen2.5-14b", checkpoint=checkpoint, scheme=scheme, calibration="none", status="ok",
        suite_version="0.2.0", date="2026-11-29T12:00:00+00:00",
        kmmlu_acc=0.5 + delta, kmmlu_delta=delta, kmmlu_ci_low=low, kmmlu_ci_high=high,
        kmmlu_verdict=NO_LOSS if low > -0.01 else INCONCLUSIVE, mmlu_acc=0.7, mmlu_delta=0.0,
        mmlu_ci_low=-0.004, mmlu_ci_high=0.004, mmlu_verdict=NO_LOSS, weights_gib=1.0, kv_cache_gib=1.0,
        kv_cache_tokens=1000, max_concurrency=2.0, serve_profile="rtx4090-16k:abc", checkpoint_key="k",
        versions="vllm=0.32.0", command="kqe eval --model qwen2.5-14b",
    )  # fmt: skip
    values.update(cells)
    return LeaderboardRow(**values)


# the pipeline leaves the base's comparison cells empty: it is not compared with itself
COMPARED = ("delta", "ci_low", "ci_high", "verdict")
BASE_ROW_CELLS = {f"{task}_{cell}": None for task in ("kmmlu", "mmlu") for cell in COMPARED}


def board() -> list[LeaderboardRow]:
    """The guide's case: FP16 14B does not fit a 24 GB card; FP8 loses less than AWQ."""
    return [
        row("bf16", "bf16", 0.0, 0.0, 0.0, **BASE_ROW_CELLS),
        row("awq-w4a16", "awq-w4a16", -0.006, -0.009, -0.003, calibration="ko70"),
        row("fp8-dynamic", "fp8-dynamic", -0.003, -0.008, 0.002),
    ]


def target(gpu: str = "rtx4090", count: int = 1, measured: bool = False) -> Deployment:
    on = target_from(gpu_named(gpu), None, load_profile("rtx4090-16k"), count)
    return Deployment(model=load_registry()["qwen2.5-14b"], target=on, measured=measured)


def test_choose_takes_the_best_quality_that_fits_and_names_the_runner_up() -> None:
    result = choose(board(), target(), "kmmlu", max_loss=1.0, min_concurrency=1)
    assert result.chosen is not None and result.chosen.checkpoint == "fp8-dynamic"
    assert result.runner_up is not None and result.runner_up.checkpoint == "awq-w4a16"
    assert [c.checkpoint for c in result.candidates][-1] == "bf16"  # 27.5 GiB of weights: pattern A
    assert "pattern A" in result.candidates[-1].reasons[0]
    why, cost, buys, runner_up = result.lines
    assert why.startswith("choose fp8-dynamic") and "rtx4090" in why
    assert "-0.3 points [-0.8, +0.2]" in cost
    assert "planner, profile rtx4090-16k" in buys and "bf16: does not fit" in buys
    assert runner_up.startswith("runner-up: awq-w4a16") and "qualifies too" in runner_up


def test_min_concurrency_moves_the_choice_to_the_smaller_checkpoint() -> None:
    result = choose(board(), target(), "kmmlu", max_loss=1.0, min_concurrency=2)
    assert result.chosen is not None and result.chosen.checkpoint == "awq-w4a16"
    assert result.runner_up is not None and result.runner_up.checkpoint == "fp8-dynamic"
    assert "< --min-concurrency 2" in result.lines[-1]


def test_budget_uses_the_ci_lower_bound_not_the_point_estimate() -> None:
    rows = [*board()[:1], row("fp8-dynamic", "fp8-dynamic", -0.002, -0.012, 0.008)]
    result = choose(rows, target(), "kmmlu", max_loss=1.0, min_concurrency=1)
    assert result.chosen is None
    fp8 = next(c for c in result.candidates if c.checkpoint == "fp8-dynamic")
    assert (
        fp8.memory is not None
        and fp8.memory.fits
        and fp8.reasons == ["KMMLU Δ CI reaches -1.2 points, past the -1 budget"]
    )
    assert any(line.startswith("--max-loss 1.2: admits fp8-dynamic") for line in result.would_qualify)
    assert any("more items" in line for line in result.would_qualify)  # the point Δ is within budget


def test_nothing_qualifies_says_what_would() -> None:
    result = choose(board(), target(), "kmmlu", max_loss=0.5, min_concurrency=1)
    assert result.chosen is None and result.runner_up is None
    assert result.lines[0].startswith("no checkpoint qualifies on rtx4090")
    would = "\n".join(result.would_qualify)
    assert "--count 2: bf16 fits" in would  # 27.5 GiB over two cards
    assert "--gpu a100-40g (39.5 GiB): bf16 fits" in would
    assert "--max-loss 0.8: admits fp8-dynamic" in would


def test_failed_rows_never_qualify() -> None:
    rows = [*board(), row("gptq", "awq-w4a16", 0.0, 0.0, 0.0, status="failed: out of memory")]
    result = choose(rows, target(), "kmmlu", max_loss=1.0, min_concurrency=1)
    failed = next(c for c in result.candidates if c.checkpoint == "gptq")
    assert not failed.qualifies and failed.reasons[0] == "status failed: out of memory"


def test_measured_memory_is_used_only_for_the_gpu_it_was_measured_on() -> None:
    profile = load_profile("rtx4090-16k")
    memory = MemoryReport(
        source="vllm-log", device="gpu", weights_gib=9.1, kv_cache_gib=11.0, kv_cache_tokens=60000,
        max_concurrency=3.7, max_model_len=16384,
    )  # fmt: skip
    run = RunSummary(
        config={}, command="kqe eval", wall_s=1.0, calibrations={}, profile=profile, checkpoints=[],
        failures={}, score_runs=[], comparisons=[], memory={"awq-w4a16": memory},
    )  # fmt: skip
    assert measured_applies(run, gpu_named("rtx4090"), profile, 1)
    assert not measured_applies(run, gpu_named("a100-40g"), profile, 1)
    assert not measured_applies(run, gpu_named("rtx4090"), load_profile("rtx4090-same-kv"), 1)
    # a two-card profile is written for the 4090 too, though its name does not start with it
    two_cards = load_profile("2x4090-tp2")
    tp2_run = run.model_copy(update={"profile": two_cards})
    assert measured_applies(tp2_run, gpu_named("rtx4090"), two_cards, 2)
    assert not measured_applies(tp2_run, gpu_named("rtx4090"), two_cards, 1)
    cpu_run = run.model_copy(update={"memory": {"awq-w4a16": memory.model_copy(update={"device": "cpu"})}})
    assert not measured_applies(cpu_run, gpu_named("rtx4090"), profile, 1)
    result = choose(board(), target(measured=True), "kmmlu", max_loss=1.0, min_concurrency=1)
    assert all(c.memory and c.memory.source == "vllm-log" for c in result.candidates)
    assert "memory (measured (vLLM log, profile rtx4090-16k))" in result.lines[2]
    measured = result.candidates[0].memory
    assert measured is not None and (measured.weights_gib, measured.max_concurrency) == (1.0, 2.0)
    assert measured.max_model_len == profile.max_model_len and measured.profile == "rtx4090-16k"


def test_profile_for_gpu_is_the_default_profiles_toml_names() -> None:
    profiles = serve_profiles()
    assert profile_for_gpu(gpu_named("rtx4090"), profiles) == "rtx4090-16k"
    assert profile_for_gpu(gpu_named("a100-40g"), profiles) == "a100-40g"
    assert profile_for_gpu(gpu_named("l4"), profiles) is None
    # the default comes from the field, not the name: file order and prefixes play no part
    renamed = [p.model_copy(update={"name": f"x-{p.name}"}) for p in reversed(profiles)]
    assert profile_for_gpu(gpu_named("rtx4090"), renamed) == "x-rtx4090-16k"


def test_every_gpu_profile_names_a_known_gpu_and_each_gpu_has_at_most_one_default() -> None:
    gpus = load_gpus()
    profiles = serve_profiles()
    assert all(p.gpu in gpus for p in profiles if p.gpu is not None)
    defaults = [p.gpu for p in profiles if p.default_for_gpu]
    assert len(defaults) == len(set(defaults))
    # every GPU profile but the shared-GPU one is written for a card
    assert {p.name for p in profiles if p.gpu is None and not p.name.startswith("cpu-")} == {"shared-gpu"}


def test_a_default_profile_must_name_its_gpu() -> None:
    with pytest.raises(ValueError, match="default_for_gpu needs gpu"):
        ServeProfile(name="x", max_model_len=1024, max_num_seqs=1, default_for_gpu=True)


def test_the_profile_gpu_fields_do_not_change_its_key() -> None:
    profile = load_profile("rtx4090-16k")
    assert profile.key == profile.model_copy(update={"gpu": None, "default_for_gpu": False}).key


def test_diff_of_the_same_rows_says_nothing_changed() -> None:
    result = diff(board(), board(), "a.csv", "b.csv")
    assert result.nothing_changed and len(result.unchanged) == 3
    assert render(result).startswith("nothing changed")


def test_diff_reports_a_flipped_verdict_and_rows_on_one_side() -> None:
    before = board()
    after = [
        before[0],
        row("awq-w4a16", "awq-w4a16", -0.03, -0.05, -0.01, calibration="en100", kmmlu_verdict=SIGNIFICANT),
        row("gptq-w4a16", "awq-w4a16", 0.0, -0.01, 0.01),
    ]
    result = diff(before, after, "a.csv", "b.csv")
    assert not result.nothing_changed
    [changed] = result.changed
    assert changed.key == "qwen2.5-14b/awq-w4a16"
    assert changed.verdict_flips == [f"kmmlu: {NO_LOSS} → {SIGNIFICANT}"]
    delta = next(c for c in changed.changes if c.column == "kmmlu_delta")
    assert delta.change == pytest.approx(-0.024)
    assert {c.column for c in changed.changes} >= {"calibration", "kmmlu_verdict", "kmmlu_ci_low"}
    assert result.only_in_a == ["qwen2.5-14b/fp8-dynamic"]
    assert result.only_in_b == ["qwen2.5-14b/gptq-w4a16"]
    text = render(result)
    assert "VERDICT FLIPPED" in text and "-0.6 pts → -3.0 pts (-2.4 pts)" in text


def test_diff_of_two_calibration_mixes_pairs_the_rows_of_one_scheme() -> None:
    before = board()
    ko70 = before[1].model_copy(update={"checkpoint": "awq-w4a16-ko70", "calibration": "ko70"})
    en100 = ko70.model_copy(
        update={"checkpoint": "awq-w4a16-en100", "calibration": "en100", "kmmlu_delta": -0.03,
                "date": "2026-11-30T08:00:00+00:00"}
    )  # fmt: skip
    result = diff([before[0], ko70], [before[0], en100], "ko70.csv", "en100.csv")
    [changed] = result.changed
    assert changed.key == "awq-w4a16-ko70 ↔ awq-w4a16-en100"
    assert {c.column for c in changed.changes} == {"checkpoint", "calibration", "kmmlu_delta"}
    assert not result.only_in_a and not result.only_in_b
    assert "(-2.4 pts)" in render(result)


def test_diff_of_two_models_matches_on_checkpoint() -> None:
    other = [r.model_copy(update={"model": "qwen2.5-7b"}) for r in board()]
    result = diff(board(), other, "a.csv", "b.csv")
    assert result.match_on == "checkpoint" and result.nothing_changed


# --- through the click commands: exit code 2 and one line -----------------------------------------


@pytest.fixture
def board_csv(tmp_path: Path) -> Path:
    path = tmp_path / "qwen2.5-14b" / "leaderboard.csv"
    write_leaderboard(path, board())
    return path


def test_choose_command_prints_three_lines_and_the_runner_up(board_csv: Path) -> None:
    result = CliRunner().invoke(choose_command, ["--leaderboard", str(board_csv), "--gpu", "rtx4090"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("choose fp8-dynamic") and lines[3].startswith("runner-up")


def test_choose_json_is_one_object(board_csv: Path) -> None:
    args = ["--leaderboard", str(board_csv), "--gpu", "rtx4090", "--min-concurrency", "2", "--json"]
    result = CliRunner().invoke(choose_command, args)
    assert result.exit_code == 0, result.output
    assert '"checkpoint": "awq-w4a16"' in result.stdout.split('"runner_up"')[0]
    # each candidate's memory is the run's memory record: it reads back as one, planned here
    choice = json.loads(result.stdout)
    memory = {c["checkpoint"]: MemoryReport.model_validate(c["memory"]) for c in choice["candidates"]}
    assert memory["awq-w4a16"].source == "planner" and memory["awq-w4a16"].profile == "rtx4090-16k"
    assert memory["awq-w4a16"].max_model_len == choice["max_model_len"] and memory["awq-w4a16"].fits
    assert not memory["bf16"].fits and memory["bf16"].max_concurrency == 0.0
    assert "pattern A" in memory["bf16"].summary


def test_unknown_gpu_is_one_line(board_csv: Path) -> None:
    result = CliRunner().invoke(choose_command, ["--leaderboard", str(board_csv), "--gpu", "rtx9090"])
    assert_one_line_error(result, "rtx9090", "rtx4090")


def test_missing_columns_are_named_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    path.write_text(f"schema_version,model,checkpoint\n{SCHEMA_VERSION},qwen2.5-14b,bf16\n")
    result = CliRunner().invoke(choose_command, ["--leaderboard", str(path), "--gpu", "rtx4090"])
    assert_one_line_error(result, "lacks columns", "scheme", "status")
    assert_one_line_error(CliRunner().invoke(diff_command, [str(path), str(path)]), "lacks columns", "scheme")


def test_empty_leaderboard_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    result = CliRunner().invoke(choose_command, ["--leaderboard", str(path), "--gpu", "rtx4090"])
    assert_one_line_error(result, "no rows")
    assert_one_line_error(CliRunner().invoke(diff_command, [str(path), str(path)]), "no rows")


def test_unknown_model_of_a_leaderboard_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [r.model_copy(update={"model": "./gone-model"}) for r in board()])
    result = CliRunner().invoke(choose_command, ["--leaderboard", str(path), "--gpu", "rtx4090"])
    assert_one_line_error(result, "gone-model")


def test_a_gpu_count_the_model_cannot_split_into_is_one_line(board_csv: Path) -> None:
    args = ["--leaderboard", str(board_csv), "--gpu", "rtx4090", "--count", "3"]
    assert_one_line_error(
        CliRunner().invoke(choose_command, args), "tensor-parallel-size 3", "valid sizes are 1, 2, 4, 8"
    )


def test_a_collapsed_checkpoint_is_never_chosen_for_that_task() -> None:
    """AWQ answers A on every KMMLU item: its +4.4 points, CI above the budget, is letter preference."""
    collapsed = "collapsed: picks A on 100% of items"
    awq = row("awq-w4a16", "awq-w4a16", 0.044, 0.001, 0.087, kmmlu_verdict=collapsed)
    rows = [board()[0], awq, board()[2]]
    result = choose(rows, target(), "kmmlu", max_loss=1.0, min_concurrency=2)  # only AWQ has the room
    assert result.chosen is None
    judged = next(c for c in result.candidates if c.checkpoint == "awq-w4a16")
    assert judged.memory_ok and not judged.quality_ok
    assert judged.reasons == [f"KMMLU answers {collapsed}: its Δ is letter preference"]
    assert not any("admits awq-w4a16" in line for line in result.would_qualify)  # no budget admits it
    on_mmlu = choose(rows, target(), "mmlu", max_loss=1.0, min_concurrency=2)  # it did not collapse there
    assert on_mmlu.chosen is not None and on_mmlu.chosen.checkpoint == "awq-w4a16"


def test_an_fp8_kv_row_is_planned_with_its_kv_dtype_and_wins_on_concurrency() -> None:
    """The same FP8 weights served with an FP8 KV cache: twice the requests on the target, so with
    a concurrency floor only it qualifies, and it is planned with the KV dtype it was served with."""
    fp8_kv = row("fp8-dynamic+kv-fp8", "fp8-dynamic", -0.003, -0.008, 0.002, kv_cache_dtype="fp8")
    rows = [*board(), fp8_kv]
    plain = choose(rows, target(), "kmmlu", max_loss=1.0, min_concurrency=1)
    by_name = {c.checkpoint: c for c in plain.candidates}
    auto, kv = by_name["fp8-dynamic"], by_name["fp8-dynamic+kv-fp8"]
    assert auto.memory is not None and kv.memory is not None and kv.kv_cache_dtype == "fp8"
    assert kv.memory.max_concurrency is not None and auto.memory.max_concurrency is not None
    assert kv.memory.max_concurrency > 1.9 * auto.memory.max_concurrency
    floor = (auto.memory.max_concurrency + kv.memory.max_concurrency) / 2
    needing = choose(rows, target(), "kmmlu", max_loss=1.0, min_concurrency=floor)
    assert needing.chosen is not None and needing.chosen.checkpoint == "fp8-dynamic+kv-fp8"

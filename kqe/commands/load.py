"""`kqe load`: serving capacity of one checkpoint under long Korean RAG prompts (thin shell).

Serves the checkpoint under a serve profile and loads it, or loads a server already running on this
machine (`--url`). The work is in `evals.capacity.load`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evals.capacity.load import (
    LoadReport,
    LoadSettings,
    local_base_url,
    parse_concurrency,
    run_load,
)
from evals.capacity.load_prompts import rag_prompts
from evals.serving.endpoint import Endpoint
from kqe.commands.guard import Number, echo, run_guarded
from kqe.core import defaults
from kqe.core.errors import UserError


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:,.0f}"


def render(report: LoadReport) -> str:
    """The report as a table for a terminal (times in milliseconds)."""
    where = f"profile {report.profile}" if report.profile else "a running server"
    lines = [
        f"{report.checkpoint} on {where}: prompts of {report.prompt_tokens} tokens "
        f"({'shared' if report.shared_prefix else 'distinct'} passages), {report.max_tokens} output tokens, "
        f"{report.duration_s:g} s per level",
        f"{'conc':>4} {'ok/sent':>9} {'req/s':>6} {'out tok/s':>9} {'TTFT p50':>8} {'p95':>7} "
        f"{'e2e p50':>8} {'p95':>7} {'preempt':>7} {'prefix hit':>10}",
    ]
    for level in report.levels:
        hit = "-" if level.prefix_cache_hit_rate is None else f"{100 * level.prefix_cache_hit_rate:.0f}%"
        preempt = "-" if level.preemptions is None else str(level.preemptions)
        lines.append(
            f"{level.concurrency:>4} {f'{level.requests_ok}/{level.requests_sent}':>9} "
            f"{level.requests_per_s:>6.2f} {level.output_tokens_per_s:>9.1f} {_ms(level.ttft_p50_s):>8} "
            f"{_ms(level.ttft_p95_s):>7} {_ms(level.latency_p50_s):>8} {_ms(level.latency_p95_s):>7} "
            f"{preempt:>7} {hit:>10}"
        )
    failures = [level for level in report.levels if level.first_error]
    lines += [f"concurrency {level.concurrency}: first failure: {level.first_error}" for level in failures]
    return "\n".join(lines)


def _korean_texts() -> dict[str, str]:
    from kqe.core.sources import source_paths
    from kqe.core.workspace import Workspace

    paths = source_paths(Workspace.from_env())
    return {key: path.read_text(encoding="utf-8") for key, path in paths.items() if key.startswith("ko/")}


def _load(options: dict[str, Any], settings: LoadSettings) -> LoadReport:
    from evals.serving.serve import VllmServer, local_profile
    from kqe.core.modelstore import model_dir
    from kqe.core.registry import resolve_model
    from kqe.core.workspace import Workspace, safe_name

    ws = Workspace.from_env()
    spec = resolve_model(options["model"], ws)
    served_dir: Path = options["checkpoint_dir"] or model_dir(spec, ws)
    if not (served_dir / "config.json").is_file():
        raise UserError(f"{served_dir} has no config.json: give --checkpoint-dir a model or checkpoint dir")
    profile = None if options["url"] else local_profile(options["profile"], ws)  # cheap checks first
    prompts = rag_prompts(served_dir, _korean_texts(), settings.seed, settings.shared_prefix)
    if profile is None:
        endpoint = Endpoint(local_base_url(options["url"]), options["api_key"], options["served_name"])
        return run_load(endpoint, prompts, settings)
    served_name = options["served_name"] or safe_name(served_dir.name)
    log_path = ws.results(spec.name) / "logs" / f"load.{served_name}.{profile.name}.log"
    with VllmServer(served_dir, served_name, profile, ws, log_path) as server:
        return run_load(server.endpoint, prompts, settings, profile)


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
@click.option(
    "--url",
    help="Load a server already running on this machine, e.g. http://127.0.0.1:8000 (prompts are sized "
    "with the tokenizer of --checkpoint-dir or --model).",
)
@click.option("--api-key", envvar="KQE_API_KEY", help="API key of the --url server [env KQE_API_KEY].")
@click.option("--served-name", help="Model name to request (--url default: the one the server lists).")
@click.option("--concurrency", default="1,4,8", show_default=True, help="Requests in flight, per level.")
@click.option(
    "--duration-s",
    type=Number(),
    default=30.0,
    show_default=True,
    help="Seconds of sending per level.",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Output tokens per request.",
)
@click.option(
    "--prompt-tokens", type=click.IntRange(min=1), default=1500, show_default=True, help="Tokens per prompt."
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Cap on requests per level.",
)
@click.option(
    "--drain-timeout-s", type=Number(0), default=60.0, show_default=True, help="Wait for requests in flight."
)
@click.option("--shared-prefix", is_flag=True, help="Same passages in every prompt (prefix cache helps).")
@click.option("--seed", type=int, default=defaults.SEED, show_default=True, help="Seed of the passage order.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def load_command(**options: Any) -> None:
    """Send concurrent streaming requests with long Korean RAG prompts to a served checkpoint for a
    bounded time per concurrency level; report output tokens/s, requests/s, time to first token,
    latency and preemptions."""

    def action() -> None:
        settings = LoadSettings(
            concurrency=parse_concurrency(options["concurrency"]),
            duration_s=options["duration_s"],
            max_tokens=options["max_tokens"],
            prompt_tokens=options["prompt_tokens"],
            max_requests=options["max_requests"],
            drain_timeout_s=options["drain_timeout_s"],
            shared_prefix=options["shared_prefix"],
            seed=options["seed"],
        )
        if options["url"]:
            local_base_url(options["url"])  # refuse a remote target before loading anything
        report = _load(options, settings)
        echo(report.to_json() if options["as_json"] else render(report))

    run_guarded(action)

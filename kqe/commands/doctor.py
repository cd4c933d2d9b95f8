"""`kqe doctor LOGFILE|-` / `kqe doctor --metrics URL`: name the OOM pattern a vLLM log (or a running
server) shows and the fix to try first (thin shell)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evals.serving.doctor.diagnose import (
    Diagnosis,
    diagnose,
    diagnose_metrics,
    live_gpu_processes,
    read_gpu_processes,
)
from evals.serving.doctor.kv_pressure import read_metrics
from evals.serving.vllm_log import log_lines, stream_lines
from kqe.commands.console import echo, run_guarded
from kqe.core.errors import UserError

SMI_FIX = "save `nvidia-smi` output to a file (nvidia-smi > smi.txt) and give that"


def render(diagnosis: Diagnosis) -> str:
    """The diagnosis as a few lines for a terminal."""
    lines = [diagnosis.summary]
    if diagnosis.evidence:
        where = f" (line {diagnosis.line})" if diagnosis.line else ""
        lines.append(f"evidence{where}: {diagnosis.evidence}")
    lines += [f"  {n}. {line}" for n, line in enumerate(diagnosis.advice, 1)]
    lines += [f"also: {line}" for line in diagnosis.also]
    return "\n".join(lines)


@click.command("doctor")
@click.argument("logfile", required=False)
@click.option("--profile", help="Serve profile the server ran under, for settings the log does not state.")
@click.option("--metrics", "metrics_url", help="Read a running server's /metrics instead of a log.")
@click.option(
    "--nvidia-smi",
    "smi_file",
    type=click.Path(path_type=Path),
    help="A file of `nvidia-smi` output: the processes beside vLLM are named in the advice "
    "(default: this machine's nvidia-smi, where there is one).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object: pattern, evidence, advice, numbers."
)
def doctor_command(
    logfile: str | None, profile: str | None, metrics_url: str | None, smi_file: Path | None, as_json: bool
) -> None:
    """Read a vLLM log or traceback (a file, or `-` for standard input: `docker logs vllm 2>&1 | kqe
    doctor -`) and name its OOM pattern (A weights, B KV cache / concurrency, C one long context, D
    another process, or none), the line that shows it, and what to try first; or, with --metrics URL,
    say whether a running server is under KV pressure now."""
    from evals.serving.serve import load_profile

    def action() -> None:
        if (logfile is None) == (metrics_url is None):
            raise UserError("kqe doctor: give a LOGFILE (or - for standard input), or --metrics URL")
        if metrics_url:
            diagnosis = diagnose_metrics(read_metrics(metrics_url), metrics_url)
        else:
            served = load_profile(profile) if profile else None  # a wrong name is said before the log is read
            # without a file, this machine's nvidia-smi now: a log from here names what holds its GPU
            smi = read_gpu_processes(log_lines(smi_file, "--nvidia-smi", SMI_FIX)) if smi_file else None
            smi = smi or live_gpu_processes()
            lines = (
                stream_lines(sys.stdin.buffer, "standard input")
                if logfile == "-"
                else log_lines(Path(str(logfile)))
            )
            diagnosis = diagnose(lines, served, smi)
        echo(diagnosis.to_json() if as_json else render(diagnosis))

    run_guarded(action)

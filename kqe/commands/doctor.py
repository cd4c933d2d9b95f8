"""`kqe doctor LOGFILE`: name the OOM pattern a vLLM log shows and the fix to try first (thin shell)."""

from __future__ import annotations

from pathlib import Path

import click

from evals.serving.doctor import Diagnosis, diagnose
from evals.serving.vllm_log import read_log
from kqe.commands.guard import echo, run_guarded


def render(diagnosis: Diagnosis) -> str:
    """The diagnosis as a few lines for a terminal."""
    lines = [diagnosis.summary]
    if diagnosis.evidence:
        lines.append(f"evidence: {diagnosis.evidence}")
    lines += [f"  {n}. {line}" for n, line in enumerate(diagnosis.advice, 1)]
    return "\n".join(lines)


@click.command("doctor")
@click.argument("logfile", type=click.Path(path_type=Path))
@click.option("--profile", help="Serve profile the server ran under, for settings the log does not state.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: pattern, evidence, advice.")
def doctor_command(logfile: Path, profile: str | None, as_json: bool) -> None:
    """Read a vLLM log or traceback and name its OOM pattern (A weights, B KV cache / concurrency,
    C one long context, D another process, or none), the line that shows it, and what to try first."""
    from evals.serving.serve import load_profile

    def action() -> None:
        served = load_profile(profile) if profile else None  # a wrong name is said before the log is read
        diagnosis = diagnose(read_log(logfile), served)
        echo(diagnosis.to_json() if as_json else render(diagnosis))

    run_guarded(action)

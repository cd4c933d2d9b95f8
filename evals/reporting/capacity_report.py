"""The report's serving-capacity section, from run.json: every `vllm bench serve` level of every
checkpoint measured, and why the others were not."""

from __future__ import annotations

from kqe.core.capacity import CapacityReport
from kqe.core.results import RunSummary


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _rows(name: str, report: CapacityReport) -> list[str]:
    return [
        f"| {name} | {level.concurrency} | {level.completed} | {level.output_tokens_per_s:.2f} | "
        f"{level.requests_per_s:.3f} | "
        f"{'—' if level.goodput_requests_per_s is None else f'{level.goodput_requests_per_s:.3f}'} | "
        f"{_ms(level.ttft_p50_ms)} / {_ms(level.ttft_p99_ms)} | {_ms(level.tpot_p50_ms)} / "
        f"{_ms(level.tpot_p99_ms)} | {'—' if level.preemptions is None else level.preemptions} |"
        for level in report.levels
    ]


def capacity_section(run: RunSummary | None) -> list[str]:
    """Lines of the section; empty when the run did not measure load."""
    if run is None or not (run.capacity or run.load_failures):
        return []
    lines = []
    if run.capacity:
        first = next(iter(run.capacity.values()))
        lines += [
            f"`vllm bench serve` (vLLM {first.engine_version}) against each checkpoint under the run's "
            f"profile: {first.workload} prompts of {first.prompt_tokens} tokens, {first.max_tokens} output "
            f"tokens, ~{first.seconds_per_level:g} s per level; goodput SLO TTFT ≤ {first.slo.ttft_ms:g} ms, "
            f"TPOT ≤ {first.slo.tpot_ms:g} ms. Every level is in `run.json` (`capacity`); the leaderboard "
            "keeps the highest.",
            "",
            "| checkpoint | in flight | requests | out tok/s | req/s | goodput req/s | TTFT p50 / p99 ms "
            "| TPOT p50 / p99 ms | preemptions |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, report in run.capacity.items():
            lines += _rows(name, report)
    measured = set(run.capacity) | set(run.load_failures)
    not_asked = [c.name for c in run.checkpoints if c.name not in measured]
    lines += ["", *[f"- {name}: not measured: {why}" for name, why in run.load_failures.items()]]
    if not_asked:
        lines.append(
            f"- {', '.join(not_asked)}: not measured here (served dequantized or planned for the target: "
            "its capacity belongs to the real format's kernels)"
        )
    return lines

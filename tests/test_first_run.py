"""A first `kqe eval` as a user sees it in a terminal: the plan and estimate up front, a progress line
for every stage, the answer at the end; the second run says in one line that it reused everything."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kqe.core.io import write_record
from kqe.core.results import Perplexity, ScoreRun
from kqe.core.schemes import SCHEMES
from kqe.core.workspace import Workspace
from kqe.pipeline.matrix import MatrixEntry
from kqe.pipeline.preview import dominant_stage
from kqe.pipeline.rates import (
    REFERENCE_ITEM_TOKENS,
    Rates,
    recorded_perplexity,
    recorded_scores,
    task_items_per_s,
)
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


def run_in_terminal(args: list[str], cwd: Path, home: Path, timeout: float = 900) -> tuple[str, float]:
    """`kqe ARGS` on a pseudo-terminal (rich draws its live progress there); its output without
    escape sequences, and its wall time."""
    master, slave = pty.openpty()
    env = {**os.environ, "KQE_HOME": str(home), "KQE_SERVE_VENV": str(REPO / ".venv-serve"), "COLUMNS": "160"}
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "kqe.cli", *args], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    chunks = []
    while time.monotonic() - started < timeout:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif child.poll() is not None:
            break
    child.wait(timeout=60)
    os.close(master)
    assert child.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    text = _ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r", "\n")
    return text, time.monotonic() - started


@pytest.mark.slow
@needs_serve_env
def test_a_first_run_shows_its_plan_its_progress_and_its_answer(tiny_model_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_sources(Workspace(root=home, cache=home, serve_venv=REPO / ".venv-serve"))
    args = [
        "eval",
        "--model",
        str(tiny_model_dir),
        "--schemes",
        "bf16,awq-w4a16",
        "--calibration",
        "ko70",
        "--calib-samples",
        "10",
        "--calib-seq-len",
        "64",
        "--tasks",
        "kmmlu_hard,mmlu",
        "--limit",
        "20",
        "--profile",
        "cpu-ci",
    ]
    shown, wall = run_in_terminal(args, tmp_path, home)
    assert "plan: 2 checkpoints; items per task: kmmlu_hard 20, mmlu 20" in shown
    assert re.search(r"bf16 +the base weights, serve, score 40 items", shown)
    assert re.search(r"awq-w4a16-ko70 +build, serve, score 40 items", shown)
    estimate = re.search(r"estimate: about (\d+) (s|min|h) on this machine \(([^)]*)\)", shown)
    assert estimate, shown[-3000:]
    seconds = int(estimate.group(1)) * {"s": 1, "min": 60, "h": 3600}[estimate.group(2)]
    assert 1 <= seconds <= 36_000
    flowing = " ".join(shown.split())  # the estimate's line is wrapped to the terminal's width
    assert re.search(  # one build (the base is served as it is), two of every other stage
        r"the most of it: (building, 1 checkpoint|(server starts|scoring|perplexity), 2 checkpoints) \(",
        flowing,
    )
    for stage in (
        "calibration sets",
        "build awq-w4a16-ko70",
        "serve bf16",
        "score bf16 kmmlu_hard",
        "score awq-w4a16-ko70 mmlu",
        "perplexity awq-w4a16-ko70",
    ):
        assert stage in shown, stage
    said = "KMMLU: KMMLU-HARD dev (offline), 20 of 225 items sampled across subjects — differences under ~"
    assert said in flowing and "items offline (local model folder); KQE_ONLINE=1" in flowing
    assert re.search(  # the answer says which items again, with the MDE the checkpoints had
        r"KMMLU: KMMLU-HARD dev \(offline, 225 items\), 0-shot; 20 sampled across subjects \(seed \d+\) — "
        r"losses under [\d.–]+ points cannot be resolved on these items \(MDE\)",
        flowing,
    )
    assert re.search(r"checkpoint +KMMLU Δ \[95% CI\] +MMLU Δ \[95% CI\] +KMMLU verdict", shown)
    assert re.search(r"awq-w4a16-ko70 +[+-]\d+\.\d \[", shown) and "leaderboard: " in shown
    print(f"first run: estimate {seconds} s ({estimate.group(3)}), measured {wall:.0f} s")  # noqa: T201
    again, _ = run_in_terminal(args, tmp_path, home)
    assert "everything reused: no checkpoint built, no server started (2 checkpoints)" in again
    assert "estimate: everything is done already" in again and "serve bf16" not in again


def test_the_estimate_names_the_stage_that_takes_most_summed_over_checkpoints() -> None:
    """One 10-minute build against five 4-minute scoring passes: scoring is most of the run."""
    scoring = {("score", name): 240.0 for name in ("bf16", "awq-ko70", "awq-en100", "rtn", "fp8")}
    costs = {("build", "awq-ko70"): 600.0, ("serve", "bf16"): 90.0, **scoring}
    assert dominant_stage(costs) == "scoring, 5 checkpoints (20 min)"
    assert dominant_stage({("build", "awq-ko70"): 600.0, ("score", "awq-ko70"): 240.0}) == (
        "building, 1 checkpoint (10 min)"
    )


def test_long_prompt_tasks_are_estimated_at_their_own_rate_not_the_short_items_one() -> None:
    """ko_rag's first run was estimated at the short-item rate (17 min; it took 69): without a record
    its items cost as many short items as their prompts are longer; a recorded task keeps its own."""
    rates = Rates(
        items_per_s=12.0,
        task_items_per_s={"mmlu": 6.0},
        server_start_s=30.0,
        perplexity_s=30.0,
        build_s={},
        source="test",
    )
    long_prompts = 10 * REFERENCE_ITEM_TOKENS
    assert task_items_per_s(rates, "ko_rag", long_prompts) == pytest.approx(1.2)
    assert task_items_per_s(rates, "ko_rag_mc", long_prompts) == pytest.approx(1.2)
    assert task_items_per_s(rates, "ko_rag", REFERENCE_ITEM_TOKENS / 2) == 12.0  # never faster than short
    assert task_items_per_s(rates, "kmmlu", long_prompts) == 12.0  # short items are not scaled
    assert task_items_per_s(rates, "mmlu", None) == 6.0
    recorded = Rates(**{**rates.__dict__, "task_items_per_s": {"ko_rag": 0.4}})
    assert task_items_per_s(recorded, "ko_rag", long_prompts) == 0.4


def test_generation_tasks_are_estimated_by_the_tokens_they_may_generate() -> None:
    """An lm-eval generation task's first run was estimated at the letter-choice rate (43 items/s; it
    generated 1.23 items/s): without a record each item costs a short item per token it may generate."""
    rates = Rates(
        items_per_s=40.0,
        task_items_per_s={"lm-eval:recorded": 2.0},
        server_start_s=30.0,
        perplexity_s=30.0,
        build_s={},
        source="test",
    )
    assert task_items_per_s(rates, "lm-eval:kqe_kmmlu_hard_gen", None, 32) == pytest.approx(40.0 / 32)
    assert task_items_per_s(rates, "lm-eval:one_token", None, 0.5) == 40.0  # never faster than a choice
    assert task_items_per_s(rates, "lm-eval:recorded", None, 32) == 2.0


def _rates(**fields: object) -> Rates:
    values: dict = {"items_per_s": 12.0, "task_items_per_s": {}, "server_start_s": 30.0}
    return Rates(**{**values, "perplexity_s": 60.0, "build_s": {}, "source": "test", **fields})


FP8 = MatrixEntry("fp8-dynamic", "fp8-dynamic", None)
AWQ = MatrixEntry("awq-w4a16-ko70", "awq-w4a16", "ko70")


def test_each_scheme_is_estimated_at_its_own_cost_on_vllm_cpu() -> None:
    """The Xeon's first run took 47 min where 22 were said: FP8 scored 3.6 times slower than the base
    there; W4A16 1.6 times on a Zen 4. On a CPU each checkpoint without a record of its own is the base's
    rate over its scheme's time on that CPU kind; elsewhere (a GPU, a kind never timed) the base's."""
    fp8_time = SCHEMES["fp8-dynamic"].cpu_item_time["AMX"]
    awq_time = SCHEMES["awq-w4a16"].cpu_item_time["AVX-512 BF16"]
    assert fp8_time > 1.0 and awq_time > 1.0  # FP8 and the W4A16 GEMM both slower than oneDNN's bfloat16
    on_cpu, zen4 = _rates(cpu_kind="AMX"), _rates(cpu_kind="AVX-512 BF16")
    assert task_items_per_s(on_cpu, "kmmlu", None, entry=FP8) == pytest.approx(12.0 / fp8_time)
    assert task_items_per_s(zen4, "kmmlu", None, entry=AWQ) == pytest.approx(12.0 / awq_time)
    long_prompts = 10 * REFERENCE_ITEM_TOKENS  # both scalings at once
    assert task_items_per_s(on_cpu, "ko_rag", long_prompts, entry=FP8) == pytest.approx(1.2 / fp8_time)
    assert task_items_per_s(_rates(), "kmmlu", None, entry=FP8) == 12.0
    assert task_items_per_s(on_cpu, "kmmlu", None, entry=AWQ) == 12.0  # W4A16 never timed on AMX
    assert task_items_per_s(_rates(cpu_kind="AVX2"), "kmmlu", None, entry=AWQ) == 12.0
    own = _rates(cpu_kind="AMX", checkpoint_items_per_s={"fp8-dynamic": {"kmmlu": 2.0}})
    assert task_items_per_s(own, "kmmlu", None, entry=FP8) == 2.0
    assert task_items_per_s(own, "mmlu", None, entry=FP8) == pytest.approx(12.0 / fp8_time)


def _score_run(checkpoint: str, rate: float, profile_key: str = "cpu-small") -> ScoreRun:
    return ScoreRun(
        checkpoint=checkpoint,
        task="kmmlu",
        n_items=150,
        accuracy=0.25,
        items_per_s=rate,
        items_path="x.jsonl",
        profile_key=profile_key,
    )


def test_records_of_every_scheme_say_the_base_rate_through_their_scheme_time(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    fp8 = SCHEMES["fp8-dynamic"]
    fp8_time, fp8_ppl_time = fp8.cpu_item_time["AMX"], fp8.cpu_perplexity_time["AMX"]
    runs = {"a": _score_run("bf16", 10.0), "b": _score_run("fp8-dynamic", 3.0), "c": _score_run("other", 1.0)}
    runs["d"] = _score_run("bf16", 99.0, profile_key="cpu-large")  # another profile: another rate
    for name, run in runs.items():
        write_record(stages / f"{name}.score.json", run)
    schemes = {"bf16": "bf16", "fp8-dynamic": "fp8-dynamic"}
    per_checkpoint, base, _ = recorded_scores(tmp_path, "cpu-small", schemes, "AMX")
    assert per_checkpoint == {"bf16": {"kmmlu": 10.0}, "fp8-dynamic": {"kmmlu": 3.0}, "other": {"kmmlu": 1.0}}
    assert base["kmmlu"] == pytest.approx([10.0, 3.0 * fp8_time])  # "other": no scheme known
    _, on_gpu, _ = recorded_scores(tmp_path, "cpu-small", schemes, None)
    assert on_gpu["kmmlu"] == [10.0, 3.0]
    ppl = {"tokens": {}, "nll": {}, "perplexity": {}, "text_sha256": {}, "window_tokens": 512}
    write_record(stages / "f.perplexity.json", Perplexity(checkpoint="fp8-dynamic", wall_s=300.0, **ppl))
    by_checkpoint, base_s = recorded_perplexity(tmp_path, schemes, "AMX")
    assert by_checkpoint == {"fp8-dynamic": 300.0} and base_s == pytest.approx([300.0 / fp8_ppl_time])

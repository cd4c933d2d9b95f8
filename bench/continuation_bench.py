"""Continuation scoring speed: an lm-eval task with multi-token choices through the suite's server path
against stock `lm_eval --model hf`, same items, model and machine (`make bench`, or run alone:
`python -m bench.continuation_bench [--runs N]`).

Items: the KoBEST-COPA-shaped user task of tests/helpers/lm_eval_tasks.py (lm-eval's own kobest_copa YAML
over a local json file, 24 items, two sentence choices each). kqe: `evals.scoring.continuation
.score_choices` against `vllm serve` under the cpu-small profile, the first pass untimed (warm-up),
server start excluded. hf: lm-eval's HF backend, bf16, batch 8, loaded once, model load excluded.
Both in this process's venv for hf and the serve venv for vLLM, one after the other.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench import bench_rows
from bench.suite_bench import MODEL, say
from bench.suite_table import Row, spread, table, write_csv
from evals.scoring.continuation import score_choices
from evals.scoring.job import ScoringJob
from evals.serving import cpu
from evals.serving.serve import VllmServer, local_profile
from evals.tasks import lm_eval_bridge
from kqe.core.workspace import Workspace
from tests.helpers.lm_eval_tasks import write_user_tasks

TASK = "kqe_copa_local"
PROFILE = "cpu-small"


def serve_runs(ws: Workspace, model_dir: Path, folder: Path, runs: int) -> tuple[list[float], int]:
    """Seconds of each timed pass of score_choices over the task's items, and the item count."""
    include = lm_eval_bridge.check_include_path(str(folder))
    items = lm_eval_bridge.load_prompts(lm_eval_bridge.resolve(f"lm-eval:{TASK}", include), include, None, 0)
    seconds = []
    with (
        tempfile.TemporaryDirectory(prefix="kqe-bench-cont-") as tmp,
        VllmServer(model_dir, "bf16", local_profile(PROFILE, ws), ws, Path(tmp) / "server.log") as server,
    ):
        for run in range(runs + 1):  # pass 0 warms the server up
            started = time.perf_counter()
            score_choices(
                items, ScoringJob(model_dir, server.endpoint, Path(tmp) / f"{run}.jsonl", "bf16", "bench")
            )
            if run:
                seconds.append(time.perf_counter() - started)
    return seconds, len(items)


def hf_runs(model_dir: Path, folder: Path, runs: int) -> list[float]:
    """Seconds of each `simple_evaluate` pass of lm-eval's hf backend (model loaded once)."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(model_dir), dtype="bfloat16", device="cpu", batch_size=8)
    manager = TaskManager(include_path=str(folder))
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        lm_eval.simple_evaluate(model=lm, tasks=[TASK], task_manager=manager)
        seconds.append(time.perf_counter() - started)
    return seconds


def continuation_rows(ws: Workspace, runs: int) -> list[Row]:
    model_dir = ws.models() / MODEL
    with tempfile.TemporaryDirectory(prefix="kqe-bench-tasks-") as tmp:
        folder = write_user_tasks(Path(tmp))
        loads = [os.getloadavg()[0]]
        ours_s, items = serve_runs(ws, model_dir, folder, runs)
        loads.append(os.getloadavg()[0])
        theirs_s = hf_runs(model_dir, folder, runs)
        loads.append(os.getloadavg()[0])
    ours, theirs = [items / s for s in ours_s], [items / s for s in theirs_s]
    ratio = statistics.median(ours) / statistics.median(theirs)
    note = f"{cpu.cpu_facts().model}; {items} COPA-shaped items, {runs} runs each; load avg {spread(loads)}"
    return [
        Row(
            "MC continuation scoring, items/s",
            ours,
            "lm_eval --model hf",
            theirs,
            ">= 1x",
            ratio,
            ratio >= 1,
            note,
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="Continuation scoring: kqe's server path vs lm_eval hf.")
    parser.add_argument("--runs", type=int, default=3, help="timed passes of each")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ["DISABLE_MULTIPROC"] = "1"  # lm-eval's forked bootstrap pool can deadlock (tests/conftest.py)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("lm_eval").setLevel(logging.CRITICAL)
    ws = Workspace.from_env()
    if not (ws.models() / MODEL / "config.json").exists():
        raise SystemExit(f"{MODEL} is not installed in {ws.models()}: run `make setup` first")
    rows = continuation_rows(ws, args.runs)
    write_csv(rows, quick=False)
    say(bench_rows.record_suite("continuation", rows, quick=False))
    say(f"{os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.1f}\n{table(rows)}")


if __name__ == "__main__":
    main()

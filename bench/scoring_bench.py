"""Scoring speed on the same items, model and machine: the suite's serve path against stock lm-eval.

- kqe: `evals.scoring.score.score_task` (what `make eval` runs) against `vllm serve` under the cpu-small
  profile, both tasks, wall time of the calls (tokenizer and HTTP included, server start excluded);
- `lm_eval --model hf`: lm-eval's HF backend, bf16, batch 8, in the core venv;
- `lm_eval --model vllm`: lm-eval's in-process vLLM backend in the serve venv, engine arguments
  taken from the same profile; and, in that process, the suite's own one-token read sent straight
  to `vllm.LLM` (no server, no HTTP): what the serve path would be without its server.

The engines run one after another (never two at once), each loaded once and timed over `runs`
passes of the same items with the prefix cache emptied before each pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.scoring.job import ScoringJob
from evals.scoring.score import score_task
from evals.serving.serve import VllmServer, local_profile
from evals.tasks.prompt_tokens import choice_tokenizer
from evals.tasks.prompts import PromptItem, load_prompts, prepare_tasks
from evals.tasks.registry import LM_EVAL_TASKS
from kqe.core.io import read_jsonl
from kqe.core.records import ServeProfile
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace

TASKS = ("kmmlu_hard", "mmlu")
PROFILE = "cpu-small"
RUNNER = Path(__file__).with_name("lm_eval_runner.py")
WARM_UP_ITEMS = 8
"""Items of each task outside the bench set, scored once before timing (first requests are slow)."""
SEED = 1234
"""`make eval`'s item sampling seed."""


@dataclass
class Timed:
    """One way of scoring the bench items: seconds per pass, load time, and its answers."""

    name: str
    runs_s: list[float]
    load_s: float
    preds: dict[str, int] = field(default_factory=dict)
    load_avg: list[float] = field(default_factory=list)


def bench_items(
    ws: Workspace, per_task: int
) -> tuple[Path, dict[str, list[PromptItem]], dict[str, list[PromptItem]]]:
    """`per_task` items of each task sampled across subjects as `make eval` samples them (seed 1234), and
    a few other items of the default LIMIT=300 set to warm the server up with."""
    data = prepare_tasks(ws, list(TASKS), per_task, SEED)
    items = {task: load_prompts(task, data) for task in TASKS}
    others = prepare_tasks(ws, list(TASKS), 300, SEED)
    used = {item.item_id for prompts in items.values() for item in prompts}
    warm_up = {
        task: [item for item in load_prompts(task, others) if item.item_id not in used][:WARM_UP_ITEMS]
        for task in TASKS
    }
    return data, items, warm_up


def measure(ws: Workspace, model_dir: Path, per_task: int, runs: int, engine_runs: int) -> list[Timed]:
    """kqe's serve path, lm-eval hf, lm-eval vllm and vllm.LLM with the suite's read, on one item set."""
    data, items, warm_up = bench_items(ws, per_task)
    profile = local_profile(PROFILE, ws)
    ours = serve_path(ws, model_dir, profile, items, warm_up, runs)
    hf = lm_eval_backend(Path(sys.executable), "hf", model_dir, data, runs, profile)
    encoded = [_encoded(model_dir, item) for prompts in items.values() for item in prompts]
    python = ws.serve_venv / "bin" / "python"
    vllm = lm_eval_backend(python, "vllm", model_dir, data, engine_runs, profile, encoded)
    expected = {task: [item.item_id for item in prompts] for task, prompts in items.items()}
    for other in (hf, vllm):
        if other["item_ids"] != {LM_EVAL_TASKS[task]: ids for task, ids in expected.items()}:
            raise RuntimeError(f"lm-eval scored other items than the suite: {other['item_ids']}")
    return [
        ours,
        Timed("lm_eval --model hf", hf["runs_s"], hf["load_s"], hf["preds"], hf["load_avg"]),
        Timed("lm_eval --model vllm", vllm["runs_s"], vllm["load_s"], vllm["preds"], vllm["load_avg"]),
        Timed(
            "vllm.LLM, suite's one-token read", vllm["engine_runs_s"], vllm["load_s"], {}, vllm["load_avg"]
        ),
    ]


def _encoded(model_dir: Path, item: PromptItem) -> dict[str, Any]:
    encoded = choice_tokenizer(model_dir.resolve()).encode(item)
    return {"context_ids": encoded.context_ids, "choice_ids": encoded.choice_ids}


@contextlib.contextmanager
def _dev_mode() -> Iterator[None]:
    """vLLM's /reset_prefix_cache exists only in its dev mode (loopback and our key still apply)."""
    before = os.environ.get("VLLM_SERVER_DEV_MODE")
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["VLLM_SERVER_DEV_MODE"]
        else:
            os.environ["VLLM_SERVER_DEV_MODE"] = before


def _reset_prefix_cache(server: VllmServer) -> None:
    request = urllib.request.Request(
        f"{server.base_url}/reset_prefix_cache",
        method="POST",
        headers={"Authorization": f"Bearer {server.api_key}"},
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=60) as answer:
        if answer.status != 200:
            raise RuntimeError(f"reset_prefix_cache: HTTP {answer.status}")


def serve_path(
    ws: Workspace,
    model_dir: Path,
    profile: ServeProfile,
    items: dict[str, list[PromptItem]],
    warm_up: dict[str, list[PromptItem]],
    runs: int,
) -> Timed:
    """`score_task` on both tasks through one server, after scoring the warm-up items once."""
    with tempfile.TemporaryDirectory(prefix="kqe-bench-score-") as tmp, _dev_mode():
        started = time.perf_counter()
        log = Path(tmp) / "server.log"
        with VllmServer(model_dir, "bf16", profile, ws, log) as server:
            load_s = time.perf_counter() - started

            def job(items_path: Path) -> ScoringJob:
                return ScoringJob(model_dir, server.endpoint, items_path, "bf16", "bench")

            for task, prompts in warm_up.items():
                score_task(prompts, job(Path(tmp) / f"warm-{task}.jsonl"))
            runs_s, load_avg = [], []
            for run in range(runs):
                _reset_prefix_cache(server)
                load_avg.append(os.getloadavg()[0])
                started = time.perf_counter()
                for task, prompts in items.items():
                    score_task(prompts, job(Path(tmp) / f"{run}-{task}.jsonl"))
                runs_s.append(time.perf_counter() - started)
        last = [read_jsonl(Path(tmp) / f"{runs - 1}-{task}.jsonl", ItemResult) for task in items]
    return Timed(
        "kqe serve path (evals.score)",
        runs_s,
        load_s,
        {r.item_id: r.pred for rs in last for r in rs},
        load_avg,
    )


def lm_eval_backend(
    python: Path,
    backend: str,
    model_dir: Path,
    data: Path,
    runs: int,
    profile: ServeProfile,
    encoded: list[dict[str, Any]] | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run bench/lm_eval_runner.py with `python` and return its report (with the machine's load added);
    `overrides` replace the job's keys (other tasks, a limit, `generate`)."""
    engine = {
        "max_model_len": profile.max_model_len,
        "max_num_seqs": profile.max_num_seqs,
        "enable_prefix_caching": profile.enable_prefix_caching,
        "enable_chunked_prefill": profile.enable_chunked_prefill,
        "enforce_eager": profile.enforce_eager,
        "kv_cache_memory_bytes": round(profile.cpu_kv_cache_gib * 1024**3),
        "max_logprobs": profile.max_logprobs,
    }
    job = {
        "backend": backend,
        "model": str(model_dir),
        "data": str(data),
        "limit": None,
        "runs": runs,
        "tasks": [LM_EVAL_TASKS[task] for task in TASKS],
        "engine": engine,
        "encoded": encoded,
    } | (overrides or {})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if backend == "vllm":
        # vLLM 0.32's offline progress divides by tqdm's elapsed time, which stays 0 when tqdm is off
        env.pop("TQDM_DISABLE", None)
        env |= {"VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1"}
    with tempfile.TemporaryDirectory(prefix=f"kqe-bench-{backend}-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        load_before = os.getloadavg()[0]
        done = subprocess.run(
            [str(python), str(RUNNER), str(job_path), str(out_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"lm_eval --model {backend} failed: {done.stderr[-2000:]}")
        report: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    report["load_avg"] = [load_before, os.getloadavg()[0]]
    return report

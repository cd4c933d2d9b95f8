"""Generation speed and agreement on the same items, model and machine: kqe's generation path against
stock lm-eval (issue #47, items 6 and 7).

- kqe: `evals.scoring.lm_eval_generate.score_lm_eval_generation` (what `make eval` runs for an lm-eval
  `generate_until` task) against `vllm serve` under the cpu-small profile, `defaults.CONCURRENCY`
  requests in flight; the timed pass includes building the task's requests and its judge, as
  lm-eval's `simple_evaluate` does;
- `lm_eval --model local-completions` against the same server, at each `num_concurrent` of
  `LOCAL_CONCURRENCY` (the best of them is the comparison);
- `lm_eval --model hf`: lm-eval's HF backend, bf16, in a fresh process (bench/lm_eval_runner.py), at each
  batch size of `HF_BATCH_SIZES`: 1 is what `lm_eval --model hf` does unless told, 8 what a user who
  tunes it gets on 2 cores.

lm-eval's task index is built once per process for everyone, outside the timed passes, as kqe's is.
The task is the shipped `kqe_kmmlu_hard_gen` (greedy, at most 32 tokens, lm-eval's answer filter), its
first `items` documents for everyone. The server's prefix cache is emptied before each pass. Agreement:
the share of items whose filtered answer equals kqe's, against each alternative.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm_eval.tasks import TaskManager

from bench.scoring_bench import _dev_mode, _reset_prefix_cache, lm_eval_backend
from evals.scoring.job import ScoringJob
from evals.scoring.lm_eval_generate import score_lm_eval_generation
from evals.serving.serve import VllmServer, local_profile
from evals.tasks import lm_eval_bridge
from evals.tasks.lm_eval_generation import GenerationItem, GenerationJudge, generation_task
from kqe.core import defaults
from kqe.core.io import read_jsonl
from kqe.core.records import ServeProfile
from kqe.core.results import ItemResult
from kqe.core.workspace import Workspace

TASK = "kqe_kmmlu_hard_gen"
TASK_DIR = Path(__file__).resolve().parents[1] / "evals" / "tasks" / "generation"
PROFILE = "cpu-small"
LOCAL_CONCURRENCY = (1, 2, 4, 8)
"""`num_concurrent` values tried for lm-eval's API model (8: the profile's max-num-seqs)."""
WARM_UP_ITEMS = 4
"""Documents after the bench set, generated once before timing (first requests are slow)."""


@dataclass
class Generated:
    """One way of generating the bench items: seconds per pass and the filtered answers by doc id."""

    name: str
    runs_s: list[float]
    answers: dict[int, str] = field(default_factory=dict)
    load_avg: list[float] = field(default_factory=list)

    def agreement(self, other: Generated) -> tuple[int, int]:
        """(items with the same filtered answer, items compared) against `other`."""
        shared = set(self.answers) & set(other.answers)
        return len(shared) - len(self.differences(other)), len(shared)

    def differences(self, other: Generated) -> list[str]:
        """`doc: ours/theirs` for each document whose filtered answers differ."""
        shared = sorted(set(self.answers) & set(other.answers))
        return [
            f"{d}: {self.answers[d]!r}/{other.answers[d]!r}"
            for d in shared
            if self.answers[d] != other.answers[d]
        ]


def _first_docs(items: int) -> list[GenerationItem]:
    bridged = lm_eval_bridge.resolve(f"lm-eval:{TASK}", TASK_DIR)
    every = generation_task(bridged, TASK_DIR, None, 0).items
    return sorted(every, key=lambda item: int(item.item_id.rsplit("/", 1)[1]))[: items + WARM_UP_ITEMS]


def _doc(item_id: str) -> int:
    return int(item_id.rsplit("/", 1)[1])


def kqe_pass(server: VllmServer, model_dir: Path, items: int, path: Path) -> dict[int, str]:
    """Build the task's first `items` requests and its judge, then generate and judge them."""
    bridged = lm_eval_bridge.resolve(f"lm-eval:{TASK}", TASK_DIR)
    chosen = _first_docs(items)[:items]
    job = ScoringJob(model_dir, server.endpoint, path, "bf16", "bench", concurrency=defaults.CONCURRENCY)
    score_lm_eval_generation(chosen, job, GenerationJudge(bridged, TASK_DIR), seed=0)
    return {_doc(result.item_id): result.filtered or "" for result in read_jsonl(path, ItemResult)}


def local_completions_pass(
    server: VllmServer, model_dir: Path, items: int, concurrent: int, manager: TaskManager
) -> dict[int, str]:
    """Stock lm-eval's API model against the server, as its docs say to run it (`manager`: its task
    index, built once, as kqe's is)."""
    import lm_eval

    os.environ["OPENAI_API_KEY"] = server.api_key
    args = (
        f"model=bf16,base_url={server.base_url}/v1/completions,tokenizer={model_dir},"
        f"tokenized_requests=True,add_bos_token=True,num_concurrent={concurrent},max_retries=2"
    )
    result = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=args,
        tasks=[TASK],
        task_manager=manager,
        limit=items,
        log_samples=True,
    )
    assert result is not None
    return {int(s["doc_id"]): str(s["filtered_resps"][0]) for s in result["samples"][TASK]}


def _timed(run: Any, name: str, runs: int, server: VllmServer) -> Generated:
    timed = Generated(name, [])
    for _ in range(runs):
        _reset_prefix_cache(server)
        timed.load_avg.append(os.getloadavg()[0])
        started = time.perf_counter()
        timed.answers = run()
        timed.runs_s.append(time.perf_counter() - started)
    return timed


def served(ws: Workspace, model_dir: Path, profile: ServeProfile, items: int, runs: int) -> list[Generated]:
    """kqe's pass and lm-eval local-completions at each concurrency, through one server."""
    with tempfile.TemporaryDirectory(prefix="kqe-bench-gen-") as tmp, _dev_mode():
        folder = Path(tmp)
        with VllmServer(model_dir, "bf16", profile, ws, folder / "server.log") as server:
            warm = _first_docs(items)[items:]
            job = ScoringJob(model_dir, server.endpoint, folder / "warm.jsonl", "bf16", "bench")
            bridged = lm_eval_bridge.resolve(f"lm-eval:{TASK}", TASK_DIR)
            score_lm_eval_generation(warm, job, GenerationJudge(bridged, TASK_DIR), seed=0)
            passes = iter(range(runs))
            ours = _timed(
                lambda: kqe_pass(server, model_dir, items, folder / f"kqe-{next(passes)}.jsonl"),
                "kqe generation (evals.scoring)",
                runs,
                server,
            )
            manager = TaskManager(include_path=str(TASK_DIR))
            theirs = [
                _timed(
                    lambda c=concurrent: local_completions_pass(server, model_dir, items, c, manager),
                    f"lm_eval --model local-completions, num_concurrent={concurrent}",
                    1,
                    server,
                )
                for concurrent in LOCAL_CONCURRENCY
            ]
    return [ours, *theirs]


HF_BATCH_SIZES = (1, 8)
"""lm-eval hf's batch sizes timed: its default, and the batch a user would set on 2 cores."""


def hf_pass(model_dir: Path, items: int, runs: int, profile: ServeProfile, batch_size: int) -> Generated:
    """lm-eval's HF backend on the same documents at `batch_size`, in the core venv."""
    job = {
        "include_path": str(TASK_DIR),
        "tasks": [TASK],
        "limit": items,
        "generate": True,
        "batch_size": batch_size,
    }
    report = lm_eval_backend(Path(sys.executable), "hf", model_dir, TASK_DIR, runs, profile, overrides=job)
    answers = {int(doc): str(answer) for doc, answer in report["answers"][TASK].items()}
    return Generated(
        f"lm_eval --model hf, batch_size={batch_size}", report["runs_s"], answers, report["load_avg"]
    )


def measure(ws: Workspace, model_dir: Path, items: int, runs: int) -> tuple[list[Generated], list[Generated]]:
    """kqe then lm-eval local-completions at each concurrency, and lm-eval hf at each batch size, on
    one item set."""
    profile = local_profile(PROFILE, ws)
    served_passes = served(ws, model_dir, profile, items, runs)
    return served_passes, [hf_pass(model_dir, items, runs, profile, size) for size in HF_BATCH_SIZES]

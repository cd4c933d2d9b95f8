"""Stock lm-eval on the bench items, timed: the `hf` backend (core venv) or in-process `vllm` (serve venv).

    python bench/lm_eval_runner.py JOB.json OUT.json

Run by bench/scoring_bench.py as a fresh process in the environment that has the backend; it imports
nothing from kqe, so that the serve venv (vLLM's pins) can run it. JOB holds: backend, model, data
(prepared task folder), tasks (lm-eval task names), limit (first items of each, or null), runs, engine (vLLM
engine arguments) and, for vllm, encoded (the suite's requests as token ids: the same one-token
read done in-process with vllm.LLM, no HTTP); optionally include_path (another task folder),
generate (a `generate_until` task) and batch_size (hf's, 8 unless given). The model is loaded once;
each run is timed alone. OUT gets load_s, runs_s, engine_runs_s and, of the last run, item_ids and
preds (argmax per item) or, for generate, answers (the filtered answer per task and doc id).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).resolve().parents[1] / "evals" / "tasks"


def _load(job: dict[str, Any]) -> Any:
    if job["backend"] == "hf":
        from lm_eval.models.huggingface import HFLM

        return HFLM(
            pretrained=job["model"], dtype="bfloat16", device="cpu", batch_size=job.get("batch_size", 8)
        )
    from lm_eval.models.vllm_causallms import VLLM

    # Gemma needs its BOS; lm-eval's vllm backend does not add it unless told (DESIGN.md)
    return VLLM(
        pretrained=job["model"], dtype="bfloat16", add_bos_token=True, batch_size="auto", **job["engine"]
    )


def _task_manager(job: dict[str, Any]) -> Any:
    """lm-eval's task index over the job's folder, built once before the timed runs (indexing every
    shipped YAML takes seconds, which a user pays once per process, not per evaluation)."""
    from lm_eval.tasks import TaskManager

    folder = job.get("include_path") or str(TASKS_DIR)
    return TaskManager(include_path=folder, metadata={"kqe_task_data": job["data"]})


def _evaluate(lm: Any, job: dict[str, Any], manager: Any) -> dict[str, Any]:
    import lm_eval

    results = lm_eval.simple_evaluate(
        model=lm, tasks=job["tasks"], task_manager=manager, limit=job["limit"], log_samples=True
    )
    assert results is not None
    samples: dict[str, Any] = results["samples"]
    return samples


def _reset_cache(lm: Any) -> None:
    """Forget cached prefixes so that every timed run computes every prompt (vllm only)."""
    reset = getattr(getattr(lm, "model", None), "reset_prefix_cache", None)
    if reset is not None:
        reset()


def _engine_read(lm: Any, encoded: list[dict[str, Any]]) -> float:
    """The suite's request, one next-token read restricted to the choice tokens, on vllm.LLM itself."""
    from vllm import SamplingParams, TokensPrompt

    started = time.perf_counter()
    groups: dict[tuple[int, ...], list[list[int]]] = {}
    for item in encoded:
        groups.setdefault(tuple(item["choice_ids"]), []).append(item["context_ids"])
    for choice_ids, contexts in groups.items():
        params = SamplingParams(
            max_tokens=1, temperature=0, logprobs=len(choice_ids), logprob_token_ids=list(choice_ids)
        )
        lm.model.generate([TokensPrompt(prompt_token_ids=ids) for ids in contexts], params, use_tqdm=False)
    return time.perf_counter() - started


def _outcome(samples: dict[str, Any], generate: bool) -> dict[str, Any]:
    """What the last run answered: the filtered answer per task and doc id (generation), or the items
    and each one's argmax choice (multiple choice)."""
    if generate:
        answers = {
            task: {str(s["doc_id"]): str(s["filtered_resps"][0]) for s in found}
            for task, found in samples.items()
        }
        return {"answers": answers}
    return {
        "item_ids": {task: [s["doc"]["item_id"] for s in found] for task, found in samples.items()},
        "preds": {
            s["doc"]["item_id"]: max(range(len(s["resps"])), key=lambda i: float(s["resps"][i][0][0]))
            for found in samples.values()
            for s in found
        },
    }


def main(job_path: Path, out_path: Path) -> None:
    job = json.loads(job_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    lm = _load(job)
    report: dict[str, Any] = {"load_s": time.perf_counter() - started, "runs_s": [], "engine_runs_s": []}
    samples: dict[str, Any] = {}
    manager = _task_manager(job)
    for _ in range(job["runs"]):
        _reset_cache(lm)
        started = time.perf_counter()
        samples = _evaluate(lm, job, manager)
        report["runs_s"].append(time.perf_counter() - started)
    for _ in range(job["runs"] if job.get("encoded") else 0):
        _reset_cache(lm)
        report["engine_runs_s"].append(_engine_read(lm, job["encoded"]))
    report |= _outcome(samples, bool(job.get("generate")))
    out_path.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":  # vllm.LLM starts worker processes: the guard keeps them from re-running main
    main(Path(sys.argv[1]), Path(sys.argv[2]))

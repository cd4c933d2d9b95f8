"""Child process of a checkpoint build: `python -m quantize.llmcompressor_child '<OneshotJob JSON>'`.

Runs llmcompressor's oneshot on a copy of the base model (`job.dtype`) and writes the compressed
checkpoint into `job.out_dir`. It runs apart from the suite so that its peak memory can be measured on
its own and a crash (or an out-of-memory kill) cannot leave the parent half-way through a write.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from quantize.calibration import TOKENIZER_FILES

REPORT_NAME = "kqe-oneshot.json"
"""Timings the child leaves in the checkpoint directory."""


class OneshotJob(BaseModel):
    """What the parent asks the child to build."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_dir: str
    out_dir: str
    scheme: str
    recipe: dict[str, Any]
    calibration_path: str | None
    """JSON Lines of calibration samples (`text`, `tokens`), None for data-free schemes."""
    seq_len: int | None
    dtype: str
    """What the base is loaded and calibrated in; the output's 16-bit tensors are bfloat16 either way."""


def allow_cpu_awq() -> None:
    """Make `IntermediatesCache.pin_memory` a no-op when torch has no accelerator.

    llmcompressor 0.14 AWQ pins its cached activations before the scale search to speed up
    host-to-device copies; on a CPU-only torch `Tensor.pin_memory()` raises "Cannot access
    accelerator device when none is available". With no device there is no copy to speed up, so
    skipping the pinning changes nothing else. Patched in this child process only.
    """
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    if torch.accelerator.is_available():
        return

    def skip_pinning(
        self: IntermediatesCache, batch_index: int, input_names: list[str] | None = None
    ) -> None:
        return None

    IntermediatesCache.pin_memory = skip_pinning  # type: ignore[method-assign]


def observe_awq_mappings(report: dict[str, Any]) -> None:
    """Note in `report` which AWQ smoothings llmcompressor actually resolves.

    It silently skips mappings whose shapes do not fit (e.g. v_proj→o_proj when the model has fewer
    KV heads than query heads), and how many survive explains a poor AWQ result. Observation only.
    """
    from llmcompressor.modifiers.transform.awq import AWQModifier

    resolve = AWQModifier._set_resolved_mappings

    def resolve_and_note(self: AWQModifier, model: Any) -> None:
        resolve(self, model)
        report["awq_declared"] = [mapping.smooth_layer for mapping in self.mappings or []]
        smoothed = Counter(m.smooth_name.rsplit(".", 1)[-1] for m in self._resolved_mappings)
        report["awq_smoothed"] = dict(sorted(smoothed.items()))

    AWQModifier._set_resolved_mappings = resolve_and_note  # type: ignore[method-assign]


def calibration_ids(path: Path, tokenizer: Any, seq_len: int) -> list[list[int]]:
    """The samples as token ids, checked to be exactly the token counts the set recorded."""
    ids = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        sample = json.loads(line)
        tokens = tokenizer(sample["text"])["input_ids"]
        if len(tokens) != sample["tokens"] or len(tokens) > seq_len:
            raise RuntimeError(
                f"{path}:{number}: {len(tokens)} tokens, the set recorded {sample['tokens']} "
                f"(seq_len {seq_len}): built with another tokenizer?"
            )
        ids.append(tokens)
    return ids


def calibration_dataset(path: Path, tokenizer: Any, seq_len: int) -> Any:
    """The samples as a `datasets.Dataset` of token ids for llmcompressor."""
    from datasets import Dataset

    ids = calibration_ids(path, tokenizer, seq_len)
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(t) for t in ids]})


def run(job: OneshotJob) -> dict[str, Any]:
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from quantize.schemes import recipe_for

    allow_cpu_awq()
    report: dict[str, Any] = {}
    observe_awq_mappings(report)
    recipe = recipe_for(job.scheme, job.recipe)
    base, out = Path(job.base_dir), Path(job.out_dir)
    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, job.dtype))
    tokenizer = AutoTokenizer.from_pretrained(base)
    loaded = time.monotonic()
    data: dict[str, Any] = {}
    if job.calibration_path is not None:
        assert job.seq_len is not None
        dataset = calibration_dataset(Path(job.calibration_path), tokenizer, job.seq_len)
        data = {
            "dataset": dataset,
            "max_seq_length": job.seq_len,
            "num_calibration_samples": len(dataset),
            "shuffle_calibration_samples": False,  # the set is already shuffled under its seed
        }
    module_names = frozenset(name for name, _ in model.named_modules())
    oneshot(model=model, tokenizer=tokenizer, recipe=recipe.modifiers(module_names), **data)
    calibrated = time.monotonic()
    model.bfloat16()  # what a bfloat16 build saves: the same layout and bytes from every machine
    model.save_pretrained(out, save_compressed=True)
    copy_tokenizer(base, out)
    saved = time.monotonic()
    report.update(
        load_s=round(loaded - started, 2),
        oneshot_s=round(calibrated - loaded, 2),
        save_s=round(saved - calibrated, 2),
        calibration_samples=len(data.get("dataset", [])),
        torch_threads=torch.get_num_threads(),
    )
    return report


def copy_tokenizer(base: Path, out: Path) -> None:
    """Copy the base's tokenizer files into the checkpoint: copied, not re-saved, so that the checkpoint
    tokenizes exactly as the base does."""
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copy2(base / name, out / name)


def child_main(argv: list[str], build: Callable[[OneshotJob], dict[str, Any]], tool: str) -> int:
    """Entry point of a build child: build the job given as JSON in `argv[0]` with `build` (which
    `tool` names in the log) and leave its report in the checkpoint directory."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    job = OneshotJob.model_validate_json(argv[0])
    report = build(job)
    (Path(job.out_dir) / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    logging.getLogger(f"quantize.{tool}").info("%s %s done: %s", tool, job.scheme, report)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:], run, "oneshot"))

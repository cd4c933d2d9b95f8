"""The baseline of `bench.quantize_bench`: what a user writes with llmcompressor alone.

    python bench/bare_oneshot.py BASE_DIR CALIBRATION.jsonl|- SCHEME OUT_DIR

Load the model, tokenize the calibration texts, run `oneshot` with the recipe written out as in
llmcompressor's examples, save compressed. No suite code is imported: it is the comparison point.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def recipe(scheme: str) -> list[Any]:
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    w4a16 = {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 4,
                "type": "int",
                "symmetric": True,
                "strategy": "group",
                "group_size": 128,
            },
        }
    }
    recipes: dict[str, Any] = {
        "awq-w4a16": lambda: [
            AWQModifier(duo_scaling=True, n_grid=20),
            QuantizationModifier(config_groups=w4a16, ignore=["lm_head"]),
        ],
        "gptq-w4a16": lambda: [
            GPTQModifier(config_groups=w4a16, ignore=["lm_head"], dampening_frac=0.01, actorder="static")
        ],
        "w4a16-rtn": lambda: [QuantizationModifier(config_groups=w4a16, ignore=["lm_head"])],
        "fp8-dynamic": lambda: [
            QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])
        ],
        "fp8-static": lambda: [QuantizationModifier(targets="Linear", scheme="FP8", ignore=["lm_head"])],
    }
    return recipes[scheme]()


def main(base: Path, calibration: str, scheme: str, out: Path) -> None:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.pipelines.cache import IntermediatesCache
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not torch.accelerator.is_available():  # AWQ pins memory, which a CPU-only torch refuses
        IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(base)
    data: dict[str, Any] = {}
    if calibration != "-":
        texts = [
            json.loads(line)["text"] for line in Path(calibration).read_text(encoding="utf-8").splitlines()
        ]
        ids = [tokenizer(text)["input_ids"] for text in texts]
        dataset = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]})
        data = {
            "dataset": dataset,
            "max_seq_length": max(len(i) for i in ids),
            "num_calibration_samples": len(ids),
            "shuffle_calibration_samples": False,
        }
    oneshot(model=model, tokenizer=tokenizer, recipe=recipe(scheme), **data)
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]))

"""Child process of an autoawq build: `python -m quantize.autoawq_child '<OneshotJob JSON>'`.

Quantizes the base with the `autoawq` package (0.2.9, deprecated upstream; installed with
`--no-deps`) on the job's calibration windows and saves vLLM's `awq` format (GEMM packing).

Models autoawq does not know are refused before the build (`quantize.build.AUTOAWQ_UNSUPPORTED`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from quantize.llmcompressor_child import OneshotJob, calibration_ids, child_main, copy_tokenizer


def run(job: OneshotJob) -> dict[str, Any]:
    import torch
    from awq import AutoAWQForCausalLM
    from transformers import AutoTokenizer

    from quantize.schemes import AutoAwqW4A16Recipe

    base, out = Path(job.base_dir), Path(job.out_dir)
    recipe = AutoAwqW4A16Recipe.model_validate(job.recipe)
    assert job.calibration_path is not None and job.seq_len is not None
    started = time.monotonic()
    model = AutoAWQForCausalLM.from_pretrained(str(base), torch_dtype=getattr(torch, job.dtype))
    tokenizer = AutoTokenizer.from_pretrained(base)
    ids = calibration_ids(Path(job.calibration_path), tokenizer, job.seq_len)
    loaded = time.monotonic()
    model.quantize(
        tokenizer,
        quant_config=recipe.quant_config(),
        calib_data=ids,
        max_calib_samples=len(ids),
        max_calib_seq_len=job.seq_len,
        duo_scaling=recipe.duo_scaling,
        apply_clip=recipe.apply_clip,
    )
    calibrated = time.monotonic()
    model.model.to(torch.bfloat16)  # as `quantize.llmcompressor_child` saves
    model.save_quantized(str(out))
    copy_tokenizer(base, out)
    saved = time.monotonic()
    return {
        "load_s": round(loaded - started, 2),
        "quantize_s": round(calibrated - loaded, 2),
        "save_s": round(saved - calibrated, 2),
        "calibration_samples": len(ids),
        "torch_threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:], run, "autoawq"))

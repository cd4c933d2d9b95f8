"""Child process of an autoawq build: `python -m quantize._autoawq '<OneshotJob JSON>'`.

Quantizes the base with the `autoawq` package (0.2.9, deprecated upstream; installed with
`--no-deps`) on the job's calibration windows and saves vLLM's `awq` format (GEMM packing).

autoawq 0.2.9 predates Gemma 3. `support_gemma3` teaches it the text model with its Gemma 2 recipe
(same norms and projections) plus what Gemma 3 changed: RMSNorm computes `x·(1 + w)`, so smoothing
must scale `1 + w`, not `w` (as autoawq already does for Gemma 1/2); and sliding and global layers
use different rotary embeddings, while autoawq replays layer 0's arguments to every layer, so each
attention block gets its own rotary embedding back. Layer 0's sliding-window mask is only right for
global layers while the windows are no longer than the sliding window: checked.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from quantize._oneshot import OneshotJob, calibration_ids, child_main, copy_tokenizer


def support_gemma3(model_type: str) -> None:
    """Register `gemma3_text` with autoawq (see the module docstring); other models are left as is."""
    if model_type != "gemma3_text":
        return
    import torch
    from awq.models import auto, base
    from awq.models.gemma2 import Gemma2AWQForCausalLM
    from awq.quantize import scale
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    class Gemma3TextAWQForCausalLM(Gemma2AWQForCausalLM):
        layer_type = "Gemma3DecoderLayer"

        @staticmethod
        def fuse_layers(model: Any) -> None:
            """autoawq's fused blocks serve its own inference, which this build never runs."""

    auto.AWQ_CAUSAL_LM_MODEL_MAP["gemma3_text"] = Gemma3TextAWQForCausalLM
    base.TRANSFORMERS_AUTO_MAPPING_DICT["gemma3_text"] = "AutoModelForCausalLM"
    scale.allowed_norms.append(Gemma3RMSNorm)
    scale_plain_norm = scale.scale_ln_fcs

    @torch.no_grad()
    def scale_norm(ln: Any, fcs: Any, scales: torch.Tensor) -> None:
        if not isinstance(ln, Gemma3RMSNorm):
            scale_plain_norm(ln, fcs, scales)
            return
        scales = scales.to(ln.weight.device)
        ln.weight.copy_(((1 + ln.weight.float()) / scales - 1).to(ln.weight.dtype))
        for fc in fcs if isinstance(fcs, list) else [fcs]:
            fc.weight.mul_(scales.view(1, -1))

    scale.scale_ln_fcs = scale_norm


def own_rotary_embeddings(model: Any) -> None:
    """Give every Gemma 3 attention block the rotary embedding of its own layer type on each call."""
    import torch

    rotary = model.model.rotary_emb

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        kwargs["position_embeddings"] = rotary(hidden, positions, module.layer_type)
        return args, kwargs

    for layer in model.model.layers:
        layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True)


def run(job: OneshotJob) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoTokenizer

    base, out = Path(job.base_dir), Path(job.out_dir)
    config = AutoConfig.from_pretrained(base)
    support_gemma3(config.model_type)
    from awq import AutoAWQForCausalLM

    from quantize.schemes import AutoAwqW4A16Recipe

    recipe = AutoAwqW4A16Recipe.model_validate(job.recipe)
    assert job.calibration_path is not None and job.seq_len is not None
    window = getattr(config, "sliding_window", None)
    if config.model_type == "gemma3_text" and window is not None and job.seq_len > window:
        raise RuntimeError(f"calibration windows of {job.seq_len} tokens exceed the sliding window {window}")
    started = time.monotonic()
    model = AutoAWQForCausalLM.from_pretrained(str(base), torch_dtype=torch.bfloat16)
    if config.model_type == "gemma3_text":
        own_rotary_embeddings(model.model)
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

"""What a checkpoint's `config.json` says about its quantization, in one vocabulary across formats
(built here or by anyone else): the record serving and planning read to decide how to serve it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kqe.core.errors import UserError
from kqe.core.io import loads_json


@dataclass(frozen=True)
class QuantFacts:
    """What a checkpoint's `quantization_config` says, in one vocabulary across formats."""

    method: str
    """`none`, `compressed-tensors`, `awq`, `gptq`, `fp8`, or whatever else the config names."""
    weight_bits: int | None = None
    weight_type: Literal["int", "float"] | None = None
    act_bits: int | None = None
    """Bits of quantized activations; None when activations stay 16-bit (weight-only)."""
    act_type: Literal["int", "float"] | None = None
    act_dynamic: bool | None = None
    """Activation scales computed per token at run time (True) or calibrated and fixed (False)."""
    layout: str | None = None
    """How the weights are stored: compressed-tensors' `format` (`pack-quantized`…) or awq's `version`."""

    @property
    def dequantizable(self) -> bool:
        """Whether `quantize.dequantize` can rebuild this checkpoint's weights as plain ones."""
        if self.method == "compressed-tensors":
            return self.layout == "pack-quantized"
        return self.method == "awq" and str(self.layout).lower() == "gemm" and self.weight_bits == 4

    @property
    def label(self) -> str:
        """Short scheme-like name: `w4a16`, `fp8-dynamic`, `fp8-static`, `w8a8-int8`, `bf16`…"""
        if self.method == "none":
            return "unquantized"
        if self.weight_type == "float" and self.weight_bits == 8:
            if self.act_bits is None:
                return "fp8-w8a16"
            return "fp8-dynamic" if self.act_dynamic else "fp8-static"
        if self.act_bits is None and self.weight_bits is not None:
            return f"w{self.weight_bits}a16"
        if self.act_bits == 8 and self.weight_bits == 8 and self.act_type == "int":
            return "w8a8-int8"
        return f"{self.method}-w{self.weight_bits}a{self.act_bits}"


def _group_facts(group: dict[str, Any]) -> dict[str, Any]:
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    return {
        "weight_bits": weights.get("num_bits"),
        "weight_type": weights.get("type"),
        "act_bits": acts.get("num_bits") if acts else None,
        "act_type": acts.get("type") if acts else None,
        "act_dynamic": bool(acts.get("dynamic")) if acts else None,
    }


def quant_facts(config: dict[str, Any]) -> QuantFacts:
    """The quantization a model `config.json` (as a dict) declares."""
    quant = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(quant, dict):
        return QuantFacts("none")
    method = str(quant.get("quant_method", "unknown"))
    if method == "compressed-tensors":
        groups = list((quant.get("config_groups") or {}).values())
        layout = quant.get("format")
        return QuantFacts(method, **_group_facts(groups[0]), layout=layout) if groups else QuantFacts(method)
    if method in ("awq", "gptq"):
        bits = quant.get("bits") or quant.get("w_bit")
        return QuantFacts(method, weight_bits=bits, weight_type="int", layout=quant.get("version"))
    if method == "fp8":  # vLLM's own FP8 format (`activation_scheme`: dynamic or static)
        dynamic = quant.get("activation_scheme", "dynamic") == "dynamic"
        return QuantFacts(method, 8, "float", 8, "float", dynamic)
    return QuantFacts(method)


def read_quant_facts(checkpoint_dir: Path) -> QuantFacts:
    config_path = checkpoint_dir / "config.json"
    try:
        config = loads_json(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{config_path} cannot be read ({exc}): not a model checkpoint folder") from None
    return quant_facts(config)

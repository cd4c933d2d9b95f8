"""The model registry and MODEL resolution: registry names, hub ids, local folders, and the errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kqe.core.errors import UserError
from kqe.core.registry import (
    DEFAULT_MODEL,
    dense_param_count,
    load_registry,
    resolve_model,
    spec_from_config,
    spec_from_local_dir,
)
from kqe.core.workspace import Workspace

EXPECTED = {
    "gemma3-270m": "google/gemma-3-270m",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2.5-14b": "Qwen/Qwen2.5-14B-Instruct",
    "qwen2.5-32b": "Qwen/Qwen2.5-32B-Instruct",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
    "exaone-3.5-7.8b": "LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct",
    "exaone-3.5-32b": "LGAI-EXAONE/EXAONE-3.5-32B-Instruct",
}

# The keys these config.json files really use (EXAONE 3.5: `num_layers`, no `head_dim`; Gemma 3 4B and
# up: the language model nested in `text_config`).
QWEN_14B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "max_position_embeddings": 32768,
    "model_type": "qwen2",
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 152064,
}
EXAONE_7B_CONFIG = {
    "architectures": ["ExaoneForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "exaone",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_layers": 32,
    "tie_word_embeddings": False,
    "vocab_size": 102400,
}
GEMMA_NESTED_CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "max_position_embeddings": 32768,
    },
    "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
}
FACTS = ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab", "tied_embeddings")


def test_registry_holds_the_models_with_hub_ids_and_the_offline_default() -> None:
    registry = load_registry()
    assert {name: spec.hub_id for name, spec in registry.items()} == EXPECTED
    assert registry[DEFAULT_MODEL].offline == "gemma3-gguf"
    assert [name for name, spec in registry.items() if spec.offline] == [DEFAULT_MODEL]
    for spec in registry.values():
        assert re.fullmatch(r"[0-9a-f]{40}|main", spec.revision), spec.name
        assert spec.heads % spec.kv_heads == 0, spec.name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_registry_parameter_counts_agree_with_the_architecture(name: str) -> None:
    spec = load_registry()[name]
    count = dense_param_count(
        layers=spec.layers,
        hidden=spec.hidden,
        intermediate=spec.intermediate,
        heads=spec.heads,
        kv_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        vocab=spec.vocab,
        tied=spec.tied_embeddings,
    )
    assert count / 1e9 == pytest.approx(spec.params_b, rel=0.005)


@pytest.mark.parametrize(
    ("registry_name", "config"),
    [
        ("qwen2.5-14b", QWEN_14B_CONFIG),
        ("exaone-3.5-7.8b", EXAONE_7B_CONFIG),
        ("gemma3-270m", GEMMA_NESTED_CONFIG),
    ],
)
def test_spec_from_config_reads_the_facts_of_real_config_layouts(registry_name: str, config: dict) -> None:
    expected = load_registry()[registry_name]
    spec = spec_from_config("x", config)
    assert {f: getattr(spec, f) for f in FACTS} == {f: getattr(expected, f) for f in FACTS}
    assert spec.max_context == expected.max_context
    assert spec.params_b == pytest.approx(expected.params_b, rel=0.005)
    assert spec.revision == "local" and spec.hub_id == "x"


def test_spec_from_config_names_the_missing_key() -> None:
    config = {k: v for k, v in QWEN_14B_CONFIG.items() if k != "intermediate_size"}
    with pytest.raises(UserError, match="intermediate_size"):
        spec_from_config("broken", config)


def test_registry_name_resolves_to_its_entry(workspace: Workspace) -> None:
    assert resolve_model("qwen2.5-14b", workspace) == load_registry()["qwen2.5-14b"]


def test_unknown_name_lists_known_names_and_other_forms(workspace: Workspace) -> None:
    with pytest.raises(UserError) as raised:
        resolve_model("qwen9-1b", workspace)
    message = str(raised.value)
    assert "qwen9-1b" in message and "\n" not in message
    assert all(name in message for name in EXPECTED)
    assert "hf:org/name" in message and "local model directory" in message


def test_local_directory_facts_come_from_config_and_weights(tiny_model_dir: Path) -> None:
    spec = spec_from_local_dir(tiny_model_dir)
    assert (spec.layers, spec.hidden, spec.intermediate) == (2, 256, 512)
    assert (spec.heads, spec.kv_heads, spec.head_dim, spec.vocab) == (4, 2, 64, 1024)
    assert spec.tied_embeddings is False and spec.max_context == 2048
    assert spec.local_path == str(tiny_model_dir) and spec.revision == "local"
    # Counted from the safetensors header; a Llama has no biases, so the formula must agree exactly.
    exact = dense_param_count(
        layers=2, hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64, vocab=1024, tied=False
    )
    assert spec.params_b == round(exact / 1e9, 3)


def test_relative_path_resolves_against_the_project_root(workspace: Workspace, tiny_model_dir: Path) -> None:
    shutil.copytree(tiny_model_dir, workspace.root / "models" / "tiny")
    spec = resolve_model("models/tiny", workspace)
    assert spec.name == "tiny"
    assert spec.local_path == str(workspace.root / "models" / "tiny")


def test_paths_that_are_not_models_say_what_is_missing(workspace: Workspace, tiny_model_dir: Path) -> None:
    with pytest.raises(UserError, match="not-a-model"):
        resolve_model("./not-a-model", workspace)
    folder = workspace.root / "half"
    folder.mkdir()
    with pytest.raises(UserError, match=r"config\.json not found: a model folder holds config\.json"):
        resolve_model(str(folder), workspace)
    shutil.copy(tiny_model_dir / "config.json", folder / "config.json")
    with pytest.raises(UserError, match=r"no \*\.safetensors"):
        resolve_model(str(folder), workspace)
    (folder / "model.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(UserError, match="not a readable safetensors file"):
        resolve_model(str(folder), workspace)
    (folder / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="not valid JSON"):
        resolve_model(str(folder), workspace)


def test_hub_reference_must_name_org_and_model(workspace: Workspace) -> None:
    with pytest.raises(UserError, match="hf:org/name"):
        resolve_model("hf:qwen", workspace)
    with pytest.raises(UserError, match=r"write hf:Qwen/Qwen2\.5-3B-Instruct"):
        resolve_model("Qwen/Qwen2.5-3B-Instruct", workspace)


def test_hub_model_offline_is_a_one_line_error(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    # Real hub client with the network switched off (as on this suite's offline machines).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as raised:
        resolve_model("hf:Qwen/Qwen2.5-0.5B-Instruct@main", workspace)
    assert "hf:Qwen/Qwen2.5-0.5B-Instruct@main" in str(raised.value)
    assert "\n" not in str(raised.value)

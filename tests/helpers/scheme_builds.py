"""One real build of every scheme of the tiny model, shared by the slow tests that need them (the
`built` fixture in conftest.py): llmcompressor and, when the optional extra is installed, autoawq."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

from evals.serving.hardware import local_device
from evals.serving.serve import load_profile
from evals.serving.serve_command import engine_env
from kqe.core.modelstore import LocalModel
from kqe.core.records import Checkpoint
from kqe.core.schemes import SCHEMES
from kqe.core.workspace import Workspace
from quantize.build import build_checkpoint
from quantize.calibration import build_calibration_set
from quantize.catalog import SourceSpec
from quantize.schemes import recipe_for
from tests.helpers.prose import korean_prose
from tests.helpers.repo import REPO

HAS_AUTOAWQ = importlib.util.find_spec("awq") is not None
"""autoawq is an optional extra (requirements/autoawq.txt): without it its scheme is left out here."""
BUILT = tuple(name for name in SCHEMES if HAS_AUTOAWQ or name != "autoawq-w4a16")


def calibration_sources(ws: Workspace) -> list[SourceSpec]:
    (ws.sources() / "ko").mkdir(parents=True)
    (ws.sources() / "ko" / "law.txt").write_text(korean_prose(1, 40), encoding="utf-8")
    return [SourceSpec(name="law", lang="ko", glob="ko/law.txt", origin="tests/test_calibration.py")]


def build_every_scheme(tmp: Path, tiny_model_dir: Path, serve_venv: Path) -> dict:
    """One calibration set and one build of every scheme in `BUILT`, in a workspace under `tmp`."""
    ws = Workspace(root=tmp / "project", cache=tmp / "cache", serve_venv=serve_venv)
    calib = build_calibration_set(
        ws, LocalModel("tiny", tiny_model_dir), {"ko": 1.0}, 8, 64, 0, "ko100", calibration_sources(ws)
    )
    ckpts = {
        scheme: build_checkpoint(
            ws, LocalModel("tiny", tiny_model_dir), scheme, recipe_for(scheme), calib, name=f"{scheme}-ko100"
        )
        for scheme in BUILT
    }
    return {"ws": ws, "calib": calib, "ckpts": ckpts}


def load_in_engine(paths: list[str], ws: Workspace) -> list[dict]:
    """Each checkpoint loaded by vLLM's engine in one process (tests/vllm_load_probe.py)."""
    env = os.environ | engine_env(
        load_profile("cpu-ci"), ws, local_device(ws.serve_venv).engine == "gpu", "unused"
    )
    probe = [str(REPO / ".venv-serve" / "bin" / "python"), str(REPO / "tests" / "vllm_load_probe.py")]
    result = subprocess.run([*probe, *paths], capture_output=True, text=True, env=env, timeout=600)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(paths), result.stderr[-2000:]
    return lines


def quant_config(ckpt: Checkpoint) -> dict:
    """The `quantization_config` a built checkpoint wrote into its config.json."""
    return json.loads((Path(ckpt.path) / "config.json").read_text(encoding="utf-8"))["quantization_config"]


def loads_and_runs(directory: Path) -> None:
    """Transformers loads the checkpoint and gives finite logits over the tiny vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    ids = AutoTokenizer.from_pretrained(directory)("대한민국은 민주공화국이다.", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape[-1] == 1024 and torch.isfinite(logits.float()).all()

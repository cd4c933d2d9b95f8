"""One real build of every scheme of the tiny model, shared by the slow tests that need them (the
`built` fixture in conftest.py): llmcompressor and, when the optional extra is installed, autoawq."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kqe.core.workspace import Workspace
from quantize.build import build_checkpoint
from quantize.calibration import build_calibration_set
from quantize.catalog import SourceSpec
from quantize.schemes import SCHEMES, recipe_for
from tests.test_calibration import korean_prose

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
        ws, "tiny", tiny_model_dir, {"ko": 1.0}, 8, 64, 0, "ko100", calibration_sources(ws)
    )
    ckpts = {
        scheme: build_checkpoint(
            ws, "tiny", tiny_model_dir, scheme, recipe_for(scheme), calib, name=f"{scheme}-ko100"
        )
        for scheme in BUILT
    }
    return {"ws": ws, "calib": calib, "ckpts": ckpts}

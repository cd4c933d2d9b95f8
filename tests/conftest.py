"""Shared fixtures: a tiny real model built once per session, and an isolated workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqe.workspace import Workspace
from tests.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama (bf16 safetensors) with a trained byte-level BPE tokenizer."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture()
def workspace(tmp_path: Path) -> Workspace:
    """A workspace whose results and cache live in a temporary folder; serve env is the repo's."""
    root = tmp_path / "project"
    root.mkdir()
    return Workspace(root=root, cache=tmp_path / "cache", serve_venv=REPO / ".venv-serve")


def has_serve_env() -> bool:
    return (REPO / ".venv-serve" / "bin" / "vllm").exists()


needs_serve_env = pytest.mark.skipif(
    not has_serve_env(), reason="serve environment missing: run `make setup`"
)

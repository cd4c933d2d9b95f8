"""The package graph (fast): the floor imports nothing above it, each stage imports only the floor and
the stages before it in STAGE_ORDER (evals may read quantize's records), only the roof imports across
all, so the stages form a DAG; no import cycle between files; evals/reporting alone names leaderboard
columns; no module over 400 lines; test modules import only the shared helpers (`tests/helpers/`)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kqe", "evals", "quantize")
ROOF = ("kqe.commands", "kqe.pipeline", "kqe.cli")
"""Modules allowed to import across every stage."""
QUANTIZE_RECORDS = {"quantize", "quantize.formats"}
"""What evals may read of quantize: what a checkpoint's config says about its quantization."""
STAGE_ORDER = (
    "kqe.core", "quantize", "evals.serving", "evals.tasks", "evals.statistics", "evals.scoring",
    "evals.capacity", "evals.planning", "evals.reporting", "kqe.pipeline", "kqe.commands", "kqe.cli",
)  # fmt: skip
"""The stages, bottom up (docs/contributing.md#architecture-rules): a stage may import those before it."""
REPORTING = "evals.reporting"
"""The one stage that names leaderboard columns and builds LeaderboardRow's cells."""
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `path` imports, at any depth of its code (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _project_modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _in(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _stage(module: str) -> str:
    """The stage a module belongs to: `evals.<stage>`, `kqe.<layer>` or `quantize` (a package root is its
    own: `kqe` holds only the version)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("evals", "kqe") else parts[0]


def _allowed(importer: str, imported: str) -> bool:
    if _in(imported, "kqe.core") or imported == "kqe":
        return True  # the floor (and the package root, which holds only the version)
    if _in(importer, "kqe.core") or importer == "kqe":
        return False
    if any(_in(importer, roof) for roof in ROOF):
        return True
    stage = importer.split(".")[0]
    if _in(imported, stage):
        return True
    return stage == "evals" and imported in QUANTIZE_RECORDS


def _stage_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for importer, imports in _graph().items():
        graph.setdefault(_stage(importer), set()).update(
            _stage(imported) for imported in imports if _stage(imported) != _stage(importer)
        )
    return graph


def test_every_stage_imports_only_stages_before_it() -> None:
    graph = _stage_graph()
    assert set(graph) - {"kqe", "evals"} == set(STAGE_ORDER), "a new stage takes its place in STAGE_ORDER"
    order = {stage: n for n, stage in enumerate(STAGE_ORDER)} | {"kqe": -1, "evals": -1}
    wrong = sorted(
        f"{stage} -> {imported}"
        for stage, imports in graph.items()
        for imported in imports
        if order[imported] >= order[stage]
    )
    assert wrong == []


def test_the_stages_form_a_dag() -> None:
    assert _cycle(_stage_graph()) is None


def test_the_package_graph_has_no_back_edges() -> None:
    wrong = sorted(
        f"{importer} -> {imported}"
        for importer, imports in _graph().items()
        for imported in imports
        if not _allowed(importer, imported)
    )
    assert wrong == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between files (as a path), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if _is_package(nxt, graph):  # importing a package's name binds its submodule, no cycle
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _is_package(name: str, graph: dict[str, set[str]]) -> bool:
    return any(other.startswith(name + ".") for other in graph)


def test_no_import_cycle_between_files() -> None:
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_over_400_lines() -> None:
    long = {
        name: n
        for name, path in _project_modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def _test_imports(path: Path) -> set[str]:
    """The modules under `tests` that `path` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if _in(name, "tests")}


def test_tests_import_only_the_shared_helpers() -> None:
    """A helper two test files need lives in `tests/helpers/`: no test module (nor conftest) is
    imported by another, so no test file's import runs another's module code, and no cycle forms."""
    wrong = sorted(
        f"{path.relative_to(REPO)} -> {name}"
        for path in (REPO / "tests").rglob("*.py")
        if "data" not in path.relative_to(REPO / "tests").parts
        for name in _test_imports(path)
        if not _in(name, "tests.helpers")
    )
    assert wrong == []


def _reporting_free_modules() -> dict[str, Path]:
    return {name: path for name, path in _project_modules().items() if not _in(name, REPORTING)}


def test_only_reporting_builds_leaderboard_cells() -> None:
    """Stages hand typed parts to reporting: outside evals/reporting no function is named `*_cells`, no
    code builds a LeaderboardRow, and no dict names a generated (per-task or ko_rag) column."""
    from evals.reporting.leaderboard_row import GENERATED_COLUMNS

    wrong = []
    for name, path in _reporting_free_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("_cells"):
                wrong.append(f"{name}: def {node.name}")
            elif isinstance(node, ast.Call) and _called(node) in (
                "LeaderboardRow",
                "LeaderboardRow.model_validate",
            ):
                wrong.append(f"{name}: {_called(node)}(…)")
            elif isinstance(node, ast.Dict):
                keys = {
                    k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
                wrong += [f"{name}: column {key!r}" for key in sorted(keys & set(GENERATED_COLUMNS))]
    assert wrong == []


def _called(node: ast.Call) -> str:
    return ast.unparse(node.func)

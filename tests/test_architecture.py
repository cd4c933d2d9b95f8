"""The package graph (fast): the floor imports nothing above it, the stages import only the floor (and
evals may read quantize's records), only the roof imports across all; no import cycle between files;
no module over 400 lines; test modules import only the shared helpers (`tests/helpers/`)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kqe", "evals", "quantize")
ROOF = ("kqe.commands", "kqe.pipeline", "kqe.cli")
"""Modules allowed to import across every stage."""
QUANTIZE_RECORDS = {"quantize", "quantize.formats"}
"""What evals may read of quantize: what a checkpoint's config says about its quantization."""
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

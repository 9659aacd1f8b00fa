"""How the package's modules depend on one another: module-level imports never form a
circle (names used only in annotations are imported under `TYPE_CHECKING` and do not
count), and no module reads the timing pass's private state (`timing._…`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kernbench_cli"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """The kernbench modules `path` imports when it is imported: module-level statements,
    less `if TYPE_CHECKING:` blocks (imports inside functions run later, on a call)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("kernbench_cli"):
                found.add(n.module)
            elif isinstance(n, ast.Import):
                found |= {a.name for a in n.names if a.name.startswith("kernbench_cli")}
    return found


def _graph(package: str) -> dict[str, set[str]]:
    root = PACKAGE.joinpath(*package.split(".")[1:])
    modules = {_module(p): p for p in root.glob("*.py")}
    return {m: {d for d in _runtime_imports(p) if d in modules and d != m}
            for m, p in modules.items()}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in `graph`, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return [*path[path.index(d):], d] if d in path else [*path, m, d]
            if d not in state:
                found = visit(d, [*path, d])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


@pytest.mark.parametrize("package", ["kernbench_cli.hw", "kernbench_cli.sim",
                                     "kernbench_cli.lang", "kernbench_cli.api"])
def test_no_import_circle(package):
    assert _circle(_graph(package)) is None


def test_the_circle_finder_finds_one():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def test_no_module_reads_the_timing_pass_private_state():
    readers = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "timing.py"
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if re.search(r"\btiming\._[a-z]", line)]
    assert readers == []

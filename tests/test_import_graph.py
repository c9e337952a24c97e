"""No import circle among xformer's modules: the import graph, read from the source with ``ast``
(function-level imports included), has no strongly connected component of two or more modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xformer"


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imported(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: dict) -> list[str]:
    """The xformer modules an import statement loads (``from . import x`` loads the module ``x``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != mod:
            out.append(name)
    return out


def _graph(root: Path, module_level_only: bool) -> dict[str, set[str]]:
    known = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, (path, is_pkg) in known.items():
        tree = ast.parse(path.read_text())
        nodes = (
            [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            if module_level_only
            else [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        )
        for node in nodes:
            graph[mod].update(_imported(mod, is_pkg, node, known))
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_level_import_circle():
    assert _circles(_graph(PACKAGE, module_level_only=True)) == []


def test_no_import_circle_through_function_level_imports_either():
    assert _circles(_graph(PACKAGE, module_level_only=False)) == []


def test_the_graph_sees_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "xformer"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from .b import thing\n")
    (pkg / "sub" / "b.py").write_text("def thing():\n    from . import a\n")
    assert _circles(_graph(pkg, module_level_only=False)) == [["xformer.sub.a", "xformer.sub.b"]]
    assert _circles(_graph(pkg, module_level_only=True)) == []

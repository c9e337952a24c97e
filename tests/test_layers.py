"""Layers import down only: model <- data <- train <- config <- jobs <- report / cli. A module of a lower layer
never imports one of a higher layer, at module level or inside a function (read with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xformer"
LAYERS = ("model", "data", "train", "config", "jobs", "report")


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def _upward_imports(root: Path) -> list[tuple[str, str]]:
    found = []
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mod = ".".join(parts[:-1] if is_pkg else parts)
        here = _layer(mod)
        if here is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    targets = [".".join([*base, node.module] if node.module else base)]
                else:
                    targets = [node.module or ""]
            else:
                continue
            for target in targets:
                there = _layer(target)
                if target.startswith("xformer.") and there is not None and there > here:
                    found.append((mod, target))
    return sorted(found)


def test_no_layer_imports_a_higher_one():
    assert _upward_imports(PACKAGE) == []


def test_the_check_sees_an_upward_import(tmp_path):
    pkg = tmp_path / "xformer"
    for sub in ("data", "jobs"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "data" / "base.py").write_text("def f():\n    from xformer.jobs.resume import x\n")
    assert _upward_imports(pkg) == [("xformer.data.base", "xformer.jobs.resume")]

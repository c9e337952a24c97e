"""Exact resume lives in two modules: the checkpoint's loop state and the loader's data position are
read and written only by :mod:`xformer.jobs.resume` (whose docstring states the guarantee) and the
training loader of :mod:`xformer.data.loader`."""

from __future__ import annotations

import ast
from pathlib import Path

import xformer
from xformer.data import loader
from xformer.jobs import resume

PACKAGE = Path(xformer.__file__).parent
HOMES = {Path(resume.__file__), Path(loader.__file__)}


def _offenders(predicate) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in HOMES:
            continue
        tree = ast.parse(path.read_text())
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in ast.walk(tree) if predicate(node)]
    return found


def test_checkpoint_loop_state_is_only_touched_by_the_resume_module():
    """No other module indexes a checkpoint's ``"loops"`` (Lightning's loop progress) or its loader
    position keys; a new place doing so must move here."""

    def reads_loop_state(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Subscript | ast.Call)
            and isinstance(getattr(node, "slice", None), ast.Constant)
            and node.slice.value in {"loops", "batches_done", "epoch_batches"}
        ) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in {"loops", "batches_done", "epoch_batches"}
        )

    assert _offenders(reads_loop_state) == []


def test_no_other_resumable_loader():
    """The training data's checkpoint state is the :class:`~xformer.data.loader.EpochStream`'s alone: no DataLoader
    subclass keeps one."""

    def loader_with_state(node: ast.AST) -> bool:
        if not isinstance(node, ast.ClassDef):
            return False
        bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
        methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        return "DataLoader" in bases and "load_state_dict" in methods

    assert _offenders(loader_with_state) == []
    assert callable(loader.EpochStream.state_dict) and callable(loader.EpochStream.load_state_dict)


def test_the_module_states_the_guarantee_and_names_every_piece():
    doc = resume.__doc__ or ""
    assert "The guarantee" in doc
    for piece in (
        "EpochStream",
        "StepSeed",
        "OptimizerStepIntervals",
        "ResumableCSVLogger",
    ):
        assert piece in doc, piece

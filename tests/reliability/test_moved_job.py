"""A job folder moved or copied to another path, then resumed there, goes on as if resumed in place.

Lightning's ``ModelCheckpoint`` stores absolute paths in each checkpoint and, finding its folder
changed, drops the best score and its top-k record (Lightning#15705): the next validation became the
"best" whatever its score, and that checkpoint was tested. Reference: the same job resumed where it
was trained. The objective is ``val/loss`` with ``mode=max`` so that the best checkpoint is an early
one (the loss falls while training): a resume that forgets the best score picks a later one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.reliability.conftest import TINY, metrics, run_py

BASE = [
    *TINY,
    "trainer.val_check_interval=2",
    "trainer.deterministic=true",
    "objective.metric=val/loss",
    "objective.mode=max",
]


def _run(tmp: Path, job: Path, args: list[str]):
    res = run_py([*BASE, *args, f"hydra.run.dir={job}"], tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _outcome(job: Path) -> dict:
    m = metrics(job)
    best = Path(m["best"]["checkpoint"])
    assert best.parent == job / "checkpoints" and best.is_file(), best  # in the job's own folder
    return {
        "best": (best.name, m["best"]["value"]),
        "test": {k: v for k, v in m["metrics"].items() if k.startswith("test/")},
        "wandb": (job / "wandb_id.txt").read_text().strip(),
    }


def _trained(tmp_path: Path) -> Path:
    job = tmp_path / "trained" / "job"
    _run(tmp_path, job, ["trainer.max_steps=4"])
    return job


def _resume(tmp_path: Path, job: Path) -> dict:
    res = _run(tmp_path, job, ["trainer.max_steps=8", "ckpt_path=last"])
    assert "dirpath has changed" not in res.stdout + res.stderr
    return _outcome(job)


@pytest.mark.slow  # 30-60 s: in `make test-slow`, out of `make test`'s 10-minute budget
@pytest.mark.parametrize("how", ["copied", "moved", "renamed_parent"])
def test_a_relocated_job_keeps_its_best_checkpoint_score_and_wandb_run(tmp_path, how):
    """``copied``: to another absolute path, the original left (as onto another machine);
    ``moved``: renamed; ``renamed_parent``: the folder holding it renamed (a sweep folder's job)."""
    trained = _trained(tmp_path)
    first_best = _outcome(trained)["best"]
    elsewhere = {"copied": tmp_path / "b" / "job", "moved": tmp_path / "moved", "renamed_parent": None}[how]
    if how == "renamed_parent":
        shutil.copytree(trained, tmp_path / "sweep" / "0")
        os.rename(tmp_path / "sweep", tmp_path / "sweep-renamed")
        elsewhere = tmp_path / "sweep-renamed" / "0"
    else:
        shutil.copytree(trained, elsewhere)
    if how == "moved":  # the reference is resumed in place first, from a copy kept where it was trained
        reference = _resume(tmp_path, trained)
        shutil.rmtree(trained)
    else:
        reference = None
    relocated = _resume(tmp_path, elsewhere)
    if reference is None:
        reference = _resume(tmp_path, trained)
    assert reference["best"] == first_best  # the scenario: the best stays a checkpoint of the first 4 steps
    assert relocated == reference
    if how == "copied":  # the original keeps its files
        assert (trained / "checkpoints" / reference["best"][0]).is_file()

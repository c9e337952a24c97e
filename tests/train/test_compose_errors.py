"""Hydra's composition errors (an unknown option of a group, a key the chosen option lacks) are one
``error:`` line with the fix, from ``run.py`` before ``@hydra.main`` (xformer/jobs/compose_check.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xformer.jobs.compose_check import first_error

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["model/pe=rpoe"],
            "model/pe=rpoe: config group model/pe has no option 'rpoe'. Fix: did you mean model/pe=rope?",
        ),
        (["model/pe=rpoe,rope", "-m"], "model/pe=rpoe: config group model/pe has no option 'rpoe'"),
        (
            ["optim.scheduler.floor=2"],
            "optim.scheduler.floor=2: optim.scheduler has no key 'floor'. Fix: floor is a key of "
            "optim/scheduler=cosine, linear",
        ),
        (["modle.d_model=3"], "modle.d_model=3: the root config has no key 'modle'. Fix: did you mean"),
        (["model/pe=rope", "model.pe.bse=3"], "model.pe.bse=3: model.pe has no key 'bse'. Fix: did you mean base?"),
        (["optim.lrr=3"], "optim.lrr=3: optim has no key 'lrr'. Fix: did you mean lr?"),
    ],
)
def test_a_composition_error_is_one_line_with_the_fix(args, expected):
    line = first_error(args, CONF)
    assert line is not None and line.startswith(expected), line
    assert "\n" not in line


def test_what_composes_or_is_not_a_known_kind_is_left_to_hydra():
    assert first_error(["model/pe=rope", "model.d_model=64", "seed=1,2", "-m"], CONF) is None
    assert first_error(["+model.pe.bse=3"], CONF) is None  # added keys are the schema's (stage 1)
    assert first_error(["--cfg", "job"], CONF) is None  # other flags: Hydra alone


def test_run_py_prints_the_line_and_exits_2_without_hydras_dump(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "model/pe=rpoe"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == 2
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert lines == ["error: " + first_error(["model/pe=rpoe"], CONF)], lines

"""Checkpoints of compiled runs load: ``trainer.compile`` compiles the model in place, so parameter
names carry no ``_orig_mod.``; checkpoints written by a wrapped model (older runs) load too.

The eager ``torch.compile`` backend keeps the test fast on a CPU; parameter naming does not depend
on the backend (``trainer.compile=true`` uses inductor)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.reliability.conftest import TINY, env_for, run_py

LINES = ["three hundred and twenty-one", "twelve"]


def _translate(ckpt, tmp_path):
    return subprocess.run(
        [sys.executable, "-m", "xformer.cli", "translate", "--ckpt", str(ckpt)],
        input="\n".join(LINES) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_for(tmp_path),
        timeout=120,
    )


def _evaluate(ckpt, tmp_path, name):
    res = run_py(["mode=eval", f"ckpt_path={ckpt}", "logger=csv", f"hydra.run.dir={tmp_path / name}"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads((tmp_path / name / "metrics.json").read_text())


@pytest.mark.slow  # suite time: ~28 s, torch.compile
def test_a_compiled_run_reloads_for_eval_and_translate_and_old_wrapped_checkpoints_too(tmp_path):
    job = tmp_path / "job"
    res = run_py(
        [
            *TINY,
            "trainer.max_steps=1",
            "trainer.val_check_interval=1",
            "trainer.compile={backend:eager}",
            "logger=csv",
            f"hydra.run.dir={job}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    ckpt = job / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert state["state_dict"] and not any("_orig_mod" in k for k in state["state_dict"])
    trained = json.loads((job / "metrics.json").read_text())

    evaluated = _evaluate(ckpt, tmp_path, "eval")
    assert evaluated["status"] == "finished"
    assert abs(evaluated["metrics"]["test/loss"] - trained["metrics"]["test/loss"]) < 1e-5
    plain = _translate(ckpt, tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert len(plain.stdout.splitlines()) == len(LINES)

    # a checkpoint as a torch.compile wrapper writes it: every model key has _orig_mod.
    wrapped = dict(state)
    wrapped["state_dict"] = {k.replace("model.", "model._orig_mod.", 1): v for k, v in state["state_dict"].items()}
    old = tmp_path / "wrapped.ckpt"
    torch.save(wrapped, old)
    again = _evaluate(old, tmp_path, "eval_wrapped")
    assert again["metrics"]["test/loss"] == evaluated["metrics"]["test/loss"]
    res = _translate(old, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == plain.stdout


def test_uncompiled_state_dict_strips_only_the_wrapper_segment():
    from xformer.train.module import uncompiled_state_dict

    state = {"model._orig_mod.encoder.w": 1, "_orig_mod.head.b": 2, "model.decoder.w": 3}
    assert uncompiled_state_dict(state) == {"model.encoder.w": 1, "head.b": 2, "model.decoder.w": 3}

"""Hydra's composition errors (an unknown option of any group, top-level, nested or ``experiment``; an
unknown group; a key the chosen option lacks) and interpolations that cannot resolve (an environment
variable not set) are one ``error:`` line with the fix, from ``run.py`` before ``@hydra.main`` and before
any folder is made (xformer/config/check.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xformer.config.check import first_error

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
        # a missing node above the leaf is named under its own parent, with the keys there
        (
            ["callbacks.stop_checkpoint.save_on_train_end=false"],
            "callbacks.stop_checkpoint.save_on_train_end=false: callbacks has no key 'stop_checkpoint'. Fix: did "
            "you mean last_checkpoint?",
        ),
        # a parameter of lightning.Trainer that trainer/default.yaml leaves out: '+' adds it, not the same key
        (
            ["trainer.limit_train_batches=5"],
            "trainer.limit_train_batches=5: trainer has no key 'limit_train_batches'. Fix: "
            "+trainer.limit_train_batches=5 (trainer's class takes 'limit_train_batches'",
        ),
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


#: A newcomer's mistakes: the override, the start of its one line. The suggestion prefers an option the
#: typed word contains (``prenorm`` -> ``pre``) and looks for a group among the parent's groups.
MISTAKES = [
    ("trainer=dpp", "trainer=dpp: config group trainer has no option 'dpp'. Fix: did you mean trainer=ddp?"),
    ("data=numbrs", "data=numbrs: config group data has no option 'numbrs'. Fix: did you mean data=numbers?"),
    ("logger=wandbb", "logger=wandbb: config group logger has no option 'wandbb'. Fix: did you mean logger=wandb?"),
    (
        "experiment=multi30k_gpu",
        "experiment=multi30k_gpu: config group experiment has no option 'multi30k_gpu'. "
        "Fix: did you mean experiment=multi30k?",
    ),
    (
        "experiment=claims/c2_params",
        "experiment=claims/c2_params: config group experiment has no option 'claims/c2_params'. Fix: did you mean",
    ),
    (
        "model/nrm=pre",
        "model/nrm=pre: there is no config group model/nrm. Fix: did you mean model/norm=pre?",
    ),
    (
        "model/norm=prenorm",
        "model/norm=prenorm: config group model/norm has no option 'prenorm'. Fix: did you mean model/norm=pre?",
    ),
    (
        "hydra/launcher=slurmm",
        "hydra/launcher=slurmm: config group hydra/launcher has no option 'slurmm'. "
        "Fix: did you mean hydra/launcher=slurm?",
    ),
]


@pytest.mark.parametrize(("arg", "expected"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_group_mistake_is_one_line_with_the_closest_name(arg, expected):
    line = first_error([arg], CONF)
    assert line is not None and line.startswith(expected), line
    assert "\n" not in line


def test_the_options_listed_are_the_groups_files_with_the_claims_among_the_experiments():
    line = first_error(["experiment=claims/c2_params"], CONF)
    claims = sorted(p.stem for p in (CONF / "experiment" / "claims").glob("*.yaml"))
    tops = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    assert line.endswith(f"(options: {', '.join(tops)}, claims/{{{', '.join(claims)}}})"), line
    groups = sorted(p.name for p in (CONF / "model").iterdir() if p.is_dir())
    assert first_error(["model/nrm=pre"], CONF).endswith(f"(groups in model: {', '.join(groups)})")


def test_a_sweep_of_options_is_checked_by_its_first_value():
    assert first_error(["trainer=dpp,ddp", "-m"], CONF).startswith("trainer=dpp: config group trainer has no option")


def test_an_environment_variable_not_set_is_one_line_saying_what_to_export(monkeypatch):
    monkeypatch.delenv("XFORMER_DATA", raising=False)
    line = first_error(["experiment=claims/c1_ffn_ratio", "-m"], CONF)
    assert line == (
        "data.root=${oc.env:XFORMER_DATA}/tinyshakespeare: the environment variable XFORMER_DATA is not set. "
        "Fix: export XFORMER_DATA=/path/to/data (the folder that holds tinyshakespeare/), or set data.root"
    )
    monkeypatch.setenv("XFORMER_DATA", "/somewhere")
    assert first_error(["experiment=claims/c1_ffn_ratio", "-m"], CONF) is None


def test_a_reference_to_a_missing_key_names_it_once():
    # optim.optimizer.lr refers to optim.lr, which refers to the missing key: only optim.lr is named
    line = first_error(["optim.lr=${optim.lrr}"], CONF)
    assert line == "optim.lr=${optim.lrr}: there is no key optim.lrr. Fix: correct the reference, or set +optim.lrr=..."


def _run(args, cwd, env_drop=("HYDRA_FULL_ERROR",)):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for k in env_drop:
        env.pop(k, None)
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("arg", [m[0] for m in MISTAKES[:7]])
def test_run_py_exits_2_with_the_one_line_for_each_mistake(arg, tmp_path):
    res = _run([arg], tmp_path)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert (res.returncode, lines) == (2, ["error: " + first_error([arg], CONF)])
    assert list(tmp_path.iterdir()) == []  # no outputs/ folder


def test_a_claim_sweep_without_its_data_variable_writes_nothing(tmp_path):
    sweep_dir = tmp_path / "sweep"
    res = _run(
        ["experiment=claims/c1_ffn_ratio", f"hydra.sweep.dir={sweep_dir}", "-m"],
        tmp_path,
        env_drop=("HYDRA_FULL_ERROR", "XFORMER_DATA"),
    )
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: data.root=${oc.env:XFORMER_DATA}") and "export XFORMER_DATA=" in lines[0]
    assert list(tmp_path.iterdir()) == []  # neither the sweep folder, a job folder nor a summary


def test_a_key_of_other_options_also_names_the_keys_of_the_chosen_one():
    """``data.batch_size`` on the default task (which sizes batches in tokens): the line names the data options
    that have the key and every key of the chosen data node, ``tokens_per_batch`` among them."""
    from hydra import compose, initialize_config_dir

    line = first_error(["data.batch_size=32"], CONF)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        chosen = [str(k) for k in compose("config").data if not str(k).startswith("_")]
    assert line is not None and "batch_size is a key of data=" in line and "\n" not in line
    assert "tokens_per_batch" in chosen and all(key in line.rsplit("keys: ", 1)[1].split(", ") for key in chosen)

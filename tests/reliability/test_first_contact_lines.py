"""First contact, as a new user types it (issue 53): a refused run leaves no folder, a mistyped option is found by
meaning as well as spelling with its options listed once, a comma list without ``-m`` is one line, the text
``None`` for an optional key gets the fix ``null``, and a type error's fix is written in words. Each case runs
``run.py`` as a script (its ``__main__`` block), each case from its own empty folder, all in one process."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.reliability.conftest import TINY, env_for
from xformer.config_types import Range

CASES = {
    # item 6: refused at each stage of the check; none may leave a folder
    "norm_as_key": ["model.norm=pre"],  # stage 0/1: a group set as a key
    "steps_as_word": ["trainer.max_steps=2k"],  # stage 1: the schema
    "dropout_range": ["model.dropout=1.5"],  # stage 2: the model's signature
    "data_path_typo": ["data=tinyshakespeare", "data.root=./no_such_folder"],  # stage 1: the data folder
    "too_short_max_len": [*TINY, "model/pe=learned", "model.max_len=4"],  # stage 4: the built data vs the model
    # item 8
    "rotary": ["model/pe=rotary"],
    "layernorm": ["model/norm=layernorm"],
    "rotari": ["model/pe=rotari"],
    "unknown_pe": ["model/pe=xyz"],
    "comma_list": ["model.ffn_ratio=2,4"],
    "choice_list": ["model.ffn_ratio=choice(2,4)", "seed=1"],
    # item 10
    "d_qk_None": ["model.d_qk=None"],
    "val_dense_None": ["val_dense.every=None"],
    "d_qk_word": ["model.d_qk=x"],
}


DRIVER = """import contextlib, io, json, os, runpy, sys
from hydra.core.global_hydra import GlobalHydra
run_py = sys.argv[2]
for case in json.load(open(sys.argv[1])):
    GlobalHydra.instance().clear()
    os.chdir(case["cwd"])
    sys.argv = [run_py, *case["args"]]
    err, rc = io.StringIO(), 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(run_py, run_name="__main__")  # its __main__ block, as the script runs it
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:
            import traceback
            traceback.print_exc()
            rc = 1
    print(json.dumps({"rc": rc, "err": err.getvalue()}), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case once, each from its own empty working folder (no ``hydra.run.dir``: the default
    ``outputs/<date>/<time>``); ``name -> {"rc", "err", "cwd"}``."""
    tmp = tmp_path_factory.mktemp("first_contact")
    cases = []
    for name, args in CASES.items():
        (tmp / name).mkdir()
        cases.append({"args": args, "env": {}, "cwd": str(tmp / name)})
    spec = tmp / "cases.json"
    spec.write_text(json.dumps(cases))
    driver = tmp / "driver.py"  # `python run.py <args>` per case, from the case's folder, in one process
    driver.write_text(DRIVER)
    res = subprocess.run(
        [sys.executable, str(driver), str(spec), str(REPO / "run.py")],
        cwd=tmp,
        env=env_for(tmp),
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(cases), res.stderr[-3000:]
    return {name: {**out, "cwd": Path(case["cwd"])} for name, out, case in zip(CASES, lines, cases, strict=True)}


def one_line(out: dict) -> str:
    assert out["rc"] == 2, out
    errors = [line for line in out["err"].splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out["err"], out["err"][-3000:]
    return errors[0]


@pytest.mark.parametrize(
    "name", ["norm_as_key", "steps_as_word", "dropout_range", "data_path_typo", "too_short_max_len"]
)
def test_a_refused_run_leaves_no_folder(name, outcomes):
    """Issue 53, row 6: each refused run (was: ``outputs/<date>/<time>/`` with ``.hydra/`` and ``run.log``)."""
    out = outcomes[name]
    one_line(out)
    assert not list(out["cwd"].iterdir()), list(out["cwd"].rglob("*"))


def test_a_refused_run_keeps_a_folder_it_did_not_make(tmp_path):
    """A refused run into a folder that existed (``hydra.run.dir`` of an earlier run) keeps it and its files."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "notes.txt").write_text("mine")
    res = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "model.dropout=1.5", f"hydra.run.dir={job}"],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert (job / "notes.txt").read_text() == "mine"


def test_an_option_is_found_by_its_other_name(outcomes):
    """``rotary`` is RoPE's other name (was: "Fix: known: alibi, ... (options: alibi, ...)", the list twice)."""
    line = one_line(outcomes["rotary"])
    assert "did you mean model/pe=rope?" in line, line
    assert line.count("alibi") == 1 and line.count("sinusoidal") == 1, line  # the options once


def test_an_alias_of_two_options_names_both(outcomes):
    line = one_line(outcomes["layernorm"])
    assert "did you mean model/norm=post or model/norm=pre?" in line, line
    assert line.count("sandwich") == 1, line


def test_a_misspelled_alias_and_an_unknown_word(outcomes):
    assert "did you mean model/pe=rope?" in one_line(outcomes["rotari"])
    line = one_line(outcomes["unknown_pe"])
    assert "did you mean" not in line and line.count("alibi") == 1 and "rope" in line, line


@pytest.mark.parametrize("name", ["comma_list", "choice_list"])
def test_a_sweep_without_m_is_one_line(name, outcomes):
    """Issue 53: ``model.ffn_ratio=2,4`` without ``-m`` (was: Hydra's 6-line "Ambiguous value", exit 1)."""
    line = one_line(outcomes[name])
    assert line.startswith(f"error: {CASES[name][0]}: a sweep") and line.endswith(" -m"), line


@pytest.mark.parametrize(("name", "key"), [("d_qk_None", "model.d_qk"), ("val_dense_None", "val_dense.every")])
def test_the_text_None_for_an_optional_key_gets_the_fix_null(name, key, outcomes):
    """A W&B agent's ``${args_no_hyphens}`` writes Python's ``None`` (was: "must be an integer. Fix: a value of
    Optional[Annotated[int, Range(ge=1)]]")."""
    line = one_line(outcomes[name])
    assert f"Fix: {key}=null" in line and "args_json" in line, line
    assert "Optional[" not in line and "Annotated[" not in line, line


def test_a_type_error_fix_is_written_in_words(outcomes):
    line = one_line(outcomes["d_qk_word"])
    assert "must be an integer. Fix: give an integer ≥ 1, or null" in line, line
    assert "Optional[" not in line and "Annotated[" not in line, line


@pytest.mark.parametrize(
    ("hint", "words"),
    [
        (typing.Optional[typing.Annotated[int, Range(ge=1)]], "an integer ≥ 1, or null"),
        (typing.Annotated[float, Range(ge=0, lt=1)], "a number in [0, 1)"),
        (typing.Annotated[float, Range(gt=0)], "a number > 0"),
        (typing.Literal["min", "max"], "one of min, max"),
        (bool, "true or false"),
        (tuple[float, float], "a list of 2 values (a number, a number)"),
        (list[int], "a list, each an integer"),
    ],
)
def test_readable_annotations(hint, words):
    from xformer.config_types import readable

    assert readable(hint) == words

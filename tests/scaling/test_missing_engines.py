"""A sweeper, launcher or logger whose engine is missing here is one ``error:`` line, exit 2, and no folder: SLURM
without ``sbatch``/``srun`` (a PATH without them), Optuna, joblib, submitit or W&B not installed (the package made
unimportable in the subprocess: ``sys.modules[name] = None``, which ``import`` and ``find_spec`` both read as not
installed), and an online W&B run whose server refuses the connection (a local port nothing listens on).
On the old code each of these was a traceback (exit 1) or a run that went on, and left a folder behind."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.reliability.conftest import TINY, env_for, run_py

BLOCK = """import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: import raises ModuleNotFoundError, find_spec returns None
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_without(modules: str, args: list[str], tmp: Path, **env: str | None) -> subprocess.CompletedProcess:
    """``python run.py *args`` in ``tmp`` with ``modules`` (comma-separated) not importable."""
    script = tmp / "without.py"
    script.write_text(BLOCK)
    return subprocess.run(
        [sys.executable, str(script), modules, str(REPO / "run.py"), *args],
        cwd=tmp,
        env=env_for(tmp, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(res: subprocess.CompletedProcess) -> str:
    """The single ``error:`` line of a refused command (exit 2, no traceback)."""
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr[-3000:]
    return errors[0]


def no_folder(tmp: Path) -> None:
    left = [p for name in ("outputs", "multirun") for p in (tmp / name).rglob("*")]
    assert not left, left


def test_slurm_without_sbatch_and_srun_is_one_line_and_no_folder(tmp_path):
    """The issue's first row: a PATH without SLURM's programs (was: 25 lines ending in submitit's
    ``Could not detect "srun"``, exit 1, and a ``multirun/<date>/<time>/`` folder)."""
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    res = run_py(["hydra/launcher=slurm", "model.ffn_ratio=2,4", "-m"], tmp_path, PATH=str(empty_path))
    line = one_line(res)
    assert "hydra/launcher=slurm" in line and "sbatch and srun not found" in line and "Fix:" in line, line
    no_folder(tmp_path)


def test_slurm_with_sbatch_but_no_srun_names_srun(tmp_path):
    """A sibling: ``sbatch`` on PATH (a shell script that would queue nothing) but no ``srun``, which submitit
    needs too (the old check looked for ``sbatch`` only)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").chmod(0o755)
    res = run_py(["hydra/launcher=slurm", "model.ffn_ratio=2,4", "-m"], tmp_path, PATH=str(bin_dir))
    line = one_line(res)
    assert "srun not found" in line and "sbatch and" not in line, line
    no_folder(tmp_path)


def test_optuna_not_installed_is_one_line_and_no_folder(tmp_path):
    """``hparams_search=optuna`` without Optuna (was: Hydra's "Error locating target 'optuna.samplers...'", and
    a sweep folder plus ``multirun/optuna/``)."""
    line = one_line(run_without("optuna", ["hparams_search=optuna", "-m"], tmp_path))
    assert line.startswith("error: hparams_search=optuna") and "optuna, which is not installed" in line, line
    assert "pip install optuna" in line, line
    no_folder(tmp_path)


def test_joblib_not_installed_is_one_line_and_no_folder(tmp_path):
    """A launcher that imports its engine only when it launches (joblib): found before the first job."""
    res = run_without("joblib", ["hydra/launcher=joblib_cpu", "model.ffn_ratio=2,4", "-m"], tmp_path)
    line = one_line(res)
    assert line.startswith("error: hydra/launcher=joblib_cpu") and "joblib, which is not installed" in line, line
    no_folder(tmp_path)


def test_submitit_not_installed_is_one_line_and_no_folder(tmp_path):
    """SLURM's launcher imports submitit only when it launches: its plugin's requirements are looked up."""
    res = run_without("submitit", ["hydra/launcher=slurm", "model.ffn_ratio=2,4", "-m"], tmp_path)
    line = one_line(res)
    assert line.startswith("error: hydra/launcher=slurm") and "submitit, which is not installed" in line, line
    no_folder(tmp_path)


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_wandb_not_installed_is_one_line_and_no_folder(multirun, tmp_path):
    """The default logger without W&B (was: a traceback from ``import wandb``, exit 1, and the run's folder)."""
    args = [*TINY, "trainer.max_steps=2", *(["model.ffn_ratio=2,4", "-m"] if multirun else [])]
    line = one_line(run_without("wandb", args, tmp_path))
    assert line.startswith("error: logger=wandb") and "wandb, which is not installed" in line, line
    assert "logger=csv" in line, line
    no_folder(tmp_path)


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_online_wandb_run_without_its_server_is_one_line_and_no_folder(tmp_path):
    """An API key and no ``WANDB_MODE``: W&B would log online; its server refuses the connection (was: the run
    went on and logged offline after W&B's own attempt)."""
    env = {"WANDB_MODE": None, "WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}"}
    line = one_line(run_py([*TINY, "trainer.max_steps=2"], tmp_path, **env))
    assert line.startswith("error: logger=wandb") and "cannot be reached" in line, line
    assert "WANDB_MODE=offline" in line, line
    no_folder(tmp_path)


def test_an_offline_wandb_run_does_not_need_its_server(tmp_path):
    """The same key and unreachable server with ``WANDB_MODE=offline``: nothing to reach, the run is checked and
    goes on (a dry run: the config check, nothing trained)."""
    env = {"WANDB_MODE": "offline", "WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}"}
    res = run_py([*TINY, "sweep.dry_run=true", f"hydra.run.dir={tmp_path / 'job'}"], tmp_path, **env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "config ok" in res.stdout

"""The private Lightning names xformer uses, all behind :mod:`xformer.lightning_compat`: this test
mirrors that module one to one (one test per group of its functions, each calling them on real
Lightning objects), so a Lightning release that moves a name fails here before a run does, and it
checks that no other xformer module names one of them. The supported range is pinned in ``pyproject.toml``.
"""

import re
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from xformer import lightning_compat as compat

PACKAGE = Path(compat.__file__).resolve().parent


def _trainer(tmp_path):
    return L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path)


def test_every_private_name_is_listed_once_and_used_by_the_module():
    source = Path(compat.__file__).read_text()
    names = [name for _, name in compat.PRIVATE_NAMES]
    assert len(names) == len(set(names))
    used = set(re.findall(r"\b(_[A-Za-z][A-Za-z_]*)\b", source.split("PRIVATE_NAMES", 2)[2]))
    assert set(names) <= used, f"listed but not used: {set(names) - used}"


def test_no_other_module_names_a_private_lightning_name():
    """Each listed name appears in lightning_compat.py only."""
    names = [name for _, name in compat.PRIVATE_NAMES]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    offenders = [
        f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "lightning_compat.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, "\n".join(offenders)
    lightning_private = re.compile(r"from lightning[\w.]* import [^#\n]*\b_[A-Za-z]")
    assert not [
        p for p in PACKAGE.rglob("*.py") if p.name != "lightning_compat.py" and lightning_private.search(p.read_text())
    ]


def test_the_validation_decision(tmp_path):
    trainer = _trainer(tmp_path)
    decide = compat.val_check_decision(trainer)
    assert callable(decide)
    compat.set_val_check_decision(trainer, lambda _fetcher: True)
    assert compat.val_check_decision(trainer)(None) is True
    compat.set_val_check_decision(trainer, decide)


def test_every_private_name_says_why():
    """Each entry of PRIVATE_NAMES not owned by the launcher or FSDP code has a comment line above it."""
    body = Path(compat.__file__).read_text().split("PRIVATE_NAMES: tuple", 1)[1].split("\n)\n", 1)[0]
    lines = body.splitlines()
    entries = [i for i, line in enumerate(lines) if line.strip().startswith('("')]
    assert len(entries) == len(compat.PRIVATE_NAMES)
    for i in entries:
        if "launchers" not in lines[i] and "ModelParallel" not in lines[i]:
            assert lines[i - 1].strip().startswith("#"), lines[i]


def test_logger_started(tmp_path):
    wandb = WandbLogger(offline=True, save_dir=str(tmp_path))
    assert compat.logger_started(wandb) is False  # asking did not start a run
    csv = CSVLogger(str(tmp_path))
    assert compat.logger_started(csv) is False
    _ = csv.experiment  # the property creates the logger's experiment
    assert compat.logger_started(csv) is True


def test_csv_headers_refreshed_from_the_file(tmp_path):
    logger = CSVLogger(str(tmp_path))
    trainer = L.Trainer(logger=logger, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path)
    writer = logger.experiment
    writer.metrics_keys = ["a"]
    Path(writer.metrics_file_path).write_text("b,step\n1,0\n")  # columns a pickled copy never saw
    compat.refresh_csv_headers(trainer)
    assert writer.metrics_keys == ["a", "b", "step"]


def test_request_stop_sets_the_flag_the_training_loop_reads(tmp_path):
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path)
    assert trainer.received_sigterm is False
    compat.request_stop(trainer)
    assert trainer.received_sigterm is True


def test_wandb_init_kwargs_are_the_loggers_own(tmp_path):
    logger = WandbLogger(offline=True, save_dir=str(tmp_path))
    init = compat.wandb_init_kwargs(logger)
    assert isinstance(init, dict) and "anonymous" in init
    init["probe"] = 1
    assert compat.wandb_init_kwargs(logger)["probe"] == 1  # edits reach the logger's wandb.init call
    assert compat.wandb_init_kwargs(CSVLogger(str(tmp_path))) is None


def test_the_config_check_reads_lightnings_precision_list():
    """No copy of the list: ``trainer.precision`` is checked against the ``Trainer``'s own annotation."""
    from omegaconf import OmegaConf

    from xformer.config.check import check_targets
    from xformer.model import ConfigError

    for precision in ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true"):
        check_targets(OmegaConf.create({"trainer": {"_target_": "lightning.Trainer", "precision": precision}}))
    with pytest.raises(ConfigError, match=r"^trainer.precision=bf17: must be one of .*32-true"):
        check_targets(OmegaConf.create({"trainer": {"_target_": "lightning.Trainer", "precision": "bf17"}}))


def test_no_module_edits_lightnings_loop_state_in_a_checkpoint():
    """A resume is Lightning's own restore: no xformer module reads or rewrites the ``loops`` entry of a
    checkpoint (the data's epochs run as one Lightning epoch, so there is no epoch boundary to correct)."""
    offenders = [
        f"{p.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"""["']loops["']""", line)
    ]
    assert offenders == []

"""xformer patches or reads a few private Lightning names; this test fails when a Lightning release
moves one of them, before a run does. The supported range is pinned in ``pyproject.toml``.

Where each name is used:

* ``subprocess_script._hydra_subprocess_cmd``, ``._launch_process_observer``: replaced by
  :mod:`xformer.jobs.distributed` so DDP child ranks of a Hydra ``-m`` job run that job only.
* ``WandbLogger._experiment``: :mod:`xformer.jobs.wandb_run` tells a started run (rank 0) apart
  without starting one.
* ``ModelParallelStrategy._data_parallel_size``: ``trainer=fsdp`` (:func:`xformer.jobs.distributed.fsdp_strategy`).
* training-epoch-loop and trainer internals: :mod:`xformer.jobs.steps` (validation and checkpoint
  intervals counted in optimizer steps, consistent resume).
* the CSV logger's writer ``metrics_keys`` / ``metrics_file_path``: ``refresh_csv_headers``.
* ``Trainer._signal_connector.received_sigterm``: set on Ctrl-C by
  :class:`xformer.jobs.callbacks.StopCheckpoint`, so SIGINT stops training as SIGTERM does.
* ``WandbLogger._wandb_init``: :mod:`xformer.jobs.wandb_run` drops the ``anonymous=None`` W&B warns about.
"""

import importlib

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.strategies import ModelParallelStrategy

MODULE_NAMES = [
    ("lightning.pytorch.strategies.launchers.subprocess_script", "_hydra_subprocess_cmd"),
    ("lightning.pytorch.strategies.launchers.subprocess_script", "_launch_process_observer"),
]


@pytest.mark.parametrize("module,name", MODULE_NAMES)
def test_patched_module_functions_exist(module, name):
    assert callable(getattr(importlib.import_module(module), name, None)), f"{module}.{name} moved"


def test_loop_and_trainer_internals_exist(tmp_path):
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        default_root_dir=tmp_path)
    epoch_loop = trainer.fit_loop.epoch_loop
    for name in ("_should_check_val_fx", "_should_accumulate", "_should_check_val_epoch",
                 "_num_ready_batches_reached"):
        assert callable(getattr(epoch_loop, name, None)), f"training epoch loop: {name} moved"
    assert isinstance(epoch_loop._batches_that_stepped, int)
    assert hasattr(trainer.fit_loop, "_can_stop_early")
    assert hasattr(trainer, "_val_check_time_interval")


def test_logger_and_strategy_internals_exist(tmp_path):
    assert WandbLogger(offline=True, save_dir=str(tmp_path))._experiment is None  # not started yet
    writer = CSVLogger(str(tmp_path)).experiment
    assert isinstance(writer.metrics_keys, list) and hasattr(writer, "metrics_file_path")
    strategy = ModelParallelStrategy(data_parallel_size="auto", tensor_parallel_size=1)
    assert strategy._data_parallel_size == "auto"


def test_stop_flag_and_wandb_init_arguments_exist(tmp_path):
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        default_root_dir=tmp_path)
    assert trainer.received_sigterm is False
    trainer._signal_connector.received_sigterm = True
    assert trainer.received_sigterm is True  # the flag the training loop reads
    init = WandbLogger(offline=True, save_dir=str(tmp_path))._wandb_init
    assert isinstance(init, dict) and "anonymous" in init

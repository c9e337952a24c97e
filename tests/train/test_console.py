"""The progress bar's epoch label with ``max_epochs=-1``, and Lightning's log lines
printed once."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest

from tests.train.test_run import TINY, run
from xformer.jobs.driver import RichBar, epoch_label, single_log_lines


@pytest.mark.parametrize(
    "epoch,max_epochs,want",
    [(46, -1, "Epoch 46"), (0, -1, "Epoch 0"), (3, None, "Epoch 3"), (3, 10, "Epoch 3/9"), (0, 1, "Epoch 0/0")],
)
def test_epoch_label(epoch, max_epochs, want):
    assert epoch_label(epoch, max_epochs) == want


def test_rich_bar_description_has_no_negative_total():
    bar = RichBar()
    bar._trainer = SimpleNamespace(max_epochs=-1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RichBar, "trainer", property(lambda self: self._trainer))
        assert bar.train_description(46).strip() == "Epoch 46"
        bar._trainer.max_epochs = 5
        assert bar.train_description(2).strip() == "Epoch 2/4"


def test_single_log_lines_leaves_one_route(monkeypatch):
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    root = logging.getLogger()
    collect = Collect()
    lightning = logging.getLogger("lightning")
    console = logging.StreamHandler()
    monkeypatch.setattr(root, "handlers", [*root.handlers, collect])
    monkeypatch.setattr(lightning, "handlers", [*lightning.handlers, console])
    single_log_lines()
    assert console not in lightning.handlers
    logging.getLogger("lightning.pytorch.utilities.rank_zero").warning("hello once")
    assert records.count("hello once") == 1


def test_a_run_prints_each_lightning_line_once_and_no_negative_epoch_total(tmp_path):
    args = [a for a in TINY if not a.startswith("trainer.enable_progress_bar")]
    res = run(
        [
            *args,
            "trainer.max_steps=3",
            "trainer.val_check_interval=3",
            "trainer.max_epochs=-1",
            "logger=csv",
            "trainer.enable_progress_bar=true",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    both = res.stdout + res.stderr
    # each Lightning line once (the "`Trainer.fit` stopped" line is one that stays on the console;
    # the accelerator report is filtered out altogether, tests/reliability/test_console.py)
    assert both.count("`Trainer.fit` stopped") == 1 and "GPU available:" not in both
    assert "Epoch " in both and not re.search(r"Epoch \d+/-", both)

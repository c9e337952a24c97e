"""The progress bar in optimizer steps of the budget (rate and time left from the steps this run trained, a
plain line without a terminal), and Lightning's log lines printed once."""

from __future__ import annotations

import logging
import re

import pytest

from tests.train.test_run import TINY, run
from xformer.jobs.console import progress_text, single_log_lines


@pytest.mark.parametrize(
    "step, total, steps_run, elapsed, want_rate, want_left",
    [(16, 108, 16, 2.0, "8 steps/s", "0:00:11 left"), (96, 96, 48, 8.0, "6 steps/s", "0:00:00 left")],
)
def test_the_bar_reads_rate_and_time_left_from_this_runs_optimizer_steps(
    step, total, steps_run, elapsed, want_rate, want_left
):
    """Rate = steps trained by this run / its seconds (a resumed run counts from its first step, not from the
    checkpoint's); time left = steps left / rate, to the second (issue 53: 8889 it/s at ~6 steps/s, 0:00:00 left
    with 92 steps to go)."""
    text = progress_text(step, total, steps_run, elapsed, epoch=1)
    assert text.startswith(f"epoch 1 · step {step}/{total} · {want_rate} · ")
    assert text.endswith(want_left)
    rate = steps_run / elapsed
    h, m, s = (int(x) for x in text.split(" · ")[-1].split()[0].split(":"))
    assert h * 3600 + m * 60 + s == int((total - step) / rate)


def test_before_the_first_step_the_bar_claims_no_rate():
    assert progress_text(0, 10, 0, 0.0, epoch=0) == "epoch 0 · step 0/10 · -- steps/s · 0:00:00 elapsed · --:--:-- left"


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


def test_a_run_without_a_terminal_prints_plain_step_lines_and_each_lightning_line_once(tmp_path):
    """stdout is a pipe here: the bar prints plain lines (no control characters, none wrapped), counted in the
    run's optimizer steps, with the data's epoch; each Lightning line once."""
    args = [a for a in TINY if not a.startswith("trainer.enable_progress_bar")]
    res = run(
        [
            *args,
            "trainer.max_steps=10",
            "trainer.val_check_interval=5",
            "logger=csv",
            "trainer.enable_progress_bar=true",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    both = res.stdout + res.stderr
    assert both.count("`Trainer.fit` stopped") == 1 and "GPU available:" not in both
    lines = [line for line in res.stdout.splitlines() if " · step " in line or line.startswith("epoch ")]
    steps = [int(m.group(1)) for line in lines if (m := re.search(r"step (\d+)/10 ", line))]
    assert steps == list(range(1, 11)), lines  # a tenth of 10 steps: every step, and the last
    assert all(re.match(r"epoch \d+ · step \d+/10 · [\d.]+ steps/s · \d:\d\d:\d\d elapsed · ", x) for x in lines)
    assert "\r" not in res.stdout and "\x1b[" not in res.stdout


def test_on_a_terminal_the_bar_is_a_rich_bar_ending_at_the_budget(tmp_path, monkeypatch):
    """stdout a terminal: a Rich bar whose task counts optimizer steps (2 micro-batches a step here) up to
    ``max_steps``, with nothing left at the end."""
    import lightning as L
    import torch

    from xformer.jobs.console import StepBar

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):  # noqa: ARG002 - hook signature
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    bar = StepBar()
    seen = []
    real_stop = None

    def on_train_end(trainer, pl_module):
        task = bar._progress.tasks[0]
        seen.append((task.completed, task.total, task.fields["text"]))
        real_stop(trainer, pl_module)

    real_stop, bar.on_train_end = bar.on_train_end, on_train_end
    trainer = L.Trainer(
        max_steps=3,
        accumulate_grad_batches=2,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=str(tmp_path),
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=2))
    completed, total, text = seen[0]
    assert (completed, total) == (3, 3) and " step 3/3 " in f" {text} " and "0:00:00 left" in text

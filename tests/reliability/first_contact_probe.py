"""Callbacks for the first-contact tests (added to a ``run.py`` job with ``+callbacks.<name>._target_=...``).

* :class:`SlowSteps` -- sleeps after every training batch, so a test can send a second signal
  while the run is still stopping from the first.
* :class:`BarProbe` -- records the progress bar's text, the optimizer step and the data's epoch
  at every training batch start and at the end of training, in a JSON file.
"""

from __future__ import annotations

import json
import time

import lightning as L
from typing_extensions import override

from xformer.data.loader import data_position


class SlowSteps(L.Callback):
    """Sleep ``seconds`` after each training batch."""

    def __init__(self, seconds: float = 0.5) -> None:
        self.seconds = float(seconds)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: D102
        time.sleep(self.seconds)


class BarProbe(L.Callback):
    """Append ``{"epoch", "step", "text"}`` to ``path`` at every batch start and at the end of training: the
    data's epoch, ``trainer.global_step`` and what the progress bar (``xformer.jobs.console.StepBar``) shows
    then."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[dict] = []

    def _record(self, trainer) -> None:
        bar = trainer.progress_bar_callback
        if bar is None or not hasattr(bar, "text"):
            return
        epoch = position[0] if (position := data_position(trainer)) is not None else trainer.current_epoch
        self.rows.append({"epoch": epoch, "step": trainer.global_step, "text": bar.text(trainer)})
        with open(self.path, "w") as f:
            json.dump(self.rows, f)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        self._record(trainer)

    @override
    def on_train_end(self, trainer, pl_module) -> None:  # noqa: D102
        self._record(trainer)


class DiskFull(L.Callback):
    """Raise ``OSError(ENOSPC)`` for ``<dirpath>/last.ckpt`` at training batch ``at``, as a disk
    that fills up during the run would."""

    def __init__(self, dirpath: str, at: int = 2) -> None:
        self.dirpath, self.at = dirpath, int(at)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: D102
        if trainer.global_step >= self.at:
            import errno
            import os

            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{self.dirpath}/last.ckpt")


class SigtermWholeJob(L.Callback):
    """While training step ``step`` is in flight (as its first micro-batch starts): SIGTERM to W&B's
    service process (a child of this process) and, once it has exited, to this process, as SLURM's
    ``scancel`` signals every process of a job."""

    def __init__(self, step: int) -> None:
        self.step = int(step)
        self.sent = False

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:  # noqa: D102
        import os
        import signal
        from pathlib import Path

        if trainer.global_step != self.step - 1 or self.sent:
            return
        self.sent = True
        services = []
        for proc in Path("/proc").iterdir():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == os.getpid() and b"wandb-core" in (proc / "cmdline").read_bytes():
                    services.append(int(proc.name))
            except (OSError, ValueError, IndexError):
                continue
        assert services, "no W&B service process to stop"
        for pid in services:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}/stat").exists() for pid in services):
            for pid in services:
                try:
                    os.waitpid(pid, os.WNOHANG)  # reap it (W&B would, later)
                except ChildProcessError:
                    pass
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

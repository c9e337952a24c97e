"""Atomic checkpoint writes: a crash, SIGKILL or full disk during a save never leaves a half-written
``last.ckpt`` that a resume would load.

:class:`AtomicCheckpointIO` is a Lightning ``CheckpointIO`` plugin. For a local path it serialises the
checkpoint to a temporary file *in the same folder* (``.<name>.tmp-<random>``), flushes and
``fsync``\\ s it, then ``os.replace``\\ s it over the target (atomic on POSIX within one file system) and
``fsync``\\ s the folder so the rename itself survives a power loss. Until the rename, the previous
file is untouched; if anything fails the temporary file is removed and the error propagates.
Remote paths (``s3://`` ...) are left to Lightning's own writer.

The driver does not need to know about it: the ``atomic_checkpoints`` callback
(:class:`xformer.jobs.callbacks.AtomicCheckpoints`, on by default in ``conf/callbacks/default.yaml``)
installs it on the trainer's strategy unless another ``CheckpointIO`` was configured.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


def _is_local(path: Any) -> bool:
    return "://" not in str(path) or str(path).startswith("file://")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)``, atomically: temp file in the same folder, fsync, ``os.replace``.

    Raises:
        Whatever ``torch.save`` or the file system raises; ``path`` then still holds its previous
        content (or does not exist), and no temporary file is left behind.
    """
    path = Path(str(path).removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose ``save_checkpoint`` is atomic for local paths (see module doc)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_torch_save(checkpoint, path)

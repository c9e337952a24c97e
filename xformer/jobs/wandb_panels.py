"""What a W&B run needs so that a sweep's dashboard fills itself (docs/running.md): best-value summaries, the
parameter breakdown, the claim and the swept keys as top-level config keys, and a table of decoded samples."""

from __future__ import annotations

import math
from typing import Annotated, Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import WandbLogger
from typing_extensions import override

from xformer.config.overrides import override_values
from xformer.config_types import Range
from xformer.hydra_job import sweep_dir as sweep_dir_of

from .overrides import swept_keys
from .wandb_run import wandb_call

#: summary kind per validation metric (W&B keeps this aggregate in the run's summary)
SUMMARIES = {"val/loss": "min", "val/ppl": "min", "val/acc": "max", "val/bleu": "max", "val/exact_match": "max"}


def top_level_key(override_key: str) -> str:
    """The run-config key of a swept override: dots and slashes as underscores (``model_ffn_ratio``)."""
    return override_key.lstrip("+~").replace(".", "_").replace("/", "_")


def swept_values(keys: list[str], overrides: list[str], config: dict) -> dict[str, Any]:
    """This job's value of each swept key: from its overrides (``key=value``), else from the config."""
    given = override_values(overrides)
    out: dict[str, Any] = {}
    for key in keys:
        if key in given:
            value: Any = given[key]  # numbers as numbers, so W&B treats the axis as numeric
        else:
            value = config
            for part in key.replace("/", ".").split("."):
                value = value.get(part) if isinstance(value, dict) else None
        out[top_level_key(key)] = value
    return out


class WandbPanels(L.Callback):
    """Fill each W&B run with what the sweep dashboard reads: at ``fit`` start the :data:`SUMMARIES` and
    :meth:`run_config` (``claim``: else from ``experiment=claims/<name>``); after each validation the best values
    of the whole job (in the checkpoint: a resumed W&B run restarts its min/max, wandb#9684) and ``n_samples``
    decoded rows of ``val/samples`` (rank 0)."""

    def __init__(self, n_samples: Annotated[int, Range(ge=0)] = 16, claim: str | None = None) -> None:
        self.n_samples = int(n_samples)
        self.claim = claim
        self._rows: list[list] = []
        self._best: dict[str, float] = {}  # best value of each SUMMARIES key over the whole job

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self._best)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._best = {k: float(v) for k, v in (state_dict.get("best") or {}).items()}

    def _write_summary(self, trainer: L.Trainer) -> None:
        logger = self._wandb(trainer)
        if logger is not None and self._best:
            wandb_call(logger, logger.experiment.summary.update, {k: {SUMMARIES[k]: v} for k, v in self._best.items()})

    @override
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write_summary(trainer)

    @staticmethod
    def _wandb(trainer: L.Trainer) -> WandbLogger | None:
        if not trainer.is_global_zero:
            return None
        return next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (logger := self._wandb(trainer)) is None:
            return
        run = logger.experiment
        for key, kind in SUMMARIES.items():
            run.define_metric(key, summary=kind, step_metric="trainer/global_step")
        run.config.update(self.run_config(pl_module), allow_val_change=True)

    def run_config(self, pl_module: L.LightningModule) -> dict:
        """``params/<part>``, ``claim``, ``swept`` and each swept key's value (:func:`top_level_key`)."""
        out: dict[str, Any] = {}
        breakdown = getattr(getattr(pl_module, "model", None), "param_breakdown", None)
        if callable(breakdown):
            out.update({f"params/{k}": int(v) for k, v in breakdown().items()})
        overrides, sweep_dir, choice = [], None, None
        if HydraConfig.initialized():
            hc = HydraConfig.get()
            overrides = list(hc.overrides.task)
            sweep_dir = sweep_dir_of(hc)
            choice = hc.runtime.choices.get("experiment")
        claim = self.claim or (str(choice).split("/", 1)[1] if choice and str(choice).startswith("claims/") else None)
        if claim:
            out["claim"] = claim
        keys = swept_keys(sweep_dir)
        out["swept"] = keys
        config = getattr(pl_module, "checkpoint_meta", {}).get("config") or {}
        out.update(swept_values(keys, overrides, config))
        return out

    @override
    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._rows = []

    @override
    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        if (
            trainer.sanity_checking
            or len(self._rows) >= self.n_samples
            or self._wandb(trainer) is None
            or not isinstance(batch, dict)
            or "tgt_text" not in batch
            or hasattr(pl_module.model, "reshard")
        ):  # FSDP-sharded: decoding needs every rank
            return
        take = min(self.n_samples - len(self._rows), len(batch["tgt_text"]))
        part = {
            k: (v[:take] if isinstance(v, (list, tuple)) or hasattr(v, "dim") and v.dim() > 0 else v)
            for k, v in batch.items()
        }
        hyps = pl_module.generate(part)
        srcs = part.get("src_text") or [pl_module.detokenize(row) for row in part["src"].tolist()]
        step = trainer.global_step
        self._rows += [[step, s, r, h] for s, r, h in zip(srcs, part["tgt_text"], hyps, strict=True)]

    @override
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        for key, kind in SUMMARIES.items():
            v, old = float(trainer.callback_metrics.get(key, math.nan)), self._best.get(key)
            if math.isfinite(v) and (old is None or (v < old if kind == "min" else v > old)):
                self._best[key] = v
        self._write_summary(trainer)
        if (logger := self._wandb(trainer)) is not None and self._rows:
            columns = ["step", "source", "reference", "hypothesis"]
            logger.log_table("val/samples", columns=columns, data=self._rows, step=trainer.global_step)

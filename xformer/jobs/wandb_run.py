"""Everything xformer does with a job's W&B run (docs/running.md, "W&B"): its name, group and tags within W&B's
limits, resuming it, the offline fallback, the summary at the end. The API key is read by W&B alone."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Callable

from hydra.utils import instantiate
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig

from xformer.config.overrides import key_of
from xformer.lightning_compat import wandb_init_kwargs

from .engines import wandb_has_api_key
from .overrides import swept_keys

log = logging.getLogger("xformer")

WANDB_ID_FILE = "wandb_id.txt"


def run_fields(node: DictConfig, info: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """The W&B ``(kwargs, full)`` (:func:`fit_wandb_fields`) of this job's run: ``node``'s values, else the name
    the overrides that differ between a sweep's jobs, the group the sweep folder, tags ``node.tags`` + overrides."""
    swept = [o for o in info["overrides"] if not o.startswith(("hydra.", "trainer.max_steps"))]
    varying = set(swept_keys(info.get("sweep_dir")))
    differ = [o for o in swept if key_of(o) in varying] if varying else swept
    name = node.get("name") if node.get("name") is not None else (",".join(differ) or None)
    group = node.get("group")
    if group is None and info.get("sweep_dir"):
        group = "_".join(Path(info["sweep_dir"]).parts[-2:])
    tags = sorted(set(list(node.get("tags") or []) + swept))[:64]
    more = {k: node.get(k) for k in ("project", "job_type")}
    return fit_wandb_fields(name=name, group=group, tags=tags, **more)


def wandb_logger(node: DictConfig, info: dict, out_dir: Path, resumed: Path | None = None) -> Any:
    """The ``WandbLogger`` of ``node``, named by :func:`run_fields`, continuing this job's run when it resumes its
    own checkpoint ``resumed``, offline without a key, started now."""
    if not wandb_has_api_key() and os.environ.get("WANDB_MODE") not in ("online", "disabled"):
        os.environ["WANDB_MODE"] = "offline"
    kwargs, full = run_fields(node, info)
    id_file = out_dir / WANDB_ID_FILE
    if resumed is not None and id_file.is_file() and (run_id := id_file.read_text().strip()):
        kwargs.update(id=run_id, resume="allow")  # the run this job logged to before its checkpoint
    if "settings" not in node:
        # no summary dump at the end (finish_runs says how to upload an offline run); offline, no start-up lines
        import wandb

        offline = os.environ.get("WANDB_MODE") in ("offline", "dryrun")
        kwargs["settings"] = wandb.Settings(quiet=True, silent=offline)
    logger = _instantiate(node, **kwargs)
    if getattr(rank_zero_only, "rank", 0) == 0:  # start the run now; an online run that cannot start goes offline
        try:
            run = logger.experiment
        except Exception as err:
            if os.environ.get("WANDB_MODE") in ("offline", "dryrun", "disabled"):
                raise
            why = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
            line = "W&B: could not start an online run (%s); logging offline instead, upload later with `wandb sync`"
            log.warning(line, why)
            os.environ["WANDB_MODE"] = "offline"
            _teardown()
            logger = _instantiate(node, **kwargs, mode="offline")
            run = logger.experiment
        if isinstance(run_id := getattr(run, "id", None), str) and run_id:
            out_dir.mkdir(parents=True, exist_ok=True)
            id_file.write_text(run_id + "\n")
        if full:  # the shortened fields' full text
            run.config.update({"wandb_full": full}, allow_val_change=True)
    # spawned ranks re-attach with W&B's settings from the environment: keep their files in the job folder
    os.environ["WANDB_DIR"] = str(logger.save_dir or out_dir)
    return logger


def describe_runs(loggers: list) -> dict | None:
    """``{"id", "name", "group", "tags", "mode"}`` of this process's W&B run (rank 0), else ``None``."""
    if (run := next((lg.experiment for lg in loggers if isinstance(lg, LightningWandbLogger)), None)) is None:
        return None
    mode = os.environ.get("WANDB_MODE", "online")
    return {"id": run.id, "name": run.name, "group": run.group, "tags": list(run.tags or []), "mode": mode}


def finish_runs(loggers: list, metrics: dict, exit_code: int) -> None:
    """Put ``metrics`` in each W&B run's summary under ``final/`` and finish it with ``exit_code``."""
    for lg in loggers:
        if getattr(lg, "service_lost", False):
            _teardown()
        elif isinstance(lg, LightningWandbLogger):
            run = lg.experiment
            run_dir = getattr(run, "dir", None)
            wandb_call(lg, run.summary.update, {f"final/{k}": v for k, v in metrics.items()})
            wandb_call(lg, run.finish, exit_code=exit_code)
            if os.environ.get("WANDB_MODE") == "offline" and run_dir:
                log.info("W&B run saved offline; upload with: wandb sync %s", Path(run_dir).parent)


def wandb_call(logger: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` through ``logger``'s W&B service, unless that process is gone (SLURM's SIGTERM
    reaches it too, wandb/wandb#9963: a ``ConnectionError``): then one warning and ``None``, and every later call
    through ``logger`` is skipped, so the job goes on and its stop still saves ``last.ckpt``."""
    if getattr(logger, "service_lost", False):
        return None
    try:
        return fn(*args, **kwargs)
    except ConnectionError as err:
        import wandb

        logger.service_lost = True
        run = wandb.run.id if wandb.run is not None else "?"
        line = "W&B's service process has stopped (%s, as on a SIGTERM sent to the whole job); this job goes on "
        log.warning(line + "without W&B, so run %s holds what was logged until now", type(err).__name__, run)
        return None


class WandbLogger(LightningWandbLogger):
    """Lightning's ``WandbLogger`` whose calls below go through :func:`wandb_call`, so a job whose W&B service was
    killed keeps training and saving; :func:`wandb_logger` makes it in place of Lightning's class."""

    service_lost = False


def _through_wandb_call(name: str) -> Callable[..., None]:
    def method(self: WandbLogger, *args: Any, **kwargs: Any) -> None:
        wandb_call(self, getattr(super(WandbLogger, self), name), *args, **kwargs)

    method.__name__ = name
    return method


for _name in ("log_metrics", "log_hyperparams", "log_table", "after_save_checkpoint", "finalize"):
    setattr(WandbLogger, _name, _through_wandb_call(_name))


def _instantiate(node: DictConfig, **kwargs: Any) -> Any:
    """The logger ``node`` names, built with ``kwargs``; Lightning's ``WandbLogger`` becomes :class:`WandbLogger`.
    Without the ``anonymous=None`` Lightning passes to ``wandb.init`` (W&B warns whenever it is given)."""
    made = instantiate(node, **kwargs, _partial_=True)
    logger = (WandbLogger if made.func is LightningWandbLogger else made.func)(*made.args, **made.keywords)
    init = wandb_init_kwargs(logger)
    if init is not None and "anonymous" in init and init["anonymous"] is None:
        del init["anonymous"]
    return logger


TAG_MAX = 64
NAME_MAX = 128
GROUP_MAX = 128


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters: a prefix, ``~`` and 8 hex digits of its SHA-1 (the same text always
    gives the same value). Raises: ValueError when ``limit`` < 10."""
    if limit < 10:
        raise ValueError(f"limit must be >= 10, got {limit}")
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return f"{text[: limit - 9]}~{digest}"


LIMITS = {"name": NAME_MAX, "group": GROUP_MAX, "project": 128, "job_type": 64}  # W&B's, in characters


def fit_wandb_fields(tags: list[str] | None = None, **fields: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """W&B ``init`` arguments (``tags`` and the :data:`LIMITS` fields) within W&B's limits (empty tags dropped,
    duplicates removed, ``None`` left out). Returns ``(kwargs, full)``: ``full`` maps each shortened field to its
    original value."""
    kwargs: dict[str, Any] = {}
    full: dict[str, Any] = {}
    for key, value in fields.items():
        if value is not None:
            kwargs[key] = shorten(str(value), LIMITS[key])
            if kwargs[key] != str(value):
                full[key] = str(value)
    if tags is not None:
        kwargs["tags"] = list(dict.fromkeys(shorten(str(t), TAG_MAX) for t in tags if str(t)))
        if any(len(str(t)) > TAG_MAX for t in tags):
            full["tags"] = [str(t) for t in tags]
    return kwargs, full


def _teardown() -> None:
    """Shut down this process's W&B service connection: after a failed ``wandb.init`` (which keeps the run id
    registered, failing an offline retry) or once the service stopped (else W&B's exit hook prints a traceback)."""
    try:
        import wandb

        wandb.teardown()
    except Exception as err:  # nothing to shut down, or already gone
        log.debug("W&B teardown: %s", err)

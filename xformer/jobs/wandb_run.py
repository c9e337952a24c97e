"""Everything xformer does with W&B, in one place: whether a key exists, the run's name, group and
tags, W&B's length limits, resuming a job's run, the offline fallback, and the summary at the end.

* :func:`wandb_has_api_key`: ``WANDB_API_KEY``, or a ``.netrc`` entry for the host of
  ``WANDB_BASE_URL`` (``api.wandb.ai`` by default; a self-hosted server's key is stored under its own
  host). Without a key the run is offline from the start.
* :func:`run_fields`: name, group and tags from the Hydra job (in a sweep the run is named by the
  overrides that differ between jobs; the group is the sweep folder; every override is a tag).
* :func:`fit_wandb_fields`: W&B rejects a run whose tag is empty or longer than 64 characters
  (``wandb.init`` raises, the job exits 1), and its server limits run names, group names and project
  names to 128 characters and the job type to 64. Every over-long value is shortened to a prefix plus
  a hash of the whole text (the same text always gives the same short value, so every job of a
  sweep lands in the same group); the full texts go to the run's config under ``wandb_full``.
* :func:`wandb_resume_kwargs`: a job that resumes its own checkpoint continues its previous W&B run
  (id stored in ``wandb_id.txt``, ``resume="allow"``).
* :func:`start_wandb`: starts the run as soon as the logger exists. If an online run cannot be
  started (no network, W&B down, bad key, ``WANDB_BASE_URL`` unreachable) it logs one warning and
  starts the run offline instead (``wandb sync <dir>`` uploads it later). The online attempt is
  bounded by W&B's ``init_timeout`` (``WANDB_INIT_TIMEOUT`` seconds; W&B's default is 90).
* :func:`wandb_logger`: all of the above for one ``logger`` config node; :func:`describe_runs` and
  :func:`finish_runs` for ``metrics.json`` and the end of the job.

Secrets: the API key is read by W&B from the environment / ``.netrc`` only; xformer never puts it in
the config, ``metrics.json`` or its logs.
"""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from hydra.utils import instantiate
from omegaconf import DictConfig

from xformer.lightning_compat import logger_started, wandb_init_kwargs

from .resume import own_checkpoint

log = logging.getLogger("xformer")

WANDB_ID_FILE = "wandb_id.txt"
DEFAULT_BASE_URL = "https://api.wandb.ai"


def wandb_has_api_key() -> bool:
    """True when a W&B API key is available: ``WANDB_API_KEY``, or a ``.netrc`` entry with a password
    for the host of ``WANDB_BASE_URL`` (default ``https://api.wandb.ai``), the file being ``$NETRC``,
    else ``~/.netrc`` (where ``wandb login`` writes it)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).netloc
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    if not host:
        return False
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return entry is not None and bool(entry[2])


def run_fields(node: DictConfig, info: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """The W&B name, group and tags of this job's run, fitted to W&B's limits (see
    :func:`fit_wandb_fields`), from the logger's config ``node`` and the Hydra job ``info``
    (:meth:`xformer.jobs.context.JobContext.info`).

    Values set in ``node`` win. Otherwise the name is the overrides joined with commas (in a sweep
    only those of the keys that differ between its jobs), the group is the sweep folder (its last two
    parts), and the tags are ``node.tags`` plus every override (64 at most).

    Returns:
        ``(kwargs, full)`` as :func:`fit_wandb_fields`.
    """
    from .overrides import key_of
    from .wandb_panels import swept_keys

    swept = [o for o in info["overrides"] if not o.startswith(("hydra.", "trainer.max_steps"))]
    varying = set(swept_keys(info.get("sweep_dir")))
    differ = [o for o in swept if key_of(o) in varying] if varying else swept
    name = node.get("name") if node.get("name") is not None else (",".join(differ) or None)
    group = node.get("group")
    if group is None and info.get("sweep_dir"):
        group = "_".join(Path(info["sweep_dir"]).parts[-2:])
    tags = sorted(set(list(node.get("tags") or []) + swept))[:64]
    return fit_wandb_fields(
        name=name, group=group, tags=tags, project=node.get("project"), job_type=node.get("job_type")
    )


def wandb_logger(node: DictConfig, cfg: DictConfig, info: dict, out_dir: Path) -> Any:
    """The ``WandbLogger`` of config ``node``, named by :func:`run_fields`, continuing this job's run
    when it resumes, offline when there is no key, started now (falling back to offline)."""
    if not wandb_has_api_key() and os.environ.get("WANDB_MODE") not in ("online", "disabled"):
        os.environ["WANDB_MODE"] = "offline"
    kwargs, full = run_fields(node, info)
    kwargs.update(wandb_resume_kwargs(cfg, out_dir))
    if "settings" not in node:
        # no history sparklines or summary dump at the end (finish_runs says where an offline run is
        # and how to upload it, once); offline, none of W&B's start-up lines either
        import wandb

        offline = os.environ.get("WANDB_MODE") in ("offline", "dryrun")
        kwargs["settings"] = wandb.Settings(quiet=True, silent=offline)
    logger = start_wandb(lambda **kw: instantiate(node, **kwargs, **kw), out_dir)
    # ranks that trainer=ddp_spawn starts re-attach to this run with W&B's settings from the environment:
    # without this their files (sample tables) would land in ./wandb of the folder the job was launched from
    os.environ["WANDB_DIR"] = str(logger.save_dir or out_dir)
    if full and logger_started(logger):  # rank 0: the shortened fields' full text
        logger.experiment.config.update({"wandb_full": full}, allow_val_change=True)
    return logger


def describe_runs(loggers: list) -> dict | None:
    """``{"id", "name", "group", "tags", "mode"}`` of this process's W&B run (rank 0), else ``None``."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in loggers:
        if isinstance(lg, WandbLogger) and logger_started(lg):
            run = lg.experiment
            return {
                "id": run.id,
                "name": run.name,
                "group": run.group,
                "tags": list(run.tags or []),
                "mode": os.environ.get("WANDB_MODE", "online"),
            }
    return None


def finish_runs(loggers: list, metrics: dict, exit_code: int) -> None:
    """Put ``metrics`` in each W&B run's summary under ``final/``, finish it with ``exit_code``, and
    say how to upload an offline run."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in loggers:
        if isinstance(lg, WandbLogger):
            run = lg.experiment
            run_dir = getattr(run, "dir", None)
            run.summary.update({f"final/{k}": v for k, v in metrics.items()})
            run.finish(exit_code=exit_code)
            if os.environ.get("WANDB_MODE") == "offline" and run_dir:
                log.info("W&B run saved offline; upload with: wandb sync %s", Path(run_dir).parent)


TAG_MAX = 64
NAME_MAX = 128
GROUP_MAX = 128
PROJECT_MAX = 128
JOB_TYPE_MAX = 64


def shorten(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first characters, ``~`` and 8 hex
    digits of its SHA-1 (``limit`` characters in all).

    Raises:
        ValueError: ``limit`` < 10 (no room for the hash).
    """
    if limit < 10:
        raise ValueError(f"limit must be >= 10, got {limit}")
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return f"{text[: limit - 9]}~{digest}"


def fit_wandb_fields(
    name: str | None = None,
    group: str | None = None,
    tags: list[str] | None = None,
    project: str | None = None,
    job_type: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """W&B ``init`` arguments within W&B's limits, and the full values of those that were shortened.

    Tags: empty ones are dropped, long ones shortened, duplicates after shortening removed (order
    kept). ``None`` arguments are left out of the result.

    Returns:
        ``(kwargs, full)``: ``kwargs`` for the ``WandbLogger``; ``full`` maps each shortened field to
        its original value (empty when nothing was shortened).
    """
    kwargs: dict[str, Any] = {}
    full: dict[str, Any] = {}
    for key, value, limit in (
        ("name", name, NAME_MAX),
        ("group", group, GROUP_MAX),
        ("project", project, PROJECT_MAX),
        ("job_type", job_type, JOB_TYPE_MAX),
    ):
        if value is None:
            continue
        value = str(value)
        kwargs[key] = shorten(value, limit)
        if kwargs[key] != value:
            full[key] = value
    if tags is not None:
        short: list[str] = []
        for tag in (str(t) for t in tags):
            if tag and shorten(tag, TAG_MAX) not in short:
                short.append(shorten(tag, TAG_MAX))
        kwargs["tags"] = short
        if any(len(str(t)) > TAG_MAX for t in tags):
            full["tags"] = [str(t) for t in tags]
    return kwargs, full


def wandb_resume_kwargs(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """``{"id": <previous run id>, "resume": "allow"}`` when this job resumes its own checkpoint and
    ``wandb_id.txt`` exists, else ``{}`` (a new run)."""
    id_file = out_dir / WANDB_ID_FILE
    if not id_file.is_file() or own_checkpoint(cfg, out_dir) is None:
        return {}
    run_id = id_file.read_text().strip()
    return {"id": run_id, "resume": "allow"} if run_id else {}


def _forget_failed_run() -> None:
    """Shut down this process's W&B service after a failed ``wandb.init``.

    The service keeps the run id of the failed online attempt registered, so an offline retry with
    the same id -- a resumed job passes its previous id -- fails with "run ID ... is in use". A fresh
    service (started by the next ``wandb.init``) knows no run.
    """
    try:
        import wandb

        wandb.teardown()
    except Exception as err:  # nothing to shut down, or already gone: the retry reports real problems
        log.debug("W&B teardown after a failed start: %s", err)


def _without_unset_anonymous(logger: Any) -> Any:
    """``logger`` (a ``WandbLogger``) without the ``anonymous=None`` that Lightning always passes to
    ``wandb.init``: W&B >= 0.22 warns "The anonymous setting has no effect" whenever the argument is
    given at all, even as None."""
    init = wandb_init_kwargs(logger)
    if init is not None and "anonymous" in init and init["anonymous"] is None:
        del init["anonymous"]
    return logger


def start_wandb(make_logger: Callable[..., Any], out_dir: Path) -> Any:
    """Create a ``WandbLogger`` with ``make_logger(**extra)`` and start its run now (rank 0 only).

    Falls back to an offline run with one warning when the online run cannot start -- under the same
    run id when the job resumes one (the W&B service is restarted in between, see
    :func:`_forget_failed_run`); records the run id in ``<out_dir>/wandb_id.txt``.

    Raises:
        Exception: whatever W&B raises when the offline run cannot start either, or when an offline
            run (``WANDB_MODE=offline``) fails to start.
    """
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    logger = _without_unset_anonymous(make_logger())
    if getattr(rank_zero_only, "rank", 0) != 0:
        return logger
    try:
        run = logger.experiment
    except Exception as err:
        if os.environ.get("WANDB_MODE") in ("offline", "dryrun", "disabled"):
            raise
        first = (str(err).splitlines() or [""])[0][:200]
        log.warning(
            "W&B: could not start an online run (%s: %s); logging offline instead, upload later with `wandb sync`",
            type(err).__name__,
            first,
        )
        os.environ["WANDB_MODE"] = "offline"
        _forget_failed_run()
        logger = _without_unset_anonymous(make_logger(mode="offline"))
        run = logger.experiment
    run_id = getattr(run, "id", None)
    if isinstance(run_id, str) and run_id:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / WANDB_ID_FILE).write_text(run_id + "\n")
    return logger

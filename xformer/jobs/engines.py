"""Whether the engines a command names are here before anything runs (docs/troubleshooting.md, "A launcher,
sweeper or logger that cannot run here"): one line per missing one. Imports neither torch nor Lightning."""

from __future__ import annotations

import importlib
import netrc
import os
import pkgutil
import re
import shutil
import socket
import threading
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf

DEFAULT_BASE_URL = "https://api.wandb.ai"
#: Seconds an online W&B run waits for its server to accept a connection before the run is refused.
REACH_TIMEOUT_S = 4.0


def wandb_has_api_key() -> bool:
    """True when ``WANDB_API_KEY`` is set, or ``$NETRC`` (else ``~/.netrc``) has a password for the host of
    ``WANDB_BASE_URL``."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    if not (host := urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).netloc):
        return False
    try:
        entry = netrc.netrc(str(Path(os.environ.get("NETRC") or "~/.netrc").expanduser())).authenticators(host)
    except (netrc.NetrcParseError, OSError):
        return False
    return entry is not None and bool(entry[2])


def wandb_online(node: Any = None) -> bool:
    """Whether a W&B run of logger ``node`` would log online: ``WANDB_MODE=online``, or an API key and neither
    ``WANDB_MODE`` offline/dryrun/disabled nor ``offline: true`` in the node."""
    mode = os.environ.get("WANDB_MODE")
    if mode == "online":
        return True
    if mode in ("offline", "dryrun", "disabled") or (node is not None and node.get("offline")):
        return False
    return wandb_has_api_key()


def wandb_unreachable(timeout: float = REACH_TIMEOUT_S) -> str | None:
    """Why W&B's server (``WANDB_BASE_URL``, default :data:`DEFAULT_BASE_URL`) takes no TCP connection within
    ``timeout`` seconds (name lookup included, which ``socket``'s own timeout does not bound), or ``None``."""
    url = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL)
    if not url.hostname:
        return f"WANDB_BASE_URL={url.geturl()!r} names no host"
    port = url.port or (443 if url.scheme == "https" else 80)
    why: list[str] = ["no answer within %g s" % timeout]

    def connect() -> None:
        try:
            socket.create_connection((url.hostname, port), timeout=timeout).close()
            why[0] = ""
        except OSError as err:
            why[0] = err.strerror or str(err) or type(err).__name__

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return f"{url.hostname}:{port}: {why[0]}" if why[0] else None


def missing_module(target: str) -> str | None:
    """The module a ``_target_`` needs that is not installed, or ``None``: its package, one its module imports, or
    for a Hydra plugin one any module of the plugin or its distribution requires (launchers import late)."""
    if not (module := str(target).rpartition(".")[0]):
        return None
    parts = module.split(".")
    modules = [module]
    try:
        if find_spec(parts[0]) is None:
            return parts[0]
        if parts[0] == "hydra_plugins" and len(parts) > 1:
            plugin = importlib.import_module(".".join(parts[:2]))
            if hasattr(plugin, "__path__"):
                modules += [info.name for info in pkgutil.iter_modules(plugin.__path__, plugin.__name__ + ".")]
        for name in modules:
            importlib.import_module(name)
        if parts[0] == "hydra_plugins" and len(parts) > 1:
            return _missing_requirement("/".join(parts[:2]) + "/")
    except ModuleNotFoundError as err:
        return err.name or module
    except Exception:  # the module is there but fails otherwise: its own error when it is built
        return None
    return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _missing_requirement(folder: str) -> str | None:
    """The first requirement of the distribution that installed ``folder`` (``hydra_plugins/<plugin>/``) none of
    whose modules can be found, or ``None``."""
    provides = metadata.packages_distributions()  # top-level module -> distributions
    modules: dict[str, list[str]] = {}
    for module, dists in provides.items():
        for dist in dists:
            modules.setdefault(_norm(dist), []).append(module)
    for dist in provides.get("hydra_plugins", []):
        if not any(str(f).startswith(folder) for f in metadata.distribution(dist).files or []):
            continue
        for req in metadata.requires(dist) or []:
            name = re.match(r"[A-Za-z0-9_.-]+", req)
            if name is None or "extra ==" in req.replace('"', "").replace("'", ""):
                continue
            found = [m for m in modules.get(_norm(name.group(0)), []) if not m.startswith("_")]
            if not found or all(find_spec(m) is None for m in found):
                return found[0] if found else name.group(0)
    return None


def _targets(node: Any, path: str) -> list[tuple[str, str]]:
    """``(key, target)`` of every ``_target_`` in ``node`` and below."""
    out: list[tuple[str, str]] = []
    if isinstance(node, DictConfig):
        for key in node:
            child = node._get_node(key)
            if key == "_target_":
                out.append((f"{path}._target_", str(node[key])))
            elif isinstance(child, DictConfig):
                out += _targets(child, f"{path}.{key}")
    return out


def _chosen_by(config: DictConfig, group: str) -> str:
    """``group=option`` as the command line or a config chose it (``hydra/launcher=slurm``)."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    option = choices.get(group)
    return f"{group}={option}" if option else group


def _missing_line(what: str, key: str, target: str, module: str) -> str:
    parts = module.split(".")
    pip = (parts[1] if parts[0] == "hydra_plugins" and len(parts) > 1 else parts[0]).replace("_", "-")
    return (
        f"{what}: {target} ({key}) needs the Python package {module}, which is not installed. Fix: "
        f"pip install {pip}, or choose another option"
    )


def engine_problem(config: DictConfig, multirun: bool) -> str | None:
    """The first missing engine of ``config`` as one line (without ``error:``), or ``None``: under ``-m`` the
    sweeper's and launcher's packages and SLURM's programs; each logger's package and an online W&B's server."""
    from . import slurm

    if multirun:
        for group, node in (("hydra/sweeper", "hydra.sweeper"), ("hydra/launcher", "hydra.launcher")):
            for key, target in _targets(OmegaConf.select(config, node), node):
                if (module := missing_module(target)) is not None:
                    what = _chosen_by(config, group)
                    search = _chosen_by(config, "hparams_search")
                    if group == "hydra/sweeper" and search != "hparams_search":  # the option that chose the sweeper
                        what = f"{search} ({what})"
                    return _missing_line(what, key, target, module)
        dry_run = OmegaConf.select(config, "sweep.dry_run", default=False)  # checks the jobs here, queues nothing
        missing = [cmd for cmd in ("sbatch", "srun") if shutil.which(cmd) is None]  # submitit needs both
        if slurm.is_slurm_sweep(config) and not dry_run and missing:
            return (
                f"hydra/launcher=slurm: {' and '.join(missing)} not found on PATH, so this is not a SLURM login node; "
                f"nothing was queued. Fix: run the command on the cluster (or load its SLURM module), or drop "
                f"hydra/launcher=slurm to run the jobs here (hydra/launcher=joblib_cpu runs them side by side)"
            )
    loggers = OmegaConf.select(config, "logger", default=None)
    for name, node in loggers.items() if isinstance(loggers, DictConfig) else []:
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        target = str(node._target_)
        what = f"logger={_chosen_by(config, 'logger').partition('=')[2] or name}"
        if target.endswith("WandbLogger"):
            if find_spec("wandb") is None:
                return _missing_line(what, f"logger.{name}._target_", target, "wandb") + " (e.g. logger=csv)"
            if wandb_online(node) and (why := wandb_unreachable()) is not None:
                return (
                    f"{what}: W&B would log online (an API key is set, WANDB_MODE={os.environ.get('WANDB_MODE', '')!r})"
                    f" but its server cannot be reached ({why}). Fix: WANDB_MODE=offline python run.py ... "
                    f"(upload later with `wandb sync`), or check the network and WANDB_BASE_URL"
                )
    return None

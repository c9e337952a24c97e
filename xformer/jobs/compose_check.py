"""Hydra's own composition errors as one ``error:`` line with the fix, before ``@hydra.main`` runs.

Hydra reports an unknown option of a config group (``model/pe=rpoe``) or a key that the chosen option
does not have (``optim.scheduler.floor=2`` with the default inverse-sqrt schedule) as a multi-line
message listing its search path. :func:`first_error` composes the command line's overrides once with
Hydra's Compose API (a sweep's values replaced by their first one) and turns those failures into one
line naming the override, the options or keys there are, and the closest one. Anything else, or a
command line it does not understand, is left to Hydra (``None``).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from xformer.config_types import hint, import_target, parameters
from xformer.jobs.overrides import parse

FLAGS = ("-m", "--multirun")
"""The only flags :func:`first_error` reads past; with any other flag Hydra composes alone."""


def _first_values(args: list[str]) -> list[str] | None:
    """The overrides with each sweep replaced by its first value; ``None`` when ``args`` holds a flag
    other than ``-m`` or an override Hydra's grammar refuses."""
    out = []
    for arg in args:
        if arg in FLAGS:
            continue
        if arg.startswith("-"):
            return None
        override = parse(arg)
        if override is None:
            return None
        if override.is_sweep_override():
            if override.is_interval_sweep():
                return None
            first = next(iter(override.sweep_iterator()), None)
            key = arg.split("=", 1)[0]
            out.append(f"{key}={first}")
        else:
            out.append(arg)
    return out


def _options(conf: Path, group: str) -> list[str]:
    folder = conf / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _line_for(arg: str, conf: Path, err: BaseException, others: list[str]) -> str | None:
    """One line for the failure ``err`` of override ``arg``, or ``None`` when it is not one this knows."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    override = parse(arg)
    if override is None:
        return None
    key = override.key_or_group
    cause = err.__cause__
    if isinstance(err, MissingConfigException) and "/" in key and f"{key}/{override.value()}" in str(err):
        options = _options(conf, key)
        return (
            f"{arg}: config group {key} has no option {override.value()!r}. Fix: "
            f"{hint(str(override.value()), options, key + '=')}"
            + (f" (options: {', '.join(options)})" if options and len(options) <= 12 else "")
        )
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and f"'{key}'" in str(err):
        parent, _, leaf = key.rpartition(".")
        root, _ = _keys(conf, "", others)
        head = key.split(".")[0]
        if head not in root:
            close = difflib.get_close_matches(head, root, n=3, cutoff=0.6)
            fix = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(root)}"
            return f"{arg}: the root config has no key {head!r}. Fix: {fix}"
        _, keys = _keys(conf, parent, others)
        owners = [
            o
            for o in _options(conf, parent.replace(".", "/"))
            if leaf in _yaml_keys(conf / parent.replace(".", "/") / f"{o}.yaml")
        ]
        if owners:
            group = parent.replace(".", "/")
            fix = f"{leaf} is a key of {group}={', '.join(owners)}: choose one (e.g. {group}={owners[0]} {arg})"
        else:
            fix = f"{hint(leaf, keys)} (or +{arg} to add a key the node does not declare)"
        return f"{arg}: {parent} has no key {leaf!r}. Fix: {fix}"
    return None


def _yaml_keys(path: Path) -> set[str]:
    """The top-level keys of a YAML file (empty when unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return set()
    return {str(k) for k in data} if isinstance(data, dict) else set()


def _keys(conf: Path, node: str, overrides: list[str]) -> tuple[list[str], list[str]]:
    """``(root keys, keys of node)`` of the config the other ``overrides`` compose (its class's
    parameters too for a ``_target_`` node; keys starting with ``_`` left out)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
    except Exception:  # only for the message
        return [], []
    sub = OmegaConf.select(cfg, node) if node else cfg
    keys = [str(k) for k in sub.keys()] if sub is not None and hasattr(sub, "keys") else []
    if sub is not None and hasattr(sub, "get") and sub.get("_target_"):  # a class: its parameters
        target, _ = import_target(str(sub.get("_target_")))
        if target is not None:
            keys += list(parameters(target)[0])
    return sorted(str(k) for k in cfg.keys()), sorted({k for k in keys if not k.startswith("_")})


def first_error(args: list[str], conf: Path) -> str | None:
    """The ``error:`` text for the first override of ``args`` that Hydra cannot compose, or ``None``
    (it composes, or the failure is not one of an unknown option or key: Hydra reports it)."""
    from hydra import compose, initialize_config_dir

    overrides = _first_values(args)
    if not overrides:
        return None
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            compose("config", overrides=overrides)
        return None
    except Exception as err:  # compose raises several Hydra and OmegaConf types
        for arg in overrides:
            line = _line_for(arg, conf, err, [o for o in overrides if o != arg])
            if line:
                return line
        return None

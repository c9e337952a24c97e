"""Hydra's own composition errors as one ``error:`` line with the fix, before ``@hydra.main`` runs.

Hydra reports an unknown option of a config group (``trainer=dpp``, ``model/pe=rpoe``,
``experiment=claims/c2_params``), an unknown group (``model/nrm=pre``) or a key that the chosen option
does not have (``optim.scheduler.floor=2`` with the default inverse-sqrt schedule) as a multi-line
message listing its search path, with exit status 1. :func:`first_error` composes the command line's
overrides once with Hydra's Compose API (a sweep's values replaced by their first one) and turns those
failures into one line naming the override, the options, groups or keys there are, and the closest one
(:func:`xformer.config_types.closest`: a contained name before a near spelling); ``run.py`` prints it
and exits 2. The options and groups are the ones Hydra's config loader finds on its search path
(``conf/`` and Hydra's plugins, e.g. ``hydra/launcher=submitit_slurm``), options in sub-folders as
``claims/c1_ffn_ratio``. Anything else, or a command line it does not understand, is left to Hydra
(``None``).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from xformer.config_types import closest, hint, import_target, parameters
from xformer.errors import ConfigError
from xformer.jobs.config_check import check_resolves
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


def _options(loader, group: str) -> list[str]:
    """The options of config ``group``, those of its sub-folders as ``sub/option`` (Hydra accepts
    ``experiment=claims/c1_ffn_ratio``)."""
    out = list(loader.get_group_options(group))
    for sub in loader.list_groups(group):
        out += [f"{sub}/{o}" for o in _options(loader, f"{group}/{sub}")]
    return out


def _listing(options: list[str]) -> str:
    """``a, b, claims/{c1, c3}``: the options with each sub-folder's gathered in braces."""
    top = [o for o in options if "/" not in o]
    subs: dict[str, list[str]] = {}
    for o in options:
        if "/" in o:
            head, _, rest = o.partition("/")
            subs.setdefault(head, []).append(rest)
    return ", ".join(top + [f"{head}/{{{', '.join(rest)}}}" for head, rest in subs.items()])


def _line_for(arg: str, conf: Path, err: BaseException, others: list[str], loader) -> str | None:
    """One line for the failure ``err`` of override ``arg``, or ``None`` when it is not one this knows."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    override = parse(arg)
    if override is None:
        return None
    key = override.key_or_group
    cause = err.__cause__
    value = str(override.value())
    if (
        isinstance(err, MissingConfigException)
        and f"'{key}/{value}'" in str(err)
        and loader.list_groups(key) + loader.get_group_options(key)
    ):
        options = _options(loader, key)
        return (
            f"{arg}: config group {key} has no option {value!r}. Fix: "
            f"{hint(value, options, key + '=')} (options: {_listing(options)})"
        )
    if (
        isinstance(err, ConfigCompositionException)
        and "/" in key
        and override.package is None
        and f"'{key}'" in str(err)
        and not loader.get_group_options(key)
    ):
        parent, _, name = key.rpartition("/")
        groups = list(loader.list_groups(parent))
        if groups:
            near = closest(name, groups)
            fix = f"did you mean {parent}/{near}={value}?" if near else f"choose a group of {parent}"
            return f"{arg}: there is no config group {key}. Fix: {fix} (groups in {parent}: {', '.join(groups)})"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and f"'{key}'" in str(err):
        parent, _, leaf = key.rpartition(".")
        root, _ = _keys("", others)
        head = key.split(".")[0]
        if head not in root:
            close = difflib.get_close_matches(head, root, n=3, cutoff=0.6)
            fix = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(root)}"
            return f"{arg}: the root config has no key {head!r}. Fix: {fix}"
        _, keys = _keys(parent, others)
        owners = [
            o
            for o in loader.get_group_options(parent.replace(".", "/"))
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


def _keys(node: str, overrides: list[str]) -> tuple[list[str], list[str]]:
    """``(root keys, keys of node)`` of the config the other ``overrides`` compose (its class's
    parameters too for a ``_target_`` node; keys starting with ``_`` left out)."""
    from hydra import compose
    from omegaconf import OmegaConf

    try:  # inside first_error's initialize_config_dir
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
    """The ``error:`` text for the first override of ``args`` that Hydra cannot compose, or for the
    interpolations of the composed config that cannot resolve (:func:`check_resolves`: an environment
    variable not set), or ``None`` (all is well, or the failure is not one of those: Hydra or the config
    check reports it)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = _first_values(args)
    if not overrides:
        return None
    with initialize_config_dir(config_dir=str(Path(conf).resolve()), version_base="1.3"):
        try:
            cfg = compose("config", overrides=overrides)
        except Exception as err:  # compose raises several Hydra and OmegaConf types
            loader = GlobalHydra.instance().config_loader()
            for arg in overrides:
                line = _line_for(arg, conf, err, [o for o in overrides if o != arg], loader)
                if line:
                    return line
            return None
    try:  # composed: an environment variable or a key its interpolations name that is missing
        check_resolves(cfg)
    except ConfigError as err:
        return str(err)
    return None

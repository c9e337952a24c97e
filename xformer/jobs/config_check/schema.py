"""Each config node against the code it configures: :func:`check_resolves`, :func:`check_additions` and
:func:`check_group_nodes` (stage 1), :func:`check_targets` (each ``_target_`` against its signature; stages 2
and 3). Every mistake is one ``error:`` line naming the key, its YAML file where known, and the fix; a new
option needs no other file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from xformer.config_types import closest, describe, hint, import_target, parameters, value_problem
from xformer.errors import ConfigError
from xformer.jobs.overrides import added_overrides, key_of

#: Keys of a node that xformer reads itself before it instantiates the node's target.
CONSUMED = {"lightning.Trainer": ("compile",), "lightning.pytorch.Trainer": ("compile",)}
#: Nodes the run does not instantiate (Hydra's own settings).
SKIP = ("hydra",)
#: The roots checked in stage 2 (their targets import torch at most); the others follow in stage 3.
EARLY = ("model", "optim", "loss", "decode")


def raise_all(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` holding every problem, one per line (``error:`` before each)."""
    if problems:
        raise ConfigError("\nerror: ".join(dict.fromkeys(problems)))


def _hydra():
    """``(HydraConfig or None, the config loader or None)``: what a Hydra app knows of this run."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    return (HydraConfig.get() if HydraConfig.initialized() else None), loader


def check_additions(cfg: DictConfig) -> None:
    """Refuse ``+group=option`` without such a group, and ``+key`` on a node without ``_target_`` (``+sed=3``;
    a node with one is left to :func:`check_targets`). Raises: ConfigError, one line per override."""
    hc, loader = _hydra()
    problems = []
    for key, value in added_overrides(hc.overrides.task) if hc is not None else []:
        if "/" in key or "@" in key:
            group = key.split("@", 1)[0]
            if loader is None or loader.get_group_options(group):
                continue
            parent, _, name = group.rpartition("/")
            siblings, prefix = list(loader.list_groups(parent)), f"{parent}/" if parent else ""
            then = f" (then {prefix}{closest(name, siblings)}={value}, without +)" if closest(name, siblings) else ""
            problems.append(
                f"+{key}={value}: there is no config group {group} (no folder conf/{group}/ in the config "
                f"search path). Fix: {hint(name, siblings, prefix)}{then}"
            )
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = cfg if not parent_key else OmegaConf.select(cfg, parent_key, default=None)
        if not isinstance(parent, DictConfig) or parent_key.split(".")[0] in SKIP:
            continue
        added = parent.get(leaf)
        if "_target_" in parent or leaf == "_target_" or (isinstance(added, DictConfig) and "_target_" in added):
            continue
        where = f"the {parent_key} node" if parent_key else "the root config"
        problems.append(
            f"+{key}={value}: {where} has no key {leaf!r}, and {leaf!r} is read by nothing. "
            f"Fix: {hint(leaf, [k for k in parent if k != leaf], f'{parent_key}.' if parent_key else '')}"
        )
    raise_all(problems)


def _always_node(folder: Path, leaf: str) -> bool:
    """Every option of the group in ``folder`` that sets ``leaf`` sets it to a node (and one does)."""
    nodes = [OmegaConf.load(p)._get_node(leaf) for p in folder.glob("*.yaml")]  # unresolved: no interpolation runs
    return {isinstance(v, DictConfig) for v in nodes if v is not None} == {True}


def check_group_nodes(cfg: DictConfig) -> None:
    """Refuse a string where a config group puts a node: ``model.pe=x`` for the group ``model/pe``, or
    ``optim.optimizer=x`` where ``x`` is an option of group ``optim``, whose options all hold a node ``optimizer``;
    the groups are the folders of the config search path (``conf/`` outside a Hydra app). Raises: ConfigError."""
    _, loader = _hydra()
    entries = loader.get_search_path().get_path() if loader is not None else []
    roots = [Path(e.path.removeprefix("file://")) for e in entries if e.path.startswith("file://")]
    problems = []
    for root in roots or [Path(__file__).resolve().parents[3] / "conf"]:
        for folder in sorted(p for p in root.rglob("*") if p.is_dir() and p.name not in SKIP):
            group = folder.relative_to(root).as_posix()
            try:
                node = OmegaConf.select(cfg, key := group.replace("/", "."), default=None)
                items = list(node.items()) if isinstance(node, DictConfig) else [("", node)]
            except Exception:  # an interpolation that does not resolve: named elsewhere
                continue
            for leaf, value in items:
                if isinstance(value, str) and (
                    not leaf or ((folder / f"{value}.yaml").is_file() and _always_node(folder, str(leaf)))
                ):
                    problems.append(
                        f"{key + '.' + str(leaf) if leaf else key}={value}: replaces the node with a string; it is "
                        f"chosen with the config group {group}. Fix: {group}={value}"
                    )
    raise_all(problems)


def _source(path: str, key: str) -> str:
    """Where ``path.key`` came from: the command line, or the YAML file of the group that chose the node."""
    hc, _ = _hydra()
    if hc is None:
        return ""
    if any(key_of(line) == f"{path}.{key}" for line in hc.overrides.task):
        return " (from the command line)"
    for n in range(len(parts := path.split(".")), 0, -1):
        if option := hc.runtime.choices.get(group := "/".join(parts[:n])):
            return f" ({group}/{option}.yaml in the config search path)"
    return ""


def fit_problems(node: DictConfig, path: str, obj: Any, name: str, skip=(), strict: bool = True) -> list[str]:
    """Each key of ``node`` (at ``path``) against the parameters of ``obj`` (``name`` in the messages):
    unknown keys (when ``strict`` and ``obj`` takes no ``**kwargs``) and values outside their annotation."""
    params, hints, open_ = parameters(obj)
    out = []
    for key in (str(k) for k in node if not str(k).startswith("_") and k not in skip):
        src = _source(path, key)
        if key not in params:
            fix = f"Fix: drop it, or {hint(key, params, path + '.')}"
            out += [f"{path}.{key}{src}: not a parameter of {name}. {fix}"] if strict and not open_ else []
            continue
        if key not in hints or OmegaConf.is_missing(node, key):
            continue
        try:
            value = node[key]
            value = OmegaConf.to_container(value, resolve=True) if isinstance(value, ListConfig) else value
        except Exception:  # an interpolation that does not resolve: Hydra names it itself
            continue
        if OmegaConf.is_interpolation(node, key):
            src = f" (from {node._get_node(key)._value()})"
        if not isinstance(value, DictConfig) and (why := value_problem(value, hints[key])):
            shown = f"[{','.join(map(str, value))}]" if isinstance(value, list) else value
            fix = f"a value of {describe(hints[key])}"
            if why.startswith("must be one of "):
                fix = (f"{path}.{key}=" + close) if (close := closest(value, why[15:].split(", "))) else "one of those"
            out.append(f"{path}.{key}={shown}{src}: {why}. Fix: {fix} ({name} {key})")
    return out


def check_targets(cfg: DictConfig, early: bool | None = None) -> None:
    """Every node with a ``_target_`` (outside ``hydra``) against what it names: ``early=True`` the :data:`EARLY`
    roots, ``False`` the others, ``None`` all. Raises: ConfigError, every problem of the config, one line each."""
    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, DictConfig):
            if "_target_" in node and path:
                obj, why = import_target(target := str(node._target_))
                bad = [f"{path}._target_={target}{_source(path, '_target_')}: {why}"]
                problems.extend(bad if obj is None else fit_problems(node, path, obj, target, CONSUMED.get(target, ())))
            for key in node:
                if not path and (str(key) in SKIP or (early is not None and (str(key) in EARLY) != early)):
                    continue
                if isinstance(child := node._get_node(key), (DictConfig, ListConfig)):
                    walk(child, f"{path}.{key}" if path else str(key))
        elif isinstance(node, ListConfig):
            for i, item in enumerate(node._iter_ex(resolve=False)):
                walk(item, f"{path}[{i}]")

    walk(cfg, "")
    raise_all(problems)


_ENV_MISSING = re.compile(r"Environment variable '([^']+)' not found")
_KEY_MISSING = re.compile(r"Interpolation key '([^']+)' not found")


def check_resolves(cfg: DictConfig) -> None:
    """Every value outside ``hydra`` whose interpolation names an environment variable that is not set
    (``${oc.env:XFORMER_DATA}``) or a key that does not exist (``${optim.lrr}``): one line each, with the
    ``export`` or the key to set. Interpolations that Hydra fills per job (``${hydra:...}``) and other
    resolver failures are left to the later checks. Raises: ConfigError."""
    from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError

    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
        for key in keys:
            if not path and str(key) in SKIP:
                continue
            where = f"{path}[{key}]" if isinstance(node, ListConfig) else f"{path}.{key}" if path else str(key)
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)) and not child._is_interpolation():
                walk(child, where)
                continue
            raw = str(child._value())
            try:
                node[key]
            except InterpolationKeyError as err:
                missing = _KEY_MISSING.search(str(err))
                if missing and "${" + missing.group(1) in raw:  # not a value that refers to the broken one
                    problems.append(
                        f"{where}={raw}: there is no key {missing.group(1)}. Fix: correct the reference, or set "
                        f"+{missing.group(1)}=..."
                    )
            except InterpolationResolutionError as err:
                env = _ENV_MISSING.search(str(err))
                if env and f"oc.env:{env.group(1)}" in raw:
                    name = env.group(1)
                    rest = raw.split("}", 1)[1].strip("/") if raw.startswith("${oc.env:") and "}" in raw else ""
                    folder = "/path/to/data" if "DATA" in name.upper() else "<value>"
                    holds = f" (the folder that holds {rest}/)" if rest else ""
                    problems.append(
                        f"{where}={raw}: the environment variable {name} is not set. "
                        f"Fix: export {name}={folder}{holds}, or set {where}"
                    )
            except Exception:  # a missing value (???) or Hydra's own resolvers: the later checks name them
                continue

    walk(cfg, "")
    raise_all(problems)

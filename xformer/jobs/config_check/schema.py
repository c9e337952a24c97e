"""The config checked against the code it configures: every node with a ``_target_`` against the
signature of what it names, and every key added with ``+`` against the node it joins.

* :func:`check_additions` (stage 1, no imports): a ``+group=option`` whose group has no folder in the
  config search path (``+model/nrm=pre``, which Hydra otherwise stores as a plain key and ignores), and a
  ``+key=value`` added to a node that has no ``_target_`` (``+sed=3`` at the root, ``+optim.weight_decya``)
  are refused, with the closest existing name. A key added to a node with a ``_target_``
  (``+trainer.limit_train_batches=0.5``) or a new node with its own ``_target_``
  (``+callbacks.probe._target_=...``) is left to :func:`check_targets`.
* :func:`check_targets` (stage 2): each ``_target_`` must import (a missing module: "is the package on
  PYTHONPATH?"; a misspelt name: the closest name the module has), each key of its node must be a
  parameter of it (following ``**kwargs`` up the class's bases), and each value must fit the
  parameter's annotation: ``int``, ``float``, ``bool``, ``str``, ``Literal[...]`` (choices), optional
  forms of those, and ``Annotated[T, Range(...)]`` (a range; :class:`xformer.config_types.Range`). So a
  new option -- one class and one YAML -- is checked from its own signature, with nothing to register.

Every mistake of a config is reported at once, one ``error:`` line each, naming the key, the YAML file
it came from where known (``model/mixer/conv.yaml`` in the config search path), and the fix.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from xformer.config_types import Range
from xformer.errors import ConfigError

#: Keys of a node that xformer reads itself before it instantiates the node's target.
CONSUMED: dict[str, tuple[str, ...]] = {"lightning.Trainer": ("compile",), "lightning.pytorch.Trainer": ("compile",)}
#: Nodes that are not instantiated from their ``_target_`` by the run (Hydra's own settings).
SKIP = ("hydra",)
#: The nodes checked before Lightning is imported (stage 2: their targets import torch at most); the
#: others (data, trainer, callbacks, logger, module) are checked in stage 3, beside the data options.
EARLY = ("model", "optim", "loss", "decode")


def raise_all(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` holding every problem, one per line (``error:`` before each)."""
    if problems:
        raise ConfigError("\nerror: ".join(dict.fromkeys(problems)))


def _closest(word: str, options) -> str | None:
    found = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.6)
    return found[0] if found else None


def _hint(word: str, options, prefix: str = "") -> str:
    close = _closest(word, options)
    return f"did you mean {prefix}{close}?" if close else f"known: {', '.join(sorted(map(str, options)))}"


# -- stage 1: what the command line adds ------------------------------------------------------------
def _added_overrides() -> list[tuple[str, str]]:
    """``(key_or_group, value text)`` of the run's ``+`` overrides (not ``++``); empty outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for o in OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task)):
        if o.is_add():
            out.append((o.key_or_group, o.input_line.split("=", 1)[-1] if o.input_line else ""))
    return out


def _group_options(group: str) -> list[str] | None:
    """The options of config group ``group`` in the search path (``None`` outside a Hydra app)."""
    from hydra.core.global_hydra import GlobalHydra

    gh = GlobalHydra.instance()
    if not gh.is_initialized():
        return None
    return list(gh.config_loader().get_group_options(group))


def _groups_under(parent: str) -> list[str]:
    from hydra.core.global_hydra import GlobalHydra

    return list(GlobalHydra.instance().config_loader().list_groups(parent))


def check_additions(cfg: DictConfig) -> None:
    """Refuse ``+group=option`` without such a group and ``+key`` on a node without ``_target_`` (see
    the module docstring).

    Raises:
        ConfigError: every such override, one line each.
    """
    problems = []
    for key, value in _added_overrides():
        if "/" in key or "@" in key:
            group = key.split("@", 1)[0]
            options = _group_options(group)
            if options is None or options:
                continue
            parent, _, name = group.rpartition("/")
            siblings = _groups_under(parent)
            problems.append(
                f"+{key}={value}: there is no config group {group} (no folder conf/{group}/ in the config "
                f"search path). Fix: {_hint(name, siblings, f'{parent}/' if parent else '')}"
                + (
                    f" (then {parent + '/' if parent else ''}{_closest(name, siblings)}={value}, without +)"
                    if _closest(name, siblings)
                    else ""
                )
            )
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = cfg if not parent_key else OmegaConf.select(cfg, parent_key, default=None)
        if not isinstance(parent, DictConfig) or parent_key.split(".")[0] in SKIP:
            continue
        added = parent.get(leaf)
        if "_target_" in parent or leaf == "_target_" or (isinstance(added, DictConfig) and "_target_" in added):
            continue  # checked against the target's signature in stage 2
        known = [k for k in parent if k != leaf]
        where = f"the {parent_key} node" if parent_key else "the root config"
        problems.append(
            f"+{key}={value}: {where} has no key {leaf!r}, and {leaf!r} is read by nothing. "
            f"Fix: {_hint(leaf, known, f'{parent_key}.' if parent_key else '')}"
        )
    raise_all(problems)


# -- stage 2: every _target_ against its signature ------------------------------------------------
def _source(path: str, key: str | None = None) -> str:
    """Where the value at ``path`` (``.key``) came from: the command line, or its config group's YAML
    file when a group chose the node."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return ""
    if key is not None:
        full = f"{path}.{key}"
        for line in HydraConfig.get().overrides.task:
            if line.lstrip("+~").split("=", 1)[0] == full:
                return " (from the command line)"
    choices = HydraConfig.get().runtime.choices
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        group = "/".join(parts[:n])
        if choices.get(group):
            return f" ({group}/{choices[group]}.yaml in the config search path)"
    return ""


def import_target(target: str) -> tuple[Any, str | None]:
    """``(object, None)`` for an importable ``_target_``, else ``(None, why)`` with the likely cause."""
    module_name, _, attr = str(target).rpartition(".")
    if not module_name:
        return None, f"{target!r} is not a dotted path (package.module.Name)"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        return None, (
            f"cannot import module {missing} ({err}). Fix: is the package on PYTHONPATH (e.g. run from its "
            "parent folder, or PYTHONPATH=. python run.py ...), or installed?"
        )
    except Exception as err:  # the module itself fails to import: say so, briefly
        return None, f"importing {module_name} failed: {type(err).__name__}: {str(err).splitlines()[0]}"
    try:
        return getattr(module, attr), None
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n, None))]
        return None, f"module {module_name} has no {attr}. Fix: {_hint(attr, names, module_name + '.')}"


def parameters(fn: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """``(parameters, type hints, open)`` of a class's constructor (following ``**kwargs`` up its bases)
    or a function; ``open`` when every level passes ``**kwargs`` on (nothing can be refused)."""
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    levels = [k.__dict__["__init__"] for k in fn.__mro__ if "__init__" in k.__dict__] if inspect.isclass(fn) else [fn]
    for level in levels:
        try:
            sig = inspect.signature(level).parameters
        except (TypeError, ValueError):
            return params, hints, True
        try:
            hints = {**typing.get_type_hints(level, include_extras=True), **hints}
        except Exception:  # annotations that do not resolve here: check names only
            pass
        params.update(
            {k: v for k, v in sig.items() if v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL) and k not in params}
        )
        if not any(v.kind is v.VAR_KEYWORD for v in sig.values()):
            params.pop("self", None)
            return params, hints, False
    return params, hints, True


def value_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not fit annotation ``hint`` (``None``: it fits, or the hint is not one checked)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        why = value_problem(value, args[0])
        if why:
            return why
        for meta in args[1:]:
            if isinstance(meta, Range) and isinstance(value, (int, float)) and not isinstance(value, bool):
                why = meta.problem(value)
                if why:
                    return why
        return None
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if value is None and type(None) in args:
            return None
        whys = [value_problem(value, a) for a in args if a is not type(None)]
        return None if any(w is None for w in whys) else whys[0]
    if origin is typing.Literal:
        return None if value in args else f"must be one of {', '.join(map(str, args))}"
    if value is None:
        return None if hint in (Any, type(None)) else "must not be null"
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "must be a number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None


def _node_problems(node: DictConfig, path: str) -> list[str]:
    target = str(node._target_)
    obj, why = import_target(target)
    if obj is None:
        return [f"{path}._target_={target}{_source(path, '_target_')}: {why}"]
    params, hints, open_ = parameters(obj)
    out = []
    consumed = CONSUMED.get(target, ())
    for key in node:
        key = str(key)
        if key.startswith("_") or key in consumed:
            continue
        src = _source(path, key)
        if key not in params:
            if not open_:
                out.append(
                    f"{path}.{key}{src}: not a parameter of {target}. Fix: drop it, or {_hint(key, params, path + '.')}"
                )
            continue
        if key not in hints or OmegaConf.is_missing(node, key):
            continue
        try:
            value = node[key]
        except Exception:  # an interpolation that does not resolve: Hydra names it itself
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            continue
        why = value_problem(value, hints[key])
        if why:
            out.append(f"{path}.{key}={value}{src}: {why} ({target} {key}: {_show(hints[key])})")
    return out


def _show(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    if typing.get_origin(hint) is typing.Annotated:
        base, *meta = typing.get_args(hint)
        return " ".join([_show(base), *map(repr, meta)])
    text = str(hint).replace("typing.", "")
    return text.replace("xformer.config_types.", "")


def check_targets(cfg: DictConfig, early: bool | None = None) -> None:
    """Every node with a ``_target_`` (outside ``hydra``) against what it names (module docstring):
    ``early=True`` the :data:`EARLY` roots only, ``False`` every other root, ``None`` all.

    Raises:
        ConfigError: every problem of the config, one line each.
    """
    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, DictConfig):
            if "_target_" in node and path:
                problems.extend(_node_problems(node, path))
            for key in node:
                if not path and (str(key) in SKIP or (early is not None and (str(key) in EARLY) != early)):
                    continue
                try:
                    child = node._get_node(key)
                except Exception:
                    continue
                if isinstance(child, (DictConfig, ListConfig)):
                    walk(child, f"{path}.{key}" if path else str(key))
        elif isinstance(node, ListConfig):
            for i, item in enumerate(node._iter_ex(resolve=False) if hasattr(node, "_iter_ex") else node):
                walk(item, f"{path}[{i}]")

    walk(cfg, "")
    raise_all(problems)

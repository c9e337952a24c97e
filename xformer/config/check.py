"""The config check, before anything is built or read: each config node against the signature of the class it
names (the schema), the named cross-key rules no signature can know, and the stages that run them:

0. :func:`first_error`, the command line composes with Hydra's Compose API (before ``@hydra.main``);
1. :func:`check_static`, the config alone (no torch);
2. :func:`check_model`, the :data:`EARLY` nodes, the mixer and optimizer rules, the model on the meta device;
3. :func:`check_data_options`, the other nodes, the data module's constructor and (a dry run, a sweep's check) the
   callbacks and trainer the run builds (:mod:`xformer.config.trainer`);
4. :func:`check_with_data`, the built data against the model.

Every mistake is one ``error:`` line naming the key, its YAML file where known, and the fix."""

from __future__ import annotations

import inspect
import logging
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, Literal

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationKeyError, InterpolationResolutionError

from xformer.config.checkpoint import check_checkpoint_model, check_ckpt_file
from xformer.config.overrides import added_overrides, key_of, parse
from xformer.config.trainer import _ACCELERATORS, CONSUMED, _get, _nodes, as_run, build_callbacks, trainer_accepts
from xformer.config_types import Range, closest, fix_for, hint, import_target, parameters, value_problem
from xformer.errors import ConfigError, warn_once
from xformer.train.checkpoint_file import build_model, refusal

# -- the schema: each node against its class --------------------------------------------------------
#: Nodes the run does not instantiate (Hydra's own settings).
SKIP = ("hydra",)
#: The roots checked in stage 2 (their targets import torch at most); the others follow in stage 3.
EARLY = ("model", "optim", "loss", "decode")


def raise_all(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` holding every problem, one per line (``error:`` before each)."""
    if problems:
        raise ConfigError("\nerror: ".join(dict.fromkeys(problems)))


def _walk(node: Any, path: str = ""):
    """``(path, parent, key)`` of each value under ``node`` outside ``hydra``, parents first, unresolved."""
    for key in node.keys() if isinstance(node, DictConfig) else range(len(node)):
        where = f"{path}[{key}]" if isinstance(node, ListConfig) else f"{path}.{key}" if path else str(key)
        if path or str(key) not in SKIP:
            yield where, node, key
            if isinstance(child := node._get_node(key), (DictConfig, ListConfig)) and not child._is_interpolation():
                yield from _walk(child, where)


def check_group_nodes(cfg: DictConfig) -> None:
    """Refuse ``+group=option`` of no group, ``+key`` on a node without ``_target_`` (others: :func:`check_targets`),
    a string where a config group puts a node (``model.pe=x``, not ``model/pe=x``). Raises: ConfigError."""
    hc = HydraConfig.get() if HydraConfig.initialized() else None  # what Hydra knows of this run, if it runs it
    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    entries = loader.get_search_path().get_path() if loader is not None else []
    roots = [Path(e.path.removeprefix("file://")) for e in entries if e.path.startswith("file://")]
    problems = []
    for key, value in added_overrides(hc.overrides.task) if hc is not None else []:
        if "/" in key or "@" in key:
            if loader is not None and not loader.get_group_options(group := key.split("@", 1)[0]):
                parent, _, name = group.rpartition("/")
                siblings, prefix = list(loader.list_groups(parent)), f"{parent}/" if parent else ""
                then = f" (then {prefix}{near}={value}, without +)" if (near := closest(name, siblings)) else ""
                why = f"there is no config group {group} (no folder conf/{group}/ in the config search path)"
                problems.append(f"+{key}={value}: {why}. Fix: {hint(name, siblings, prefix)}{then}")
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key, default=None) if parent_key else cfg
        if not isinstance(parent, DictConfig) or parent_key.split(".")[0] in SKIP or leaf == "_target_":
            continue
        if "_target_" not in parent and not (isinstance(added := parent.get(leaf), DictConfig) and "_target_" in added):
            fix = hint(leaf, [k for k in parent if k != leaf], f"{parent_key}." if parent_key else "")
            where = f"the {parent_key} node" if parent_key else "the root config"
            problems.append(f"+{key}={value}: {where} has no key {leaf!r}, and {leaf!r} is read by nothing. Fix: {fix}")
    for root in roots or [Path(__file__).resolve().parents[2] / "conf"]:
        for folder in sorted(p for p in root.rglob("*") if p.is_dir() and p.name not in SKIP):
            group = folder.relative_to(root).as_posix()
            try:
                node = OmegaConf.select(cfg, key := group.replace("/", "."), default=None)
                items = list(node.items()) if isinstance(node, DictConfig) else [("", node)]
            except Exception:  # an interpolation that does not resolve: named elsewhere
                continue
            for leaf, value in ((str(k), v) for k, v in items if isinstance(v, str)):
                # a key of the node: where every option that sets it sets a node (read unresolved)
                sets = (n for p in folder.glob("*.yaml") if (n := OmegaConf.load(p)._get_node(leaf)) is not None)
                if not leaf or ((folder / f"{value}.yaml").is_file() and {type(n) for n in sets} == {DictConfig}):
                    where = f"{key}.{leaf}" if leaf else key
                    problems.append(f"{where}={value}: replaces the node with a string. Fix: {group}={value}")
    raise_all(problems)


def _source(path: str, key: str) -> str:
    """Where ``path.key`` came from: the command line, or the YAML file of the group that chose the node."""
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    if hc is not None and any(key_of(line) == f"{path}.{key}" for line in hc.overrides.task):
        return " (from the command line)"
    for n in range(len(parts := path.split(".")), 0, -1) if hc is not None else ():
        if option := hc.runtime.choices.get(group := "/".join(parts[:n])):
            return f" ({group}/{option}.yaml in the config search path)"
    return ""


def fit_problems(node: DictConfig, path: str, obj: Any, name: str, skip=(), strict: bool = True) -> list[str]:
    """``node``'s unknown keys (``strict``, no ``**kwargs``) and values outside the annotations of ``obj``."""
    params, hints, open_ = parameters(obj)
    out = []
    for key in (str(k) for k in node if not str(k).startswith("_") and k not in skip):
        src, at = _source(path, key), f"{path}.{key}"
        if key not in params and strict and not open_:
            out.append(f"{at}{src}: not a parameter of {name}. Fix: drop it, or {hint(key, params, path + '.')}")
        if key not in params or key not in hints or OmegaConf.is_missing(node, key):
            continue
        try:
            value = OmegaConf.to_container(v, resolve=True) if isinstance(v := node[key], ListConfig) else v
        except Exception:  # an interpolation that does not resolve: Hydra names it itself
            continue
        src = f" (from {node._get_node(key)._value()})" if OmegaConf.is_interpolation(node, key) else src
        if not isinstance(value, DictConfig) and (why := value_problem(value, hints[key])):
            shown = f"[{','.join(map(str, value))}]" if isinstance(value, list) else value
            out.append(f"{at}={shown}{src}: {why}. Fix: {fix_for(value, hints[key], at)} ({name} {key})")
    return out


def check_targets(cfg: DictConfig, early: bool | None = None) -> None:
    """Each ``_target_`` node (``early``: in :data:`EARLY` roots or not) against its class. Raises: ConfigError."""
    problems: list[str] = []
    for path, parent, key in _walk(cfg):
        if not isinstance(node := parent._get_node(key), DictConfig) or "_target_" not in node:
            continue
        if early is not None and (re.split(r"[.[]", path)[0] in EARLY) != early:
            continue
        obj, why = import_target(target := str(node._target_))
        at = f"{path}._target_={target}{_source(path, '_target_')}"
        if obj is None:
            problems.append(f"{at}: {why}")
            continue
        problems += fit_problems(node, path, obj, target, CONSUMED.get(target, ()))
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        try:  # a nested node is built from its own keys alone, unless its YAML says _partial_: true
            nested = "." in path and not node.get("_partial_") and "_args_" not in node
            params = inspect.signature(obj).parameters.values() if nested else []
        except (TypeError, ValueError):  # a builtin without a signature: Hydra's own error then
            params = []
        if missing := [p.name for p in params if p.kind in kinds and p.default is p.empty and p.name not in node]:
            fix = "add `_partial_: true` to the YAML (the parent passes them: docs/variants.md), or give them there"
            problems.append(f"{at}: it needs {', '.join(missing)}, which its YAML does not give. Fix: {fix}")
    raise_all(problems)


def check_resolves(cfg: DictConfig) -> None:
    """Refuse interpolations of an unset environment variable or a missing key (others: later). Raises: ConfigError."""
    problems: list[str] = []
    for where, node, key in _walk(cfg):
        if isinstance(child := node._get_node(key), (DictConfig, ListConfig)) and not child._is_interpolation():
            continue
        raw = str(child._value())
        try:
            node[key]
        except InterpolationKeyError as err:  # named where the reference is written, not where it is used
            if (m := re.search(r"Interpolation key '([^']+)' not found", str(err))) and "${" + m[1] in raw:
                fix = f"correct the reference, or set +{m[1]}=..."
                problems.append(f"{where}={raw}: there is no key {m[1]}. Fix: {fix}")
        except InterpolationResolutionError as err:
            if (m := re.search(r"Environment variable '([^']+)' not found", str(err))) and f"oc.env:{m[1]}" in raw:
                rest = raw.split("}", 1)[1].strip("/") if raw.startswith("${oc.env:") and "}" in raw else ""
                value = "/path/to/data" if "DATA" in m[1].upper() else "<value>"
                value += f" (the folder that holds {rest}/)" if rest else ""
                fix = f"export {m[1]}={value}, or set {where}"
                problems.append(f"{where}={raw}: the environment variable {m[1]} is not set. Fix: {fix}")
        except Exception:  # a missing value (???) or Hydra's own resolvers: the later checks name them
            continue
    raise_all(problems)


# -- the named cross-key rules ---------------------------------------------------------------------
#: The sequence metrics the training module can compute; ``objective.metric=val/<m>`` names one of them.
SEQUENCE_METRICS = ("bleu", "exact_match")
#: Lightning loggers whose package xformer does not install: class name -> (modules, install line).
_LOGGER_PACKAGES = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    "MLFlowLogger": (("mlflow",), "pip install mlflow"),
    "CometLogger": (("comet_ml",), "pip install comet-ml"),
    "NeptuneLogger": (("neptune",), "pip install neptune"),
}


def warmup_rules(cfg: DictConfig) -> None:
    """Warm-up vs schedule length and step budget (warns), on the config with its epoch keys in steps."""
    warmup, steps, total = (_get(cfg, k) for k in ("optim.warmup_steps", "trainer.max_steps", "optim.scheduler"))
    total = _get(cfg, "optim.scheduler.total_steps") if isinstance(total, DictConfig) else None
    if isinstance(warmup, int) and isinstance(total, int) and 0 < total <= warmup:
        why = f">= optim.scheduler.total_steps={total}: the learning rate climbs for the whole schedule, then drops"
        warn_once(f"optim.warmup_steps={warmup} {why} to its floor at once", cfg)
    elif isinstance(warmup, int) and isinstance(steps, int) and 0 < steps < warmup:
        why = f"> trainer.max_steps={steps}: the run ends before the learning rate reaches its peak optim.lr"
        warn_once(f"optim.warmup_steps={warmup} {why}", cfg)


def optim_rules(cfg: DictConfig) -> None:
    """Schedule vs step budget, unread weight decay (the warm-up: :func:`warmup_rules`). Raises: ConfigError."""
    steps, epochs, optim = (_get(cfg, k) for k in ("trainer.max_steps", "trainer.max_epochs", "optim"))
    node = optim.get("scheduler") if isinstance(optim, DictConfig) else None
    follows = isinstance(node, DictConfig) and "total_steps" in node
    follows = follows and node._get_node("total_steps")._value() == "${trainer.max_steps}"
    # max_epochs becomes max_steps once the data is known (xformer.config.steps)
    if follows and isinstance(steps, int) and steps < 1 and not (isinstance(epochs, int) and epochs > 0):
        fix = "set optim.scheduler.total_steps=<steps>, trainer.max_steps or trainer.max_epochs"
        raise ConfigError(f"optim.scheduler.total_steps: follows trainer.max_steps={steps} (no length). Fix: {fix}")
    opt = optim.get("optimizer") if isinstance(optim, DictConfig) and optim.get("weight_decay") else None
    if opt is not None and "${optim.weight_decay}" not in (OmegaConf.to_yaml(opt) if OmegaConf.is_dict(opt) else ""):
        fix = "an optimizer whose node reads ${optim.weight_decay}, or optim.optimizer.weight_decay"
        raise ConfigError(f"optim.weight_decay={optim.weight_decay}: the chosen optimizer does not read it. Fix: {fix}")


def trainer_rules(cfg: DictConfig) -> None:
    """FSDP2's precision, the step budget, eval's checkpoint, keys counted in epochs, and ``ModelCheckpoint``:
    a timedelta interval, no mid-step saves under accumulation (``StepEndCheckpoint``). Raises: ConfigError."""
    precision = str(_get(cfg, "trainer.precision", "32-true"))
    target = str(_get(cfg, "trainer.strategy._target_") or _get(cfg, "trainer.strategy"))
    unscaled = ("32-true", "bf16-mixed", "bf16-true", "16-true")  # FSDP2 (ModelParallelStrategy) has no gradient scaler
    if target.endswith("fsdp_strategy") and precision not in unscaled:
        fix = f"trainer.precision=bf16-mixed, or one of {', '.join(unscaled)}"
        raise ConfigError(f"trainer.precision={precision}: FSDP2 has no gradient scaler for it. Fix: {fix}")
    steps, epochs, time = (_get(cfg, f"trainer.{k}") for k in ("max_steps", "max_epochs", "max_time"))
    if cfg.get("mode") == "train" and steps == 0:
        raise ConfigError("trainer.max_steps=0: would train nothing. Fix: max_steps >= 1, or mode=eval ckpt_path=...")
    if cfg.get("mode") == "train" and steps in (None, -1) and not (epochs or 0) > 0 and time is None:
        fix = "trainer.max_steps=<optimizer steps> or trainer.max_epochs=<data epochs>"
        raise ConfigError(f"trainer.max_steps={steps}: no budget (nor max_epochs or max_time). Fix: {fix}")
    if cfg.get("mode") == "eval" and not cfg.get("ckpt_path"):
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if (path := cfg.get("ckpt_path")) and path != "last":  # a file named; ``last`` is the job's own
        check_ckpt_file(str(path))
    fixes = {"trainer.min_epochs": "trainer.min_steps=<optimizer steps>"}
    fixes["trainer.reload_dataloaders_every_n_epochs"] = "remove it"  # the samplers reshuffle every data epoch
    accumulate, ours = _get(cfg, "trainer.accumulate_grad_batches", 1), "xformer.jobs.callbacks.StepEndCheckpoint"
    periodic = ("train_time_interval", "every_n_train_steps") if isinstance(accumulate, int) and accumulate > 1 else ()
    for name, node in _nodes(cfg, "callbacks"):
        fixes[f"callbacks.{name}.every_n_epochs"] = f"callbacks.{name}.every_n_train_steps=<optimizer steps>"
        if isinstance(timed := node.get("train_time_interval"), DictConfig) and "_target_" not in timed:
            at, keys = f"callbacks.{name}.train_time_interval", "".join(f", {k}: {v}" for k, v in timed.items())
            fix = f"{at}={{_target_: datetime.timedelta{keys}}}"  # Lightning calls timedelta methods on it
            raise ConfigError(f"{at}: ModelCheckpoint takes a datetime.timedelta, not a mapping. Fix: {fix}")
        for key in (k for k in periodic if node.get(k) is not None):  # a resume cannot continue a mid-step save
            if str(node.get("_target_", "")).endswith(".ModelCheckpoint"):
                why = f"with trainer.accumulate_grad_batches={accumulate} it can save mid-step"
                raise ConfigError(f"callbacks.{name}.{key}: {why}. Fix: callbacks.{name}._target_={ours}")
    for key, fix in fixes.items():
        if _get(cfg, key):
            raise ConfigError(f"{key}: counts Lightning's epochs (xformer counts steps). Fix: {fix}")


def epoch_keyed_callbacks(cfg: DictConfig) -> None:
    """Refuse a callback acting on Lightning's epoch (the whole run: docs/scaling.md). Raises: ConfigError."""
    from lightning.pytorch import callbacks as cb

    why = {
        cb.StochasticWeightAveraging: "averages from an epoch on. Fix: remove it (or AveragedModel by step)",
        cb.GradientAccumulationScheduler: "changes the accumulation at epochs. Fix: remove it and set "
        "trainer.accumulate_grad_batches=<micro-batches a step>",
        cb.BaseFinetuning: "unfreezes layers at epochs. Fix: remove it (or unfreeze in on_train_batch_start)",
        cb.ProgressBar: "shows Lightning's epoch (always 0). Fix: remove it (xformer's bar shows steps)",
    }
    for name, node in _nodes(cfg, "callbacks"):
        if not isinstance(cls := import_target(str(node.get("_target_")))[0], type):
            continue
        key, mine = f"callbacks.{name}", cls.__module__.startswith("xformer.")
        for base, option, bad, good in (
            (cb.EarlyStopping, "check_on_train_epoch_end", "true", "false"),
            (cb.LearningRateMonitor, "logging_interval", "epoch", "step"),
        ):
            if issubclass(cls, base) and str(node.get(option)).lower() == bad:
                raise ConfigError(f"{key}.{option}={bad}: acts at an epoch's end. Fix: {key}.{option}={good}")
        for base in (b for b in why if issubclass(cls, b) and not mine):
            raise ConfigError(f"{key} ({cls.__name__}): {why[base]}")
        # no step or time trigger: Lightning saves at its epoch's end (once, at the run's end) or after validations
        triggers = (node.get(k) for k in ("every_n_train_steps", "every_n_epochs", "train_time_interval"))
        lone = issubclass(cls, cb.ModelCheckpoint) and all(t is None for t in triggers)
        at, fix = f"{key}.save_on_train_epoch_end", f"Fix: {key}.every_n_train_steps=<optimizer steps, e.g. an epoch's>"
        epoch_end, limit = node.get("save_on_train_epoch_end"), _get(cfg, "trainer.limit_val_batches")
        if lone and str(epoch_end).lower() == "true":
            raise ConfigError(f"{at}=true: saves at Lightning's epoch's end, which comes once, at the run's end. {fix}")
        if lone and epoch_end is None and limit == 0 and not mine:  # xformer's own save at validations by design
            said = f"{key} ({cls.__name__}) saves after each validation, and it runs none (Lightning: at epochs' ends)"
            raise ConfigError(f"trainer.limit_val_batches={limit}: {said}. {fix}")
        hooks = [h for h in ("on_train_epoch_start", "on_train_epoch_end") if hasattr(cls, h)]
        if hooks := [h for h in hooks if getattr(cls, h).__module__.split(".")[0] not in ("lightning", "xformer")]:
            fix = "act in on_train_batch_end every N optimizer steps (trainer.global_step), or in on_validation_end"
            said = " and ".join(f"{h} runs once, at the run's {h.rsplit('_', 1)[1]}" for h in hooks)
            raise ConfigError(f"{key} ({cls.__name__}): its {said}. Fix: {fix}")


def installed_and_present(cfg: DictConfig) -> None:
    """Each logger's optional package is installed (looked up, not imported); ``data.root`` exists."""
    for name, node in _nodes(cfg, "logger"):
        modules, install = _LOGGER_PACKAGES.get(target := str(node.get("_target_", "")).rsplit(".", 1)[-1], ((), ""))
        if modules and not any(find_spec(m) for m in modules):
            raise ConfigError(f"logger.{name}: {target} needs {' or '.join(modules)}. Fix: {install}")
    if (root := _get(cfg, "data.root")) is not None and not Path(str(root)).expanduser().is_dir():
        raise ConfigError(f"data.root={root}: no such folder. Fix: the data's folder, or null to download/generate it")


def check_objective(cfg: DictConfig, metrics: list[str] | None = None, data_name: str = "this data") -> None:
    """Training logs ``objective.metric`` (of the data's ``metrics``; None: not known). Raises: ConfigError."""
    if cfg.get("mode", "train") != "train":
        return
    metric, known = str(cfg.objective.metric), list(SEQUENCE_METRICS) if metrics is None else metrics
    keys = ["val/loss", "val/ppl", "val/acc", *[f"val/{m}" for m in known], "train/loss"]  # logged at validations
    watched = [(f"callbacks.{n}.monitor", _get(cfg, f"callbacks.{n}.monitor")) for n, _ in _nodes(cfg, "callbacks")]
    for at, name in (("objective.metric", metric), *((at, str(m)) for at, m in watched if m is not None)):
        if name not in keys:
            why = "no such metric" if metrics is None else f"data {data_name} does not compute it"
            why = "test metrics come after training" if name.startswith("test/") else why
            raise ConfigError(f"{at}={name}: not logged ({why}). Fix: use one of {', '.join(keys)}")
    limit, never = _get(cfg, "trainer.limit_val_batches"), f"so objective.metric={metric} is never logged"
    if metric.startswith("val/") and limit is not None and not isinstance(limit, bool) and limit == 0:
        raise ConfigError(f"trainer.limit_val_batches={limit}: {never}. Fix: > 0, or objective.metric=train/loss")
    if metric.split("/", 1)[-1] in known and _get(cfg, "decode.val_batches") == 0:
        raise ConfigError(f"decode.val_batches=0: {never}. Fix: >= 1 (or null = all), or objective.metric=val/loss")


STATIC = (optim_rules, trainer_rules, installed_and_present, check_objective)


def mixer_fits(cfg: DictConfig) -> None:
    """Mixer vs positional scheme: the mixer serves a stack, and its ``refusal()`` accepts each one's scheme."""
    from xformer.model import FullAttention, Mixer

    try:
        model_cls, mixer = get_class(cfg.model._target_), instantiate(cfg.model.mixer)
    except Exception:  # no mixer node, an unknown class or bad arguments: the schema or the model names it
        return
    if not isinstance(mixer, Mixer) or not hasattr(model_cls, "stack_patterns"):
        return
    pattern = instantiate(cfg.model.attention) if cfg.model.get("attention") is not None else FullAttention()
    patterns = model_cls.stack_patterns(pattern() if callable(pattern) and not hasattr(pattern, "blocked") else pattern)
    if not (served := [name for name in patterns if mixer.applies_to(name)]):
        why = f"model/arch={model_cls.arch} has no {mixer.stacks} stack (it has {' and '.join(patterns)})"
        raise ConfigError(f"model.mixer.stacks={mixer.stacks}: {why}. Fix: model.mixer.stacks=both")
    pe_cls = get_class(cfg.model.pe._target_) if "pe" in cfg.model else None
    for name in served:
        if why := mixer.refusal(patterns[name], pe_cls):
            fix = "" if "Fix:" in why else ". Fix: another model/pe, model/attention or model/mixer"
            if len(patterns) > 1 and pe_cls is not None and "positional scheme" not in why:
                fix += f" (or model.mixer.stacks={next(n for n in patterns if n != name)})"
            raise ConfigError(f"model.mixer={type(mixer).__name__} on the {name}: {why}{fix}")


# -- the stages ------------------------------------------------------------------------------------
def _root(seed: Annotated[int, Range(ge=0)], mode: Literal["train", "eval"], ckpt_path: str | None): ...
def _objective(metric: str, mode: Literal["min", "max"]): ...
def _optim(lr: Annotated[float, Range(gt=0)]): ...  # warm-up and decay: the schedule's and optimizer's own
def _val_dense(every: Annotated[int, Range(ge=1)] | None, until: Annotated[int, Range(ge=0)]): ...
def _unchecked_by_lightning(  # keys Lightning accepts out of range (a negative interval) or reads late (max_time)
    log_every_n_steps: Annotated[int, Range(ge=0)] | None,
    max_time: str | None,  # "DD:HH:MM:SS", or a node of timedelta keys (not checked here), as Timer takes it
    accumulate_grad_batches: Annotated[int, Range(ge=1)],  # Lightning's annotation is a bare int
): ...


#: Nodes without a ``_target_`` that run.py and the driver read (and keys Lightning checks late), as signatures.
DECLARED = {"": _root, "objective": _objective, "optim": _optim, "val_dense": _val_dense}
DECLARED["trainer"] = _unchecked_by_lightning


def check_static(cfg: DictConfig) -> None:
    """Stage 1 (interpolations first). Raises: ConfigError, every problem, one line each."""
    check_resolves(cfg)
    problems = []
    for path, fn in DECLARED.items():
        if isinstance(node := cfg.get(path) if path else cfg, DictConfig):
            problems += [p.lstrip(".") for p in fit_problems(node, path, fn, path or "the root config", strict=False)]
    for check in (check_group_nodes, *STATIC):
        try:
            check(cfg)
        except ConfigError as err:
            problems.append(str(err))
    raise_all(problems)


def check_model(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stage 2: early nodes, mixer, optimizer, model (meta device), the loaded ``ckpt`` vs it. Raises: ConfigError."""
    import torch

    from xformer.train.optim import build_optimizer

    check_targets(cfg, early=True)
    mixer_fits(cfg)
    if isinstance(node := _get(cfg, "optim.optimizer"), DictConfig) and "_target_" in node:
        try:  # its own constructor judges its arguments, for a one-weight model
            build_optimizer(instantiate(node), torch.nn.Linear(1, 1))
        except (ValueError, RuntimeError, TypeError, IndexError) as err:
            why = str(err).splitlines()[0].rstrip(".")
            raise ConfigError(f"optim.optimizer ({node._target_}): {why}. Fix: correct that argument") from None
    build_model(cfg, 32, 32, 0, device="meta")
    if ckpt is not None and cfg.mode == "train":
        check_checkpoint_model(cfg, ckpt)


def check_data_options(cfg: DictConfig, trainer: bool = True):
    """Stage 3 (``trainer``: not in the run): the other nodes; returns the data module. Raises: ConfigError."""
    check_targets(cfg, early=False)
    epoch_keyed_callbacks(cfg)
    if trainer:
        build_callbacks(cfg, check=True)
    try:
        dm = instantiate(cfg.data)
    except Exception as err:
        if (why := refusal(err, (ValueError, TypeError))) is None:
            raise
        raise ConfigError(f"data ({str(cfg.data.get('_target_', '?')).rsplit('.', 1)[-1]}): {why}") from None
    check_objective(cfg, list(getattr(dm, "metrics", []) or []), type(dm).__name__)
    if trainer:  # the trainer the run builds, after its data is known
        trainer_accepts(converted := as_run(cfg, dm))
        warmup_rules(converted)
    return dm


def check_config_first(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1 and 2: what ``run.py`` checks before it imports Lightning or W&B. Raises: ConfigError."""
    check_static(cfg)
    check_model(cfg, ckpt)


def check_devices(cfg: DictConfig) -> None:
    """The training run's ``trainer.accelerator`` and ``trainer.devices`` exist here. Raises: ConfigError."""
    import torch

    if (acc := str(_get(cfg, "trainer.accelerator", "auto"))) not in _ACCELERATORS:
        return
    have = torch.cuda.device_count() if _ACCELERATORS[acc] == "cuda" else int(torch.backends.mps.is_available())
    if have == 0:
        fix = "run it where one is, or trainer.accelerator=cpu (or experiment=<name>_cpu where one exists)"
        raise ConfigError(f"trainer.accelerator={acc}: this machine has no such device. Fix: {fix}")
    if isinstance(want := _get(cfg, "trainer.devices", "auto"), int) and want > have:
        fix = f"trainer.devices={have} or fewer, or run it where {want} are"
        raise ConfigError(f"trainer.devices={want}: this machine has {have} {acc} device(s). Fix: {fix}")


def check_config(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1-3 (a dry run, every job of a sweep). Raises: ConfigError, one line per problem."""
    check_config_first(cfg, ckpt)
    check_data_options(cfg)


def check_with_data(cfg: DictConfig, dm, model) -> None:
    """Stage 4: ``model.check_data``, the longest sequence vs ``model.max_len`` (eval: warns), the warm-up vs the step
    budget (warns). Raises: ConfigError."""
    warmup_rules(cfg)
    model.check_data(dm)
    limit, need = model.position_limit, model.positions_needed(dm)
    if limit is None or limit >= need:
        return
    stack = model.encoder if getattr(model, "encoder", None) is not None else model.decoder
    what = f"the data's longest sequence has {need} tokens and {type(stack.pe).__name__} positions stop at max_len"
    if cfg.mode != "eval":
        raise ConfigError(f"model.max_len={limit}: {what}; set model.max_len={need} or more")
    logging.getLogger("xformer").warning("model.max_len=%d: %s; over-long examples are cut to fit", limit, what)


# -- stage 0: the command line ----------------------------------------------------------------------
def _option_fix(value: str, options: list[str], group: str, conf: Path, listed: str) -> str:
    """The fix for option ``value`` of ``group``: what it names by ``# aliases:`` or spelling, and the ``listed``."""
    aliases: dict[str, list[str]] = {}
    for option in options:
        yaml = path.read_text() if (path := Path(conf) / group / f"{option}.yaml").is_file() else ""  # else elsewhere
        for alias in (a for m in re.finditer(r"^#\s*aliases:\s*(.+)$", yaml, re.M) for a in m[1].split(",")):
            aliases.setdefault(alias.strip().lower(), []).append(option)
    word = value.strip().lower().replace("-", "_")
    if meant := aliases.get(word):
        why = f"{value!r} is another name for {' and '.join(meant)}; "
    else:
        close = closest(word, [*options, *aliases])
        meant = [close] if close in options else aliases.get(close or "", [])
        why = f"{close!r} is another name for {' and '.join(meant)}; " if close and close not in options else ""
    if not meant:
        return f"choose one of the options: {listed}"
    return f"did you mean {' or '.join(f'{group}={o}' for o in meant)}? ({why}options: {listed})"


def _line_for(arg: str, conf: Path, err: BaseException, others: list[str], loader) -> str | None:
    """One line for the failure ``err`` of override ``arg``, or ``None`` when it is not one this knows."""
    override = parse(arg)  # parsed by first_error
    key, value, said = override.key_or_group, str(override.value()), str(err)
    missing = isinstance(err, MissingConfigException) and f"'{key}/{value}'" in said
    if missing and loader.list_groups(key) + loader.get_group_options(key):
        tops = loader.get_group_options(key)
        subs = {s: loader.get_group_options(f"{key}/{s}") for s in loader.list_groups(key)}
        options = [*tops, *(f"{s}/{o}" for s, names in subs.items() for o in names)]
        listed = ", ".join([*tops, *(f"{s}/{{{', '.join(names)}}}" for s, names in subs.items() if names)])
        fix = _option_fix(value, options, key, conf, listed)
        return f"{arg}: config group {key} has no option {value!r}. Fix: {fix}"
    parent, _, name = key.rpartition("/")
    unknown = isinstance(err, ConfigCompositionException) and override.package is None and f"'{key}'" in said
    if unknown and "/" in key and not loader.get_group_options(key) and (groups := loader.list_groups(parent)):
        fix = f"did you mean {parent}/{g}={value}?" if (g := closest(name, groups)) else f"choose a group of {parent}"
        return f"{arg}: there is no config group {key}. Fix: {fix} (groups in {parent}: {', '.join(groups)})"
    if not isinstance(err.__cause__, (ConfigAttributeError, ConfigKeyError)) or f"'{key}'" not in said:
        return None
    try:  # the config without this override: its root keys, the node's keys and its class's parameters
        cfg = compose("config", overrides=others)
    except Exception:  # only for the message
        cfg = OmegaConf.create()
    if (head := key.split(".")[0]) not in cfg:
        return f"{arg}: the root config has no key {head!r}. Fix: {hint(head, sorted(map(str, cfg)))}"
    parts = key.split(".")  # the first missing key, under its parent (a missing node above the leaf too)
    n = next((i for i in range(2, len(parts)) if OmegaConf.select(cfg, ".".join(parts[:i])) is None), len(parts))
    parent, leaf = ".".join(parts[: n - 1]), parts[n - 1]
    sub = OmegaConf.select(cfg, parent)
    cls = import_target(str(sub._target_))[0] if OmegaConf.is_dict(sub) and sub.get("_target_") else None
    keys = [*(sub if OmegaConf.is_dict(sub) else []), *(parameters(cls)[0] if cls is not None else [])]
    keys = sorted({str(k) for k in keys if not str(k).startswith("_")})
    group = parent.replace(".", "/")
    yamls = [(o, conf / group / f"{o}.yaml") for o in loader.get_group_options(group)]
    if owners := [o for o, p in yamls if p.is_file() and leaf in OmegaConf.load(p)]:
        # and the keys of the chosen option, where the setting may have another name
        fix = f"{leaf} is a key of {group}={', '.join(owners)}: choose one (e.g. {group}={owners[0]} {arg})"
        fix += f", or set one of this {parent}'s keys: {', '.join(keys)}" if keys else ""
    elif leaf in keys:  # a parameter of the node's class that its YAML leaves out
        fix = f"+{arg} ({parent}'s class takes {leaf!r}; '+' adds a key the node does not declare)"
    else:
        fix = f"{hint(leaf, keys)} (or +{arg} to add a key the node does not declare)"
    return f"{arg}: {parent} has no key {leaf!r}. Fix: {fix}"


def first_error(args: list[str], conf: Path) -> str | None:
    """The ``error:`` line for the first override Hydra cannot compose or resolve; ``None``: fine, or Hydra's."""
    overrides = []
    for arg in (a for a in args if a not in ("-m", "--multirun")):
        if (override := None if arg.startswith("-") else parse(arg)) is None or override.is_interval_sweep():
            return None
        if override.is_sweep_override():  # a sweep: checked by its first value
            arg = f"{arg.split('=', 1)[0]}={next(iter(override.sweep_iterator()), None)}"
        overrides.append(arg)
    if not overrides:
        return None
    with initialize_config_dir(config_dir=str(Path(conf).resolve()), version_base="1.3"):
        try:
            cfg = compose("config", overrides=overrides)
        except Exception as err:  # compose raises several Hydra and OmegaConf types
            loader = GlobalHydra.instance().config_loader()
            lines = (_line_for(a, conf, err, [o for o in overrides if o != a], loader) for a in overrides)
            return next(filter(None, lines), None)
    try:  # composed: an environment variable or a key its interpolations name that is missing
        check_resolves(cfg)
    except ConfigError as err:
        return str(err)
    return None

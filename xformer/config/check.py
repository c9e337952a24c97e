"""The config check, before anything is built or read: each config node against the signature of the class it
names (the schema), the named cross-key rules no signature can know, and the stages that run them:

0. :func:`first_error`, the command line composes with Hydra's Compose API (before ``@hydra.main``);
1. :func:`check_static`, the config alone (no torch);
2. :func:`check_model`, the :data:`EARLY` nodes, the mixer and optimizer rules, the model on the meta device;
3. :func:`check_data_options`, the other nodes and the data module's constructor;
4. :func:`check_with_data`, the built data against the model.

Every mistake is one ``error:`` line naming the key, its YAML file where known, and the fix."""

from __future__ import annotations

import difflib
import logging
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

from xformer.config.checkpoint import check_checkpoint_model, check_ckpt_file
from xformer.config.overrides import added_overrides, key_of, parse
from xformer.config_types import Range, closest, fix_for, hint, import_target, parameters, value_problem
from xformer.errors import ConfigError, warn_once
from xformer.train.checkpoint_file import build_model, refusal

# -- the schema: each node against its class --------------------------------------------------------


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
    """Refuse a string where a config group puts a node (``model.pe=x`` for the group ``model/pe``, or
    ``optim.optimizer=x`` where every option of ``optim`` holds a node ``optimizer``). Raises: ConfigError."""
    _, loader = _hydra()
    entries = loader.get_search_path().get_path() if loader is not None else []
    roots = [Path(e.path.removeprefix("file://")) for e in entries if e.path.startswith("file://")]
    problems = []
    for root in roots or [Path(__file__).resolve().parents[2] / "conf"]:
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
            fix = fix_for(value, hints[key], f"{path}.{key}")
            if why.startswith("must be one of "):
                fix = (f"{path}.{key}=" + close) if (close := closest(value, why[15:].split(", "))) else "one of those"
            out.append(f"{path}.{key}={shown}{src}: {why}. Fix: {fix} ({name} {key})")
    return out


def unbound_arguments(node: DictConfig, obj: Any) -> list[str]:
    """The required parameters of ``obj`` that ``node`` leaves out when Hydra calls it with the node's keys
    alone (no ``_partial_: true``, no ``_args_``): the call would fail with a ``TypeError``."""
    import inspect

    if node.get("_partial_", False) or "_args_" in node:
        return []
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: Hydra's own error then
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds and p.default is p.empty and p.name not in node]


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
                if obj is not None and "." in path and (missing := unbound_arguments(node, obj)):
                    # a nested node is built from its own keys; a factory group's YAML says _partial_: true
                    problems.append(
                        f"{path}._target_={target}{_source(path, '_target_')}: it needs {', '.join(missing)}, "
                        f"which its YAML does not give. Fix: add `_partial_: true` to the YAML, so xformer "
                        f"passes them when it builds the parent (docs/variants.md, Constructors), or give them there"
                    )
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
    """Name each value outside ``hydra`` whose interpolation needs an unset environment variable or a missing key,
    with the ``export`` or key to set; ``${hydra:...}`` and other resolver failures are left to later checks.
    Raises: ConfigError."""
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


# -- the named cross-key rules ---------------------------------------------------------------------


#: The sequence metrics the training module can compute; ``objective.metric=val/<m>`` names one of them.
SEQUENCE_METRICS = ("bleu", "exact_match")
#: Precisions of Lightning's ModelParallelStrategy (FSDP2), which has no gradient scaler.
_FSDP_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-true")
#: Lightning loggers whose package xformer does not install: class name -> (modules, install line).
_LOGGER_PACKAGES = {
    "TensorBoardLogger": (("tensorboard", "tensorboardX"), "pip install tensorboard"),
    "MLFlowLogger": (("mlflow",), "pip install mlflow"),
    "CometLogger": (("comet_ml",), "pip install comet-ml"),
    "NeptuneLogger": (("neptune",), "pip install neptune"),
}


def _get(cfg: DictConfig, key: str, default=None):  # an interpolation that does not resolve: Hydra names it
    return OmegaConf.select(cfg, key, default=default, throw_on_resolution_failure=False)


def schedule_length(cfg: DictConfig) -> None:
    """Warm-up vs schedule length: ``total_steps`` that follows ``max_steps`` needs a step budget (warns too)."""
    warmup, max_steps, node = _get(cfg, "optim.warmup_steps"), _get(cfg, "trainer.max_steps"), _get(cfg, "optim")
    node = node.get("scheduler") if isinstance(node, DictConfig) else None
    total = _get(cfg, "optim.scheduler.total_steps") if isinstance(node, DictConfig) else None
    if isinstance(warmup, int) and isinstance(total, int) and 0 < total <= warmup:
        why = f">= optim.scheduler.total_steps={total}: the learning rate climbs for the whole schedule, then drops"
        warn_once(f"optim.warmup_steps={warmup} {why} to its floor at once", cfg)
    elif isinstance(warmup, int) and isinstance(max_steps, int) and 0 < max_steps < warmup:
        why = f"> trainer.max_steps={max_steps}: the run ends before the learning rate reaches its peak optim.lr"
        warn_once(f"optim.warmup_steps={warmup} {why}", cfg)
    follows = isinstance(node, DictConfig) and "total_steps" in node and OmegaConf.is_interpolation(node, "total_steps")
    follows = follows and node._get_node("total_steps")._value() == "${trainer.max_steps}"
    epochs = _get(cfg, "trainer.max_epochs")  # converted to max_steps once the data is known (xformer.jobs.steps)
    if follows and isinstance(max_steps, int) and max_steps < 1 and not (isinstance(epochs, int) and epochs > 0):
        raise ConfigError(
            f"optim.scheduler.total_steps: follows trainer.max_steps={max_steps}, which gives the schedule no "
            "length. Fix: set optim.scheduler.total_steps=<steps>, trainer.max_steps or trainer.max_epochs"
        )


def weight_decay_is_read(cfg: DictConfig) -> None:
    """Weight decay read by the optimizer: ``optim.weight_decay`` that the optimizer node ignores did nothing."""
    optim = _get(cfg, "optim")
    if isinstance(optim, DictConfig) and optim.get("weight_decay"):
        node = optim.get("optimizer")
        if "${optim.weight_decay}" not in (OmegaConf.to_yaml(node) if isinstance(node, DictConfig) else ""):
            raise ConfigError(
                f"optim.weight_decay={optim.weight_decay}: the chosen optimizer does not read it. Fix: pick an "
                "optimizer whose node reads ${optim.weight_decay}, or set its own optim.optimizer.weight_decay"
            )


def precision_and_strategy(cfg: DictConfig) -> None:
    """Precision x strategy: FSDP2 trains only with the precisions it has no need to scale for."""
    precision, strategy = str(_get(cfg, "trainer.precision", "32-true")), _get(cfg, "trainer.strategy")
    target = str(strategy.get("_target_", "")) if isinstance(strategy, DictConfig) else str(strategy)
    if target.endswith("fsdp_strategy") and precision not in _FSDP_PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision}: FSDP2 has no gradient scaler for it. Fix: "
            f"trainer.precision=bf16-mixed, or one of {', '.join(_FSDP_PRECISIONS)}"
        )


def mode_and_checkpoint(cfg: DictConfig) -> None:
    """Mode vs steps and checkpoint: training trains a step, evaluation names a checkpoint that exists."""
    if cfg.get("mode") == "train" and _get(cfg, "trainer.max_steps") == 0:
        raise ConfigError(
            "trainer.max_steps=0: would train nothing and test an untrained model. Fix: "
            "max_steps >= 1 (or -1 with trainer.max_epochs), or mode=eval ckpt_path=..."
        )
    budget = [_get(cfg, f"trainer.{k}") for k in ("max_steps", "max_epochs", "max_time")]
    if cfg.get("mode") == "train" and budget[0] in (None, -1) and not (budget[1] or 0) > 0 and budget[2] is None:
        raise ConfigError(
            f"trainer.max_steps={budget[0]}: no budget (nor trainer.max_epochs or trainer.max_time): the run would "
            "train forever. Fix: trainer.max_steps=<optimizer steps> or trainer.max_epochs=<data epochs>"
        )
    if cfg.get("mode") == "eval" and not cfg.get("ckpt_path"):
        raise ConfigError("ckpt_path: mode=eval needs ckpt_path=/path/to/checkpoint.ckpt")
    if (path := cfg.get("ckpt_path")) and path != "last":  # a file named; ``last`` is the job's own
        check_ckpt_file(str(path))


def saves_on_whole_steps(cfg: DictConfig) -> None:
    """Accumulation vs Lightning's own ``ModelCheckpoint`` saving by step count or wall time: after a resume it
    can save between the micro-batches of a step (a time save anywhere), whose gradients no checkpoint
    holds, so a resume from that save would not continue exactly. ``xformer.jobs.callbacks.StepEndCheckpoint``
    (the default) saves at steps' ends only. Also: ``train_time_interval`` is a ``datetime.timedelta`` (a bare
    mapping would reach Lightning as one and fail at the first save)."""
    accumulate, callbacks = _get(cfg, "trainer.accumulate_grad_batches", 1), _get(cfg, "callbacks")
    if not isinstance(callbacks, DictConfig):
        return
    for name, node in callbacks.items():
        timed = node.get("train_time_interval") if isinstance(node, DictConfig) else None
        if isinstance(timed, DictConfig) and "_target_" not in timed:  # Lightning calls timedelta methods on it
            keys = ", ".join(f"{k}: {v}" for k, v in timed.items())
            raise ConfigError(
                f"callbacks.{name}.train_time_interval: ModelCheckpoint takes a datetime.timedelta, not a mapping. "
                f"Fix: callbacks.{name}.train_time_interval={{_target_: datetime.timedelta, {keys}}}"
            )
    if not isinstance(accumulate, int) or accumulate <= 1:
        return
    for name, node in callbacks.items():
        if not isinstance(node, DictConfig) or str(node.get("_target_", "")).rsplit(".", 1)[-1] != "ModelCheckpoint":
            continue
        for key in ("train_time_interval", "every_n_train_steps"):
            if node.get(key) is not None:
                raise ConfigError(
                    f"callbacks.{name}.{key}: with trainer.accumulate_grad_batches={accumulate} Lightning's "
                    "ModelCheckpoint can save between the micro-batches of a step, which a resume cannot continue. "
                    f"Fix: callbacks.{name}._target_=xformer.jobs.callbacks.StepEndCheckpoint"
                )


def counts_data_epochs(cfg: DictConfig) -> None:
    """Trainer keys counted in Lightning's epochs with no step equivalent: xformer trains by optimizer steps over
    the data's epochs run back to back as one Lightning epoch, which ends only with the run (the epoch keys that
    have one are converted: :mod:`xformer.jobs.steps`)."""
    if _get(cfg, "trainer.min_epochs"):
        raise ConfigError(
            "trainer.min_epochs: not supported (xformer counts optimizer steps). "
            "Fix: trainer.min_steps=<optimizer steps> instead"
        )
    if _get(cfg, "trainer.reload_dataloaders_every_n_epochs"):
        raise ConfigError(
            "trainer.reload_dataloaders_every_n_epochs: not supported (xformer counts optimizer steps; the samplers "
            "reshuffle every data epoch themselves). Fix: remove it"
        )
    callbacks = _get(cfg, "callbacks")
    for name, node in callbacks.items() if isinstance(callbacks, DictConfig) else []:
        if isinstance(node, DictConfig) and node.get("every_n_epochs"):
            raise ConfigError(
                f"callbacks.{name}.every_n_epochs: counts epochs (xformer counts optimizer steps). "
                f"Fix: callbacks.{name}.every_n_train_steps=<optimizer steps> instead"
            )


def _epoch_keyed(name: str, node: DictConfig, cls: type) -> str | None:
    """Why callback ``cls`` (config ``node`` at ``callbacks.<name>``) would act on Lightning's epoch, which is the
    whole run here, with the step-counted fix; None when it works on steps."""
    from lightning.pytorch.callbacks import (
        BaseFinetuning,
        EarlyStopping,
        GradientAccumulationScheduler,
        LearningRateMonitor,
        ProgressBar,
        StochasticWeightAveraging,
    )

    key = f"callbacks.{name}"
    if issubclass(cls, EarlyStopping) and node.get("check_on_train_epoch_end"):
        return (
            f"{key}.check_on_train_epoch_end=true: checks at an epoch's end. Fix: {key}.check_on_train_epoch_end=false"
            " (it then checks after every validation, every trainer.val_check_interval optimizer steps)"
        )
    if issubclass(cls, LearningRateMonitor) and node.get("logging_interval") == "epoch":
        return f"{key}.logging_interval=epoch: logs at an epoch's end. Fix: {key}.logging_interval=step"
    why = {
        StochasticWeightAveraging: "averages the weights from an epoch on and swaps them in at an epoch's end. Fix: "
        "remove it (Lightning's SWA has no step-counted form; torch.optim.swa_utils.AveragedModel in a module "
        "averages by step)",
        GradientAccumulationScheduler: "changes the accumulation at epochs. Fix: remove it and set "
        "trainer.accumulate_grad_batches=<micro-batches a step> (one value for the run)",
        BaseFinetuning: "unfreezes layers at epochs. Fix: remove it (or unfreeze in your module's "
        "on_train_batch_start at a trainer.global_step)",
        ProgressBar: "shows Lightning's epoch (always 0 here). Fix: remove it: xformer's bar shows optimizer steps, "
        "the data's epoch, the rate and the time left (trainer.enable_progress_bar=false for none)",
    }
    for base, words in why.items():
        if issubclass(cls, base) and not cls.__module__.startswith("xformer."):
            return f"{key} ({cls.__name__}): {words}"
    import lightning as L

    hooks = [h for h in ("on_train_epoch_start", "on_train_epoch_end") if getattr(cls, h) is not getattr(L.Callback, h)]
    owners = {getattr(cls, h).__module__.split(".")[0] for h in hooks}
    if hooks and owners - {"lightning", "xformer"}:
        return (
            f"{key} ({cls.__name__}): its {' and '.join(hooks)} run once, at the end of the run. Fix: act in "
            "on_train_batch_end every N optimizer steps (trainer.global_step), or in on_validation_end"
        )
    return None


def epoch_keyed_callbacks(cfg: DictConfig) -> None:
    """Each configured callback works on optimizer steps (an epoch-keyed Lightning feature is refused with its
    step-counted fix; docs/scaling.md, "Steps are the unit"). Raises: ConfigError, the first one."""
    callbacks = _get(cfg, "callbacks")
    for name, node in callbacks.items() if isinstance(callbacks, DictConfig) else []:
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        cls, _ = import_target(str(node._target_))
        if isinstance(cls, type) and (why := _epoch_keyed(str(name), node, cls)):
            raise ConfigError(why)


def installed_and_present(cfg: DictConfig) -> None:
    """Each logger's optional package is installed (looked up, not imported); ``data.root`` exists."""
    from importlib.util import find_spec

    for name, node in (_get(cfg, "logger") or {}).items():
        target = str(node.get("_target_", "")).rsplit(".", 1)[-1] if isinstance(node, DictConfig) else ""
        modules, install = _LOGGER_PACKAGES.get(target, ((), ""))
        if modules and not any(find_spec(m) for m in modules):
            raise ConfigError(
                f"logger.{name}: {target} needs {' or '.join(modules)}, which is not installed. "
                f"Fix: {install}, or choose another logger"
            )
    if (root := _get(cfg, "data.root")) is not None and not Path(str(root)).expanduser().is_dir():
        raise ConfigError(
            f"data.root={root}: no such folder. Fix: point data.root at the folder holding the "
            "data files, or set data.root=null to download/generate them"
        )


def objective_keys(metrics: list[str]) -> list[str]:
    """The keys a training run logs at every validation, which ``objective.metric`` may name."""
    return ["val/loss", "val/ppl", "val/acc"] + [f"val/{m}" for m in metrics] + ["train/loss"]


def check_objective(cfg: DictConfig, metrics: list[str] | None, data_name: str = "this data") -> None:
    """Objective vs data: ``objective.metric`` is logged while training (``metrics``: the data's sequence
    metrics, ``None`` before the data is known). Raises: ConfigError naming the key that keeps it unlogged."""
    metric, known = str(cfg.objective.metric), list(SEQUENCE_METRICS) if metrics is None else metrics
    if metric not in objective_keys(known):
        why = "no such metric" if metrics is None else f"data {data_name} does not compute it"
        why = "test metrics come after training" if metric.startswith("test/") else why
        raise ConfigError(
            f"objective.metric={metric}: not logged during training ({why}); use one of "
            f"{', '.join(objective_keys(known))}"
        )
    limit_val = _get(cfg, "trainer.limit_val_batches")
    if metric.startswith("val/") and limit_val is not None and not isinstance(limit_val, bool) and limit_val == 0:
        raise ConfigError(
            f"trainer.limit_val_batches={limit_val}: no validation runs, so objective.metric={metric} "
            "is never logged; set limit_val_batches > 0 (or null) or objective.metric=train/loss"
        )
    if metric.split("/", 1)[-1] in known and _get(cfg, "decode.val_batches") == 0:
        raise ConfigError(
            f"decode.val_batches=0: validation decodes nothing, so objective.metric={metric} is never "
            "logged; set decode.val_batches >= 1 (or null = all) or objective.metric=val/loss"
        )


def objective_named(cfg: DictConfig) -> None:
    """Stage 1's reading of :func:`check_objective`: the metric's name, before the data is known."""
    return check_objective(cfg, None) if cfg.get("mode") == "train" else None


STATIC = (schedule_length, weight_decay_is_read, precision_and_strategy, mode_and_checkpoint)
STATIC += (saves_on_whole_steps, counts_data_epochs, installed_and_present, objective_named)


def optimizer_builds(cfg: DictConfig) -> None:
    """The optimizer node builds an optimizer for a one-weight model: its own constructor judges its arguments."""
    import torch
    from hydra.utils import instantiate

    from xformer.train.optim import build_optimizer

    node = _get(cfg, "optim.optimizer")
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        build_optimizer(instantiate(node), torch.nn.Linear(1, 1))
    except (ValueError, RuntimeError, TypeError, IndexError) as err:
        raise ConfigError(
            f"optim.optimizer ({node._target_}): {str(err).splitlines()[0].rstrip('.')}. Fix: correct that "
            "argument under optim.optimizer (or what it interpolates, e.g. optim.lr)"
        ) from None


def mixer_fits(cfg: DictConfig) -> None:
    """Mixer vs positional scheme: the mixer serves a stack, and its ``refusal()`` accepts each one's scheme."""
    from hydra.utils import get_class, instantiate

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
        raise ConfigError(
            f"model.mixer.stacks={mixer.stacks}: model/arch={model_cls.arch} has no {mixer.stacks} "
            f"stack (it has {' and '.join(patterns)}). Fix: model.mixer.stacks=both"
        )
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
def _unchecked_by_lightning(  # keys Lightning reads late (clipping) or accepts out of range (a negative interval)
    gradient_clip_algorithm: Literal["norm", "value"] | None,
    log_every_n_steps: Annotated[int, Range(ge=0)] | None,
    max_time: str | None,  # "DD:HH:MM:SS", or a node of timedelta keys (not checked here), as Timer takes it
    accumulate_grad_batches: Annotated[int, Range(ge=1)],  # Lightning's annotation is a bare int
): ...


#: Nodes without a ``_target_`` that run.py and the driver read (and a key Lightning checks late), as signatures.
DECLARED = {
    "": _root,
    "objective": _objective,
    "optim": _optim,
    "val_dense": _val_dense,
    "trainer": _unchecked_by_lightning,
}


def check_static(cfg: DictConfig) -> None:
    """Stage 1. Raises: ConfigError, every problem, one line each (only the unresolvable interpolations when
    there are any: the other checks would read their values)."""
    check_resolves(cfg)
    problems = []
    for path, fn in DECLARED.items():
        if isinstance(node := cfg.get(path) if path else cfg, DictConfig):
            problems += [p.lstrip(".") for p in fit_problems(node, path, fn, path or "the root config", strict=False)]
    for check in (check_additions, check_group_nodes, *STATIC):
        try:
            check(cfg)
        except ConfigError as err:
            problems.append(str(err))
    raise_all(problems)


def check_model(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stage 2, with ``ckpt`` (the checkpoint this run loads) against this run's model. Raises: ConfigError."""
    check_targets(cfg, early=True)
    mixer_fits(cfg)
    optimizer_builds(cfg)
    build_model(cfg, 32, 32, 0, device="meta")
    if ckpt is not None and cfg.mode == "train":
        check_checkpoint_model(cfg, ckpt)


def bare_trainer(target: str, keys: dict):
    """Lightning's ``target`` trainer built from ``keys`` alone (no logger, callbacks or checkpoints), without
    its device summary or warnings. Raises: what the trainer's constructor raises."""
    import warnings

    from hydra.utils import instantiate

    quiet = [logging.getLogger(f"lightning.{p}.utilities.rank_zero") for p in ("pytorch", "fabric")]
    for lg in quiet:  # the device summary: printed once, by the run's own trainer
        lg.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            node = {"_target_": target, "_convert_": "all", **keys}  # plain dicts (max_time as a timedelta's keys)
            return instantiate(node, logger=False, enable_checkpointing=False, callbacks=[])
    finally:
        for lg in quiet:
            lg.disabled = False


def trainer_accepts(cfg: DictConfig) -> None:
    """Lightning's own checks of the ``trainer`` node (an accelerator it cannot use, a device count given as a
    word, an unknown strategy), run by building the trainer before any data is read; a refusal names the first
    key whose value Lightning refuses, adding the node's keys one by one in their order. A GPU accelerator is
    left to :func:`check_devices`, which only the training run applies (a login node may have no GPU).
    Raises: ConfigError."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    node = _get(cfg, "trainer")
    if not isinstance(node, DictConfig) or "_target_" not in node or str(node.get("accelerator")) in _ACCELERATORS:
        return
    target = str(node._target_)
    keys: dict[str, Any] = {}
    for key in (str(k) for k in node if k != "_target_" and k not in CONSUMED.get(target, ())):
        try:
            value = node[key]
            keys[key] = (
                OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
            )
        except Exception:  # ${hydra:...} outside a job (a sweep's check), or a reference named by another check
            continue
    kinds = (ValueError, TypeError, MisconfigurationException, ImportError)
    try:
        bare_trainer(target, keys)
        return
    except Exception as err:
        if refusal(err, kinds) is None:
            raise
    given: dict = {}
    for key, value in keys.items():
        given[key] = value
        try:
            bare_trainer(target, given)
        except Exception as err:
            if (own := refusal(err, (ConfigError,))) is not None:  # a strategy of xformer's: its line as it is
                raise ConfigError(own) from None
            if (why := refusal(err, kinds)) is None:
                raise
            sub = node.get(key)
            shown = f"{key} ({sub._target_})" if isinstance(sub, DictConfig) and "_target_" in sub else f"{key}={sub}"
            raise ConfigError(
                f"trainer.{shown}: {why.rstrip('.')}. Fix: another trainer.{key} (lightning.Trainer {key})"
            ) from None


def check_data_options(cfg: DictConfig, trainer: bool = True):
    """Stage 3: the remaining nodes, the callbacks against steps, the trainer's settings as Lightning checks them
    (``trainer``: a check without training, a dry run or a sweep's check of its jobs; a training run builds its
    one trainer instead), and ``cfg.data`` built (nothing read). Returns the data module, not set up.
    Raises: ConfigError."""
    from hydra.utils import instantiate

    check_targets(cfg, early=False)
    epoch_keyed_callbacks(cfg)
    if trainer:
        trainer_accepts(cfg)
    try:
        dm = instantiate(cfg.data)
    except Exception as err:
        if (why := refusal(err, (ValueError, TypeError))) is None:
            raise
        raise ConfigError(f"data ({str(cfg.data.get('_target_', '?')).rsplit('.', 1)[-1]}): {why}") from None
    if cfg.mode == "train":
        check_objective(cfg, list(getattr(dm, "metrics", []) or []), type(dm).__name__)
    return dm


def check_config_first(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1 and 2: what ``run.py`` checks before it imports Lightning or W&B. Raises: ConfigError."""
    check_static(cfg)
    check_model(cfg, ckpt)


#: Lightning's accelerator names (values of ``trainer.accelerator``) for devices torch can count
_ACCELERATORS = {
    "gpu": "cuda",
    "cuda": "cuda",
    "mps": "mps",
}


def check_devices(cfg: DictConfig) -> None:
    """The accelerator ``trainer.accelerator`` names, and ``trainer.devices`` of them, exist on this machine.
    Checked by the run that trains, not by a dry run or a sweep's check of its jobs (a login node may have
    no GPU). Raises: ConfigError."""
    import torch

    acc = str(_get(cfg, "trainer.accelerator", "auto"))
    if acc not in _ACCELERATORS:
        return
    have = torch.cuda.device_count() if _ACCELERATORS[acc] == "cuda" else int(torch.backends.mps.is_available())
    want = _get(cfg, "trainer.devices", "auto")
    if have == 0:
        raise ConfigError(
            f"trainer.accelerator={acc}: this machine has no such device. Fix: run it where one is, or set "
            f"trainer.accelerator=cpu (an experiment's CPU form is experiment=<name>_cpu where one exists)"
        )
    if isinstance(want, int) and want > have:
        raise ConfigError(
            f"trainer.devices={want}: this machine has {have} {acc} device(s). Fix: "
            f"trainer.devices={have} or fewer, or run it where {want} are"
        )


def check_config(cfg: DictConfig, ckpt: str | None = None) -> None:
    """Stages 1-3 (a dry run, every job of a sweep). Raises: ConfigError, one line per problem."""
    check_config_first(cfg, ckpt)
    check_data_options(cfg)


def check_with_data(cfg: DictConfig, dm, model) -> None:
    """Stage 4: objective vs the data's metrics, the model's ``check_data``, the longest sequence vs
    ``model.max_len`` (a warning in ``mode=eval``, which cuts them). Raises: ConfigError."""
    if cfg.mode == "train":
        check_objective(cfg, list(dm.metrics), type(dm).__name__)
    model.check_data(dm)
    limit, need = model.position_limit, model.positions_needed(dm)
    if limit is None or limit >= need:
        return
    stack = model.encoder if getattr(model, "encoder", None) is not None else model.decoder
    what = f"the data's longest sequence has {need} tokens and {type(stack.pe).__name__} positions stop at max_len"
    if cfg.mode != "eval":
        raise ConfigError(f"model.max_len={limit}: {what}; set model.max_len={need} or more")
    logging.getLogger("xformer").warning("model.max_len=%d: %s; over-long examples are cut to fit", limit, what)


FLAGS = ("-m", "--multirun")  # the only flags first_error reads past


def _first_values(args: list[str]) -> list[str] | None:
    """The overrides with each sweep replaced by its first value; ``None`` for a flag other than ``-m`` or an
    override Hydra's grammar refuses."""
    out = []
    for arg in (a for a in args if a not in FLAGS):
        override = None if arg.startswith("-") else parse(arg)
        if override is None or override.is_interval_sweep():
            return None
        if override.is_sweep_override():  # its first value
            arg = f"{arg.split('=', 1)[0]}={next(iter(override.sweep_iterator()), None)}"
        out.append(arg)
    return out


def _options(loader, group: str) -> list[str]:
    """The options of config ``group``, those of its sub-folders as ``sub/option``."""
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


_ALIASES = re.compile(r"^#\s*aliases:\s*(.+)$")


def option_aliases(conf: Path, group: str, options: list[str]) -> dict[str, list[str]]:
    """``alias -> [options]`` from the ``# aliases: a, b`` comment line of each option's YAML in ``conf/<group>``
    (other common names of the option; one alias may name several options)."""
    out: dict[str, list[str]] = {}
    for option in options:
        try:
            lines = (Path(conf) / group / f"{option}.yaml").read_text().splitlines()
        except OSError:  # an option from another search path: no aliases
            continue
        for line in lines:
            if m := _ALIASES.match(line.strip()):
                for alias in (a.strip().lower() for a in m.group(1).split(",")):
                    out.setdefault(alias, []).append(option)
    return out


def _option_fix(value: str, options: list[str], group: str, conf: Path) -> str:
    """The fix for an unknown option ``value`` of ``group``: the option it names by meaning (an alias) or
    spelling, then the options, each listed once."""
    aliases = option_aliases(conf, group, options)
    word = value.strip().lower().replace("-", "_")
    meant = aliases.get(word)
    why = f"{value!r} is another name for {' and '.join(meant)}" if meant else ""
    if not meant:
        close = closest(word, [*options, *aliases])
        meant = [close] if close in options else aliases.get(close or "", [])
        why = f"{close!r} is another name for {' and '.join(meant)}" if close and close not in options else ""
    listed = f"options: {_listing(options)}"
    if not meant:
        return f"choose one of the {listed}"
    return f"did you mean {' or '.join(f'{group}={o}' for o in meant)}? ({why + '; ' if why else ''}{listed})"


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
        return f"{arg}: config group {key} has no option {value!r}. Fix: {_option_fix(value, options, key, conf)}"
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
        root, keys = _keys(parent, others)
        head = key.split(".")[0]
        if head not in root:
            close = difflib.get_close_matches(head, root, n=3, cutoff=0.6)
            fix = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(root)}"
            return f"{arg}: the root config has no key {head!r}. Fix: {fix}"
        group = parent.replace(".", "/")
        owners = [o for o in loader.get_group_options(group) if leaf in _yaml_keys(conf / group / f"{o}.yaml")]
        if owners:  # and the keys of the chosen option, where the setting may have another name
            fix = f"{leaf} is a key of {group}={', '.join(owners)}: choose one (e.g. {group}={owners[0]} {arg})"
            fix += f", or set one of this {parent}'s keys: {', '.join(keys)}" if keys else ""
        elif leaf in keys:  # a parameter of the node's class that its YAML leaves out
            fix = f"+{arg} ({parent}'s class takes {leaf!r}; '+' adds a key the node does not declare)"
        else:
            fix = f"{hint(leaf, keys)} (or +{arg} to add a key the node does not declare)"
        return f"{arg}: {parent} has no key {leaf!r}. Fix: {fix}"
    return None


def _yaml_keys(path: Path) -> set[str]:
    """The top-level keys of a YAML file (empty when unreadable)."""
    try:
        data = OmegaConf.load(path)
    except Exception:  # missing or not YAML: only for the message
        return set()
    return {str(k) for k in data} if isinstance(data, DictConfig) else set()


def _keys(node: str, overrides: list[str]) -> tuple[list[str], list[str]]:
    """``(root keys, keys of node)`` of the config the ``overrides`` compose (with a ``_target_`` class's
    parameters), private keys left out."""
    from hydra import compose

    try:
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
    """The ``error:`` line for the first override of ``args`` Hydra cannot compose (an unknown option, group or
    key, with the closest name), or for an interpolation that cannot resolve; ``None`` when all is well or
    the failure is Hydra's to report."""
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

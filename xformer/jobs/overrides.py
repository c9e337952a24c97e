"""Override strings read with Hydra's own ``OverridesParser`` (so ``key=[1,2]`` is one value, not a sweep),
and written back: :func:`hydra_literal`, :func:`expand_json_args` (a W&B agent's ``${args_json}``)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: Set by a ``-m`` job for the ranks it runs under ``torchrun`` (xformer.jobs.distributed.run_job): JSON with
#: the job's ``info`` (``metrics.json``'s ``job``) and the sweep's ``resume`` command.
SWEEP_JOB_ENV = "XFORMER_SWEEP_JOB"


def sweep_job_facts() -> dict:
    """What :data:`SWEEP_JOB_ENV` holds (``{"info", "resume"}``); ``{}`` outside the ranks of a ``-m`` job."""
    return json.loads(os.environ.get(SWEEP_JOB_ENV) or "{}")


#: Sweep functions of sweeper plugins that Hydra's grammar does not know (Optuna's ``tag(...)``, ...).
_SWEEP_FUNCS = ("range(", "choice(", "interval(", "glob(")


def parse(line: str):
    """The Hydra ``Override`` of one override string, or ``None`` when Hydra's grammar refuses it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (override,) = OverridesParser.create().parse_overrides([str(line)])
    except Exception:  # not Hydra's grammar: the caller decides
        return None
    return override


def key_of(line: str) -> str:
    """The key (or config group) an override string sets, without its ``+``/``++``/``~`` prefix."""
    override = parse(line)
    return override.key_or_group if override is not None else str(line).partition("=")[0].lstrip("+~")


def sweep_override_keys(overrides) -> list[str]:
    """The non-``hydra.*`` keys of ``overrides`` that sweep (not a list value); an override Hydra's grammar
    refuses counts only when its value calls a sweeper's function."""
    out = []
    for item in overrides:
        override, key = parse(item), key_of(item)
        if key.startswith("hydra."):
            continue
        if override is not None and override.is_sweep_override():
            out.append(key)
        elif override is None and str(item).partition("=")[2].startswith(_SWEEP_FUNCS):
            out.append(key)
    return out


def sweep_values(text: str) -> list[Any]:
    """The values of one key's sweep text (``"1,2,4"``, ``"choice(a,b)"``) as Python values; one value gives a
    list of one. Raises: ValueError for text Hydra refuses or an interval."""
    override = parse(f"k={text}")
    if override is None or override.is_interval_sweep():
        raise ValueError(f"{text!r}: not a list of sweep values")
    if override.is_sweep_override():
        return list(override.sweep_iterator())
    return [override.value()]


def override_values(overrides) -> dict[str, Any]:
    """``key -> value`` of the overrides that set one value; sweeps, deletions and unparsable ones left out."""
    out: dict[str, Any] = {}
    for item in overrides:
        override = parse(item)
        if override is not None and not override.is_sweep_override() and not override.is_delete():
            out[override.key_or_group] = override.value()
    return out


def added_overrides(overrides) -> list[tuple[str, str]]:
    """``(key or group, value text)`` of the overrides added with ``+`` (not ``++``)."""
    out = []
    for item in overrides:
        override = parse(item)
        if override is not None and override.is_add():
            out.append((override.key_or_group, str(item).split("=", 1)[-1]))
    return out


def quoted(text: str) -> str:
    """``text`` single-quoted for Hydra: quotes escaped, and backslash runs before a quote or the end doubled
    (the only places Hydra reads escapes)."""
    return "'" + re.sub(r"\\+(?='|\Z)", lambda m: m.group(0) * 2, text).replace("'", "\\'") + "'"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form: 0.001, 1e-05, -2.5, inf, nan
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_text(str(k))}: {_text(v)}" for k, v in value.items()) + "}"
    text = str(value)
    plain = parse(f"k={text}")  # a plain word, path or interpolation stays as written
    if plain is not None and not plain.is_sweep_override() and _same(plain.value(), text):
        return text
    return quoted(text)


def hydra_literal(value: Any) -> str:
    """The override text Hydra's grammar reads back as ``value`` (``null``, ``true``, ``1e-05``, ``[1, 2]``, a
    plain string as written, else quoted). Raises: ValueError when no text reads back as ``value``."""
    text = _text(value)
    back = parse(f"k={text}")
    if back is None or back.is_sweep_override() or not _same(_plain(back.value()), _plain(value)):
        raise ValueError(f"{value!r}: no Hydra override text reads back as this value")
    return text


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def expand_json_args(argv: list[str]) -> list[str]:
    """``argv`` with each JSON-object argument replaced by one ``key=value`` override per entry
    (:func:`hydra_literal`; a W&B agent's ``${args_no_hyphens}`` would write Python's ``str()``).
    Raises: ValueError from :func:`hydra_literal`."""
    out = []
    for arg in argv:
        if isinstance(arg, str) and arg.lstrip().startswith("{"):
            try:
                params = json.loads(arg)
            except ValueError:
                params = None
            if isinstance(params, dict):
                out += [f"{key}={hydra_literal(value)}" for key, value in params.items()]
                continue
        out.append(arg)
    return out


def resume_command(job_dir: Path) -> str:
    """The shell command that continues the current Hydra job from its ``last.ckpt`` (``ckpt_path=last
    hydra.run.dir=<job_dir>``); for a ``-m`` job and the ranks it runs, :func:`sweep_resume_command`."""
    if sweep_job := sweep_job_facts():
        return sweep_job["resume"]
    overrides: list[str] = []
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            hydra = HydraConfig.get()
            given = [*hydra.overrides.hydra, *hydra.overrides.task]
            overrides = [o for o in given if key_of(o) not in ("ckpt_path", "hydra.run.dir", "hydra.mode")]
            if str(hydra.mode) == "RunMode.MULTIRUN":
                return sweep_resume_command(HydraConfig.instance().cfg)
    except Exception:  # outside Hydra, or no sweep folder to read: the job's own command below
        pass
    command = [*overrides, "ckpt_path=last", f"hydra.run.dir={job_dir}"]
    return " ".join(["python", *map(shlex.quote, [_script(), *command])])


def sweep_resume_command(config: DictConfig) -> str:
    """The sweep's own command (its ``multirun.yaml`` overrides, ``-m``) into the same ``hydra.sweep.dir``, which
    skips finished jobs and resumes interrupted ones; ``config``: the job's config with its ``hydra`` node."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    try:
        recorded = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides
    except Exception:  # no multirun.yaml (yet): this job's own overrides
        recorded = config.hydra.overrides
    overrides = [str(o) for o in [*(recorded.get("hydra") or []), *(recorded.get("task") or [])]]
    overrides = [o for o in overrides if key_of(o) not in ("hydra.sweep.dir", "hydra.mode")]
    return " ".join(["python", *map(shlex.quote, [_script(), *overrides, f"hydra.sweep.dir={sweep_dir}"]), "-m"])


def _script() -> str:
    """The script the user ran: ``sys.argv[0]``, or ``run.py`` inside a launcher's worker (submitit's
    ``_submit.py``, an installed module) or outside a script."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(".py") and "site-packages" not in Path(argv0).parts:
        return argv0
    return "run.py"


def swept_keys(sweep_dir: str | Path | None) -> list[str]:
    """Keys that vary across the jobs of the sweep in ``sweep_dir`` (empty for a single run), from its
    ``multirun.yaml``: the swept command-line overrides and the keys of ``hydra.sweeper.params``. Read from
    what the sweep asked for, since a running job cannot see its siblings' results."""
    if not sweep_dir:
        return []
    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return []
    cfg = OmegaConf.load(path)
    keys = sweep_override_keys(OmegaConf.select(cfg, "hydra.overrides.task", default=[]) or [])
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    keys += sweep_override_keys([f"{key}={value}" for key, value in params.items()])
    return list(dict.fromkeys(keys))

"""``run.py ... -m`` checks every job's config before the first job starts
(:class:`~xformer.jobs.hydra_callbacks.ValidateSweep`); a refused job leaves no folder and nothing trains."""

from __future__ import annotations

import itertools
from typing import Any

from omegaconf import DictConfig, OmegaConf


def _interval_ends(sweep: Any) -> list[str]:
    ends = [sweep.start, sweep.end]
    if all(isinstance(v, int) for v in ends):
        return [str(v) for v in ends]
    return [repr(float(v)) for v in ends]


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of every job of multirun ``config`` in Hydra's ``BasicSweeper`` order (``hydra.sweeper.params``
    first, then the command line, the cartesian product), so job numbers match; an ``interval(a, b)`` gives
    both ends."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    lines = [f"{k}={v}" for k, v in params.items()] if isinstance(params, DictConfig) else []
    lines += list(config.hydra.overrides.task)
    per_key: dict[str, list[str]] = {}
    for ov in OverridesParser.create().parse_overrides(lines):
        key = ov.get_key_element()
        if ov.is_delete() and ov.value() is None:  # ~key
            per_key[key] = [key]
            continue
        if ov.is_discrete_sweep():
            values = list(ov.sweep_string_iterator())
        elif ov.is_interval_sweep():
            values = _interval_ends(ov.value())
        else:
            values = [ov.get_value_element_as_str()]
        per_key[key] = [f"{key}={v}" for v in values]  # a later override of a key replaces it in place
    return [list(job) for job in itertools.product(*per_key.values())]


def _swept(jobs: list[list[str]]) -> list[list[str]]:
    """Each job's overrides of the keys that vary across the sweep (all of them for one job)."""
    if len(jobs) < 2:
        return jobs
    varying = [i for i in range(len(jobs[0])) if len({job[i] for job in jobs}) > 1]
    return [[job[i] for i in varying] for job in jobs]


def check_sweep(config: DictConfig) -> tuple[int, list[tuple[int, list[str], BaseException]]]:
    """Compose and check every job; return ``(number of jobs, [(job number, swept overrides, error)])``."""
    from hydra.core.global_hydra import GlobalHydra

    from xformer.data.errors import DataError
    from xformer.jobs.config_check import check_config
    from xformer.model import ConfigError

    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_jobs(config)
    shown = _swept(jobs)
    bad = []
    for num, overrides in enumerate(jobs):
        try:
            check_config(loader.load_sweep_config(config, overrides))
        except (ConfigError, DataError) as err:
            bad.append((num, shown[num], err))
        except Exception as err:  # composition errors (bad group option, missing key, ...)
            if type(err).__module__.startswith(("hydra", "omegaconf")):
                bad.append((num, shown[num], err))
            else:
                raise
    return len(jobs), bad


def error_lines(n_jobs: int, bad: list[tuple[int, list[str], BaseException]], max_listed: int = 20) -> list[str]:
    """One ``error:`` line per distinct problem of the invalid jobs ``bad`` (a problem every job shares is one
    line), at most ``max_listed``, then a count."""
    by_problem: dict[str, list[tuple[int, list[str]]]] = {}
    for num, overrides, err in bad:
        by_problem.setdefault(" ".join(str(err).replace("\nerror: ", "; ").split()), []).append((num, overrides))
    if len(by_problem) == 1 and len(bad) == n_jobs:
        return [f"error: {next(iter(by_problem))} (all {n_jobs} sweep jobs; nothing was run)"]
    lines = []
    for msg, jobs in list(by_problem.items())[:max_listed]:
        num, overrides = jobs[0]
        more = f" and {len(jobs) - 1} more job{'s' if len(jobs) > 2 else ''}" if len(jobs) > 1 else ""
        lines.append(f"error: sweep job {num} ({' '.join(overrides) or 'defaults'}){more}: {msg}")
    if len(by_problem) > max_listed:
        lines.append(f"error: ... and {len(by_problem) - max_listed} more problems")
    lines.append(
        f"error: {len(bad)} of {n_jobs} sweep jobs have an invalid config; nothing was run. "
        "Fix the overrides above (HYDRA_FULL_ERROR=1 shows a stack trace)"
    )
    return lines

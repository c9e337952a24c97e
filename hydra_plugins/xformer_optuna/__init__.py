"""hydra-optuna-sweeper's sweeper with two settings the plugin has no option for, selected by
``conf/hparams_search/optuna.yaml`` (Hydra takes sweepers only from the ``hydra_plugins`` package).

* A dry run (``sweep.dry_run=true``) keeps its study in memory, so validating a search never adds
  trials to a stored study.
* A stored study continued by the same command numbers its jobs after its trials (job folder ``n``
  holds trial ``n``; the plugin starts at 0 in every invocation) and reseeds a seeded sampler
  (:func:`continued_sampler`), so the new trials are new points.

Failed and diverged trials need nothing here: ``run.py`` returns the worst objective for them.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("xformer")

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the Optuna plugin is not installed: Hydra says so when a sweep asks for it
    OptunaSweeper = None


def continued_sampler(sampler: Any, sampler_cfg: Any, n_stored: int) -> Any:
    """The sampler for an invocation that continues a stored study of ``n_stored`` trials.

    A seeded sampler rebuilt with the same seed replays its random draws, so a resumed study's
    start-up trials would repeat the first invocation's (optuna#3255). With trials stored, the sampler
    is instantiated again from ``sampler_cfg`` (``hydra.sweeper.sampler``) with the seed
    ``SeedSequence([seed, n_stored])``: reproducible for the same command on the same study, different
    for every invocation. A fresh study, an unseeded sampler or one made later from the search space
    (``_partial_``: the grid sampler, which skips visited points itself) is returned as it is.
    """
    if not n_stored or sampler_cfg is None or isinstance(sampler, functools.partial):
        return sampler
    seed = OmegaConf.select(sampler_cfg, "seed", default=None)
    if seed is None:
        return sampler
    import numpy as np
    from hydra.utils import instantiate

    new_seed = int(np.random.SeedSequence([int(seed), int(n_stored)]).generate_state(1)[0])
    log.info("optuna: the study has %d trials; sampler seed %d -> %d for this invocation", n_stored, seed, new_seed)
    return instantiate(sampler_cfg, seed=new_seed)


def stored_trials(study_name: str | None, storage: Any) -> int:
    """Number of trials already in the stored study (0 when it does not exist yet)."""
    import optuna

    try:
        summaries = optuna.study.get_all_study_summaries(storage=storage)
    except Exception:  # no database yet: the plugin creates it
        return 0
    return next((s.n_trials for s in summaries if s.study_name == study_name), 0)


if OptunaSweeper is not None:

    class OptunaStudySweeper(OptunaSweeper):
        """The plugin's ``OptunaSweeper`` (same options) with a dry run's study in memory and a stored
        study's job numbers and sampler continued (module docstring)."""

        def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
            super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
            study = self.sweeper  # the plugin's implementation object; its settings are plain attributes
            if OmegaConf.select(config, "sweep.dry_run", default=False):
                study.storage = None
            elif study.storage:
                study.job_idx = stored_trials(study.study_name, study.storage)
                sampler_cfg = OmegaConf.select(config, "hydra.sweeper.sampler", default=None)
                study.sampler = continued_sampler(study.sampler, sampler_cfg, study.job_idx)

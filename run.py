"""xformer's entry point: ``python run.py [group=option ...] [key=value ...] [-m]``.

Returns the configured objective (``objective.metric``) so Hydra sweepers (Optuna) can optimise it.
Invalid configurations and inputs print one line naming the key/file and the fix, and exit with
status 2 (set ``HYDRA_FULL_ERROR=1`` for the stack trace). A NaN/Inf training loss prints one line
naming the step and exits 1; SIGTERM saves ``last.ckpt`` and exits 143 (README: "When things go wrong").
"""

import logging
import os
import sys

import hydra
from omegaconf import DictConfig

import xformer  # noqa: F401  (registers ${xformer.run_id:}, the run folder's suffix)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from xformer.data.errors import DataError
    from xformer.model import ConfigError
    from xformer.jobs.callbacks import NonFiniteLossError
    from xformer.jobs.driver import run

    try:
        if cfg.get("sweep") and cfg.sweep.get("dry_run"):
            from xformer.jobs.sweep import dry_run

            return dry_run(cfg)  # validate and print the job, no training
        from xformer.jobs.sweep_resume import prepare_job

        plan = prepare_job(cfg)  # -m into an existing sweep dir: skip finished jobs, resume killed ones
        if plan is not None and plan.action == "skip":
            return plan.value
        return run(cfg)
    except (ConfigError, DataError, NonFiniteLossError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        logging.getLogger("xformer").error("%s", err)
        if str(HydraConfig.get().mode) == "RunMode.MULTIRUN":
            raise  # Hydra records the failed job and the sweep goes on
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1 if isinstance(err, NonFiniteLossError) else 2)
    except SIGTERMException:  # preempted: last.ckpt was saved (xformer.jobs.callbacks.StopCheckpoint)
        sys.exit(143)


if __name__ == "__main__":
    from xformer.jobs.distributed import external_rank_argv

    sys.argv = external_rank_argv(sys.argv)  # torchrun/srun ranks > 0: no Hydra output of their own
    main()

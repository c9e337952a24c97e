"""xformer's entry point: ``python run.py [group=option ...] [key=value ...] [-m]``.

Returns the configured objective (``objective.metric``) so Hydra sweepers (Optuna) can optimise it.
Invalid configurations and inputs print one line naming the key/file and the fix, and exit with
status 2 (set ``HYDRA_FULL_ERROR=1`` for the stack trace). The config is checked before torch's
training stack, Lightning and W&B are imported and before any data is built
(:func:`xformer.jobs.config_check.stages.check_config_first`), so such a line comes within seconds. A NaN/Inf
training loss prints one line naming the step and exits 1; SIGTERM saves ``last.ckpt`` and exits
143, Ctrl-C (SIGINT) saves it too and exits 130, printing the command that resumes the run (a
second Ctrl-C quits at once); README: "When things go wrong".
"""

import logging
import os
import sys

import hydra
from omegaconf import DictConfig

import xformer  # noqa: F401  (registers ${xformer.run_id:}, the run folder's suffix)


def _fail(err: BaseException, code: int) -> None:
    """Print ``error: <err>`` (one line), or re-raise under ``HYDRA_FULL_ERROR=1`` or in a sweep job
    (Hydra records the failed job and the sweep goes on)."""
    from hydra.core.hydra_config import HydraConfig

    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    # the job's log file keeps the error; the console shows it once, as the `error:` line below
    record = logging.LogRecord("xformer", logging.ERROR, __file__, 0, "%s", (err,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    if str(HydraConfig.get().mode) == "RunMode.MULTIRUN":
        raise err
    print(f"error: {err}", file=sys.stderr)
    sys.exit(code)


def _out_dir(cfg: DictConfig):
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else Path(cfg.paths.output_dir)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from xformer.errors import ConfigError
    from xformer.jobs.checkpoints import resolve_ckpt_path
    from xformer.jobs.config_check.stages import check_config_first

    checked = False  # stages 1-2 passed for this config: the driver runs stage 3 only
    try:  # the config alone and the model on the meta device: no Lightning, W&B or data yet
        if not (cfg.get("sweep") and cfg.sweep.get("dry_run")):
            check_config_first(cfg, resolve_ckpt_path(cfg, _out_dir(cfg)))
            checked = True
    except ConfigError as err:
        _fail(err, 2)

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from xformer.data.errors import DataError
    from xformer.jobs.callbacks import NonFiniteLossError, interrupt_signal
    from xformer.jobs.driver import run

    try:
        if cfg.get("sweep") and cfg.sweep.get("dry_run"):
            from xformer.jobs.sweep import dry_run

            return dry_run(cfg)  # validate and print the job, no training
        from xformer.jobs.sweep_resume import prepare_job

        plan = prepare_job(cfg)  # -m into an existing sweep dir: skip finished jobs, resume killed ones
        if plan is not None and plan.action == "skip":
            return plan.value
        return run(cfg, checked=checked and (plan is None or plan.action != "resume"))  # resume: ckpt_path changed
    except (ConfigError, DataError, NonFiniteLossError) as err:
        _fail(err, 1 if isinstance(err, NonFiniteLossError) else 2)
    except OSError as err:  # a full disk, a folder made read-only during the run, ...
        import errno

        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        _fail(
            ConfigError(
                f"{err.filename or 'the output folder'}: {err.strerror}. Fix: free space or make it "
                f"writable, then resume with ckpt_path=last hydra.run.dir={_out_dir(cfg)}"
            ),
            1,
        )
    except SIGTERMException as err:  # preempted or Ctrl-C: last.ckpt was saved (xformer.jobs.callbacks.StopCheckpoint)
        code = 130 if interrupt_signal(err) == "SIGINT" else 143
        from hydra.core.hydra_config import HydraConfig

        if str(HydraConfig.get().mode) == "RunMode.MULTIRUN":  # the sweep ends here: record it, say how to go on
            from omegaconf import open_dict

            from xformer.jobs.sweep import record_interrupted

            try:
                with open_dict(cfg):
                    cfg.hydra = HydraConfig.get()  # the job's config with its Hydra node, as callbacks see it
                record_interrupted(cfg, code)
            except Exception as err:  # never let the record keep the sweep from stopping
                logging.getLogger("xformer").warning("could not write the sweep summary: %s", err)
        sys.exit(code)


if __name__ == "__main__":
    from xformer.jobs.distributed import external_rank_argv
    from xformer.jobs.overrides import expand_json_args

    try:  # a W&B sweep agent's ${args_json}: the sweep's values as Hydra overrides (docs/scaling.md)
        sys.argv = [sys.argv[0], *expand_json_args(sys.argv[1:])]
    except ValueError as err:
        print(f"error: W&B sweep parameter {err}. Fix: give it a value Hydra can read", file=sys.stderr)
        sys.exit(2)

    sys.argv = external_rank_argv(sys.argv)  # torchrun/srun ranks > 0: no Hydra output of their own
    if os.environ.get("HYDRA_FULL_ERROR") != "1":  # an unknown option or key: one line, not Hydra's dump
        from pathlib import Path

        from xformer.jobs.compose_check import first_error

        line = first_error(sys.argv[1:], Path(__file__).resolve().parent / "conf")
        if line:
            print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
    main()

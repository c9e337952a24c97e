"""xformer's entry point: ``python run.py [group=option ...] [key=value ...] [-m]``.

Returns the configured objective (``objective.metric``) so Hydra sweepers (Optuna) can optimise it; a
sweep job without one (failed, diverged, NaN) returns the worst value for ``objective.mode`` (+/-inf)
and the sweep goes on.
Invalid configurations and inputs print one line naming the key/file and the fix, and exit with
status 2 (set ``HYDRA_FULL_ERROR=1`` for the stack trace). The config is checked before torch's
training stack, Lightning and W&B are imported and before any data is built
(:func:`xformer.config.check.check_config_first`), so such a line comes within seconds. A NaN/Inf
training loss prints one line naming the step and exits 1; SIGTERM saves ``last.ckpt`` and exits
143, Ctrl-C (SIGINT) saves it too and exits 130, printing the command that resumes the run (a
second Ctrl-C quits at once); every exit status: docs/troubleshooting.md.
"""

import logging
import os
import sys

import hydra
from omegaconf import DictConfig

import xformer  # noqa: F401  (registers ${xformer.run_id:}, the run folder's suffix)

log = logging.getLogger("xformer")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """One job, top to bottom: its context, the config check, training and testing (or a dry run), its end."""
    from xformer.config.check import check_config, check_config_first, check_devices
    from xformer.config.trainer import as_run
    from xformer.errors import ConfigError, held_warnings
    from xformer.jobs.context import Outcome, job_context, outcome_of
    from xformer.jobs.record import Status, read_record

    ctx = job_context(cfg)  # output folder, checkpoint, sweep job number and resume plan: worked out once
    record = None
    try:
        if ctx.plan is not None and ctx.plan.action == "refuse":
            raise ConfigError(ctx.plan.reason)
        if ctx.plan is not None and ctx.plan.action == "skip":  # finished in an earlier invocation of the sweep
            record = read_record(ctx.out_dir)
            log.info("sweep resume: job %d finished earlier (%s), skipped", ctx.num, ctx.out_dir / "metrics.json")
            end = Outcome(Status.FINISHED, 0)
        elif ctx.dry_run:
            with held_warnings():  # a refused config prints its error line alone
                check_config(cfg)
            label = f"job {ctx.num}" if ctx.multirun else "run"
            print(f"[dry run] {label}: {' '.join(ctx.overrides) or '(defaults)'} -> config ok", flush=True)
            end = Outcome(Status.VALIDATED, 0)
        else:
            if ctx.job is None:  # not a rank of a -m job, whose process checked both
                with held_warnings():  # a refused config prints its error line alone
                    check_config_first(cfg, ctx.ckpt)  # the config alone, the model on the meta device: no Lightning
                    check_devices(cfg)  # the GPUs it asks for are here (a dry run or a sweep's check may run without)
            from xformer.jobs.distributed import run_job
            from xformer.jobs.driver import run

            # data and model built once; metrics.json written however it ends; a -m job on several
            # devices runs under torchrun (xformer.jobs.distributed); eval drops the validation schedule (no fit)
            end, record = run_job(run, as_run(cfg) if cfg.mode == "eval" else cfg, ctx, script=__file__)
    except (Exception, KeyboardInterrupt) as err:  # before training: invalid config or data, Ctrl-C
        end = outcome_of(err, out_dir=ctx.out_dir)

    return end_job(cfg, ctx, end, record)


def end_job(cfg: DictConfig, ctx, end, record) -> float | None:
    """What the job's end means for this process: the objective returned to the sweeper (the worst value for a
    sweep job without one), or the ``error:`` line and the exit status (docs/troubleshooting.md)."""
    from xformer.jobs.context import fallback
    from xformer.jobs.record import Status

    if ctx.multirun:
        from xformer.jobs.sweep import record_job, stop_sweep

        record_job(cfg, ctx, end, record)  # <sweep dir>/.xformer/jobs/<num>.json, read by the sweep summary
    if end.error is None:
        value = record.objective_value if record is not None else None
        return fallback(cfg) if value is None and ctx.multirun else value
    if end.status in (Status.INTERRUPTED, Status.PREEMPTED):  # last.ckpt was saved
        if ctx.multirun:
            stop_sweep(cfg, ctx, end)  # the summary of what ran, and the command that goes on
        sys.exit(end.exit_code)
    if ctx.multirun:  # the sweep goes on; the sweeper gets the worst objective
        err, what = end.error, f"job {ctx.num} ({' '.join(ctx.overrides)}) failed; the sweep goes on"
        if end.line is not None and os.environ.get("HYDRA_FULL_ERROR") != "1":  # a refusal: its line, as a run's
            log.error("%s: error: %s", what, end.line)
        else:  # a crash: its traceback
            log.error("%s", what, exc_info=(type(err), err, err.__traceback__))
        return fallback(cfg)
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or end.line is None:
        raise end.error  # a crash: its traceback
    # the job's log file keeps the error; the console shows it once, as the `error:` line
    entry = logging.LogRecord("xformer", logging.ERROR, __file__, 0, "%s", (end.line,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)
    print(f"error: {end.line}", file=sys.stderr)
    if end.exit_code == 2:  # refused before training: the folder made for it goes too
        from xformer.jobs.hydra_callbacks import forget_refused_run

        forget_refused_run(ctx.out_dir)
    sys.exit(end.exit_code)


if __name__ == "__main__":
    from xformer.config.overrides import expand_json_args
    from xformer.jobs.distributed import external_rank_argv

    try:  # a W&B sweep agent's ${args_json}: the sweep's values as Hydra overrides (docs/scaling.md)
        sys.argv = [sys.argv[0], *expand_json_args(sys.argv[1:])]
    except ValueError as err:
        print(f"error: W&B sweep parameter {err}. Fix: give it a value Hydra can read", file=sys.stderr)
        sys.exit(2)

    sys.argv = external_rank_argv(sys.argv)  # torchrun/srun ranks > 0: no Hydra output of their own
    if os.environ.get("HYDRA_FULL_ERROR") != "1":  # an unknown option or key: one line, not Hydra's dump
        from pathlib import Path

        from xformer.config.check import first_error
        from xformer.config.overrides import sweep_without_multirun

        line = sweep_without_multirun(sys.argv[1:]) or first_error(
            sys.argv[1:], Path(__file__).resolve().parent / "conf"
        )
        if line:
            print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
    main()

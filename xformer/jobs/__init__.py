"""Running jobs: everything around the training code that a run needs but a reader of the model and
the LightningModule does not.

* :mod:`.context` -- a job's facts and how it ended; :mod:`.record` -- ``metrics.json`` as a typed record.
* :mod:`.driver` -- one job of ``run.py``: build, fit and test, write ``metrics.json``.
* :mod:`.config_check` -- config and data checks before anything is built or read (stage 0: the
  command line composes; then schema, rules, data).
* :mod:`.checkpoints` -- the one resolver of ``ckpt_path=last``, and whether a checkpoint fits this run.
* :mod:`.hydra_callbacks` -- every Hydra callback; :mod:`.overrides` -- override strings, read with
  Hydra's own parser.
* :mod:`.resume` -- exact resumption: the guarantee, the loop-progress correction, the checkpoint a
  job resumes from, its CSV history, and validation intervals in optimizer steps.
* :mod:`.callbacks` -- safe long runs: NaN guard, SIGTERM, requeue and end-of-fit checkpoints, per-step
  seeds, atomic checkpoint files.
* :mod:`.distributed` -- a ``-m`` job's ranks, FSDP; :mod:`.sweep`, :mod:`.sweep_check`,
  :mod:`.sweep_resume` -- the sweep summary, sweep checks, resumable sweeps; :mod:`.slurm` -- SLURM.
* :mod:`.wandb_run`, :mod:`.wandb_panels` -- W&B naming, limits, resume, offline fallback, dashboards.
* :mod:`.console` -- the progress bar and log lines.

The training code itself (the LightningModule, the loss, the LR schedule) is :mod:`xformer.train`;
the model and its decoding are :mod:`xformer.model`.
"""

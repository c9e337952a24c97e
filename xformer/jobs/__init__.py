"""Running jobs: everything around the training code that a run needs but a reader of the model and
the LightningModule does not.

* :mod:`.context` -- a job's facts and how it ended; :mod:`.record` -- ``metrics.json`` as a typed record.
* :mod:`.driver` -- one job of ``run.py``: build, fit and test, write ``metrics.json``.
* :mod:`.config_check` -- config and data checks before anything is built or read (schema, rules,
  stages).
* :mod:`.checkpoints` -- the one resolver of ``ckpt_path=last``, and
  whether a checkpoint fits this run; :mod:`.checkpoint_io` writes them atomically.
* :mod:`.hydra_callbacks` -- every Hydra callback; :mod:`.overrides` -- override strings, read with
  Hydra's own parser.
* :mod:`.resume` -- exact resumption: the guarantee, the data position, the loop-progress
  correction, the checkpoint a job resumes from and its CSV history.
* :mod:`.callbacks`, :mod:`.steps` -- safe long runs: NaN guard, SIGTERM and
  end-of-fit checkpoints, per-step seeds, atomic checkpoint files, intervals in optimizer steps.
* :mod:`.distributed`, :mod:`.sweep`, :mod:`.sweep_check` -- DDP/FSDP under Hydra sweeps, the sweep
  summary, dry runs and sweep checks.
* :mod:`.wandb_run`, :mod:`.wandb_panels` -- W&B naming, limits, resume, offline fallback, dashboards.
* :mod:`.console` -- the progress bar and log lines.

The training code itself (the LightningModule, the loss, the LR schedule) is :mod:`xformer.train`;
the model and its decoding are :mod:`xformer.model`.
"""

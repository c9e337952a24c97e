"""Running jobs: everything around the training code that a run needs (the config check, the driver,
checkpoints and exact resume, callbacks, sweeps, SLURM, W&B, the console); docs/layout.md lists the modules."""

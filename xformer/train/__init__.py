"""Training with Lightning: the LightningModule (loss, optimizer, evaluation), the LR schedules and
``xformer translate``. Job plumbing (driver, checks, callbacks, sweeps, resume, W&B) is in
:mod:`xformer.jobs`; the model and its decoding are in :mod:`xformer.model`."""

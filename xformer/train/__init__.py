"""Training with Lightning: the LightningModule, decoding, metrics, callbacks and the run driver."""

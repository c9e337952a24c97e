"""xformer: sweepable, reproducible ablations of the Transformer's design claims.

The model lives in :mod:`xformer.model` (plain PyTorch), data in :mod:`xformer.data`, the Lightning
training wrapper in :mod:`xformer.train`, the ablation report in :mod:`xformer.report` and the
benchmark in :mod:`xformer.bench`. ``run.py`` at the repository root is the Hydra entry point.
"""

__version__ = "0.1.0"

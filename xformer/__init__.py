"""xformer: sweepable, reproducible ablations of the Transformer's design claims.

The model lives in :mod:`xformer.model` (plain PyTorch), data in :mod:`xformer.data`, the Lightning
training wrapper in :mod:`xformer.train`, the ablation report in :mod:`xformer.report` and the
benchmark in :mod:`xformer.bench`. ``run.py`` at the repository root is the Hydra entry point.
"""

__version__ = "0.1.0"


def _register_resolvers() -> None:
    """Register ``${xformer.run_id:}``, 6 hex digits drawn once per process, which ``conf/hydra/default.yaml``
    appends to a run's folder so two runs started in the same second never share one; and ``${xformer.help:}``.
    """
    import secrets

    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("xformer.run_id"):
        run_id = secrets.token_hex(3)
        OmegaConf.register_new_resolver("xformer.run_id", lambda: run_id)
    if not OmegaConf.has_resolver("xformer.help"):  # ``python run.py --help`` (xformer/help.py)

        def _help(*, _root_) -> str:
            from xformer.help import help_text

            extra = _root_.hydra.get("searchpath") if "hydra" in _root_ else None
            return help_text([str(p) for p in extra or []])

        OmegaConf.register_new_resolver("xformer.help", _help)


_register_resolvers()

"""``xformer report``: aggregate sweep folders into ``report.md``, plots and claim verdicts.

- :mod:`xformer.report.aggregate`: find and load jobs, detect swept keys, group, mean ± std over seeds.
- :mod:`xformer.report.rules`: the claim verdicts (claims declared in ``claims/*.yaml`` or a researcher's
  file, decided by typed tests).
- :mod:`xformer.report.stats`: Welch's t, TOST, contrasts, power.
- :mod:`xformer.report.export`: the per-seed files of a report folder, and reading one back.
- :mod:`xformer.report.wandb_source`: jobs from a W&B project (``--wandb``).
- :mod:`xformer.report.plots`: metric-vs-swept-value and loss-curve PNGs (matplotlib, Agg).
- :mod:`xformer.report.markdown`: the ``report.md`` text.
- :mod:`xformer.report.cli`: ``xformer report DIR [DIR ...]``.
"""

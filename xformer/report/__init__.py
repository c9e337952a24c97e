"""``xformer report``: aggregate sweep folders into ``report.md``, plots and claim verdicts.

- :mod:`xformer.report.aggregate`: find and load jobs, detect swept keys, group, mean ± std over seeds.
- :mod:`xformer.report.claims`: the claim verdicts' entry point; the code is in :mod:`xformer.report.rules`
  (a core of checks, registry and verdict types, and one module per claim family, C1–C12).
- :mod:`xformer.report.stats`: Welch's t, TOST, Holm–Bonferroni, Fisher's exact test, the log2(step) trend.
- :mod:`xformer.report.export`: the per-seed files of a report folder, and reading one back.
- :mod:`xformer.report.benchjson`: defensive reading of ``bench.json`` (C7, C8).
- :mod:`xformer.report.wandb_source`: jobs from a W&B project (``--wandb``).
- :mod:`xformer.report.plots`: metric-vs-swept-value and loss-curve PNGs (matplotlib, Agg).
- :mod:`xformer.report.markdown`: the ``report.md`` text.
- :mod:`xformer.report.cli`: ``xformer report DIR [DIR ...]``.
"""

"""``xformer report``: aggregate sweep folders into ``report.md``, plots and claim verdicts.

- :mod:`xformer.report.aggregate`: find and load jobs, detect swept keys, group, mean ± std over seeds.
- :mod:`xformer.report.claims`: one recogniser per design claim (C1–C12) and its verdict rule.
- :mod:`xformer.report.benchjson`: defensive reading of ``bench.json`` (C7, C8).
- :mod:`xformer.report.wandb_source`: jobs from a W&B project (``--wandb``).
- :mod:`xformer.report.plots`: metric-vs-swept-value and loss-curve PNGs (matplotlib, Agg).
- :mod:`xformer.report.markdown`: the ``report.md`` text.
- :mod:`xformer.report.cli`: ``xformer report DIR [DIR ...]``.
"""

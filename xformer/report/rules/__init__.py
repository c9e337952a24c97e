"""The claim verdict rules: :mod:`~xformer.report.rules.core` (result types, comparisons, the common
checks, the budget, the registry and :func:`~xformer.report.rules.core.decide`) and one module per
claim family, each registering its verdict functions with ``@claim``. Importing this package
registers them all; :mod:`xformer.report.claims` re-exports the public names."""

from . import attention, core, cost, ffn, heads, norm, paths, positions, regularisation  # noqa: F401 (registers)

"""Claim verdicts: which design claims (C1–C13, :mod:`xformer.report.catalog`) a sweep addresses, and
whether its runs support them.

This module is the stable entry point; the code lives in :mod:`xformer.report.rules`: a small core
(:mod:`~xformer.report.rules.core`: the result types, the comparisons, the common checks, the training
budget, the registry :data:`REGISTRY` and :func:`decide`) and one module per claim family
(``ffn``: C1, C2; ``heads``: C3, C11; ``norm``: C4; ``positions``: C5, C6; ``attention``: C9, C10;
``regularisation``: C12; ``cost``: C7, C8; ``paths``: C13).

Each verdict function is registered under its claim id in :data:`REGISTRY`, is named like the claim's
config (``c1_ffn_ratio`` ↔ ``conf/experiment/claims/c1_ffn_ratio.yaml``) and maps a
:class:`~xformer.report.aggregate.Sweep` (plus :class:`Options`) to a list of :class:`Verdict` (empty:
the sweep does not address the claim). A verdict is **supported**, **not supported** or
**inconclusive** at a stated training budget; it carries the evidence (every comparison with its
interval, every check that failed), the rule it applied and the measured numbers beside the published
ones. The common rule is :data:`xformer.report.catalog.COMMON_RULE`; each claim's rule is in
:data:`xformer.report.catalog.CLAIMS`. Claims are judged separately in every *context*: each
combination of the other swept keys (e.g. C1 at ``model.param_budget=null`` and at a fixed budget).
"""

from __future__ import annotations

from .rules.attention import (  # noqa: F401 (re-exported)
    c9_attn_scale,
    c10_encoder_attention,
    head_size,
)
from .rules.core import (  # noqa: F401 (re-exported)
    ALPHA,
    BETTER,
    BOUNDS,
    C2_TOL,
    C7_BAD,
    C7_OK,
    EQUIV_REL,
    FEW,
    INCONCLUSIVE,
    LOWER_IS_BETTER,
    NOISE,
    NOT_SUPPORTED,
    PREFERRED,
    PUBLISHED,
    REGISTRY,
    SATURATION,
    SUPPORTED,
    WORSE,
    Comparison,
    Options,
    Recogniser,
    Stability,
    StabilityPoint,
    Verdict,
    best_of,
    budget,
    claim,
    compare,
    compare_groups,
    contexts,
    curve_metric,
    decide,
    evaluate,
    higher_is_better,
    metric_bounds,
    outcome_notes,
    pick_metric,
    saturated_metrics,
    saturation,
    seed_check,
    spaced,
    stability,
    summarise,
)
from .rules.cost import (  # noqa: F401 (re-exported)
    c7_attention_cost,
    c8_attention_vs_lstm,
)
from .rules.ffn import (  # noqa: F401 (re-exported)
    block_share,
    c1_ffn_ratio,
    c2_ffn_share,
    is_base_shape,
    layer_counts,
)
from .rules.heads import (  # noqa: F401 (re-exported)
    c3_heads,
    c11_d_head,
)
from .rules.norm import (  # noqa: F401 (re-exported)
    c4_norm_warmup,
    diverged,
)
from .rules.paths import c13_path_length  # noqa: F401 (re-exported)
from .rules.positions import (  # noqa: F401 (re-exported)
    LENGTH_RE,
    c5_pe_length,
    c6_pe_in_distribution,
    length_metrics,
)
from .rules.regularisation import (  # noqa: F401 (re-exported)
    SEQ_METRICS,
    c12_dropout,
    c12_label_smoothing,
)

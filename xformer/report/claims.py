"""Claim verdicts: which design claims (C1–C12, :mod:`xformer.report.catalog`) a sweep addresses, and
whether its runs support them.

This module is the stable entry point; the code lives in :mod:`xformer.report.rules`: a small core
(:mod:`~xformer.report.rules.core`: the result types, the comparisons, the common checks, the training
budget, the registry :data:`REGISTRY` and :func:`decide`) and one module per claim family
(``ffn``: C1, C2; ``heads``: C3, C11; ``norm``: C4; ``positions``: C5, C6; ``attention``: C9, C10;
``regularisation``: C12; ``cost``: C7, C8).

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

from .rules.core import (  # noqa: F401 (re-exported)
    REGISTRY,
    ALPHA, best_of, BETTER, BOUNDS, budget, C2_TOL, C7_BAD, C7_OK, claim, compare, compare_groups, Comparison,
    contexts, curve_metric, decide, EQUIV_REL, evaluate, FEW, higher_is_better, INCONCLUSIVE, LOWER_IS_BETTER,
    metric_bounds, NOISE, NOT_SUPPORTED, Options, outcome_notes, pick_metric, PREFERRED, PUBLISHED, Recogniser,
    saturated_metrics, SATURATION, saturation, seed_check, spaced, Stability, stability, StabilityPoint,
    summarise, SUPPORTED, Verdict, WORSE,
)
from .rules.ffn import (  # noqa: F401 (re-exported)
    block_share, c1_ffn_ratio, c2_ffn_share, is_base_shape, layer_counts,
)
from .rules.heads import (  # noqa: F401 (re-exported)
    c11_d_head, c3_heads,
)
from .rules.norm import (  # noqa: F401 (re-exported)
    c4_norm_warmup, diverged,
)
from .rules.positions import (  # noqa: F401 (re-exported)
    LENGTH_RE, c5_pe_length, c6_pe_in_distribution, length_metrics,
)
from .rules.attention import (  # noqa: F401 (re-exported)
    c10_encoder_attention, c9_attn_scale, head_size,
)
from .rules.regularisation import (  # noqa: F401 (re-exported)
    SEQ_METRICS, c12_dropout, c12_label_smoothing,
)
from .rules.cost import (  # noqa: F401 (re-exported)
    c7_attention_cost, c8_attention_vs_lstm,
)

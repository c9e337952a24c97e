"""The design claims C1–C13: statement, source passage, sweep axis, configs, verdict rule and published
figures. One table used by the verdicts (:mod:`xformer.report.claims`), by ``docs/claims.md``
(``python -m xformer.report.catalog > docs/claims.md``; ``tests/report/test_catalog.py`` fails when
the file drifts) and by the sweep files (:mod:`xformer.report.sweeps`).

Names: a claim's config ``conf/experiment/claims/<name>.yaml``, its W&B sweep ``sweeps/<name>.yaml``,
its results folder ``docs/results/<name>/`` and its verdict function ``claims.<name>`` share one name.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SEEDS = 3
"""Seeds per setting below which no comparison decides anything."""
MIN_POINTS, MAX_POINTS = 4, 6
"""Validations read in the second half of training: at least / at most (evenly spaced)."""
CLOSING_SHARE = 0.25
"""The gap is closing when it shrinks per doubling of steps by more than this share of its final size."""
DIVERGE_SHARE = 0.5
"""A setting diverges more than another when its share of diverged seeds is larger by at least this."""
OVERFIT_RISE, OVERFIT_GAP = 0.05, 0.25
"""C12 dropout's precondition, in nats: the dropout-0 arm over-fits when its validation NLL ends at
least ``OVERFIT_RISE`` above its minimum, or at least ``OVERFIT_GAP`` above its training NLL (seeds' mean)."""
LS_EFFECT_BLEU = 0.5
"""The published label-smoothing effect: ε 0 → 25.3 BLEU against 25.8 with ε 0.1 (Table 3 row D)."""

COMMON_RULE = (
    "Every verdict is stated **at the training budget** of the compared runs (optimizer steps, tokens "
    "seen, learning-rate schedule), as published ablations compare settings at a fixed budget (Vaswani et "
    "al. 2017 Table 3; Kaplan et al. 2020), not at convergence. Every comparison of two settings A and B "
    "is Welch's t on the per-seed values of the decision metric: Δ is A's improvement over B (positive: "
    "A better; for a loss, lower), printed with its 95 % interval and p-value. **better** when the "
    "interval lies above 0, **worse** when below 0, **within noise** otherwise; fewer than 3 seeds on a "
    "side decides nothing. The decision metric is continuous and held out: `test/loss` (the test split "
    "is never used to pick the checkpoint, which is chosen on validation), else `val/loss`, `test/bleu`, "
    "`val/bleu`, `test/ppl`, `val/ppl` (or `--metric`). **Diverged runs** (training loss NaN/Inf, or a "
    "last validation loss above the first; status `diverged` in `metrics.json`) are outcomes: a diverged "
    "seed is its setting's worst outcome. When both sides have ≥ 3 runs and A's share of diverged seeds "
    "exceeds B's by at least one half (e.g. 2 of 3 against 0 of 3), A is worse whatever its other seeds "
    "say; below that the finished seeds are compared, but the side with more diverged seeds is never "
    "called better. Crashed or unfinished jobs are not counted and are named in the verdict. **Best of "
    "k**: where a rule picks the best of k settings before testing it, the k comparisons are corrected "
    "with Holm–Bonferroni and the verdict says so. Whatever the claim's own rule says, the verdict is "
    "**inconclusive** when (a) the sweep does not cover the claim's axis, (b) a compared setting has "
    "fewer than 3 seeds that count (finished or diverged), (c) the decision metric is saturated (every "
    "setting's mean within 2 % of the metric's range from its bound: exact match and accuracy in [0, 1], "
    "BLEU in [0, 100]), or (d) the ranking is not stable in the **second half of training**: on the "
    "validations of the decision metric's `val/` form (else `val/loss`) that every seed of both settings "
    "shares at step ≥ half the last, at most 6 evenly spaced ones (so the result does not depend on how "
    "often runs were validated) and at least 4 (fewer: inconclusive, with the `trainer.val_check_interval` "
    "that fixes it), (d1) **late crossing**: at none of them may the 95 % interval of Δ lie on the other "
    "side of 0 from the final result; (d2) **gap closing**: the least-squares slope of mean Δ against "
    "log2(step) may not shrink the gap by more than a quarter of its final size per doubling of steps "
    "(the slope and the step where the trend reaches 0 are printed). The improvement over each setting's "
    'last validation interval is printed as a caveat ("still improving: it changed by X over its last '
    'validation interval (steps a–b)", never extrapolated beyond the run), never a blocker. Metrics '
    "measured only at the end (`test/loss@4x`) have no curve to check. A contrast of more than two "
    "settings (an interaction) is read the same way with its Welch–Satterthwaite interval. **Precondition**: "
    "a claim whose effect can only show in some settings first checks that this setting is one (its "
    "positive control, e.g. C12's over-fitting, C5's extrapolating scheme); when it fails the verdict is "
    "*inconclusive: this setting cannot show it, because …*, never *not supported*. **Power**: every "
    "comparison prints the smallest true |Δ| its seeds and spread detect with 80 % power (two-sided "
    "α = 0.05, noncentral t); where the published effect is given in the decision metric's units and a "
    "comparison within noise could not have detected it, the verdict is *inconclusive: underpowered*, "
    "with the seeds a side that would."
)


@dataclass(frozen=True)
class ClaimInfo:
    """One claim.

    Attributes:
        cid: ``"C1"`` ...; ``names``: its config/sweep/results/function names (several when the claim
        has several sweeps); ``statement``: the claim in one sentence; ``source``: where it comes from;
        ``passage``: the source's own words (quoted) or a summary (unquoted); ``axis``: the swept
        overrides; ``rule``: the verdict rule on top of :data:`COMMON_RULE`; ``published``: the
        figures printed beside the measured ones.
    """

    cid: str
    names: tuple[str, ...]
    statement: str
    source: str
    passage: str
    axis: str
    rule: str
    published: str


CLAIMS: dict[str, ClaimInfo] = {
    c.cid: c
    for c in (
        ClaimInfo(
            "C1",
            ("c1_ffn_ratio", "c1_ffn_ratio_budget"),
            "An FFN inner width of 4 × d_model is the sweet spot: less lacks capacity, more adds parameters for "
            "diminishing gains.",
            "Vaswani et al. 2017, §3.3 and Table 3 row C",
            '§3.3: "the inner-layer has dimensionality d_ff = 2048" (4 × d_model = 512). Table 3 row C varies '
            'd_ff 1024 / 2048 / 4096 → BLEU 25.4 / 25.8 / 26.2; §6.2 reads it as "bigger models are better". '
            "The sweet-spot reading is this project's claim list, not the paper's.",
            "`model.ffn_ratio=1,2,4,8` (and at equal parameter count: `c1_ffn_ratio_budget`)",
            "Needs ratio 4 and at least one ratio below and one above 4. (i) 4 is better than every swept ratio "
            "below 4; (ii) diminishing return: the gain from the largest ratio above 4 over 4, per million added "
            "parameters (per doubling without parameter counts), is below the gain of 4 over the largest ratio "
            "below it — decided on the intervals: holds when the upper bound of the upper gain is below the lower "
            "bound of the lower gain, fails when its lower bound is above the other's upper bound. **supported**: "
            "(i) and (ii) hold; **not supported**: a ratio below 4 is better than 4, or (ii) fails; else inconclusive.",
            "BLEU 25.4 / 25.8 / 26.2 at d_ff 1024 / 2048 / 4096 (ratio 2 / 4 / 8; 53 / 65 / 90 M params), "
            "Vaswani et al. 2017 Table 3 row C",
        ),
        ClaimInfo(
            "C2",
            ("c2_ffn_share",),
            "The FFN holds about two thirds of a block's parameters.",
            "Vaswani et al. 2017, §3.3; Geva et al. 2021",
            "Attention 4·512² ≈ 1.05 M against FFN 2·512·2048 ≈ 2.10 M parameters per block (counted).",
            "none: counted in every run",
            "Per-block FFN share f / (f + a) (f: parameters of one FFN, a: of one attention sub-layer) of runs of "
            "the base shape (d_ff = 4·d_model, n_heads·d_head = d_model, relu/gelu FFN, no budget): **supported** "
            "when every share is within ±0.03 of 2/3, **not supported** otherwise, inconclusive without such "
            "runs. Exact counts: no seeds, no interval.",
            "attention 4·512² ≈ 1.05 M vs FFN 2·512·2048 ≈ 2.10 M: FFN ≈ 2/3 of a block, Vaswani et al. 2017 §3.3",
        ),
        ClaimInfo(
            "C3",
            ("c3_heads",),
            "Several heads beat one, and too many heads (tiny d_k) hurt again.",
            "Vaswani et al. 2017, §6.2 and Table 3 row A",
            '"While single-head attention is 0.9 BLEU worse than the best setting, quality also drops off with '
            'too many heads."',
            "`model.n_heads=1,2,4,8,16` at fixed d_model",
            "Needs 1 head and at least two head counts above 1. (i) the best multi-head setting is better than 1 "
            "head, Holm–Bonferroni over the k head counts above 1 (the best is picked after the fact); (ii) the "
            "largest head count is worse than the best one, Holm–Bonferroni over the other k − 1. **supported**: "
            "both; **not supported**: 1 head is better than the best multi-head setting, or the largest head "
            "count is the best and better than the next largest; else inconclusive.",
            "BLEU 24.9 / 25.5 / 25.8 / 25.8 / 25.4 at h = 1 / 4 / 8 / 16 / 32, Vaswani et al. 2017 Table 3 row A",
        ),
        ClaimInfo(
            "C4",
            ("c4_norm_warmup",),
            "Pre-LN trains without learning-rate warm-up; Post-LN needs warm-up.",
            'Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"',
            "Summary: the warm-up stage is essential for Post-LN; Pre-LN can be trained without it "
            "(IWSLT14: Post-LN without warm-up 8.45 BLEU).",
            "`model/norm=pre,post` × `optim.warmup_steps=0,W`",
            "Needs pre and post at warm-up 0 and at some W > 0 (the largest is used). Decided on the contrast "
            "Xiong et al. state: (i) Post-LN's benefit from warm-up exceeds Pre-LN's, the interaction "
            "(post@W − post@0) − (pre@W − pre@0) (a Post-LN without warm-up that diverges where Post-LN with it "
            "does not settles it); (ii) pre@0 is not worse than post@W (Pre-LN without warm-up reaches the "
            "Post-LN-with-warm-up result). **supported**: (i) and (ii); **not supported**: the interaction is "
            "negative, or pre@0 is worse than post@W; else inconclusive. A warm-up benefit for Pre-LN too is a "
            "caveat: the paper says Pre-LN can drop warm-up, not that warm-up gives it nothing. The peak rate "
            "of the CPU form (0.01) is where warm-up matters: Xiong et al. §3 show Post-LN's need for warm-up "
            "growing with the rate, so a rate at which Post-LN trains without warm-up cannot show the claim.",
            "IWSLT14 BLEU: Post-LN 8.45 without warm-up, ~34 with 4000 steps; Pre-LN ~34 without, Xiong et al. 2020",
        ),
        ClaimInfo(
            "C5",
            ("c5_pe_length",),
            "Sinusoidal positions let a model run on sequences longer than any seen in training; learned "
            "positions cannot; relative schemes (RoPE, ALiBi, none) differ.",
            "Vaswani et al. 2017 §3.5; Press et al. 2022 (ALiBi); Kazemnejad et al. 2023 (NoPE)",
            '§3.5: "We chose the sinusoidal version because it may allow the model to extrapolate to sequence '
            'lengths longer than the ones encountered during training." Press et al. and Kazemnejad et al. test '
            "this in decoder-only language models; the CPU and GPU forms here are decoder-only too.",
            "`model/pe=sinusoidal,learned,rope,alibi,none`, trained on lengths ≤ L, tested at 1×, 2×, 4× L",
            "Metric family `test/loss@Nx` (else `test/bleu@Nx`, `test/exact_match@Nx`; or `--metric`), with 1×. "
            "Each scheme's degradation from 1× to N× is taken per seed (paired). The control is ALiBi (else T5, "
            "RoPE, else the scheme that degrades least). Precondition: the control degrades less than learned "
            "positions at 2× (learned is the negative control): then the task is solvable beyond the training "
            "length and the measure can tell. **supported**: sinusoidal degrades no more than the control at "
            "every N > 1; **not supported**: it degrades more at the shortest N > 1; else inconclusive.",
            "sinusoidal may extrapolate (Vaswani et al. 2017 §3.5); ALiBi extrapolates, sinusoidal and learned "
            "degrade beyond the training length (Press et al. 2022, WikiText-103 perplexity); NoPE and relative "
            "schemes beat absolute ones on length generalisation in decoder-only models (Kazemnejad et al. 2023)",
        ),
        ClaimInfo(
            "C6",
            ("c6_pe_in_distribution",),
            "Learned and sinusoidal positional encodings give nearly the same quality in-distribution.",
            "Vaswani et al. 2017, §3.5 and Table 3 row E",
            '"We also experimented with using learned positional embeddings instead, and found that the two '
            'versions produced nearly identical results (see Table 3 row (E))."',
            "`model/pe=sinusoidal,learned`",
            "An equivalence claim, margin m = 1 % of the larger mean. TOST at α = 0.05: **supported** when the "
            "90 % Welch interval of the difference lies inside (−m, m) and the second-half trend of Δ (rule (d)) "
            "is still inside ±m at the last step; **not supported** only when the 95 % interval lies entirely "
            "outside ±m (or one setting diverges more); otherwise (an interval straddling the margin) "
            "inconclusive.",
            "BLEU 25.7 (learned) vs 25.8 (sinusoidal), Vaswani et al. 2017 Table 3 row E",
        ),
        ClaimInfo(
            "C7",
            ("c7_attention_cost", "c7_mixer"),
            "Self-attention costs O(n²·d) time and O(n²) memory.",
            "Vaswani et al. 2017, Table 1",
            "Table 1: self-attention complexity per layer O(n²·d).",
            "`xformer bench` over the sequence length n",
            "Fitted log-log exponents of time and memory against n: **supported** when all are within 2 ± 0.3, "
            "**not supported** when one is off by more than 0.5, else inconclusive.",
            "O(n²·d) time, O(n²) memory (exponent 2), Vaswani et al. 2017 Table 1",
        ),
        ClaimInfo(
            "C8",
            ("c8_attention_vs_lstm",),
            "Self-attention is cheaper than a recurrent layer when n < d.",
            "Vaswani et al. 2017, Table 1 and §4",
            "§4: self-attention layers are faster than recurrent layers when the sequence length n is smaller "
            "than the representation dimensionality d.",
            "`xformer bench` attention against an LSTM layer over n at fixed d",
            "**supported** when the measured crossover length is ≥ d/2, **not supported** below, inconclusive "
            "without a crossover.",
            "attention cheaper than recurrence when n < d (n²·d vs n·d²), Vaswani et al. 2017 Table 1 and §4",
        ),
        ClaimInfo(
            "C9",
            ("c9_attn_scale",),
            "Scaling scores by 1/√d_k keeps softmax out of saturation; without it training is worse for large d_k.",
            "Vaswani et al. 2017, §3.2.1",
            '"We suspect that for large values of d_k, the dot products grow large in magnitude, pushing the '
            "softmax function into regions where it has extremely small gradients. To counteract this effect, we "
            'scale the dot products by 1/√d_k."',
            "`model.attn_scale=true,false` × `model.d_head=16,64` (the interaction)",
            "Needs scaled and unscaled at two d_k. Decided on what the claim names: (i) scaled is better than "
            "unscaled at the largest d_k and (ii) the benefit grows with d_k, the interaction "
            "(scaled − unscaled)@largest − (scaled − unscaled)@smallest, whose second-half stability is "
            "checked. **supported**: both; **not supported**: unscaled is better at the largest d_k, or the "
            "benefit shrinks; else inconclusive.",
            "scaling by 1/√d_k keeps softmax out of saturation; worse without it for large d_k, "
            "Vaswani et al. 2017 §3.2.1 (no figure)",
        ),
        ClaimInfo(
            "C10",
            ("c10_encoder_attention",),
            "A bidirectional (full) encoder models the source better than a causal one.",
            "Vaswani et al. 2017, §3.2.3; Devlin et al. 2019 (BERT)",
            '§3.2.3: "Each position in the encoder can attend to all positions in the previous layer of the encoder."',
            "`model/attention=full,causal` on the encoder (encoder–decoder)",
            "**supported** when full is better than causal, **not supported** when worse, else inconclusive.",
            "bidirectional encoder (Vaswani et al. 2017 §3.2.3; BERT); no ablation figure in the paper",
        ),
        ClaimInfo(
            "C11",
            ("c11_d_head",),
            "A smaller attention key size d_k hurts quality.",
            "Vaswani et al. 2017, §6.2 and Table 3 row B",
            '"In Table 3 rows (B), we observe that reducing the attention key size d_k hurts model quality."',
            "`model.d_qk=6,12,24` with `model.d_head` (the value size) fixed, as row B varies d_k alone; "
            "a `model.d_head` sweep (values shrink too) is read the same way and says so",
            "Needs two d_qk (else d_head) values. **supported** when the largest is better than the smallest, **not "
            "supported** when worse, else inconclusive.",
            "BLEU 25.1 / 25.4 at d_k 16 / 32 (base d_k 64: 25.8), Vaswani et al. 2017 Table 3 rows B and base",
        ),
        ClaimInfo(
            "C12",
            ("c12_dropout", "c12_label_smoothing"),
            "Dropout helps; label smoothing costs perplexity but helps BLEU.",
            "Vaswani et al. 2017, §5.4, §6.2 and Table 3 row D",
            '§6.2: "dropout is very helpful in avoiding over-fitting." §5.4 on label smoothing: "This hurts '
            'perplexity, as the model learns to be more unsure, but improves accuracy and BLEU score."',
            "`model.dropout=0,0.1,0.3` on the first 5 000 Multi30k pairs (`data.train_limit`); "
            "`loss.label_smoothing=0,0.1` with beam search, six seeds",
            "Dropout: needs 0 and a rate > 0. Precondition: dropout 0 over-fits, its validation NLL ending "
            f"≥ {OVERFIT_RISE:g} nats above its minimum or ≥ {OVERFIT_GAP:g} nats above its training NLL "
            "(unsmoothed, `train/nll`; seeds' mean). **supported** when the best rate > 0 is better than 0 "
            "(Holm–Bonferroni over the rates > 0, as the best is picked after the fact), **not supported** when "
            "worse, else inconclusive. Label smoothing: needs ε = 0 and ε > 0 and a BLEU metric (the ε > 0 with "
            "the best mean BLEU is used; both comparisons Holm–Bonferroni over the values ε > 0): (i) ε = 0 has "
            "lower `val/ppl` (else `val/loss`), (ii) ε > 0 has better BLEU; **supported** when both hold, **not "
            "supported** when either is reversed, else inconclusive; the BLEU comparison is checked for power "
            f"against the published {LS_EFFECT_BLEU:g} BLEU (ε 0: 25.3 against 25.8).",
            "P_drop 0 → 24.6 BLEU (base 0.1: 25.8, PPL 4.92); ε_ls 0 → better perplexity, worse BLEU, "
            "Vaswani et al. 2017 Table 3 row D",
        ),
        ClaimInfo(
            "C13",
            ("c13_path_length",),
            "Self-attention learns a dependency across distances at which a recurrent layer of the same size "
            "fails, because its path between the two positions is O(1) steps rather than O(n).",
            "Vaswani et al. 2017, §4 and Table 1",
            '§4: "Learning long-range dependencies is a key challenge in many sequence transduction tasks. One '
            "key factor affecting the ability to learn such dependencies is the length of the paths forward and "
            "backward signals have to traverse in the network. The shorter these paths between any combination "
            'of positions in the input and output sequences, the easier it is to learn long-range dependencies." '
            "Table 1: maximum path length O(1) self-attention, O(n) recurrent, O(log_k n) convolutional.",
            "`model/mixer=mha,lstm,conv` × `data.distance` (recall the token k positions back, `data=recall`) "
            "at equal parameter count",
            f"Decision metric `test/exact_match` (else `val/exact_match`). Needs mha and lstm at two or more "
            f"distances; k_lo is the shortest, k_hi the longest. Positive control: mha and lstm each reach a "
            f"mean accuracy ≥ {0.9:g} at k_lo, else inconclusive (this setting cannot show it). **supported**: "
            f"mha@k_hi is not worse than mha@k_lo and its mean is ≥ {0.9:g}, while lstm@k_hi is worse than "
            f"lstm@k_lo; **not supported**: lstm@k_hi still reaches {0.9:g} and is not worse than lstm@k_lo, or "
            f"both fall and mha loses at least as much accuracy as lstm; else inconclusive. The distance at "
            f"which each mixer (conv too) first falls below {0.9:g} is printed.",
            "maximum path length O(1) self-attention, O(n) recurrent, O(n/k) convolutional (O(log_k n) dilated), "
            "Vaswani et al. 2017 Table 1 (no learning experiment in the paper)",
        ),
    )
}


HEADLINES: dict[str, str] = {
    "C1": "BLEU 25.4 / 25.8 / 26.2 at ratio 2 / 4 / 8 (Table 3 C)",
    "C2": "FFN ≈ 2/3 of a block (§3.3)",
    "C3": "BLEU 24.9 / 25.5 / 25.8 / 25.8 / 25.4 at h = 1 / 4 / 8 / 16 / 32 (Table 3 A)",
    "C4": "Post-LN 8.45 BLEU without warm-up, ~34 with; Pre-LN ~34 without (Xiong et al. 2020)",
    "C5": "ALiBi extrapolates; sinusoidal, learned degrade (Press et al. 2022)",
    "C6": "BLEU 25.7 learned vs 25.8 sinusoidal (Table 3 E)",
    "C7": "exponent 2 in n (Table 1)",
    "C8": "cheaper than recurrence when n < d (Table 1)",
    "C9": "no figure (§3.2.1)",
    "C10": "no ablation figure (§3.2.3)",
    "C11": "BLEU 25.1 / 25.4 / 25.8 at d_k 16 / 32 / 64 (Table 3 B)",
    "C12": "P_drop 0: 24.6 vs 25.8 BLEU; ε_ls 0: better PPL, worse BLEU (Table 3 D)",
    "C13": "path length O(1) attention vs O(n) recurrent (Table 1, §4)",
}
"""The published figure of each claim in a few words, for the summary table at the top of ``report.md``."""


def claims_markdown() -> str:
    """The text of ``docs/claims.md``."""
    out = [
        "# The design claims",
        "",
        "Generated from `xformer/report/catalog.py` by `python -m xformer.report.catalog > docs/claims.md` "
        "(a test fails when this file drifts from the code). A swept claim has one name for its config "
        "(`conf/experiment/claims/<name>.yaml`), its W&B sweep (`sweeps/<name>.yaml`), its verdict function "
        "(`xformer.report.claims.<name>`) and its results (`docs/results/<name>/`). Names without a config "
        "are verdict functions only: C2 (`c2_ffn_share`) is counted in every report, C7 "
        "(`c7_attention_cost`) and C8 (`c8_attention_vs_lstm`) are read from `xformer bench`'s `bench.json` "
        "(`xformer report <dir> --bench bench.json`; `xformer claims run c7_mixer` passes the committed "
        "`docs/results/bench-<scale>.json`, and its sweep compares the mechanisms' quality and tokens/s).",
        "",
        "Run a claim's CPU form with `XFORMER_DATA=/path/to/data python run.py experiment=claims/<name> -m`, "
        "its GPU form with `... scale=gpu -m`, and read the verdict with "
        "`xformer report multirun/claims/<name>/cpu`; or all of it in one resumable command: "
        "`xformer claims run [<name> ...]`.",
        "",
        "## Rule common to every claim",
        "",
        COMMON_RULE,
        "",
    ]
    for c in CLAIMS.values():
        out += [
            f"## {c.cid}: {c.statement}",
            "",
            f"- names: {', '.join(f'`{n}`' for n in c.names)}",
            f"- source: {c.source}",
            f"- source passage: {c.passage}",
            f"- axis: {c.axis}",
            f"- rule: {c.rule}",
            f"- published: {c.published}",
            "",
        ]
    return "\n".join(out)


if __name__ == "__main__":
    print(claims_markdown(), end="")

"""Row 3: padding waste in one Multi30k training epoch, xformer's token-budget batches vs a random
permutation cut into fixed-size batches of the same count (the method in full: ``docs/bench.md``, row 3).
``pad_fraction``: ``1 - Σ(len src + len tgt) / Σ n_b·(max src_b + max tgt_b)`` (each side padded to its
longest member); ``pad_fraction_max_len``: :func:`~xformer.data.batching.padding_fraction` on ``max(src, tgt)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xformer.data.batching import TokenBudgetBatchSampler, padding_fraction

from .config import BenchConfig


def _summary(src_len: np.ndarray, tgt_len: np.ndarray, lengths: np.ndarray, batches: list[list[int]]) -> dict:
    idx = [np.asarray(b, dtype=np.int64) for b in batches]
    real = sum(int(src_len[i].sum() + tgt_len[i].sum()) for i in idx)
    padded = sum(len(i) * int(src_len[i].max() + tgt_len[i].max()) for i in idx)
    return {
        "pad_fraction": 1.0 - real / padded,
        "pad_fraction_max_len": padding_fraction(lengths, batches),
        "batches": len(batches),
        "mean_pairs_per_batch": float(np.mean([len(b) for b in batches])),
        "max_padded_tokens": int(max(len(i) * int(lengths[i].max()) for i in idx)),
    }


def run(cfg: BenchConfig, data_root: Path | None) -> dict:
    if data_root is None:
        note = "Multi30k files not found (set --data-root or XFORMER_DATA, or put them in ../shared/data/multi30k)"
        return {"status": "skipped", "note": note}
    from xformer.data.multi30k import Multi30kDataModule

    dm = Multi30kDataModule(root=str(data_root), tokens_per_batch=cfg.padding_tokens_per_batch, seed=cfg.seed)
    dm.setup("fit")
    ds = dm.train_set
    lengths = np.asarray(ds.lengths())
    src_len, tgt_len = (np.asarray(k) for k in ds.sort_keys())
    sampler = TokenBudgetBatchSampler(
        lengths, cfg.padding_tokens_per_batch, shuffle=True, seed=cfg.seed, sort_keys=ds.sort_keys()
    )
    budget = sampler.all_batches()
    per = max(1, round(len(lengths) / len(budget)))
    perm = np.random.default_rng(cfg.seed).permutation(len(lengths))
    fixed = [perm[i : i + per].tolist() for i in range(0, len(perm), per)]
    ours, base = _summary(src_len, tgt_len, lengths, budget), _summary(src_len, tgt_len, lengths, fixed)
    return {
        "status": "ok",
        "config": {
            "data": f"multi30k train ({data_root})",
            "pairs": int(len(lengths)),
            "tokens_per_batch": cfg.padding_tokens_per_batch,
            "vocab_size": dm.tgt_vocab_size,
            "fixed_batch_size": per,
            "seed": cfg.seed,
        },
        "token_budget": ours,
        "fixed_random": base,
        "waste_ratio": (base["pad_fraction"] / ours["pad_fraction"]) if ours["pad_fraction"] > 0 else None,
    }

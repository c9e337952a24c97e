"""Row 4: greedy decoding with the key/value cache (:func:`xformer.model.decoding.greedy`) vs
recomputing the whole prefix every step (:func:`~xformer.model.decoding.greedy_recompute`), and cached
beam search, on an untrained row-1-size model (the method in full: ``docs/bench.md``, row 4).
"""

from __future__ import annotations

from functools import partial

import torch

from xformer.model import decoding

from .config import BenchConfig
from .models import build_xformer
from .timing import interleaved, median
from .training import make_batch

NEVER = -1
"""EOS id that no argmax can produce (ids are ``>= 0``): every sequence decodes ``decode_len`` steps."""


def run(cfg: BenchConfig) -> dict:
    dev = cfg.device
    torch.manual_seed(cfg.seed)
    model = build_xformer(cfg.size).to(dev).eval()
    src = make_batch(cfg.decode_batch, cfg.decode_src_len, cfg.size.vocab, cfg.min_len_frac, cfg.seed, dev)["src"]
    n, k = cfg.decode_len, cfg.decode_beam_size
    cuda = torch.device(dev).type == "cuda"
    results: dict[str, list] = {}

    def call(name: str, fn):
        def run():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                results[name] = fn(model, src, 1, NEVER, 0, n)  # BOS 1, padding 0

        return run

    fns = {"cached": call("cached", decoding.greedy), "recompute": call("recompute", decoding.greedy_recompute)}
    times = interleaved(fns, warmup=1, repeats=cfg.decode_repeats, device=dev)
    gen = cfg.decode_batch * n
    out = {
        "status": "ok",
        "config": {
            "d_model": cfg.size.d_model,
            "layers": cfg.size.n_layers,
            "vocab": cfg.size.vocab,
            "batch": cfg.decode_batch,
            "src_len": cfg.decode_src_len,
            "output_len": n,
            "precision": "bf16 autocast" if cuda else "fp32",
            "repeats": cfg.decode_repeats,
            "forced_length": "EOS id -1 (never produced), so every row decodes output_len steps",
        },
    }

    def timed(ts: list[float]) -> dict:
        return {"ms": median(ts) * 1e3, "tokens_per_s": gen / median(ts), "ms_all": [t * 1e3 for t in ts]}

    out.update({name: timed(ts) for name, ts in times.items()})
    out["speedup"] = out["cached"]["tokens_per_s"] / out["recompute"]["tokens_per_s"]
    beam = call("beam", partial(decoding.beam_search, beam_size=k))
    ts = interleaved({"beam": beam}, warmup=1, repeats=cfg.decode_repeats, device=dev)["beam"]
    # tokens of the returned hypotheses per second (what a user gets out, not beam rows x steps)
    out["beam"] = {"beam_size": k, **timed(ts)}
    out["outputs_match"] = results["cached"] == results["recompute"]
    return out

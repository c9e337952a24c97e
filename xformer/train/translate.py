"""``xformer translate --ckpt PATH``: translate stdin lines with a trained checkpoint.

Everything needed is inside the checkpoint (the driver stores the resolved config and the
tokenizer under ``checkpoint["xformer"]``), so no data or cache is read.
"""

from __future__ import annotations

import argparse
import sys
import pickle
import tempfile
from pathlib import Path

import torch
from omegaconf import OmegaConf

from xformer.data.tokenizers import BOS as BOS_ID, EOS as EOS_ID, PAD as PAD_ID, load_tokenizer

from . import decoding


def load_checkpoint(path: str | Path):
    """Rebuild ``(model, tokenizer, config)`` from a checkpoint written by ``run.py``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a readable checkpoint, or was not written by xformer (no
            ``xformer`` section).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--ckpt {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
        raise ValueError(f"--ckpt {path}: not a readable checkpoint (truncated or corrupt: "
                         f"{str(err).splitlines()[0]}). Fix: use the job's checkpoints/last.ckpt or best-*.ckpt") from err
    meta = ckpt.get("xformer") if isinstance(ckpt, dict) else None
    if not meta:
        raise ValueError(f"--ckpt {path}: not an xformer checkpoint (no 'xformer' section)")
    cfg = OmegaConf.create(meta["config"])
    with tempfile.TemporaryDirectory() as tmp:
        tok_file = Path(tmp) / "tokenizer.json"
        tok_file.write_text(meta["tokenizer"], encoding="utf-8")
        tokenizer = load_tokenizer(tok_file)
    from .validate import build_model

    model = build_model(cfg, meta["src_vocab_size"], meta["tgt_vocab_size"], meta.get("pad_id", PAD_ID))
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model.load_state_dict(state)
    return model.eval(), tokenizer, cfg


def translate(model, tokenizer, lines: list[str], beam_size: int = 1, alpha: float = 0.6,
              max_len_a: float = 1.5, max_len_b: int = 10, batch_size: int = 64) -> list[str]:
    """Translate ``lines`` (raw source text) with an encoder–decoder ``model``; returns one string each."""
    if getattr(model, "arch", "encoder_decoder") != "encoder_decoder":
        raise ValueError("translate needs an encoder_decoder checkpoint")
    out: list[str] = []
    for i in range(0, len(lines), batch_size):
        chunk = [tokenizer.encode(line) + [EOS_ID] for line in lines[i:i + batch_size]]
        width = max(len(c) for c in chunk)
        src = torch.full((len(chunk), width), PAD_ID, dtype=torch.long)
        for j, ids in enumerate(chunk):
            src[j, :len(ids)] = torch.tensor(ids)
        max_len = decoding.max_output_len(width, max_len_a, max_len_b, getattr(model, "max_len", None))
        if beam_size > 1:
            hyps = decoding.beam_search(model, src, BOS_ID, EOS_ID, PAD_ID, max_len, beam_size, alpha)
        else:
            hyps = decoding.greedy(model, src, BOS_ID, EOS_ID, PAD_ID, max_len)
        out.extend(tokenizer.decode(h) for h in hyps)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``xformer translate --ckpt PATH [--beam K] [--alpha A] < input.txt > output.txt``."""
    ap = argparse.ArgumentParser(prog="xformer translate", description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint (.ckpt) written by run.py")
    ap.add_argument("--beam", type=int, default=None, help="beam size (default: the run's decode.beam_size)")
    ap.add_argument("--alpha", type=float, default=None, help="length penalty alpha")
    args = ap.parse_args(argv)
    if args.beam is not None and args.beam < 1:
        print(f"error: --beam={args.beam}: must be >= 1 (1 = greedy)", file=sys.stderr)
        return 2
    if args.alpha is not None and not args.alpha >= 0:
        print(f"error: --alpha={args.alpha}: must be >= 0", file=sys.stderr)
        return 2
    try:
        model, tokenizer, cfg = load_checkpoint(args.ckpt)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    dec = cfg.decode
    lines = [line.rstrip("\n") for line in sys.stdin]
    for hyp in translate(model, tokenizer, lines, beam_size=args.beam or dec.beam_size,
                         alpha=dec.alpha if args.alpha is None else args.alpha,
                         max_len_a=dec.max_len_a, max_len_b=dec.max_len_b):
        print(hyp)
    return 0

"""``xformer translate --ckpt PATH``: translate stdin lines with a trained checkpoint.

The checkpoint's ``xformer`` section holds the config and the tokenizer: no data or cache is read.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf
from torch.nn.utils.rnn import pad_sequence

from xformer.data.tokenizers import BOS, EOS, PAD, load_tokenizer
from xformer.help import PlainHelpFormatter
from xformer.model import EncoderDecoder, decoding

from .checkpoint_file import UnreadableCheckpoint, arch_name, build_model, read_checkpoint


def load_checkpoint(path: str | Path):
    """Rebuild ``(model, tokenizer, config)`` from a checkpoint written by ``run.py``.
    Raises: FileNotFoundError (no such file), ValueError (unreadable, or no ``xformer`` section)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--ckpt {path}: no such file")
    try:
        ckpt = read_checkpoint(path)
    except UnreadableCheckpoint as err:
        raise ValueError(
            f"--ckpt {path}: not a readable checkpoint (truncated or corrupt: {err}). "
            f"Fix: use the job's checkpoints/last.ckpt or best-*.ckpt"
        ) from err
    meta = ckpt.get("xformer") if isinstance(ckpt, dict) else None
    if not meta:
        raise ValueError(f"--ckpt {path}: not an xformer checkpoint (no 'xformer' section)")
    cfg = OmegaConf.create(meta["config"])
    with tempfile.TemporaryDirectory() as tmp:
        tok_file = Path(tmp) / "tokenizer.json"
        tok_file.write_text(meta["tokenizer"], encoding="utf-8")
        tokenizer = load_tokenizer(tok_file)
    model = build_model(cfg, meta["src_vocab_size"], meta["tgt_vocab_size"], meta.get("pad_id", PAD))
    from .module import uncompiled_state_dict

    state = {
        k.removeprefix("model."): v
        for k, v in uncompiled_state_dict(ckpt["state_dict"]).items()
        if k.startswith("model.")
    }
    model.load_state_dict(state)
    return model.eval(), tokenizer, cfg


def translate(
    model,
    tokenizer,
    lines: list[str],
    beam_size: int = 1,
    alpha: float = 0.6,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    batch_size: int = 64,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """One translation per line of raw source text, by an encoder–decoder ``model``, each capped at
    ``max_len_a · (its tokens + EOS) + max_len_b`` tokens (and ``model.max_len``) whatever the other lines.
    A line longer than ``model.position_limit`` is cut to fit, with one ``warn`` message naming its line.
    Raises: ValueError if ``model`` is not an encoder–decoder."""
    if not isinstance(model, EncoderDecoder):
        raise ValueError(
            f"translate needs an encoder_decoder checkpoint (model/arch=encoder_decoder); this one "
            f"is {arch_name(type(model).__name__)} ({type(model).__name__})"
        )
    limit = getattr(model, "position_limit", None)
    encoded = []
    for n, line in enumerate(lines, start=1):
        ids = tokenizer.encode(line) + [EOS]
        ids, clipped = decoding.clip_source(ids, limit, EOS)
        if clipped and warn is not None:
            warn(
                f"line {n}: {len(tokenizer.encode(line)) + 1} tokens, more than the model's {limit} positions "
                f"(model.max_len); translated its first {limit - 1} tokens"
            )
        encoded.append(ids)
    # batches of lines with the same output cap, so a line's translation does not depend on its neighbours
    cap = getattr(model, "max_len", None)
    groups: dict[int, list[int]] = {}
    for n, ids in enumerate(encoded):
        groups.setdefault(decoding.max_output_len(len(ids), max_len_a, max_len_b, cap), []).append(n)
    out: list[str] = [""] * len(encoded)
    for max_len, members in groups.items():
        for i in range(0, len(members), batch_size):
            rows = members[i : i + batch_size]
            src = pad_sequence([torch.tensor(encoded[r]) for r in rows], batch_first=True, padding_value=PAD)
            if beam_size > 1:
                hyps = decoding.beam_search(model, src, BOS, EOS, PAD, max_len, beam_size, alpha)
            else:
                hyps = decoding.greedy(model, src, BOS, EOS, PAD, max_len)
            for r, h in zip(rows, hyps, strict=True):
                out[r] = tokenizer.decode(h)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``xformer translate --ckpt PATH [--beam K] [--alpha A] < input.txt > output.txt``."""
    ap = argparse.ArgumentParser(
        prog="xformer translate", description=__doc__.split("\n\n")[0], formatter_class=PlainHelpFormatter
    )
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
    if not lines:
        print(
            "note: the input was empty: nothing to translate (give one source sentence per line on stdin)",
            file=sys.stderr,
        )
        return 0
    try:  # translate() returns a list: nothing is printed before a refusal (e.g. a decoder-only model)
        hyps = translate(
            model,
            tokenizer,
            lines,
            beam_size=args.beam or dec.beam_size,
            alpha=dec.alpha if args.alpha is None else args.alpha,
            max_len_a=dec.max_len_a,
            max_len_b=dec.max_len_b,
            warn=lambda msg: print(f"warning: {msg}", file=sys.stderr),
        )
    except ValueError as err:
        print(f"error: --ckpt {args.ckpt}: {err}", file=sys.stderr)
        return 2
    for hyp in hyps:
        print(" ".join(hyp.splitlines()))  # one output line per input line, even if a line break was generated
    return 0

"""The LightningModule that trains and evaluates any xformer model shape on any data module.

One module covers the three shapes, dispatching once on ``model.arch``:

* ``encoder_decoder`` on sequence-to-sequence batches: teacher forcing, decoding for BLEU/exact match;
* ``decoder_only`` on LM batches, or on sequence-to-sequence batches fed as a prefix LM
  (``src + [BOS] + tgt``, loss on the target part only);
* ``encoder_only`` as a tagger on length-preserving tasks (label ``i`` = target token ``i``).

Logged keys: ``train/loss`` (the training objective, label-smoothed), ``val/loss`` (token NLL without
smoothing, so label-smoothing sweeps compare), ``val/ppl`` = exp(val/loss), ``val/acc`` (token
accuracy), ``val/bleu`` / ``val/exact_match`` (decoded), the same under ``test/`` after fit, and
``perf/tokens_per_s`` (non-padding source + target tokens per second of training step).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import lightning as L
import sacrebleu
import torch
import torch.nn.functional as F
from torch import Tensor

from . import decoding


def prefix_lm_batch(src: Tensor, tgt: Tensor, pad: int) -> tuple[Tensor, Tensor, Tensor]:
    """Pack seq2seq pairs as one causal-LM sequence each: ``src + tgt`` (``tgt`` starts with BOS,
    which doubles as the separator).

    Args:
        src: ``(B, S)`` padded source ids; tgt: ``(B, T)`` padded ``[BOS] + y + [EOS]``.

    Returns:
        ``seq`` ``(B, L)`` right-padded, ``labels`` ``(B, L)`` (next token on the target part,
        ``pad`` elsewhere), ``prompt_len`` ``(B,)`` = source length + 1 (the BOS).
    """
    src_len = (src != pad).sum(1)
    tgt_len = (tgt != pad).sum(1)
    total = src_len + tgt_len
    bsz, width = src.shape[0], int(total.max())
    seq = torch.full((bsz, width), pad, dtype=src.dtype, device=src.device)
    labels = torch.full_like(seq, pad)
    for b in range(bsz):
        s, t = int(src_len[b]), int(tgt_len[b])
        seq[b, :s] = src[b, :s]
        seq[b, s:s + t] = tgt[b, :t]
        labels[b, s:s + t - 1] = tgt[b, 1:t]
    return seq, labels, src_len + 1


class Seq2SeqModule(L.LightningModule):
    """Train/evaluate ``model`` with label-smoothed cross-entropy and Adam + inverse-sqrt warm-up.

    Args:
        model: an ``nn.Module`` from :mod:`xformer.model` (its ``arch`` attribute selects the path).
        optimizer: factory ``params -> torch.optim.Optimizer`` (Hydra ``_partial_``).
        lr_lambda: factory ``step -> multiplier`` (the schedule, applied every optimizer step).
        label_smoothing: ε_ls of Szegedy et al. 2016 (Vaswani et al. §5.4 use 0.1).
        pad_id, bos_id, eos_id: special ids of the data.
        detokenize: target ids → text comparable to the references.
        metrics: sequence metrics to compute on val/test (``"bleu"``, ``"exact_match"``).
        decode: dict with ``beam_size``, ``alpha``, ``max_len_a``, ``max_len_b``.
        test_split_names: names of the test loaders (``"test"`` logs plain keys, others ``@name``).
        val_decode_limit: decode at most this many validation batches (``None`` = all).
    """

    def __init__(self, model: torch.nn.Module, optimizer: Callable, lr_lambda: Callable[[int], float],
                 label_smoothing: float = 0.1, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2,
                 detokenize: Callable[[list[int]], str] | None = None, metrics: list[str] | None = None,
                 decode: dict | None = None, test_split_names: list[str] | None = None,
                 val_decode_limit: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.optimizer_factory, self.lr_lambda = optimizer, lr_lambda
        self.label_smoothing = label_smoothing
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.detokenize = detokenize or (lambda ids: " ".join(map(str, ids)))
        self.seq_metrics = list(metrics or [])
        self.decode_cfg = {"beam_size": 1, "alpha": 0.6, "max_len_a": 1.5, "max_len_b": 10, **(decode or {})}
        self.test_split_names = list(test_split_names or ["test"])
        self.val_decode_limit = val_decode_limit
        self.arch = getattr(model, "arch", "encoder_decoder")
        self._t0: float | None = None
        self._eval: dict[str, dict] = {}
        self.tokens_seen = 0
        #: stored in every checkpoint under ``"xformer"`` (config, tokenizer, vocab sizes) so
        #: ``mode=eval`` and ``xformer translate`` can rebuild the model without the run's files
        self.checkpoint_meta: dict = {}

    # -- forward paths ------------------------------------------------------------------------
    def logits_and_labels(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Model logits ``(B, T, V)`` and aligned labels ``(B, T)`` (``pad_id`` = ignore) for a batch."""
        pad = self.pad_id
        if "src" not in batch:  # LM batch
            tgt = batch["tgt"]
            inp, labels = tgt[:, :-1], tgt[:, 1:].clone()
            if "loss_mask" in batch:
                labels[~batch["loss_mask"][:, 1:]] = pad
            return self.model(inp), labels
        src, tgt = batch["src"], batch["tgt"]
        if self.arch == "encoder_decoder":
            return self.model(src, tgt[:, :-1]), tgt[:, 1:]
        if self.arch == "decoder_only":
            seq, labels, _ = prefix_lm_batch(src, tgt, pad)
            return self.model(seq), labels
        # encoder_only tagger: label i is target token i (length-preserving tasks)
        labels = torch.full_like(src, pad)
        n = min(src.shape[1], tgt.shape[1] - 1)
        labels[:, :n] = tgt[:, 1:1 + n]
        labels[labels == self.eos_id] = pad
        labels[src == pad] = pad
        return self.model(src), labels

    def loss(self, logits: Tensor, labels: Tensor, smoothing: float) -> Tensor:
        """Mean token cross-entropy over non-padding labels, with label smoothing ``smoothing``."""
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=self.pad_id,
                               label_smoothing=smoothing)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["xformer"] = {**self.checkpoint_meta, "tokens_seen": self.tokens_seen}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.tokens_seen = int(checkpoint.get("xformer", {}).get("tokens_seen", 0))

    # -- training -----------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        logits, labels = self.logits_and_labels(batch)
        loss = self.loss(logits, labels, self.label_smoothing)
        n_tok = int((labels != self.pad_id).sum()) + (int((batch["src"] != self.pad_id).sum()) if "src" in batch else 0)
        self.tokens_seen += n_tok
        self._batch_tokens = n_tok
        self.log("train/loss", loss, prog_bar=True, batch_size=int((labels != self.pad_id).sum()))
        return loss

    def on_train_batch_start(self, batch, batch_idx) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if self._t0 is not None:
            dt = time.perf_counter() - self._t0
            self.log("perf/tokens_per_s", self._batch_tokens / max(dt, 1e-9), prog_bar=False)
            self.log("perf/tokens_seen", float(self.tokens_seen))

    def configure_optimizers(self):
        opt = self.optimizer_factory(self.parameters())
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_lambda)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- evaluation ---------------------------------------------------------------------------
    def _eval_step(self, batch: dict, prefix: str, decode: bool) -> None:
        logits, labels = self.logits_and_labels(batch)
        mask = labels != self.pad_id
        n = int(mask.sum())
        acc = self._eval.setdefault(prefix, {"nll": 0.0, "n": 0, "correct": 0, "hyps": [], "refs": []})
        if n:
            acc["nll"] += float(F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                ignore_index=self.pad_id, reduction="sum"))
            acc["correct"] += int(((logits.argmax(-1) == labels) & mask).sum())
            acc["n"] += n
        if decode and self.seq_metrics and "tgt_text" in batch:
            acc["hyps"].extend(self.generate(batch, logits))
            acc["refs"].extend(batch["tgt_text"])

    def generate(self, batch: dict, logits: Tensor | None = None) -> list[str]:
        """Decoded, detokenised hypotheses for a batch (greedy or beam per ``decode`` settings)."""
        cfg = self.decode_cfg
        cap = getattr(self.model, "max_len", None)
        if self.arch == "encoder_only":
            if logits is None:
                logits, _ = self.logits_and_labels(batch)
            pred = logits.argmax(-1)
            lens = (batch["src"] != self.pad_id).sum(1).tolist()
            return [self.detokenize(pred[b, :lens[b]].tolist()) for b in range(pred.shape[0])]
        if "src" in batch and self.arch == "encoder_decoder":
            src = batch["src"]
            max_len = decoding.max_output_len(src.shape[1], cfg["max_len_a"], cfg["max_len_b"], cap)
            if cfg["beam_size"] > 1:
                ids = decoding.beam_search(self.model, src, self.bos_id, self.eos_id, self.pad_id, max_len,
                                           cfg["beam_size"], cfg["alpha"])
            else:
                ids = decoding.greedy(self.model, src, self.bos_id, self.eos_id, self.pad_id, max_len)
            return [self.detokenize(x) for x in ids]
        # decoder-only: prompt = source + BOS (seq2seq) or the batch's own prompt (LM tasks)
        if "src" in batch:
            seq, _, plen = prefix_lm_batch(batch["src"], batch["tgt"], self.pad_id)
            src_len = batch["src"].shape[1]
        else:
            seq, plen = batch["tgt"], batch["prompt_len"]
            src_len = int(plen.max())
        max_len = decoding.max_output_len(src_len, cfg["max_len_a"], cfg["max_len_b"], None)
        if cap:
            max_len = max(1, min(max_len, cap - int(plen.max())))
        ids = decoding.greedy_lm(self.model, seq, plen, self.eos_id, self.pad_id, max_len)
        return [self.detokenize(x) for x in ids]

    def _eval_end(self, prefix: str, suffix: str = "") -> dict[str, float]:
        acc = self._eval.pop(prefix, None)
        if acc is None:
            return {}
        tot = self._all_reduce([acc["nll"], acc["n"], acc["correct"]])
        nll, n, correct = tot
        out: dict[str, float] = {}
        if n:
            out[f"{prefix}/loss{suffix}"] = nll / n
            out[f"{prefix}/ppl{suffix}"] = math.exp(min(nll / n, 50.0))
            out[f"{prefix}/acc{suffix}"] = correct / n
        hyps, refs = self._gather_texts(acc["hyps"], acc["refs"])
        if refs:
            if "bleu" in self.seq_metrics:
                out[f"{prefix}/bleu{suffix}"] = float(sacrebleu.corpus_bleu(hyps, [refs]).score)
            if "exact_match" in self.seq_metrics:
                out[f"{prefix}/exact_match{suffix}"] = sum(h.strip() == r.strip() for h, r in zip(hyps, refs)) / len(refs)
        for key, val in out.items():
            self.log(key, val, sync_dist=False, rank_zero_only=False)
        return out

    def _all_reduce(self, values: list[float]) -> list[float]:
        """Sum ``values`` over distributed ranks (identity in a single process)."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.trainer is not None and self.trainer.world_size > 1:
            t = self.trainer.strategy.reduce(t, reduce_op="sum")
        return t.tolist()

    def _gather_texts(self, hyps: list[str], refs: list[str]) -> tuple[list[str], list[str]]:
        if self.trainer is None or self.trainer.world_size <= 1:
            return hyps, refs
        import torch.distributed as dist
        gathered: list = [None] * self.trainer.world_size
        dist.all_gather_object(gathered, (hyps, refs))
        all_h, all_r = [], []
        for h, r in gathered:
            all_h.extend(h)
            all_r.extend(r)
        return all_h, all_r

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        limit = self.val_decode_limit
        self._eval_step(batch, "val", decode=limit is None or batch_idx < limit)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, f"test#{dataloader_idx}", decode=True)

    def on_test_epoch_end(self) -> None:
        for i, name in enumerate(self.test_split_names):
            acc = self._eval.pop(f"test#{i}", None)
            if acc is None:
                continue
            self._eval["test"] = acc
            self._eval_end("test", "" if name == "test" else f"@{name}")

"""Corpus-level metrics reach every consumer as the exact float64 the module computes.

BLEU is sacrebleu's corpus BLEU; for the hypothesis "hello , world !" against "Hello, world!" it is
59.46035575..., which float32 would round to 59.46035385. Loss, perplexity, token accuracy and
exact match travel the same way and are checked the same way: through a real Lightning trainer
(callback metrics, validate/test results, the CSV log, the best-checkpoint score) and, end to end,
in the ``metrics.json`` of a ``run.py`` job.
"""

from __future__ import annotations

import csv
import json
import math

import lightning as L
import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from typing_extensions import override

from xformer.model import EncoderDecoder
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS = 0, 1, 2
HYPS = ["hello , world !", "the cat sat", "zwei"]
REFS = ["Hello, world!", "the cat sat on the mat", "zwei"]


def f32(x: float) -> float:
    return float(np.float32(x))


class FixedHypotheses(TransformerLitModule):
    """The real module, with decoding replaced by fixed strings (one per example id)."""

    @override
    def generate(self, batch, logits=None):
        return [HYPS[int(i)] for i in batch["idx"]]


def batches(n_examples: int):
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 30, (n_examples, 5), generator=g)
    tgt = torch.randint(3, 30, (n_examples, 6), generator=g)
    tgt[:, 0], tgt[:, -1] = BOS, EOS
    if n_examples > 1:  # a shorter target: padding in the batch
        tgt[1, 4:] = PAD
        tgt[1, 3] = EOS
    batch = {"src": src, "tgt": tgt, "idx": torch.arange(n_examples), "tgt_text": REFS[:n_examples]}
    return torch.utils.data.DataLoader([batch], batch_size=None, collate_fn=lambda b: b)


def reference(model, batch, hyps, refs) -> dict[str, float]:
    """The corpus metrics computed here, independently: sacrebleu, and token NLL from float64 sums."""
    with torch.no_grad():
        logits = model(batch["src"], batch["tgt"][:, :-1]).float()
    labels = batch["tgt"][:, 1:]
    mask = labels != PAD
    nll = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none", ignore_index=PAD)
    n = int(mask.sum())
    loss = math.fsum(nll.view(labels.shape).sum(1).double().tolist()) / n
    correct = int(((logits.argmax(-1) == labels) & mask).sum())
    return {
        "loss": loss,
        "ppl": math.exp(loss),
        "acc": correct / n,
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "exact_match": sum(h == r for h, r in zip(hyps, refs, strict=False)) / len(refs),
    }


def test_this_bleu_value_needs_float64():
    bleu = sacrebleu.corpus_bleu(["hello , world !"], [["Hello, world!"]]).score
    assert round(bleu, 7) == 59.4603558 and f32(bleu) != bleu  # float32 would round it


@pytest.mark.parametrize("n_examples", [1, 3])
def test_trainer_keeps_every_corpus_metric_exact(tmp_path, n_examples):
    torch.manual_seed(0)
    model = EncoderDecoder(30, 30, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    module = FixedHypotheses(
        model,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.0),
        lr_lambda=lambda _s: 1.0,
        label_smoothing=0.0,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        metrics=["bleu", "exact_match"],
    )
    data = batches(n_examples)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val/bleu", mode="max", save_top_k=1)
    trainer = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=CSVLogger(tmp_path, name="csv", version=""),
        callbacks=[ckpt],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=data, val_dataloaders=data)
    want = reference(model.eval(), next(iter(data)), HYPS[:n_examples], REFS[:n_examples])
    assert any(f32(v) != v for v in want.values())  # some value that float32 would change

    for name, value in want.items():
        assert float(trainer.callback_metrics[f"val/{name}"]) == value, name
    assert float(ckpt.best_model_score) == want["bleu"]
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/bleu")]
    for name, value in want.items():
        assert float(rows[-1][f"val/{name}"]) == value, name

    (validated,) = trainer.validate(module, dataloaders=data, verbose=False)
    (tested,) = trainer.test(module, dataloaders=data, verbose=False)
    for name, value in want.items():
        assert validated[f"val/{name}"] == value and tested[f"test/{name}"] == value, name


def test_metrics_json_holds_the_exact_test_metrics(tmp_path):
    """End to end: the test metrics of a run's metrics.json equal the module's own float64 values,
    recomputed here from the best checkpoint."""
    from hydra.utils import instantiate

    from tests.train.test_run import TINY, run
    from xformer.train.translate import load_checkpoint

    job = tmp_path / "job"
    res = run(
        [*TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", "logger=csv", f"hydra.run.dir={job}"], tmp_path
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((job / "metrics.json").read_text())
    model, _, cfg = load_checkpoint(summary["best"]["checkpoint"])
    dm = instantiate(cfg.data, cache_dir=str(tmp_path / "cache"))
    dm.setup("test")
    module = TransformerLitModule(
        model,
        optimizer=None,
        lr_lambda=None,
        pad_id=dm.pad_id,
        bos_id=dm.bos_id,
        eos_id=dm.eos_id,
        detokenize=dm.detokenize,
        metrics=dm.metrics,
        decode={k: cfg.decode[k] for k in ("beam_size", "alpha", "max_len_a", "max_len_b")},
    )
    module.eval()
    want: dict[str, float] = {}
    for name, loader in zip(dm.test_split_names, dm.test_dataloader(), strict=False):
        with torch.no_grad():
            for batch in loader:
                module._eval_step(batch, "test", decode=True)
        want.update(module._eval_end("test", "" if name == "test" else f"@{name}"))
    assert {"test/loss", "test/ppl", "test/acc", "test/exact_match", "test/loss@long"} <= set(want)
    assert any(f32(v) != v for v in want.values())
    for key, value in want.items():
        assert summary["metrics"][key] == value, key
    # the best score is the exact best of the logged validation values (the CSV log keeps them exact too)
    with open(job / "csv" / "metrics.csv") as f:
        logged = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert summary["best"]["metric"] == "val/loss" and len(logged) >= 2
    assert summary["best"]["value"] == min(logged) and f32(min(logged)) != min(logged)

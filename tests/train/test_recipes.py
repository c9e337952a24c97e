"""Modern training recipes as config groups: AdamW's weight-decay groups, the schedules
against their formulas, schedule swaps without stale keys, ``model.bias=false``, the GPT-2 init, and
the LM vocabulary / positions of nanoGPT's ``shakespeare_char``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import nn

from xformer.config.check import check_config_first as check_rules
from xformer.model import GELUFFN, ConfigError, DecoderOnly, Learned, PreNorm
from xformer.model.init import GPT2, residual_projections
from xformer.train import schedules
from xformer.train.optim import DecayGroups

REPO = Path(__file__).resolve().parents[2]


def _compose(overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=overrides)


def _gpt(bias=True, init=None, d_model=32, layers=2, vocab=50, **kw):
    return DecoderOnly(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=4,
        d_ff=4 * d_model,
        n_encoder_layers=0,
        n_decoder_layers=layers,
        dropout=0.0,
        max_len=16,
        pad_id=None,
        norm=PreNorm,
        pe=Learned,
        ffn=GELUFFN,
        bias=bias,
        init=init,
        **kw,
    )


# -- AdamW parameter groups ----------------------------------------------------------------------
def _linear_weights(model):
    return {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not model.head}


def test_adamw_decays_matmul_weights_only_by_default():
    model = _gpt()
    opt = instantiate(_compose(["optim=adamw"]).optim.optimizer)
    groups = opt.groups(model)
    decay, no_decay = set(groups[0]["names"]), set(groups[1]["names"])
    assert decay == _linear_weights(model)  # q/k/v/out and both FFN matrices of every block
    # norms, biases, the (tied) token embedding and the learned positions are not decayed
    assert "tgt_embed.weight" in no_decay and "decoder.pe.weight" in no_decay
    assert all(
        n.endswith(".bias") or "norm" in n or n in ("tgt_embed.weight", "decoder.pe.weight") for n in no_decay
    ), no_decay
    built = opt(model)
    assert [g["weight_decay"] for g in built.param_groups] == [0.1, 0.0]
    assert isinstance(built, torch.optim.AdamW)
    n_params = sum(len(g["params"]) for g in built.param_groups)
    assert n_params == len(list(model.parameters()))  # every tensor once (the tied head is the embedding)


def test_adamw_with_decay_embeddings_is_nanogpts_rule():
    model = _gpt()
    decay, no_decay = (
        set(g["names"]) for g in DecayGroups(torch.optim.AdamW, 0.1, decay_embeddings=True).groups(model)
    )
    # nanoGPT's configure_optimizers: every parameter with dim >= 2 decays, the rest does not
    assert decay == {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert no_decay == {n for n, p in model.named_parameters() if p.dim() < 2}


def test_decay_is_applied_to_the_decayed_group_only():
    torch.manual_seed(0)
    model = _gpt()
    opt = DecayGroups(lambda g: torch.optim.AdamW(g, lr=0.1), weight_decay=0.5)(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradients: only decoupled weight decay moves a parameter, by lr * wd * p
    decayed = _linear_weights(model)
    for n, p in model.named_parameters():
        expect = before[n] * (1 - 0.1 * 0.5) if n in decayed else before[n]
        torch.testing.assert_close(p.detach(), expect)


def test_weight_decay_must_be_non_negative():
    """The range is DecayGroups' annotation; the line names the key the value came from."""
    cfg = _compose(["optim=adamw", "optim.weight_decay=-0.1"])
    with pytest.raises(
        ConfigError, match=r"^optim.optimizer.weight_decay=-0.1 \(from \$\{optim.weight_decay\}\): must"
    ):
        check_rules(cfg)


# -- schedules against their formulas ------------------------------------------------------------
def _lrs(fn, steps, lr=1.0):
    """The learning rate the optimizer actually uses at each of ``steps`` optimizer steps."""
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_inverse_sqrt_is_the_papers_formula():
    d_model, warm = 512, 40
    lr = d_model**-0.5 * warm**-0.5  # the peak rate of §5.3's schedule
    got = _lrs(schedules.inverse_sqrt(warm), 200, lr)
    # Vaswani et al. 2017 eq. 3 at step_num = s (1-based)
    ref = [d_model**-0.5 * min(s**-0.5, s * warm**-1.5) for s in range(1, 201)]
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64))


def _nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT's train.py get_lr, as published (the reference)."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_cosine_is_nanogpts_curve_one_step_earlier():
    lr, warm, total, floor = 1e-3, 100, 2000, 0.1
    got = _lrs(schedules.cosine(warm, total, floor), 2300, lr)
    # warm-up: s / warmup at 1-based step s; then nanoGPT's curve at it = s (its iteration counts from 0)
    for k in range(warm):
        assert got[k] == pytest.approx(lr * (k + 1) / warm, rel=1e-12)
    for k in range(warm - 1, 2300):
        assert got[k] == pytest.approx(_nanogpt_get_lr(k + 1, lr, warm, total, floor * lr), rel=1e-12), k
    assert got[total - 1] == pytest.approx(floor * lr) and got[-1] == pytest.approx(floor * lr)


def test_linear_and_constant_against_their_formulas():
    warm, total, floor = 10, 110, 0.25
    got = _lrs(schedules.linear(warm, total, floor), 150)
    for k, v in enumerate(got):
        s = k + 1
        ref = s / warm if s <= warm else max(floor, 1 - (1 - floor) * (s - warm) / (total - warm))
        assert v == pytest.approx(ref, rel=1e-12), k
    got = _lrs(schedules.constant(warm), 50, lr=3.0)
    assert got == pytest.approx([3.0 * min(1.0, (k + 1) / warm) for k in range(50)], rel=1e-12)
    assert _lrs(schedules.constant(0), 3) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "name,params",
    [
        ("inverse_sqrt", {"warmup_steps", "decay_from"}),
        ("cosine", {"warmup_steps", "total_steps", "floor"}),
        ("linear", {"warmup_steps", "total_steps", "floor"}),
        ("constant", {"warmup_steps"}),
    ],
)
def test_selecting_a_schedule_replaces_its_node(name, params):
    for optim in ("adam", "adamw"):
        cfg = _compose([f"optim={optim}", f"optim/scheduler={name}"])
        node = cfg.optim.scheduler
        assert set(node) - {"_target_"} == params, (optim, name, list(node))
        assert node._target_ == f"xformer.train.schedules.{name}"
        check_rules(cfg)  # no stale key, values accepted
        fn = instantiate(node)
        assert 0 < fn(0) <= 1


def test_a_stale_schedule_key_is_one_error_line():
    # swapping by overriding the target keeps inverse_sqrt's decay_from
    cfg = _compose(["optim.scheduler._target_=xformer.train.schedules.linear", "+optim.scheduler.total_steps=10"])
    with pytest.raises(ConfigError) as err:
        check_rules(cfg)
    msg = str(err.value)
    assert msg.startswith("optim.scheduler.decay_from: not a parameter of xformer.train.schedules.linear")
    assert "Fix: drop it" in msg and "\n" not in msg
    bad = _compose(["optim/scheduler=cosine", "optim.scheduler.floor=1.5"])
    floor = r"^optim.scheduler.floor=1.5: must be <= 1\. Fix: give a number in \[0, 1\] "
    floor += r"\(xformer.train.schedules.cosine floor\)$"
    with pytest.raises(ConfigError, match=floor):
        check_rules(bad)


def test_claim_sweeps_keep_their_linear_schedule():
    cfg = _compose(["experiment=claims/c1_ffn_ratio", "scale=cpu"])
    assert cfg.optim.scheduler._target_ == "xformer.train.schedules.linear"
    assert "decay_from" not in cfg.optim.scheduler and cfg.optim.scheduler.floor == 0.0


# -- model.bias and the init group -----------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides",
    [
        ["model/arch=encoder_decoder", "model/norm=post"],
        ["model/arch=decoder_only", "model/norm=pre", "model/pe=learned", "model/ffn=gelu"],
        ["model/arch=encoder_only", "model/norm=sandwich", "model/ffn=swiglu"],
        ["model/arch=encoder_decoder", "model/norm=pre_rms", "model/pe=t5", "model.tie_embeddings=false"],
    ],
)
def test_bias_false_leaves_no_bias_parameter(overrides):
    cfg = _compose([*overrides, "model.d_model=32", "model.n_heads=4", "model.bias=false"])
    model = instantiate(cfg.model, src_vocab_size=40, tgt_vocab_size=40, pad_id=0)
    names = [n for n, _ in model.named_parameters()]
    assert not [n for n in names if "bias" in n.split(".")[-1] and "pe" not in n.split(".")], names
    assert all(getattr(m, "bias", None) is None for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm)))
    with_bias = instantiate(
        _compose([*overrides, "model.d_model=32", "model.n_heads=4"]).model,
        src_vocab_size=40,
        tgt_vocab_size=40,
        pad_id=0,
    )
    assert any(isinstance(m, nn.Linear) and m.bias is not None for m in with_bias.modules())
    x = torch.randint(4, 40, (2, 6))
    out = model(x, x) if "model/arch=encoder_decoder" in overrides else model(x)
    assert torch.isfinite(out).all()


def test_gpt2_init_standard_deviations():
    torch.manual_seed(0)
    layers, d = 4, 256
    model = _gpt(bias=True, init=GPT2(), d_model=d, layers=layers, vocab=2000)
    resid = {id(lin.weight) for lin, _ in residual_projections(model)}
    assert len(resid) == 2 * layers  # W^O and the FFN's second matrix of every block
    for n, m in model.named_modules():
        if isinstance(m, nn.Linear) and m is not model.head:
            want = 0.02 / math.sqrt(2 * layers) if id(m.weight) in resid else 0.02
            assert m.weight.std().item() == pytest.approx(want, rel=0.05), n
            assert m.weight.mean().abs().item() < 0.1 * want
            assert torch.equal(m.bias, torch.zeros_like(m.bias)), n
        elif isinstance(m, nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and torch.equal(m.bias, torch.zeros_like(m.bias))
    assert model.tgt_embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.decoder.pe.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert model.embed_scale == 1.0 and model.head.weight is model.tgt_embed.weight


def test_xavier_default_keeps_the_papers_init_and_embedding_scale():
    torch.manual_seed(0)
    model = _gpt(d_model=256, layers=2, vocab=2000)
    assert model.embed_scale == math.sqrt(256)
    for n, m in model.named_modules():
        if isinstance(m, nn.Linear) and m is not model.head:
            fan_out, fan_in = m.weight.shape
            bound = math.sqrt(6 / (fan_in + fan_out))  # Glorot & Bengio 2010, uniform
            assert m.weight.abs().max().item() <= bound
            assert m.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05), n
    assert model.tgt_embed.weight.std().item() == pytest.approx(256**-0.5, rel=0.05)


# -- the LM's vocabulary and positions --------------------------------------------------------------
def test_lm_needs_block_size_positions_not_one_more():
    class LM:  # what a window LM data module reports: windows of block_size + 1 tokens
        task, max_src_len, max_tgt_len = "lm", 0, 65

    assert _gpt().positions_needed(LM()) == 64


def test_shakespeare_char_is_nanogpts_vocabulary_and_split(shared_data):
    from xformer.data.shakespeare_char import NO_TOKEN, ShakespeareCharDataModule

    root = shared_data / "tinyshakespeare"
    if not (root / "input.txt").is_file():
        pytest.skip(f"{root}/input.txt not found")
    dm = ShakespeareCharDataModule(root=str(root), block_size=64, batch_size=12, val_estimate_batches=3)
    dm.setup("fit")
    text = (root / "input.txt").read_text(encoding="utf-8")
    chars = sorted(set(text))
    assert dm.tgt_vocab_size == len(chars)  # no special tokens
    n = int(len(text) * 0.9)  # nanoGPT's prepare.py
    assert len(dm.train_ids) == n and len(dm.val_ids) == len(text) - n
    assert dm.tokenizer.decode(dm.val_ids[:200].tolist()) == text[n : n + 200]
    assert dm.val_ids.tolist()[:50] == [chars.index(c) for c in text[n : n + 50]]
    assert dm.pad_id == NO_TOKEN and dm.test_split_names == ["val"]

    # the estimate: 3 batches of 12 distinct random val windows, the same at every validation
    batches = [b for b in dm.val_dataloader()]
    again = [b for b in dm.val_dataloader()]
    assert len(batches) == 3 and all(b["tgt"].shape == (12, 65) for b in batches)
    assert all(torch.equal(a["tgt"], b["tgt"]) for a, b in zip(batches, again, strict=False))
    starts = torch.cat([b["idx"] for b in batches]).tolist()
    assert len(set(starts)) == 36 and starts != sorted(starts)
    val = torch.as_tensor(dm.val_ids)
    for b in batches:
        for s, row in zip(b["idx"].tolist(), b["tgt"], strict=False):
            assert torch.equal(row, val[s : s + 65])
    full = dm.test_dataloader()[0]
    assert sum(len(b["idx"]) for b in full) == (len(dm.val_ids) - 1) // 64  # the whole contiguous pass


def test_preset_is_nanogpts_cpu_recipe():
    cfg = _compose(["experiment=shakespeare_char_cpu"])
    m, o, t = cfg.model, cfg.optim, cfg.trainer
    assert (m.n_decoder_layers, m.n_heads, m.d_model, m.max_len, m.dropout, m.bias) == (4, 4, 128, 64, 0.0, False)
    assert (cfg.data.block_size, cfg.data.batch_size, cfg.data.val_estimate_batches) == (64, 12, 20)
    assert o.optimizer.optimizer._target_ == "torch.optim.AdamW" and list(o.optimizer.optimizer.betas) == [0.9, 0.99]
    assert (o.lr, o.weight_decay, o.warmup_steps, o.optimizer.decay_embeddings) == (1e-3, 0.1, 100, True)
    assert o.scheduler._target_.endswith(".cosine") and o.scheduler.floor * o.lr == pytest.approx(1e-4)
    assert (t.max_steps, o.scheduler.total_steps, t.val_check_interval, t.gradient_clip_val) == (2000, 2000, 250, 1.0)
    assert cfg.loss.label_smoothing == 0.0 and cfg.model.init._target_.endswith("GPT2")
    check_rules(cfg)


def test_preset_model_computes_nanogpts_function():
    """The preset's model with weights copied into a plain-PyTorch nanoGPT (xformer.bench.nanogpt.PlainGPT,
    written after nanoGPT's model.py) gives the same logits: same architecture, not only the same size."""
    from xformer.bench.nanogpt import PlainGPT

    cfg = _compose(["experiment=shakespeare_char_cpu"])
    torch.manual_seed(0)
    ours = instantiate(cfg.model, src_vocab_size=65, tgt_vocab_size=65, pad_id=-100).eval()
    ref = PlainGPT(65, 64, 128, 4, 4).eval()
    with torch.no_grad():
        ref.wte.weight.copy_(ours.tgt_embed.weight)
        ref.wpe.weight.copy_(ours.decoder.pe.weight)
        for blk, layer in zip(ref.blocks, ours.decoder.layers, strict=False):
            blk.ln_1.weight.copy_(layer.res_attn.norm.weight)
            blk.ln_2.weight.copy_(layer.res_ffn.norm.weight)
            blk.c_attn.weight.copy_(layer.self_attn.in_proj.weight)
            blk.attn_proj.weight.copy_(layer.self_attn.out_proj.weight)
            blk.c_fc.weight.copy_(layer.ffn.linear1.weight)
            blk.mlp_proj.weight.copy_(layer.ffn.linear2.weight)
        ref.ln_f.weight.copy_(ours.decoder.final_norm.weight)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters()) == 804_096
    ids = torch.randint(0, 65, (3, 64))
    torch.testing.assert_close(ours(ids), ref(ids), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_preset_trains_through_run_py_and_refuses_a_stale_key(tmp_path):
    """experiment=shakespeare_char_cpu end to end for a few steps (loss falls, the estimate and the
    whole-split pass are logged, no plain test/ keys), and a stale schedule key is one error line."""
    import csv
    import json
    import os
    import subprocess
    import sys

    root = Path("/work/shared/data/tinyshakespeare")
    if not (root / "input.txt").is_file():
        root = REPO.parent / "shared" / "data" / "tinyshakespeare"
    if not (root / "input.txt").is_file():
        pytest.skip("tiny-shakespeare input.txt not found")
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    base = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=shakespeare_char_cpu",
        f"data.root={root}",
        "trainer.enable_progress_bar=false",
    ]
    bad = subprocess.run(
        [*base, "optim.scheduler._target_=xformer.train.schedules.constant"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert bad.returncode == 2
    err = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    # one error line per stale key of the cosine schedule (the config check reports every problem)
    assert len(err) == 2, bad.stderr[-2000:]
    for key, line in zip(("total_steps", "floor"), err, strict=True):
        assert line.startswith(f"error: optim.scheduler.{key} (optim/scheduler/cosine.yaml"), line
        assert "not a parameter of xformer.train.schedules.constant" in line and "Fix:" in line

    out = tmp_path / "job"
    res = subprocess.run(
        [
            *base,
            "trainer.max_steps=60",
            "trainer.val_check_interval=30",
            "optim.scheduler.total_steps=60",
            "optim.warmup_steps=10",
            "data.val_estimate_batches=2",
            "trainer.log_every_n_steps=10",
            f"hydra.run.dir={out}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    rows = list(csv.DictReader((out / "csv" / "metrics.csv").open()))
    val = [float(r["val/loss"]) for r in rows if r.get("val/loss")]
    assert len(val) == 2 and val[1] < val[0] < math.log(65)  # learning, below the uniform guess
    assert "test/loss@val" in metrics and not any(k.startswith("test/loss") and "@" not in k for k in metrics)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["optim.optimizer.weight_decay=-0.1"], r"^optim.optimizer \(torch.optim.Adam\): Invalid weight_decay value"),
        (["optim=adamw", "optim.optimizer.optimizer.betas=[0.9,1.5]"], r"^optim.optimizer \(.*\): Invalid beta param"),
        (["optim=adamw", "optim.optimizer.optimizer.eps=-1"], r"^optim.optimizer \(.*\): Invalid epsilon value"),
        (["optim.optimizer.betas=[0.9]"], r"^optim.optimizer.betas=\[0.9\]: must be 2 values\. .*\(torch.optim.Adam"),
        (["optim.optimizer.lr=-1"], r"^optim.optimizer \(torch.optim.Adam\): Invalid learning rate: -1"),
    ],
)
def test_a_bad_optimizer_argument_is_caught_before_anything_is_built(overrides, message):
    """torch checks betas, eps and weight decay when the optimizer is built; stage 2 builds it for a
    one-weight model, so its own message comes before the data and the real model are built."""
    with pytest.raises(ConfigError, match=message):
        check_rules(_compose(overrides))


@pytest.mark.parametrize("overrides", [["optim=adamw"], ["optim=adam"], ["experiment=shakespeare_char_cpu"]])
def test_shipped_optimizer_settings_pass_the_check(overrides):
    check_rules(_compose(overrides))

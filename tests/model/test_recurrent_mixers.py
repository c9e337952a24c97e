"""The layer types self-attention replaced (``model/mixer=lstm``, ``model/mixer=conv``).

Each is checked against an independent reference (``nn.LSTM`` run row by row on the unpadded
sequence; the convolution written out as a float64 sum over taps), and through the model: pads
appended to a row leave its real outputs unchanged, cached decoding (greedy and beam) equals full
recomputation, no output sees the future, both train, their parameters are counted as the mixing
sub-layer and ``model.param_budget`` holds the count equal across mixers.
"""

from __future__ import annotations

import pytest
import torch

from xformer.model import (
    ALiBi,
    CausalAttention,
    ConfigError,
    ConvMixer,
    ConvMixing,
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    Learned,
    LocalAttention,
    LSTMMixer,
    MultiHeadMixer,
    NoPE,
    RecurrentMixing,
    RoPE,
    T5RelativeBias,
)
from xformer.model.decoding import beam_search, greedy, greedy_recompute

from .test_mixer import SIZES, D, H, randomise  # the mixers' shared sizes and weight randomiser

MIXERS = {
    "lstm": LSTMMixer,
    "conv": lambda: ConvMixer(kernel=3),
    "conv_dilated": lambda: ConvMixer(kernel=2, dilation_growth=2),
}


# -- the layers against independent references ----------------------------------------------------
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_layer_equals_nn_lstm_on_each_unpadded_row(bidirectional):
    torch.manual_seed(0)
    layer = randomise(RecurrentMixing(D, bidirectional=bidirectional)).double()
    x = torch.randn(3, 7, D, dtype=torch.float64)
    lengths = [7, 4, 2]
    kpm = torch.arange(7)[None, :] >= torch.tensor(lengths)[:, None]
    out = layer(x, kpm)
    for b, n in enumerate(lengths):
        ref, _ = layer.rnn(x[b : b + 1, :n])  # the same weights, the row alone, no padding at all
        torch.testing.assert_close(out[b, :n], ref[0], rtol=1e-12, atol=1e-12)
        assert (out[b, n:] == 0).all()


def conv_reference(layer: ConvMixing, x: torch.Tensor) -> torch.Tensor:
    """The layer written out in float64: y_t = Σ_j w_j · h_{t + (j - left)·d} with zeros outside."""
    w_in, b_in = layer.in_proj.weight.double(), layer.in_proj.bias.double()
    a, g = (x @ w_in.T + b_in).chunk(2, dim=-1)
    h = a * torch.sigmoid(g)  # GLU (Dauphin et al. 2017)
    k, d, t = layer.kernel, layer.dilation, x.shape[1]
    left = (k - 1) * d if layer.causal else ((k - 1) * d) // 2
    w = layer.conv.weight.double()[:, 0, :]  # (D, k)
    y = torch.zeros_like(h)
    for i in range(t):
        for j in range(k):
            src = i - left + j * d
            if 0 <= src < t:
                y[:, i] += w[:, j] * h[:, src]
    y = y + layer.conv.bias.double()
    return y @ layer.out_proj.weight.double().T + layer.out_proj.bias.double()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kernel,dilation", [(3, 1), (4, 2), (1, 1), (2, 4)])
def test_conv_layer_equals_its_sum_over_taps(causal, kernel, dilation):
    torch.manual_seed(1)
    layer = randomise(ConvMixing(D, kernel, dilation, causal=causal)).double()
    x = torch.randn(2, 9, D, dtype=torch.float64)
    torch.testing.assert_close(layer(x), conv_reference(layer, x), rtol=1e-10, atol=1e-12)


def test_parameter_counts_are_the_documented_formulas():
    assert sum(p.numel() for p in RecurrentMixing(D).parameters()) == 8 * D * D + 8 * D
    assert sum(p.numel() for p in RecurrentMixing(D, bidirectional=True).parameters()) == 2 * 4 * (
        D * (D // 2) + (D // 2) ** 2 + 2 * (D // 2)
    )
    for k in (1, 3, 5):
        assert sum(p.numel() for p in ConvMixing(D, k).parameters()) == 3 * D * D + (k + 4) * D


# -- through the model ---------------------------------------------------------------------------
def build(cls, name, **kw):
    return cls(20, 20, **SIZES, mixer=MIXERS[name](), **kw).double().eval()


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
def test_appended_pads_leave_real_outputs_unchanged(name, cls):
    """Encoder (bidirectional / centred) and decoder (causal): the same rows with 3 pads appended."""
    torch.manual_seed(2)
    model = randomise(build(cls, name), 0.2)
    seq = torch.randint(3, 20, (2, 6))
    padded = torch.cat((seq, torch.zeros(2, 3, dtype=torch.long)), 1)
    if cls is EncoderDecoder:
        tgt = torch.randint(3, 20, (2, 5))
        short = model(seq, tgt)
        long_src = model(padded, tgt)  # pads in the source: the encoder and cross-attention ignore them
        torch.testing.assert_close(long_src, short, rtol=1e-10, atol=1e-10)
        tgt_pad = torch.cat((tgt, torch.zeros(2, 3, dtype=torch.long)), 1)
        torch.testing.assert_close(model(seq, tgt_pad)[:, :5], short, rtol=1e-10, atol=1e-10)
    else:
        torch.testing.assert_close(model(padded)[:, :6], model(seq), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", list(MIXERS))
def test_no_future_leak(name):
    """Changing tokens from position 4 on leaves every earlier output of the decoder unchanged, and a
    change at position 3 does change position 3's (the test can fail)."""
    torch.manual_seed(3)
    model = randomise(build(DecoderOnly, name), 0.2)
    seq = torch.randint(3, 20, (2, 8))
    other = seq.clone()
    other[:, 4:] = (other[:, 4:] + 5) % 17 + 3
    torch.testing.assert_close(model(other)[:, :4], model(seq)[:, :4], rtol=0, atol=0)
    moved = seq.clone()
    moved[:, 3] = (moved[:, 3] + 1) % 17 + 3
    assert not torch.allclose(model(moved)[:, 3], model(seq)[:, 3])


@pytest.mark.parametrize("name", list(MIXERS))
def test_cached_decoding_equals_recomputation(name):
    """Token by token (after a 3-token prefix) through the fixed-size state = the full forward."""
    torch.manual_seed(4)
    model = randomise(build(DecoderOnly, name), 0.2)
    seq = torch.randint(3, 20, (2, 9))
    cache = model.new_cache()
    steps = [model(seq[:, :3], cache=cache)] + [model(seq[:, i : i + 1], cache=cache) for i in range(3, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), model(seq), rtol=1e-10, atol=1e-10)
    assert cache.size == 9


class Recompute:
    """An encoder-decoder whose ``decode`` re-runs the whole target prefix without a cache: its
    "cache" keeps the token history and reorders it, so beam search through it is the no-cache
    reference of beam search through the model's own state."""

    class History:
        def __init__(self):
            self.tokens, self.size = None, 0

        def reorder(self, index):
            self.tokens = self.tokens.index_select(0, index)

    def __init__(self, model):
        self.model = model

    def encode(self, src, mask):
        return self.model.encode(src, mask)

    def new_cache(self, capacity=None):  # noqa: ARG002 - decoding's interface
        return self.History()

    def decode(self, tok, memory, memory_key_padding_mask=None, cache=None):
        cache.tokens = tok if cache.tokens is None else torch.cat((cache.tokens, tok), 1)
        cache.size = cache.tokens.shape[1]
        logits = self.model.decode(cache.tokens, memory, memory_key_padding_mask=memory_key_padding_mask)
        return logits[:, -1:]


@pytest.mark.parametrize("name", list(MIXERS))
def test_greedy_and_beam_with_the_state_equal_recomputation(name):
    torch.manual_seed(5)
    model = randomise(build(EncoderDecoder, name), 0.3)
    src = torch.randint(3, 20, (3, 6))
    src[1, 4:] = 0
    assert greedy(model, src, 1, 2, 0, 8) == greedy_recompute(model, src, 1, 2, 0, 8)
    for k in (1, 3):
        got = beam_search(model, src, 1, 2, 0, 8, beam_size=k)
        assert got == beam_search(Recompute(model), src, 1, 2, 0, 8, beam_size=k)
    assert beam_search(model, src, 1, 2, 0, 8, beam_size=1) == greedy(model, src, 1, 2, 0, 8)


def test_cross_attention_stays_attention_and_the_encoder_is_bidirectional():
    model = build(EncoderDecoder, "lstm")
    assert all(b.self_attn.rnn.bidirectional for b in model.encoder.layers)
    assert not any(b.self_attn.rnn.bidirectional for b in model.decoder.layers)
    assert all(type(b.cross_attn).__name__ == "CrossAttention" for b in model.decoder.layers)
    causal_enc = EncoderOnly(20, 20, **SIZES, mixer=LSTMMixer(), attention=CausalAttention())
    assert not any(b.self_attn.rnn.bidirectional for b in causal_enc.encoder.layers)
    conv = build(EncoderDecoder, "conv")
    assert not any(b.self_attn.causal for b in conv.encoder.layers)
    assert all(b.self_attn.causal for b in conv.decoder.layers)


def test_dilation_grows_per_layer_in_each_stack():
    model = EncoderDecoder(
        20,
        20,
        d_model=D,
        n_heads=H,
        n_encoder_layers=4,
        n_decoder_layers=3,
        mixer=ConvMixer(kernel=2, dilation_growth=2),
    )
    assert [b.self_attn.dilation for b in model.encoder.layers] == [1, 2, 4, 8]
    assert [b.self_attn.dilation for b in model.decoder.layers] == [1, 2, 4]
    flat = DecoderOnly(20, 20, d_model=D, n_heads=H, n_decoder_layers=3, mixer=ConvMixer(kernel=5))
    assert [b.self_attn.dilation for b in flat.decoder.layers] == [1, 1, 1]


def test_stacks_option_keeps_attention_on_the_other_stack():
    model = EncoderDecoder(20, 20, **SIZES, mixer=LSTMMixer(stacks="decoder"))
    assert all(type(b.self_attn).__name__ == "SelfAttention" for b in model.encoder.layers)
    assert all(isinstance(b.self_attn, RecurrentMixing) for b in model.decoder.layers)


@pytest.mark.parametrize("name", ["lstm", "conv"])
@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"pe": ALiBi}, "adds a bias to the attention scores"),
        ({"pe": T5RelativeBias}, "adds a bias to the attention scores"),
        ({"pe": RoPE}, "rotates queries and keys"),
        ({"attention": LocalAttention(3)}, "masks attention scores"),
    ],
    ids=["alibi", "t5", "rope", "local"],
)
def test_score_hooks_are_refused_with_one_line(name, kw, needle):
    cls = EncoderOnly if "attention" in kw else DecoderOnly
    with pytest.raises(ConfigError, match=needle) as err:
        cls(20, 20, **SIZES, mixer=MIXERS[name](), **kw)
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)


@pytest.mark.parametrize("pe", [NoPE, Learned, None])
def test_absolute_and_no_positions_are_accepted(pe):
    kw = {} if pe is None else {"pe": pe}
    for name in ("lstm", "conv"):
        DecoderOnly(20, 20, **SIZES, mixer=MIXERS[name](), **kw)


def test_bad_sizes_are_refused():
    with pytest.raises(ConfigError, match="even model.d_model"):
        EncoderOnly(20, 20, d_model=15, n_heads=3, n_encoder_layers=1, mixer=LSTMMixer())
    with pytest.raises(ValueError, match="kernel"):
        ConvMixer(kernel=0)


# training (loss falls): tests/model/test_mixer.py::test_every_mixer_trains covers lstm and conv


@pytest.mark.parametrize("name", ["lstm", "conv"])
def test_mixing_parameters_are_counted_as_the_mixing_sublayer(name):
    model = EncoderDecoder(20, 20, **SIZES, mixer=MIXERS[name]())
    counts = model.param_breakdown()
    mixing = sum(p.numel() for b in model.blocks() for p in b.self_attn.parameters())
    cross = sum(p.numel() for b in model.decoder.layers for p in b.cross_attn.parameters())
    assert counts["attention"] == mixing + cross and counts["other"] == 0
    assert counts["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("solves", ["d_ff", "d_model"])
def test_param_budget_holds_the_count_equal_across_mixers(solves):
    """``budget_solves=d_ff`` (C13's form: one width, the FFN takes up the difference) is exact to a
    few parameters; ``d_model`` to within one width step (2·n_heads) of the budget."""
    budget = 60_000
    totals = {}
    for name, mixer in (("mha", MultiHeadMixer()), ("lstm", LSTMMixer()), ("conv", ConvMixer(kernel=3))):
        model = DecoderOnly(
            30, 30, d_model=48, n_heads=4, n_decoder_layers=2, mixer=mixer, param_budget=budget, budget_solves=solves
        )
        totals[name] = model.param_breakdown()["total"]
        if solves == "d_model":  # the closest of the widths it may take (multiples of 2·n_heads)
            for d in (model.d_model - 8, model.d_model + 8):
                other = DecoderOnly(30, 30, d_model=d, n_heads=4, n_decoder_layers=2, mixer=mixer)
                assert abs(other.param_breakdown()["total"] - budget) >= abs(totals[name] - budget)
    if solves == "d_ff":
        assert all(abs(t - budget) / budget < 0.002 for t in totals.values()), totals
    # without the budget the three differ by far more than that
    plain = {
        n: DecoderOnly(30, 30, d_model=48, n_heads=4, n_decoder_layers=2, mixer=m).param_breakdown()["total"]
        for n, m in (("mha", MultiHeadMixer()), ("lstm", LSTMMixer()))
    }
    assert plain["lstm"] > 1.3 * plain["mha"]


@pytest.mark.parametrize("name", ["lstm", "conv"])
def test_bf16_autocast_and_no_bias(name):
    torch.manual_seed(6)
    model = EncoderDecoder(20, 20, **SIZES, mixer=MIXERS[name](), bias=False)
    assert not [n for n, p in model.named_parameters() if n.endswith("bias") or "bias_" in n]
    src, tgt = torch.randint(3, 20, (2, 7)), torch.randint(3, 20, (2, 5))
    ref = model(src, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(src, tgt)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    out.float().sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert (out.float() - ref).abs().max() < 0.25 * ref.abs().max()


# -- through the driver: every precision (here) and the distributed strategies (slow) -------------
@pytest.mark.parametrize(  # suite time: bf16-mixed in the fast set, the other precisions slow
    "precision",
    [
        pytest.param(p, marks=pytest.mark.slow) if p != "bf16-mixed" else p
        for p in ("32-true", "bf16-mixed", "16-mixed", "bf16-true")
    ],
)
@pytest.mark.parametrize("option", ["lstm", "conv"])
def test_new_mixers_train_under_every_precision(option, precision, tmp_path):
    import json

    from tests.gpu_path.test_precision_matrix import TINY, _cfg
    from xformer.jobs.context import job_context
    from xformer.jobs.driver import run as run_job

    cfg = _cfg([*TINY, f"model/mixer={option}", f"trainer.precision={precision}"], tmp_path)
    run_job(cfg, job_context(cfg))
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "finished" and m["global_step"] == 2
    assert m["config"]["model"]["mixer"]["_target_"].endswith({"lstm": "LSTMMixer", "conv": "ConvMixer"}[option])
    assert all(v == v for v in m["metrics"].values())


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["ddp", "fsdp"])
@pytest.mark.parametrize("option", ["lstm", "conv"])
def test_new_mixers_train_under_ddp_and_fsdp(option, trainer, tmp_path):
    from tests.scaling.common import TINY, fail_msg, metrics, run_py

    res = run_py(
        [
            *TINY,
            f"model/mixer={option}",
            f"trainer={trainer}",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "logger=none",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        cwd=tmp_path,
        tmp_path=tmp_path,
        timeout=400,
    )
    assert res.returncode == 0, fail_msg(res)
    m = metrics(tmp_path / "job")
    assert m["status"] == "finished" and m["global_step"] == 4 and m["tokens_seen"] > 0
    assert m["params"]["attention"] > 0 and "test/loss" in m["metrics"]


# -- precision: each mixer computes where its docstring says, its state included --------------------
AUTOCAST = [torch.bfloat16, torch.float16]  # bf16-mixed and 16-mixed on the CPU


def _lstm_pair(bidirectional):
    torch.manual_seed(7)
    layer = RecurrentMixing(32, bidirectional=bidirectional)
    ref = RecurrentMixing(32, bidirectional=bidirectional).double()
    ref.load_state_dict(layer.state_dict())
    return layer, ref


@pytest.mark.parametrize("dtype", AUTOCAST)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_under_autocast_runs_in_float32_against_float64(dtype, bidirectional):
    """Under CPU autocast the LSTM runs in its float32 weights: over 512 positions it stays within
    float32 rounding of a float64 recomputation, and its ``(h, c)`` state is float32."""
    layer, ref = _lstm_pair(bidirectional)
    x = torch.randn(2, 512, 32)
    mask = torch.zeros(2, 512, dtype=torch.bool)
    mask[1, 400:] = True
    expected = ref(x.double(), mask)
    cache = None if bidirectional else layer.new_cache()
    with torch.autocast("cpu", dtype=dtype):
        out = layer(x, mask, cache=cache)
    assert out.dtype == torch.float32
    assert (out.double() - expected).abs().max() < 1e-5
    if cache is not None:
        assert [s.dtype for s in cache.state] == [torch.float32, torch.float32]
        with torch.autocast("cpu", dtype=dtype):  # the state continues in float32
            nxt = layer(x[:, :1], torch.zeros(2, 513, dtype=torch.bool), cache=cache)
        ref_cache = ref.new_cache()
        ref(x.double(), cache=ref_cache)
        assert (nxt.double() - ref(x[:, :1].double(), cache=ref_cache)).abs().max() < 1e-5


def test_lstm_in_bf16_weights_keeps_a_bf16_state():
    """``bf16-true``: the weights are bf16, so the LSTM and its state are bf16 (its weights' dtype)."""
    layer, _ = _lstm_pair(False)
    layer = layer.bfloat16()
    cache = layer.new_cache()
    out = layer(torch.randn(2, 16, 32, dtype=torch.bfloat16), cache=cache)
    assert out.dtype == torch.bfloat16 and [s.dtype for s in cache.state] == [torch.bfloat16] * 2


def _causal_layers():
    from xformer.model.linear_attention import LinearSelfAttention

    torch.manual_seed(8)
    return {
        "lstm": (RecurrentMixing(32), lambda _: [torch.float32, torch.float32]),
        "conv": (ConvMixing(32, kernel=3, dilation=2), lambda dt: [dt]),
        "linear": (LinearSelfAttention(32, 4, 8, pattern=CausalAttention()), lambda _: [torch.float32] * 2),
    }


def _states(cache):
    s = cache.state
    return list(s) if isinstance(s, tuple) else [s]


@pytest.mark.parametrize("dtype", AUTOCAST)
@pytest.mark.parametrize("name", ["lstm", "conv", "linear"])
def test_mixer_state_under_autocast_is_documented_dtype_and_decodes_as_the_full_forward(name, dtype):
    """Each causal mixer's decoding state under bf16/fp16 autocast has its documented dtype (LSTM
    and linear-attention sums float32, the convolution's inputs in the autocast dtype it reads
    them in), and token-by-token decoding through it equals the full forward in the same autocast."""
    layer, state_dtypes = _causal_layers()[name]
    x = torch.randn(2, 40, 32)
    with torch.autocast("cpu", dtype=dtype):
        full = layer(x)
        cache = layer.new_cache()
        steps = [layer(x[:, :5], cache=cache)] + [layer(x[:, i : i + 1], cache=cache) for i in range(5, 40)]
    assert [s.dtype for s in _states(cache)] == state_dtypes(dtype)
    # float32 mixers agree to float32 rounding; the convolution to a few roundings of its own dtype
    # (its kernel blocks a 1-position input differently from a 40-position one)
    tol = 1e-5 if name != "conv" else 4 * torch.finfo(dtype).eps * full.float().abs().max().item()
    torch.testing.assert_close(torch.cat(steps, 1).float(), full.float(), rtol=0, atol=tol)

"""The attention mechanism as a config group (``model/mixer``).

* ``mha`` is the default layer: bitwise equal to its own math written with torch's functional ops;
* ``gqa`` with ``n_kv_heads = n_heads`` equals ``mha`` given the same weights, and ``mqa`` / ``gqa``
  match a float64 per-head reference, with a decoding cache that holds only the kv heads;
* ``linear`` matches its quadratic form written out (same ϕ), causal and not, with RoPE as in
  RoFormer §3.3, and its cached decoding (running sums) matches recomputation;
* every mechanism trains (loss falls), its parameters are counted as attention, and a pattern or
  scheme it cannot apply is refused with one line.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from xformer.model import (
    ALiBi,
    CausalAttention,
    ConfigError,
    ConvMixer,
    CrossAttention,
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    GroupedQueryMixer,
    LinearCrossAttention,
    LinearMixer,
    LinearSelfAttention,
    LocalAttention,
    LSTMMixer,
    Mixer,
    MultiHeadMixer,
    MultiQueryMixer,
    RoPE,
    SelfAttention,
    Sinusoidal,
    T5RelativeBias,
)
from xformer.model.decoding import greedy, greedy_recompute
from xformer.model.linear_attention import CHUNK, EPS

D, H = 16, 4
SIZES = dict(d_model=D, n_heads=H, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)


def randomise(module: nn.Module, std: float = 0.3) -> nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, std)
    return module


def padding(b: int, t: int) -> torch.Tensor:
    kpm = torch.zeros(b, t, dtype=torch.bool)
    kpm[1, t - 2 :] = True
    kpm[2, 3:] = True
    return kpm


# -- mha: unchanged ----------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_mha_is_bitwise_its_functional_math(causal):
    """The default mechanism runs exactly in_proj -> SDPA -> out_proj (multi-head attention's own ops)."""
    torch.manual_seed(0)
    mha = SelfAttention(D, H, D // H, pattern=CausalAttention() if causal else None).eval()
    x = torch.randn(3, 7, D)
    q, k, v = (
        t.view(3, 7, H, D // H).transpose(1, 2) for t in F.linear(x, mha.in_proj.weight, mha.in_proj.bias).chunk(3, -1)
    )
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref = F.linear(ref.transpose(1, 2).reshape(3, 7, D), mha.out_proj.weight, mha.out_proj.bias)
    assert torch.equal(mha(x), ref)


def test_default_mixer_is_mha_and_keeps_the_state_dict_layout():
    torch.manual_seed(0)
    default = EncoderDecoder(20, 20, **SIZES)
    torch.manual_seed(0)
    explicit = EncoderDecoder(20, 20, **SIZES, mixer=MultiHeadMixer())
    assert isinstance(default.mixer, MultiHeadMixer)
    sd = default.state_dict()
    assert sd.keys() == explicit.state_dict().keys()
    assert all(torch.equal(sd[k], explicit.state_dict()[k]) for k in sd)  # same seed, same weights
    assert sd["encoder.layers.0.self_attn.in_proj.weight"].shape == (3 * D, D)
    assert sd["decoder.layers.0.cross_attn.in_proj.weight"].shape == (3 * D, D)


# -- gqa / mqa ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly])
def test_gqa_with_as_many_kv_heads_as_heads_equals_mha(cls):
    torch.manual_seed(0)
    mha = cls(20, 20, **SIZES).eval()
    gqa = cls(20, 20, **SIZES, mixer=GroupedQueryMixer(), n_kv_heads=H).eval()
    gqa.load_state_dict(mha.state_dict())
    tgt = torch.randint(3, 20, (3, 6))
    tgt[1, 4:] = 0
    args = (torch.randint(3, 20, (3, 5)), tgt) if cls is EncoderDecoder else (tgt,)
    assert torch.equal(gqa(*args), mha(*args))


def gqa_reference(att, x, mem, blocked, kpm):
    """Float64 per-head loop: query head h reads kv head h // (H / H_kv)."""
    h, hkv, dh = att.n_heads, att.n_kv_heads, att.d_head
    w, b = att.in_proj.weight.double(), att.in_proj.bias.double()
    src = x if mem is None else mem
    q = x.double() @ w[: h * dh].T + b[: h * dh]
    k = src.double() @ w[h * dh : (h + hkv) * dh].T + b[h * dh : (h + hkv) * dh]
    v = src.double() @ w[(h + hkv) * dh :].T + b[(h + hkv) * dh :]
    outs = []
    for head in range(h):
        g = head // (h // hkv)
        s = q[..., head * dh : (head + 1) * dh] @ k[..., g * dh : (g + 1) * dh].transpose(-1, -2) / math.sqrt(dh)
        mask = torch.zeros_like(s, dtype=torch.bool)
        if blocked is not None:
            mask |= blocked
        if kpm is not None:
            mask |= kpm[:, None, :]
        s = s.masked_fill(mask, float("-inf"))
        outs.append(torch.softmax(s, -1) @ v[..., g * dh : (g + 1) * dh])
    return torch.cat(outs, -1) @ att.out_proj.weight.double().T + att.out_proj.bias.double()


@pytest.mark.parametrize("n_kv", [1, 2])
@pytest.mark.parametrize("kind", ["self", "causal", "cross"])
def test_mqa_and_gqa_match_a_float64_reference(n_kv, kind):
    torch.manual_seed(1)
    x, mem = torch.randn(3, 7, D, dtype=torch.float64), torch.randn(3, 5, D, dtype=torch.float64)
    if kind == "cross":
        att = randomise(CrossAttention(D, H, D // H, n_kv_heads=n_kv)).double()
        kpm = padding(3, 5)
        out, ref = att(x, mem, kpm), gqa_reference(att, x, mem, None, kpm)
    else:
        att = randomise(
            SelfAttention(D, H, D // H, n_kv_heads=n_kv, pattern=CausalAttention() if kind == "causal" else None)
        ).double()
        kpm = padding(3, 7)
        blocked = torch.ones(7, 7, dtype=torch.bool).triu(1) if kind == "causal" else None
        out, ref = att(x, kpm), gqa_reference(att, x, None, blocked, kpm)
    assert att.in_proj.weight.shape == ((H + 2 * n_kv) * (D // H), D)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


def test_mqa_mixer_builds_one_kv_head_and_refuses_more():
    model = EncoderDecoder(20, 20, **SIZES, mixer=MultiQueryMixer())
    for att in (model.encoder.layers[0].self_attn, model.decoder.layers[0].cross_attn):
        assert att.n_kv_heads == 1 and att.in_proj.weight.shape == ((H + 2) * (D // H), D)
    with pytest.raises(ConfigError, match="model.n_kv_heads=2"):
        EncoderDecoder(20, 20, **SIZES, mixer=MultiQueryMixer(), n_kv_heads=2)
    with pytest.raises(ConfigError, match="model.n_kv_heads=3: must divide"):
        EncoderDecoder(20, 20, **SIZES, mixer=GroupedQueryMixer(), n_kv_heads=3)
    with pytest.raises(ConfigError, match="only model/mixer=gqa uses it"):
        EncoderDecoder(20, 20, **SIZES, n_kv_heads=2)


def test_gqa_cache_holds_only_kv_heads_and_decodes_like_recompute():
    torch.manual_seed(0)
    model = EncoderDecoder(20, 20, **SIZES, mixer=GroupedQueryMixer(), n_kv_heads=2).eval()
    src = torch.randint(3, 20, (3, 6))
    src[2, 4:] = 0
    assert greedy(model, src, 1, 2, 0, 9) == greedy_recompute(model, src, 1, 2, 0, 9)
    cache = model.new_cache(8)
    memory = model.encode(src)
    model.decode(torch.ones(3, 1, dtype=torch.long), memory, src == 0, cache=cache)
    assert cache.self_attn[0].k.shape[1] == 2 and cache.cross_attn[0].k.shape[1] == 2  # kv heads, not 4


def test_mixer_serves_only_the_chosen_stack():
    model = EncoderDecoder(20, 20, **SIZES, mixer=GroupedQueryMixer(stacks="decoder"), n_kv_heads=1)
    assert model.encoder.layers[0].self_attn.n_kv_heads == H
    assert model.decoder.layers[0].self_attn.n_kv_heads == 1 == model.decoder.layers[0].cross_attn.n_kv_heads
    model = EncoderDecoder(20, 20, **SIZES, mixer=LinearMixer(stacks="encoder"))
    assert isinstance(model.encoder.layers[0].self_attn, LinearSelfAttention)
    assert isinstance(model.decoder.layers[0].self_attn, SelfAttention)


# -- linear -------------------------------------------------------------------------------------------
def phi(t):
    return F.elu(t) + 1


def linear_reference(att, x, mem, causal, kpm, rope=None):
    """The quadratic form written out in float64: w_ij = ϕ(q_i)·ϕ(k_j) / Σ_j' ϕ(q_i)·ϕ(k_j') over the
    visible keys; with RoPE the numerator's features are rotated (RoFormer eq. 19)."""
    h, dh = att.n_heads, att.d_head
    w, b = att.in_proj.weight.double(), att.in_proj.bias.double()
    src = x if mem is None else mem
    bsz, t, _ = x.shape
    s = src.shape[1]

    def split(y):
        return y.view(bsz, -1, h, dh).transpose(1, 2)

    q = phi(split(x.double() @ w[: h * dh].T + b[: h * dh]))
    k = phi(split(src.double() @ w[h * dh : 2 * h * dh].T + b[h * dh : 2 * h * dh]))
    v = split(src.double() @ w[2 * h * dh :].T + b[2 * h * dh :])
    qn, kn = q, k
    if rope is not None:
        qn, kn = rope.rotate(q, torch.arange(t)), rope.rotate(k, torch.arange(s))
    visible = torch.ones(bsz, 1, t, s, dtype=torch.bool)
    if causal:
        visible &= torch.ones(t, s, dtype=torch.bool).tril()
    if kpm is not None:
        visible &= ~kpm[:, None, None, :]
    num_w = (qn @ kn.transpose(-1, -2)) * visible
    den = ((q @ k.transpose(-1, -2)) * visible).sum(-1, keepdim=True)
    out = (num_w @ v) / (den + EPS)
    out = out.transpose(1, 2).reshape(bsz, t, h * dh)
    return out @ att.out_proj.weight.double().T + att.out_proj.bias.double()


@pytest.mark.parametrize("t", [7, CHUNK * 2 + 9])  # one chunk, several chunks of the causal form
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pe", [None, "rope"])
def test_linear_attention_matches_its_quadratic_form(causal, pe, t):
    torch.manual_seed(2)
    rope = RoPE(D, H, D // H) if pe else None
    att = randomise(
        LinearSelfAttention(D, H, D // H, pattern=CausalAttention() if causal else None, pos_embeddings=rope)
    ).double()
    x = torch.randn(3, t, D, dtype=torch.float64)
    kpm = padding(3, t)
    torch.testing.assert_close(att(x, kpm), linear_reference(att, x, None, causal, kpm, rope), rtol=1e-9, atol=1e-11)


def test_linear_cross_attention_matches_its_quadratic_form():
    torch.manual_seed(3)
    att = randomise(LinearCrossAttention(D, H, D // H)).double()
    x, mem = torch.randn(3, 4, D, dtype=torch.float64), torch.randn(3, 6, D, dtype=torch.float64)
    kpm = padding(3, 6)
    torch.testing.assert_close(att(x, mem, kpm), linear_reference(att, x, mem, False, kpm), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("pe", [None, "rope"])
def test_linear_cached_decoding_matches_recompute(pe):
    """Token by token through the running sums (and a 3-token chunk) = the full causal forward."""
    torch.manual_seed(4)
    kw = {"pe": RoPE} if pe else {}
    model = DecoderOnly(20, 20, **SIZES, mixer=LinearMixer(), **kw).double().eval()
    seq = torch.randint(3, 20, (2, 9))
    full = model(seq)
    cache = model.new_cache()
    steps = [model(seq[:, :3], cache=cache)] + [model(seq[:, i : i + 1], cache=cache) for i in range(3, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-9, atol=1e-10)
    assert cache.size == 9 and cache.self_attn[0].state[0].shape == (2, H, D // H, D // H)  # fixed size


def test_linear_encoder_decoder_greedy_and_beam_with_cache():
    torch.manual_seed(5)
    model = EncoderDecoder(20, 20, **SIZES, mixer=LinearMixer()).double().eval()
    src = torch.randint(3, 20, (3, 6))
    src[1, 4:] = 0
    assert greedy(model, src, 1, 2, 0, 8) == greedy_recompute(model, src, 1, 2, 0, 8)
    from xformer.model.decoding import beam_search

    assert beam_search(model, src, 1, 2, 0, 8, beam_size=1) == greedy(model, src, 1, 2, 0, 8)


@pytest.mark.parametrize(
    "kw", [{"pe": ALiBi}, {"pe": T5RelativeBias}, {"attention": LocalAttention(3)}], ids=["alibi", "t5", "local"]
)
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
def test_linear_refuses_score_biases_and_masking_patterns(kw, cls):
    with pytest.raises(ConfigError, match="linear attention never forms"):
        cls(20, 20, **SIZES, mixer=LinearMixer(), **kw)


def test_linear_accepts_rope_and_local_attention_on_the_other_stack():
    DecoderOnly(20, 20, **SIZES, mixer=LinearMixer(), pe=RoPE)
    EncoderDecoder(20, 20, **SIZES, mixer=LinearMixer(stacks="decoder"), attention=LocalAttention(3))


# -- every mechanism: training and parameter accounting --------------------------------------------
MIXERS = {
    "mha": (MultiHeadMixer(), None),
    "gqa": (GroupedQueryMixer(), 2),
    "mqa": (MultiQueryMixer(), None),
    "linear": (LinearMixer(), None),
}


#: the layers attention replaced: no RoPE for them (refused), sinusoidal positions instead
LAYERS = {"lstm": (LSTMMixer(), None), "conv": (ConvMixer(kernel=3), None)}


@pytest.mark.parametrize("name", [*MIXERS, *LAYERS])
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly])
def test_every_mixer_trains(name, cls):
    """40 Adam steps on one fixed batch (memorising it): the loss must fall below half its start and
    below the unigram level log(V - 3) that ignoring the context would leave."""
    torch.manual_seed(0)
    mixer, n_kv = {**MIXERS, **LAYERS}[name]
    model = cls(
        12,
        12,
        d_model=32,
        n_heads=4,
        n_encoder_layers=1,
        n_decoder_layers=1,
        dropout=0.0,
        mixer=mixer,
        n_kv_heads=n_kv,
        pe=Sinusoidal if name in LAYERS else RoPE,
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    seq = torch.randint(3, 12, (8, 6), generator=torch.Generator().manual_seed(0))
    tgt = torch.cat((torch.ones(8, 1, dtype=torch.long), seq), 1)
    losses = []
    for _ in range(40):
        logits = model(seq, tgt[:, :-1]) if cls is EncoderDecoder else model(tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0] and losses[-1] < math.log(9) - 0.5, losses


class ScaledAttention(nn.Module):
    """A mechanism from outside xformer: SelfAttention behind a learned output gain (extra parameters)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.gain = inner, nn.Parameter(torch.ones(1))

    def forward(self, x, key_padding_mask=None, cache=None):
        return self.gain * self.inner(x, key_padding_mask, cache)

    def new_cache(self, capacity=None):
        return self.inner.new_cache(capacity)


class GainMixer(Mixer):
    def self_attention(self, **kw):
        return ScaledAttention(super().self_attention(**kw))


def test_breakdown_counts_any_mechanism_as_attention():
    """GQA's smaller projections, and a mechanism class xformer has never seen, count as attention."""
    dh = D // H
    proj = {1: (H + 2) * dh * D + (H + 2) * dh + D * D + D, H: 4 * D * D + 4 * D}
    for mixer, n_kv in ((MultiQueryMixer(), 1), (GroupedQueryMixer(), H), (MultiHeadMixer(), H)):
        counts = EncoderDecoder(20, 20, **SIZES, mixer=mixer).param_breakdown()
        assert counts["attention"] == 6 * proj[n_kv]  # 2 encoder self, 2 decoder self + 2 cross
        assert counts["other"] == 0
    counts = DecoderOnly(20, 20, **SIZES, mixer=GainMixer()).param_breakdown()
    assert counts["attention"] == 2 * (proj[H] + 1) and counts["other"] == 0
    model = DecoderOnly(20, 20, **SIZES, mixer=GainMixer()).eval()
    seq = torch.randint(3, 20, (2, 5))
    cache = model.new_cache()
    torch.testing.assert_close(torch.cat([model(seq[:, i : i + 1], cache=cache) for i in range(5)], 1), model(seq))


def test_a_non_mixer_is_refused():
    with pytest.raises(ConfigError, match="is not an xformer.model.Mixer"):
        EncoderDecoder(20, 20, **SIZES, mixer=object())


def test_linear_sums_stay_float32_under_bf16_autocast():
    """The running sums are kept in float32 under autocast: the bf16 output stays close to float32's."""
    torch.manual_seed(6)
    att = LinearSelfAttention(D, H, D // H, pattern=CausalAttention()).eval()
    x = torch.randn(2, 300, D)
    ref = att(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = att(x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("mixer,n_kv", [(GroupedQueryMixer(), 2), (MultiQueryMixer(), None)])
def test_grouped_kv_heads_train_with_attention_dropout(mixer, n_kv):
    """Attention-weight dropout (xformer's CPU path and SDPA's) sees the kv heads expanded to every query head."""
    torch.manual_seed(7)
    model = DecoderOnly(
        20, 20, d_model=D, n_heads=H, n_decoder_layers=1, dropout=0.3, mixer=mixer, n_kv_heads=n_kv
    ).train()
    out = model(torch.randint(3, 20, (2, 6)))
    out.sum().backward()
    assert out.shape == (2, 6, 20) and torch.isfinite(out).all()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", list(MIXERS))
def test_model_bias_false_reaches_every_mechanism(name):
    """``model.bias=false`` removes the projection biases of whatever mechanism the blocks get."""
    mixer, n_kv = MIXERS[name]
    model = EncoderDecoder(20, 20, **SIZES, mixer=mixer, n_kv_heads=n_kv, bias=False)
    for block in model.blocks():
        for att in (block.self_attn, getattr(block, "cross_attn", None)):
            if att is not None:
                assert att.in_proj.bias is None and att.out_proj.bias is None
    assert not [n for n, _ in model.named_parameters() if n.endswith(".bias")]

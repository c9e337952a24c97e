"""A variant defined outside xformer works by overriding hooks alone, and a variant
that implements none of its base class's hooks is refused when the model is built.

Every variant below lives in this test file (outside the ``xformer`` package). Each working variant is
checked against the built-in class that computes the same thing: with equal weights the two models
give equal outputs, so the hook really is applied (and applied only where it should be).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from typing_extensions import override

from xformer.model import (
    ALiBi,
    AttentionPattern,
    CausalAttention,
    ConfigError,
    DecoderOnly,
    EncoderDecoder,
    EncoderOnly,
    LocalAttention,
    NoPE,
    PositionalEncoding,
    PreNorm,
    Residual,
    RoPE,
    Sinusoidal,
)
from xformer.model.positional import alibi_slopes, sinusoid_table

V = 20
SIZES = dict(d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)


# -- variants from outside the repository ---------------------------------------------------------
class MyRotary(PositionalEncoding):
    """RoPE written again, with no ``rotates`` flag: overriding ``rotate`` must be enough."""

    def __init__(self, d_model, n_heads, d_head, max_len=None, causal=False):
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        self.register_buffer(
            "inv", 10000.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head), persistent=False
        )

    def rotate(self, t, pos):
        ang = pos.double()[:, None] * self.inv[None, :]
        cos, sin = ang.cos().to(t.dtype), ang.sin().to(t.dtype)
        a, b = t[..., 0::2], t[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


class MyAlibi(PositionalEncoding):
    """ALiBi's bias through ``attn_bias`` only."""

    def attn_bias(self, q_pos, k_pos):
        slopes = alibi_slopes(self.n_heads).float()
        return -slopes[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs().float()


class MySinusoid(PositionalEncoding):
    """The fixed table of Vaswani et al. through ``embed`` only."""

    def embed(self, x, pos):
        return x + sinusoid_table(int(pos.max()) + 1, self.d_model)[pos].to(x.dtype)


class MyBand(AttentionPattern):
    """A sliding window through ``blocked`` only, no ``causal()``."""

    def __init__(self, window=2):
        self.window = window

    def blocked(self, q_pos, k_pos):
        return (q_pos[:, None] - k_pos[None, :]).abs() >= self.window


class MyPreNorm(Residual):
    """Pre-LN through ``forward`` (and ``final_norm``)."""

    final_norm = True

    def __init__(self, d_model, dropout=0.0, eps=1e-5):
        super().__init__(d_model, dropout, eps)
        self.norm = self.make_norm()

    def forward(self, x, f):
        return x + self.drop(f(self.norm(x)))


class MyFFN(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):  # noqa: ARG002 - the FFN constructor contract
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


class NoHookPE(PositionalEncoding):
    """Meant to add positions but implements the wrong name (a typo of a hook)."""

    def attention_bias(self, q_pos, k_pos):  # not a hook  # noqa: ARG002
        return None


class NoForwardNorm(Residual):
    pass


class NoForwardFFN(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):  # noqa: ARG002 - the FFN constructor contract
        super().__init__()
        self.w = nn.Linear(d_model, d_model)


class NotAPattern:
    def blocked(self, q_pos, k_pos):  # noqa: ARG002 - the pattern's signature
        return None


# -- helpers ----------------------------------------------------------------------------------------
def twins(cls, mine: dict, builtin: dict):
    """The same model built twice, with ``mine`` and with ``builtin`` variant arguments, equal weights."""
    torch.manual_seed(0)
    a = cls(V, V, **SIZES, **mine).eval()
    torch.manual_seed(0)
    b = cls(V, V, **SIZES, **builtin).eval()
    b.load_state_dict(a.state_dict())
    return a, b


def forward(model, ids):
    if isinstance(model, EncoderDecoder):
        return model(ids, ids)
    return model(ids)


IDS = torch.randint(3, V, (3, 9), generator=torch.Generator().manual_seed(1))


# -- each hook, applied ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
def test_rotate_alone_is_applied(cls):
    assert MyRotary(16, 2, 8).rotates and not NoPE(16, 2, 8).rotates and RoPE(16, 2, 8).rotates
    a, b = twins(cls, {"pe": MyRotary}, {"pe": RoPE})
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))
    _, nope = twins(cls, {"pe": MyRotary}, {"pe": NoPE})
    assert not torch.allclose(forward(a, IDS), forward(nope, IDS), atol=1e-4)  # the rotation matters here


@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
def test_attn_bias_alone_is_applied(cls):
    a, b = twins(cls, {"pe": MyAlibi}, {"pe": ALiBi})
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))


@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
def test_embed_alone_is_applied(cls):
    a, b = twins(cls, {"pe": MySinusoid}, {"pe": Sinusoidal})
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))


@pytest.mark.parametrize("window", [1, 2, 4])
def test_blocked_alone_gives_the_causal_band_under_decoder_only(window):
    a, b = twins(DecoderOnly, {"attention": MyBand(window)}, {"attention": LocalAttention(window)})
    assert not a.decoder.pattern.is_causal  # not the fused causal triangle
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))
    if window < IDS.shape[1]:  # plain causal attention sees further back
        _, causal = twins(DecoderOnly, {"attention": MyBand(window)}, {"attention": CausalAttention()})
        assert not torch.allclose(forward(a, IDS), forward(causal, IDS), atol=1e-4)
    # causality: changing the last token leaves every earlier position's logits alone
    other = IDS.clone()
    other[:, -1] = (other[:, -1] + 1 - 3) % (V - 3) + 3
    torch.testing.assert_close(forward(a, IDS)[:, :-1], forward(a, other)[:, :-1])


def test_blocked_alone_is_the_encoder_pattern():
    a, b = twins(EncoderOnly, {"attention": MyBand(2)}, {"attention": LocalAttention(2)})
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))


def test_causal_of_blocks_the_pattern_and_the_future():
    pos = torch.arange(6)
    got = MyBand(2).causal().blocked(pos, pos)
    want = torch.tensor([[(i - j) >= 2 or j > i for j in range(6)] for i in range(6)])
    assert torch.equal(got, want)
    assert AttentionPattern().causal().is_causal  # nothing overridden: plain causal, fused path


def test_forward_alone_is_the_norm_placement():
    a, b = twins(EncoderDecoder, {"norm": MyPreNorm}, {"norm": PreNorm})
    torch.testing.assert_close(forward(a, IDS), forward(b, IDS))


def test_ffn_with_forward_builds_and_trains():
    model = EncoderDecoder(V, V, **SIZES, ffn=MyFFN)
    logits = forward(model, IDS)
    logits.sum().backward()
    assert model.encoder.layers[0].ffn.w1.weight.grad is not None


# -- refusals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [EncoderDecoder, DecoderOnly, EncoderOnly])
@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (
            {"pe": NoHookPE},
            r"model\.pe: .*NoHookPE overrides none of the PositionalEncoding hooks embed, rotate, attn_bias",
        ),
        ({"pe": lambda **_kw: nn.Identity()}, r"model\.pe: .*Identity is not an xformer\.model\.PositionalEncoding"),
        ({"norm": NoForwardNorm}, r"model\.norm: .*NoForwardNorm does not implement forward\(x, f\)"),
        ({"ffn": NoForwardFFN}, r"model\.ffn: .*NoForwardFFN must be an nn\.Module that implements forward\(x\)"),
        ({"attention": NotAPattern()}, r"model\.attention: .*NotAPattern is not an xformer\.model\.AttentionPattern"),
    ],
)
def test_a_variant_without_its_hook_is_refused_at_build(cls, kwargs, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        cls(V, V, **SIZES, **kwargs)
    assert "\n" not in str(err.value)


def test_a_no_position_scheme_is_fine_when_it_says_so():
    class MyNoPE(NoPE):
        pass

    EncoderDecoder(V, V, **SIZES, pe=MyNoPE)
    EncoderDecoder(V, V, **SIZES, pe=PositionalEncoding)


def test_flags_that_contradict_the_hooks_are_rejected_and_consistent_ones_ignored():
    with pytest.raises(
        TypeError, match=r"rotates=False: xformer works this out from whether the class overrides rotate"
    ):

        class Off(MyRotary):
            rotates = False

    with pytest.raises(TypeError, match=r"rotates=True: .*\(here False\)"):

        class On(PositionalEncoding):
            rotates = True

            @override
            def embed(self, x, pos):
                return x

    with pytest.raises(TypeError, match=r"is_causal=True: .*keeps CausalAttention\.blocked"):

        class Fake(MyBand):
            is_causal = True

    class Redundant(MyRotary):
        rotates = True

    class Plain(CausalAttention):
        is_causal = True

    assert Redundant(16, 2, 8).rotates and Plain().is_causal
    assert "rotates" not in Redundant.__dict__ and "is_causal" not in Plain.__dict__


def test_math_of_my_rotary_is_rope():
    """The reference above is RoPE itself (so the equality tests compare like with like)."""
    t = torch.randn(1, 2, 5, 8)
    pos = torch.arange(5)
    torch.testing.assert_close(MyRotary(16, 2, 8).rotate(t, pos), RoPE(16, 2, 8).rotate(t, pos))
    assert math.isclose(float(MyAlibi(16, 2, 8).attn_bias(pos, pos)[0, 4, 1]), -(2**-4) * 3, rel_tol=1e-6)


def test_variants_from_a_module_outside_the_repo_through_the_config(tmp_path, monkeypatch):
    """The README route: a module of the user's own, named by ``_target_`` in the model config; a
    rotation-only scheme and a blocked-only pattern under ``model/arch=decoder_only``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from tests.conftest import REPO
    from xformer.train.checkpoint_file import build_model

    (tmp_path / "outside_variants.py").write_text(
        "import torch\n"
        "from xformer.model import AttentionPattern, PositionalEncoding, RoPE\n"
        "class Rot(PositionalEncoding):\n"
        "    def rotate(self, t, pos):\n"
        "        return RoPE(self.d_model, self.n_heads, self.d_head).rotate(t, pos)\n"
        "class Band(AttentionPattern):\n"
        "    def __init__(self, window):\n"
        "        self.window = window\n"
        "    def blocked(self, q_pos, k_pos):\n"
        "        return (q_pos[:, None] - k_pos[None, :]).abs() >= self.window\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "model/arch=decoder_only",
                "model.d_model=16",
                "model.n_heads=2",
                "model.n_decoder_layers=2",
                "model.dropout=0.0",
            ],
        )
    OmegaConf.set_struct(cfg, False)
    mine = cfg.copy()
    mine.model.pe = {"_target_": "outside_variants.Rot", "_partial_": True}
    mine.model.attention = {"_target_": "outside_variants.Band", "window": 3}
    builtin = cfg.copy()
    builtin.model.pe = {"_target_": "xformer.model.RoPE", "_partial_": True}
    builtin.model.attention = {"_target_": "xformer.model.LocalAttention", "window": 3}
    torch.manual_seed(0)
    a = build_model(mine, V, V, 0).eval()
    b = build_model(builtin, V, V, 0).eval()
    b.load_state_dict(a.state_dict())
    assert a.decoder.pe.rotates
    torch.testing.assert_close(a(IDS), b(IDS))


class MyBiasFFN(MyFFN):
    def __init__(self, d_model, d_ff, dropout=0.0, bias=True):  # noqa: ARG002 - the FFN constructor contract
        super().__init__(d_model, d_ff, dropout)
        self.w1, self.w2 = nn.Linear(d_model, d_ff, bias=bias), nn.Linear(d_ff, d_model, bias=bias)


@pytest.mark.parametrize("arg,cls,group", [("ffn", MyFFN, "model/ffn"), ("norm", MyPreNorm, "model/norm")])
def test_a_variant_without_a_bias_argument_under_bias_false_is_one_clear_error(arg, cls, group):
    """``model.bias=false`` passes ``bias=False`` to the FFN and norm factories; a user's variant that
    takes no ``bias`` builds with the default and is refused by name with ``model.bias=false``, not with a
    ``TypeError``."""
    EncoderDecoder(V, V, **SIZES, **{arg: cls})  # model.bias=true: the variant needs no bias argument
    with pytest.raises(ValueError, match=rf"^model.bias=false: {group} {cls.__name__} takes no bias argument\. Fix: "):
        EncoderDecoder(V, V, **SIZES, bias=False, **{arg: cls})


def test_a_variant_with_a_bias_argument_honours_bias_false():
    model = DecoderOnly(V, V, **SIZES, bias=False, ffn=MyBiasFFN)
    ffn = [n for n, _ in model.named_parameters() if ".ffn." in n]
    assert ffn and not [n for n in ffn if n.endswith(".bias")]

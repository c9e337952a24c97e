"""Parameter accounting (claim C2), FFN variants and the equal-parameter budget."""

import pytest
import torch

from xformer.model import ConfigError, EncoderDecoder, ReLUFFN, SwiGLUFFN


def test_block_breakdown_matches_hand_count_for_the_base_model():
    """Vaswani et al. base block: attention 4·512² (+ 4·512 biases), FFN 2·512·2048 (+ 2048 + 512)."""
    with torch.device("meta"):
        model = EncoderDecoder(1000, 1000, d_model=512, n_heads=8, ffn_ratio=4, n_encoder_layers=1, n_decoder_layers=1)
    attn_per_module = 4 * 512 * 512 + 4 * 512
    ffn_per_block = 2 * 512 * 2048 + 2048 + 512
    counts = model.param_breakdown()
    assert counts["attention"] == 3 * attn_per_module  # encoder self, decoder self + cross
    assert counts["ffn"] == 2 * ffn_per_block
    assert counts["embedding"] == 1000 * 512  # tied source/target/output
    assert counts["norm"] == 5 * 2 * 512
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    # C2: the FFN holds about two thirds of an encoder block's parameters
    assert ffn_per_block / (ffn_per_block + attn_per_module + 2 * 1024) == pytest.approx(2 / 3, abs=0.01)


def test_untied_embeddings_are_counted_separately():
    with torch.device("meta"):
        tied = EncoderDecoder(100, 120, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1)
        untied = EncoderDecoder(
            100, 120, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, tie_embeddings=False
        )
    assert tied.param_breakdown()["embedding"] == (100 + 120) * 32
    assert untied.param_breakdown()["embedding"] == (100 + 120 + 120) * 32


def test_swiglu_keeps_the_ffn_weight_count():
    relu, swiglu = ReLUFFN(96, 384), SwiGLUFFN(96, 384)
    relu_weights = relu.linear1.weight.numel() + relu.linear2.weight.numel()
    assert sum(p.numel() for p in swiglu.parameters()) == relu_weights
    x = torch.randn(2, 3, 96)
    assert swiglu(x).shape == x.shape


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
def test_param_budget_equalises_an_ffn_ratio_sweep(ratio):
    with torch.device("meta"):
        model = EncoderDecoder(
            500,
            500,
            d_model=64,
            n_heads=4,
            ffn_ratio=ratio,
            n_encoder_layers=2,
            n_decoder_layers=2,
            param_budget=1_000_000,
        )
    total = model.param_breakdown()["total"]
    assert abs(total - 1_000_000) / 1_000_000 < 0.06
    assert model.d_model % 8 == 0


def test_param_budget_can_solve_d_ff_instead():
    with torch.device("meta"):
        model = EncoderDecoder(
            500,
            500,
            d_model=64,
            n_heads=4,
            d_head=32,
            n_encoder_layers=2,
            n_decoder_layers=2,
            param_budget=600_000,
            budget_solves="d_ff",
        )
    assert abs(model.param_breakdown()["total"] - 600_000) < 5_000
    with pytest.raises(ConfigError, match="param_budget"):
        EncoderDecoder(500, 500, d_model=64, n_heads=4, param_budget=1000, budget_solves="d_ff")


def test_a_budget_below_the_smallest_model_is_refused_when_solving_d_model():
    """``param_budget=100`` is refused by name, not met silently by the smallest model (thousands of
    parameters)."""
    with pytest.raises(ConfigError, match=r"^model.param_budget=100: the smallest model of this shape"):
        with torch.device("meta"):
            EncoderDecoder(500, 500, d_model=64, n_heads=4, param_budget=100)


@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(d_model=30, n_heads=4), "model.n_heads"),
        (dict(ffn_ratio=0), "model.ffn_ratio"),
        (dict(ffn_ratio=-1), "model.ffn_ratio"),
        (dict(d_head=0), "model.d_head"),
    ],
)
def test_invalid_sizes_name_the_key(kwargs, key):
    args = dict(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1)
    args.update(kwargs)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        EncoderDecoder(10, 10, **args)


def test_single_key_ranges_live_in_the_signature():
    """model.dropout, layer counts, max_len, d_qk: one home each, the annotation the config check reads."""
    import typing

    from xformer.config_types import value_problem

    hints = typing.get_type_hints(EncoderDecoder.__mro__[1].__init__, include_extras=True)
    assert value_problem(1.0, hints["dropout"]) and value_problem(0.1, hints["dropout"]) is None
    assert value_problem(-1, hints["n_encoder_layers"]) and value_problem(0, hints["n_decoder_layers"]) is None
    assert (
        value_problem(0, hints["max_len"])
        and value_problem(0, hints["d_qk"])
        and value_problem(None, hints["d_qk"]) is None
    )


def test_d_head_can_be_set_independently():
    model = EncoderDecoder(10, 10, d_model=30, n_heads=4, d_head=16, n_encoder_layers=1, n_decoder_layers=1)
    assert model.encoder.layers[0].self_attn.in_proj.weight.shape == (3 * 64, 30)
    assert model(torch.randint(4, 10, (2, 5)), torch.randint(4, 10, (2, 3))).shape == (2, 3, 10)

"""Our blocks and stacks against PyTorch's own modules with copied weights, in float64."""

import pytest
import torch
from torch import nn

from xformer.model import CausalAttention, CrossAttention, EncoderDecoder, PostNorm, PreNorm, ReLUFFN, SelfAttention
from xformer.model.layers import DecoderLayer, EncoderLayer

D, H, FF = 32, 4, 64


def copy_attn(ours, theirs: nn.MultiheadAttention):
    theirs.in_proj_weight.copy_(ours.in_proj.weight)
    theirs.in_proj_bias.copy_(ours.in_proj.bias)
    theirs.out_proj.weight.copy_(ours.out_proj.weight)
    theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_ffn(ours, theirs):
    theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())


def randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.2)
    return module


@torch.no_grad()
def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer):
    copy_attn(ours.self_attn, theirs.self_attn)
    copy_ffn(ours, theirs)
    theirs.norm1.load_state_dict(ours.res_attn.norm.state_dict())
    theirs.norm2.load_state_dict(ours.res_ffn.norm.state_dict())


@torch.no_grad()
def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer):
    copy_attn(ours.self_attn, theirs.self_attn)
    copy_attn(ours.cross_attn, theirs.multihead_attn)
    copy_ffn(ours, theirs)
    theirs.norm1.load_state_dict(ours.res_self.norm.state_dict())
    theirs.norm2.load_state_dict(ours.res_cross.norm.state_dict())
    theirs.norm3.load_state_dict(ours.res_ffn.norm.state_dict())


def masks():
    src_kpm = torch.zeros(3, 7, dtype=torch.bool)
    src_kpm[1, 4:] = True
    tgt_kpm = torch.zeros(3, 5, dtype=torch.bool)
    tgt_kpm[2, 3:] = True
    return src_kpm, tgt_kpm


@pytest.mark.parametrize("norm,norm_first", [(PostNorm, False), (PreNorm, True)])
def test_encoder_layer_matches_torch(norm, norm_first):
    ours = randomise(
        EncoderLayer(
            self_attn=SelfAttention(D, H, D // H), ffn=ReLUFFN(D, FF, 0.0), residual=norm, d_model=D, dropout=0.0
        )
    ).double()
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    copy_encoder_layer(ours, theirs)
    theirs.train()  # keeps PyTorch off its nested-tensor fast path, which zeroes padded rows
    x = torch.randn(3, 7, D, dtype=torch.float64)
    src_kpm, _ = masks()
    torch.testing.assert_close(
        ours(x, key_padding_mask=src_kpm), theirs(x, src_key_padding_mask=src_kpm), rtol=1e-6, atol=1e-9
    )


@pytest.mark.parametrize("norm,norm_first", [(PostNorm, False), (PreNorm, True)])
def test_decoder_layer_matches_torch(norm, norm_first):
    ours = randomise(
        DecoderLayer(
            self_attn=SelfAttention(D, H, D // H, pattern=CausalAttention()),
            cross_attn=CrossAttention(D, H, D // H),
            ffn=ReLUFFN(D, FF, 0.0),
            residual=norm,
            d_model=D,
            dropout=0.0,
        )
    ).double()
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    copy_decoder_layer(ours, theirs)
    x = torch.randn(3, 5, D, dtype=torch.float64)
    mem = torch.randn(3, 7, D, dtype=torch.float64)
    src_kpm, tgt_kpm = masks()
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    ref = theirs(x, mem, tgt_mask=causal, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
    out = ours(x, mem, key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("norm,norm_first", [(PostNorm, False), (PreNorm, True)])
@torch.no_grad()
def test_whole_stack_matches_torch_transformer(norm, norm_first):
    model = EncoderDecoder(
        50, 50, d_model=D, n_heads=H, d_ff=FF, n_encoder_layers=2, n_decoder_layers=3, dropout=0.0, norm=norm
    ).double()
    randomise(model)
    ref = nn.Transformer(D, H, 2, 3, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    for a, b in zip(model.encoder.layers, ref.encoder.layers, strict=False):
        copy_encoder_layer(a, b)
    for a, b in zip(model.decoder.layers, ref.decoder.layers, strict=False):
        copy_decoder_layer(a, b)
    if norm_first:  # Pre-LN: our stacks' final norms play nn.Transformer's encoder/decoder norms
        ref.encoder.norm.load_state_dict(model.encoder.final_norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder.final_norm.state_dict())
    else:  # Post-LN stacks have no final norm; nn.Transformer always adds one
        ref.encoder.norm, ref.decoder.norm = nn.Identity(), nn.Identity()
    ref.train()
    src = torch.randint(4, 50, (3, 7))
    tgt = torch.randint(4, 50, (3, 5))
    src_kpm, tgt_kpm = masks()
    xs = model._embed(model.src_embed, model.encoder, src)
    xt = model._embed(model.tgt_embed, model.decoder, tgt)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    expected = ref(
        xs,
        xt,
        tgt_mask=causal,
        src_key_padding_mask=src_kpm,
        tgt_key_padding_mask=tgt_kpm,
        memory_key_padding_mask=src_kpm,
    )
    memory = model.encoder(xs, key_padding_mask=src_kpm)
    hidden = model.decoder(xt, key_padding_mask=tgt_kpm, memory=memory, memory_key_padding_mask=src_kpm)
    torch.testing.assert_close(hidden, expected, rtol=1e-6, atol=1e-9)
    # and the full forward is the head applied to that hidden state
    logits = model(src, tgt, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm)
    torch.testing.assert_close(logits, model.head(expected), rtol=1e-6, atol=1e-9)

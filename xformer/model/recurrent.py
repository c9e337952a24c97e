"""The layer types self-attention replaced (Vaswani et al. 2017 §4, Table 1), as sequence-mixing
sub-layers that drop into a Transformer block in place of its self-attention.

* :class:`RecurrentMixing`: an LSTM (Hochreiter & Schmidhuber 1997), left to right in causal stacks,
  two directions of ``d_model / 2`` concatenated in a bidirectional encoder (Schuster & Paliwal
  1997). Path between positions ``n`` apart: ``O(n)`` sequential steps.
* :class:`ConvMixing`: a gated depthwise-separable 1-D convolution (Wu et al. 2019 §3), kernel ``k``,
  dilation ``growth**layer`` (ByteNet, Kalchbrenner et al. 2016; WaveNet, van den Oord et al. 2016).
  Path between positions ``n`` apart: ``O(n/k)`` layers, ``O(log_k n)`` with growing dilation.

Both take the mixer contract of :mod:`.mixer` and keep a fixed-size decoding state: the LSTM's
``(h, c)``, the convolution's last ``(k - 1)·dilation`` inputs. Neither forms a score matrix, so
schemes acting on scores or queries and keys (ALiBi, T5 bias, RoPE) are refused at build time;
absolute schemes are added to the embeddings as usual.

Padding (``key_padding_mask``, ``True`` = pad) sits at the right end of each row. Outputs at pad
positions are zero and outputs at real positions do not depend on the pads: the bidirectional LSTM
packs the rows by length (:func:`torch.nn.utils.rnn.pack_padded_sequence`), the convolution zeroes
the pad inputs, which is what its own zero border holds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .linear_attention import RunningSumCache


def _real(key_padding_mask: Tensor | None, t: int) -> Tensor | None:
    """``(B, t, 1)`` float-ready mask of the real (non-pad) positions of the last ``t`` columns."""
    return None if key_padding_mask is None else (~key_padding_mask[:, -t:])[..., None]


class RecurrentState(RunningSumCache):
    """Decoding state of one recurrent layer: the LSTM's ``(h, c)``, each ``(1, B, H)``, and
    :attr:`size`, the positions consumed. Fixed size whatever the length decoded."""

    batch_dim = 1


class RecurrentMixing(nn.Module):
    """An LSTM as a block's sequence-mixing sub-layer: ``(B, T, D)`` in and out.

    Args:
        d_model: width ``D``; the hidden size is ``D`` (one direction) or ``D / 2`` per direction.
        bidirectional: both directions (a full-attention encoder); otherwise left to right (causal).
        bias: LSTM biases (``model.bias``).

    Raises:
        ValueError: ``bidirectional`` with an odd ``d_model``.

    Precision: the LSTM runs in its weights' dtype with autocast off (float32 under ``bf16-mixed``
    and ``16-mixed``, bf16 under ``bf16-true``), and its ``(h, c)`` state stays in that dtype; the
    output is returned in the input's dtype.

    Parameters: ``4·(D·H + H·H + 2·H)`` per direction (``H`` the hidden size), i.e. ``8·D² + 8·D``
    unidirectional against multi-head attention's ``4·D² + 4·D``.
    """

    def __init__(self, d_model: int, bidirectional: bool = False, bias: bool = True) -> None:
        super().__init__()
        if bidirectional and d_model % 2:
            raise ValueError(
                f"model/mixer=lstm: a bidirectional encoder splits d_model={d_model} between two directions. "
                "Fix: an even model.d_model"
            )
        self.bidirectional = bidirectional
        hidden = d_model // 2 if bidirectional else d_model
        self.rnn = nn.LSTM(d_model, hidden, batch_first=True, bidirectional=bidirectional, bias=bias)

    def new_cache(self, capacity: int | None = None) -> RecurrentState:
        """An empty recurrent state for incremental decoding (``capacity`` is not needed)."""
        return RecurrentState(capacity)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, cache: RecurrentState | None = None) -> Tensor:
        """Mix ``x`` ``(B, T, D)`` (positions ``past ..``, ``past`` = ``cache.size``) over time: ``(B, T, D)``,
        zero at pad positions. ``key_padding_mask``: ``(B, past+T)`` bool, ``True`` = pad; ``cache``:
        the unidirectional LSTM's state, continued and updated.

        Raises:
            ValueError: a cache for the bidirectional form (its backward direction needs the whole sequence).
        """
        dtype, weight = x.dtype, self.rnn.weight_ih_l0
        t = x.shape[1]
        real = _real(key_padding_mask, t)
        # autocast off: it would run the LSTM in bf16/fp16 (CPU fp16 has no kernel) and round (h, c) every step
        with torch.autocast(x.device.type, enabled=False):
            h = x.to(weight.dtype)
            if self.bidirectional:
                if cache is not None:
                    raise ValueError("model/mixer=lstm: the bidirectional (encoder) layer has no decoding state")
                if real is None:
                    out, _ = self.rnn(h)
                else:
                    lengths = real[..., 0].sum(1).clamp(min=1).cpu()
                    packed = pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
                    out, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=t)
            else:
                state = None if cache is None or cache.state is None else tuple(s.to(weight.dtype) for s in cache.state)
                out, new_state = self.rnn(h, state)  # right pads come after every real position: nothing leaks
                if cache is not None:
                    cache.update(new_state, t)
            if real is not None:
                out = out * real.to(out.dtype)
        return out.to(dtype)


class ConvMixing(nn.Module):
    """Gated depthwise-separable 1-D convolution as a block's sequence-mixing sub-layer (Wu et al. 2019
    §3 without the softmax-normalised weight sharing): ``GLU(x W_in)`` ``(B, T, D)`` → depthwise
    convolution over time (kernel ``k``, dilation ``d``) → ``W_out``. ``(B, T, D)`` in and out.

    Args:
        d_model: width ``D``.
        kernel: kernel size ``k`` (positions each layer sees: ``(k - 1)·d + 1``).
        dilation: spacing ``d`` of the kernel's taps.
        causal: only the current and earlier positions (left padding of ``(k - 1)·d``); otherwise
            centred (``⌊(k - 1)·d / 2⌋`` left, the rest right).
        bias: biases in the projections and the convolution (``model.bias``).

    Precision: the projections and the convolution run where autocast puts them (bf16 under
    ``bf16-mixed``); the decoding state holds the convolution's inputs in the dtype the convolution
    reads them in, so cached decoding equals the full forward under every precision.

    Parameters: ``3·D² + (k + 4)·D`` with biases, against multi-head attention's ``4·D² + 4·D``.
    """

    def __init__(self, d_model: int, kernel: int = 3, dilation: int = 1, causal: bool = True, bias: bool = True):
        super().__init__()
        self.kernel, self.dilation, self.causal = kernel, dilation, causal
        self.context = (kernel - 1) * dilation
        self.in_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.conv = nn.Conv1d(d_model, d_model, kernel, dilation=dilation, groups=d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def new_cache(self, capacity: int | None = None) -> RunningSumCache:
        """An empty state for incremental decoding: the last ``(k - 1)·d`` inputs ``(B, D, (k - 1)·d)``."""
        if not self.causal:
            raise ValueError("model/mixer=conv: the centred (encoder) convolution has no decoding state")
        return RunningSumCache(capacity)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, cache: RunningSumCache | None = None
    ) -> Tensor:
        """Mix ``x`` ``(B, T, D)`` (positions ``past ..``, ``past`` = ``cache.size``) over time: ``(B, T, D)``,
        zero at pad positions. ``key_padding_mask``: ``(B, past+T)`` bool, ``True`` = pad; ``cache``:
        the causal form's last ``(k - 1)·d`` inputs, continued and updated."""
        t = x.shape[1]
        real = _real(key_padding_mask, t)
        h = F.glu(self.in_proj(x), dim=-1)
        if real is not None:
            h = h * real.to(h.dtype)
        h = h.transpose(1, 2)  # (B, D, T)
        ctx = self.context
        if self.causal:
            if cache is not None and ctx:
                past = cache.state if cache.state is not None else h.new_zeros(h.shape[0], h.shape[1], ctx)
                h = torch.cat((past.to(h.dtype), h), dim=2)
                cache.update(h[:, :, -ctx:], t)
            elif cache is not None:
                cache.update(h[:, :, :0], t)
            else:
                h = F.pad(h, (ctx, 0))
        else:
            h = F.pad(h, (ctx // 2, ctx - ctx // 2))
        y = F.conv1d(h, self.conv.weight, self.conv.bias, dilation=self.dilation, groups=self.conv.groups)
        out = self.out_proj(y.transpose(1, 2))
        if real is not None:
            out = out * real.to(out.dtype)
        return out

"""Positional schemes, one class per scheme; each implements the hooks it needs (identity otherwise):

* :meth:`PositionalEncoding.embed` adds an absolute encoding to the scaled token embeddings
  (sinusoidal, learned);
* :meth:`PositionalEncoding.rotate` rotates queries and keys inside self-attention (RoPE);
* :meth:`PositionalEncoding.attn_bias` returns an additive bias on the attention scores (ALiBi, T5).

Relative schemes act on self-attention only. Every constructor takes the same keywords (``d_model``,
``n_heads``, ``d_head``, ``max_len``, ``causal``) so the model builds any scheme from a ``_partial_``
Hydra node. Positions are 0-based integer tensors ``(T,)``.

Contract for a new scheme (see the README's "Adding a variant"): subclass
:class:`PositionalEncoding` and override at least one hook; a class that overrides none is refused
when the model is built, unless it is :class:`NoPE` (or a subclass): "no positions" on purpose.

Precision: positions, angles and biases are computed in float32 (or float64) under every
``trainer.precision``. ``bf16-true`` / ``16-true`` convert the model with ``module.to(dtype)``, which
would round a scheme's floating *buffers* (RoPE's frequencies, ALiBi's slopes, the sinusoid table;
RoPE's angles at position 511 would be off by up to 0.2 rad); :class:`PositionalEncoding` keeps them
at their own precision (device moves still apply) and the hooks cast only their result. Learned
tables (:class:`Learned`, :class:`T5RelativeBias`) are parameters and follow the model's dtype.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .hooks import check_derived_flag, overrides

#: the hook methods a positional scheme may override
HOOKS = ("embed", "rotate", "attn_bias")


class PositionalEncoding(nn.Module):
    """Base class: identity for all three hooks (this is also NoPE, see :class:`NoPE`).

    Args:
        d_model: model width ``D``.
        n_heads: number of attention heads ``H``.
        d_head: per-head size ``d_k``.
        max_len: longest sequence (tokens) the scheme must support; ``None`` = unbounded.
        causal: whether the stack this instance serves is causal (decoder) or bidirectional.
    """

    #: True when the scheme works with absolute positions below ``max_len`` (checked against the data).
    bounded: bool = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        check_derived_flag(
            cls, "rotates", overrides(cls, PositionalEncoding, "rotate"), "whether the class overrides rotate()"
        )

    @property
    def rotates(self) -> bool:
        """True when this scheme's class overrides :meth:`rotate` (the stack then applies it)."""
        return overrides(type(self), PositionalEncoding, "rotate")

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, max_len: int | None = None, causal: bool = False
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.max_len, self.causal = max_len, causal

    def _apply(self, fn, recurse: bool = True):
        """``nn.Module._apply`` (behind ``.to``, ``.half()``, ``.cuda()``), except that a conversion of
        this module's floating buffers to a dtype with a larger machine epsilon (bfloat16, float16)
        keeps their values and dtype and applies only the device move (see the module doc)."""
        before = {name: buf for name, buf in self._buffers.items() if buf is not None and buf.is_floating_point()}
        out = super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers.get(name)
            if (
                new is not None
                and new.is_floating_point()
                and new.dtype != old.dtype
                and torch.finfo(new.dtype).eps > torch.finfo(old.dtype).eps
            ):
                self._buffers[name] = old.to(device=new.device)
        return out

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:  # noqa: ARG002 - interface default: schemes override it
        """Return ``x`` (``(B, T, D)``) with the absolute encoding of positions ``pos`` (``(T,)``) added."""
        return x

    def rotate(self, t: Tensor, pos: Tensor) -> Tensor:  # noqa: ARG002 - interface default: schemes override it
        """Return queries or keys ``t`` (``(B, H, T, d_head)``) rotated to positions ``pos`` (``(T,)``)."""
        return t

    def attn_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:  # noqa: ARG002 - interface default: schemes override it
        """Additive score bias ``(H, Tq, Tk)`` for query/key positions, or ``None`` for no bias."""
        return None

    def match_scale(self, rms: float) -> None:  # noqa: ARG002 - interface default: fixed tables override it
        """Let a *fixed* table added to the embeddings enter at root-mean-square ``rms``, the token
        embeddings' scale under the model's init scheme (``model/init``). Learned tables are drawn by
        the init scheme itself and relative schemes do not touch the embeddings: nothing to do."""


class NoPE(PositionalEncoding):
    """No positional information at all (NoPE; Kazemnejad et al. 2023).

    A causal stack can still infer order from the causal mask; a bidirectional one cannot.
    """


def sinusoid_table(n_pos: int, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """The fixed table of Vaswani et al. 2017 §3.5, shape ``(n_pos, d_model)``.

    ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and ``PE[pos, 2i+1] = cos(...)``. For odd
    ``d_model`` the last cosine column is dropped.
    """
    return sinusoid_rows(torch.arange(n_pos), d_model, dtype)


def sinusoid_rows(pos: Tensor, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Rows ``pos`` (``(T,)`` integer tensor) of :func:`sinusoid_table`, computed directly (in float64,
    then cast to ``dtype``)."""
    p = pos.to(torch.float64)[:, None]
    inv_freq = torch.exp(
        -math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64, device=pos.device) / d_model
    )
    rows = torch.stack((torch.sin(p * inv_freq), torch.cos(p * inv_freq)), dim=-1).flatten(-2)
    return rows[:, :d_model].to(dtype)


class Sinusoidal(PositionalEncoding):
    """Fixed sinusoidal absolute encoding added to the embeddings (Vaswani et al. 2017 §3.5).

    Training indexes a table precomputed for ``max_len`` positions (training data is validated
    against it); evaluation and decoding evaluate the same float64 formula at the positions asked for,
    so longer inputs work and no step reads a position back on the host (a device sync, a graph
    break under torch.compile).
    """

    bounded = True

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, max_len: int | None = None, causal: bool = False
    ) -> None:
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        self.register_buffer("table", sinusoid_table(max_len or 1024, d_model), persistent=False)
        self.amplitude = 1.0  # the paper's table: RMS 1/√2 (each sin/cos pair has sin² + cos² = 1)

    def match_scale(self, rms: float) -> None:
        """Scale the table to root-mean-square ``rms`` (its own RMS is exactly ``1/√2``)."""
        self.amplitude = float(rms) * math.sqrt(2.0)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        if self.training and not torch.compiler.is_compiling():
            rows = self.table[pos]
        else:
            rows = sinusoid_rows(pos, self.d_model).to(x.device)
        if self.amplitude != 1.0:
            rows = rows * self.amplitude
        return x + rows.to(x.dtype)


class Learned(PositionalEncoding):
    """A learned absolute position embedding, one ``D``-vector per position (Gehring et al. 2017).

    Raises:
        IndexError: at run time for positions ``>= max_len`` (configs are validated before this).
    """

    bounded = True

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, max_len: int | None = None, causal: bool = False
    ) -> None:
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        if not max_len:
            raise ValueError("model.max_len: learned positions need a finite max_len")
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * d_model**-0.5)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        # checked outside training on the CPU only, where reading ``pos.max()`` costs no device sync
        # (training inputs are validated before training; evaluation and decoding cut to max_len)
        if not self.training and pos.device.type == "cpu" and pos.numel() and int(pos.max()) >= self.weight.shape[0]:
            raise IndexError(
                f"position {int(pos.max())} >= model.max_len={self.weight.shape[0]} "
                "(learned positions cannot extrapolate)"
            )
        return x + self.weight[pos].to(x.dtype)


class RoPE(PositionalEncoding):
    """Rotary position embedding applied to queries and keys (Su et al. 2021, eq. 34).

    Channel pairs ``(2i, 2i+1)`` of each head are rotated by angle ``pos * base^(-2i/d_head)``, so the
    score ``q_m · k_n`` depends on positions only through ``m - n``.

    Raises:
        ValueError: if ``d_head`` is odd.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        max_len: int | None = None,
        causal: bool = False,
        base: float = 10000.0,
    ) -> None:
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        if d_head % 2:
            raise ValueError(f"model.d_head={d_head}: rope needs an even head size")
        inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, t: Tensor, pos: Tensor) -> Tensor:
        angles = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]  # (T, d_head/2)
        cos, sin = angles.cos().to(t.dtype), angles.sin().to(t.dtype)
        t1, t2 = t[..., 0::2], t[..., 1::2]
        return torch.stack((t1 * cos - t2 * sin, t1 * sin + t2 * cos), dim=-1).flatten(-2)


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of ALiBi (Press et al. 2022 §3 and their reference code), shape ``(H,)``.

    For ``H`` a power of two the slopes are the geometric sequence starting at ``2^(-8/H)`` with that
    ratio. Otherwise take the ``2^floor(log2 H)`` slopes of the nearest lower power of two, then add
    every other slope of the sequence for twice that power until ``H`` are reached.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_two(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(PositionalEncoding):
    """Attention with linear biases (Press et al. 2022): score bias ``-m_h · |i - j|``.

    In a causal stack only ``j <= i`` survive the mask, so this is the paper's ``-m_h (i - j)``; in a
    bidirectional stack the symmetric distance is used.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, max_len: int | None = None, causal: bool = False
    ) -> None:
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    def attn_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        # float32 however the model is converted (the attention casts it to the dtype it computes in)
        dist = (q_pos[:, None] - k_pos[None, :]).abs().to(torch.float32)  # (Tq, Tk)
        return -self.slopes.to(torch.float32)[:, None, None] * dist


class T5RelativeBias(PositionalEncoding):
    """Learned relative-position bias with log-spaced buckets (Raffel et al. 2020 §2.1).

    One scalar per (bucket, head), shared by all layers of the stack. Offsets ``k - q`` fall into
    ``num_buckets`` buckets: half exact small offsets, half logarithmic up to ``max_distance``; a
    bidirectional stack splits the buckets between the two directions.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        max_len: int | None = None,
        causal: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
    ) -> None:
        super().__init__(d_model, n_heads, d_head, max_len, causal)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias = nn.Embedding(num_buckets, n_heads)
        nn.init.zeros_(self.bias.weight)

    def bucket(self, rel: Tensor) -> Tensor:
        """Map relative offsets ``k - q`` (any shape, long) to bucket ids of the same shape."""
        n = self.num_buckets
        out = torch.zeros_like(rel)
        if not self.causal:
            n //= 2
            out = out + (rel > 0).long() * n
            rel = rel.abs()
        else:
            rel = (-rel).clamp(min=0)
        max_exact = n // 2
        is_small = rel < max_exact
        log_ratio = torch.log(rel.float().clamp(min=1) / max_exact) / math.log(self.max_distance / max_exact)
        large = (max_exact + (log_ratio * (n - max_exact)).long()).clamp(max=n - 1)
        return out + torch.where(is_small, rel, large)

    def attn_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        rel = k_pos[None, :].long() - q_pos[:, None].long()  # (Tq, Tk)
        return self.bias(self.bucket(rel)).permute(2, 0, 1)  # (H, Tq, Tk)

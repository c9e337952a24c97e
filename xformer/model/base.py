"""What the three model shapes share: sizes, variant factories, embeddings, parameter accounting,
the checks of a configuration, and the task-glue interface the training module calls.

Construction is driven by Hydra: ``hydra.utils.instantiate(cfg.model, src_vocab_size=V_s,
tgt_vocab_size=V_t, pad_id=0)``. The variant arguments (``attention``, ``norm``, ``pe``, ``ffn``) are
factories (``_partial_`` Hydra nodes or classes) called with the model's sizes; ``mixer`` builds each
block's attention modules.
"""

from __future__ import annotations

from typing import Annotated, Callable, Literal

import torch
from torch import Tensor, nn

from xformer.config_types import Range
from xformer.errors import ConfigError  # defined outside the model package: importable without torch

from .attention import AttentionPattern, FullAttention
from .dropout import Dropout
from .ffn import ReLUFFN
from .hooks import overrides
from .init import InitScheme, Xavier
from .layers import DecoderLayer, Stack, accepts, no_bias
from .mixer import Mixer, MultiHeadMixer
from .norm import PostNorm, Residual
from .positional import HOOKS as POSITIONAL_HOOKS
from .positional import NoPE, PositionalEncoding, Sinusoidal
from .tasks import fit_batch_to_positions


def resolve_sizes(
    d_model: int, n_heads: int, d_head: int | None, ffn_ratio: float, d_ff: int | None
) -> tuple[int, int]:
    """Return ``(d_head, d_ff)`` from the hyper-parameters.

    ``d_head`` defaults to ``d_model / n_heads``; ``d_ff`` to ``round(ffn_ratio · d_model)``.

    Raises:
        ConfigError: for non-positive sizes, ``d_model`` not divisible by ``n_heads`` without an
            explicit ``d_head``, or ``ffn_ratio <= 0``.
    """
    if d_model < 1:
        raise ConfigError(f"model.d_model={d_model}: must be a positive integer")
    if n_heads < 1:
        raise ConfigError(f"model.n_heads={n_heads}: must be a positive integer")
    if d_head is None:
        if d_model % n_heads:
            raise ConfigError(
                f"model.n_heads={n_heads}: d_model={d_model} is not divisible by it; "
                "pick a divisor of d_model or set model.d_head explicitly"
            )
        d_head = d_model // n_heads
    elif d_head < 1:
        raise ConfigError(f"model.d_head={d_head}: must be a positive integer (or null for d_model/n_heads)")
    if d_ff is None:
        if not ffn_ratio > 0:
            raise ConfigError(f"model.ffn_ratio={ffn_ratio}: must be > 0 (d_ff = ffn_ratio * d_model)")
        d_ff = max(1, round(ffn_ratio * d_model))
    elif d_ff < 1:
        raise ConfigError(f"model.d_ff={d_ff}: must be a positive integer (or null for ffn_ratio*d_model)")
    return d_head, d_ff


def _name(obj) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _require(obj, base: type, key: str, implement: str, where: str = "xformer.model") -> None:
    """Refuse a ``key`` variant that is not a ``base``: ConfigError naming its class and what to implement."""
    if not isinstance(obj, base):
        raise ConfigError(f"{key}: {_name(obj)} is not an {where}.{base.__name__}; subclass it and {implement}")


def check_positional(pe) -> None:
    """Refuse (ConfigError naming the class and the fix) a positional scheme that is not a
    :class:`PositionalEncoding` or that implements none of its hooks without being :class:`NoPE`."""
    _require(pe, PositionalEncoding, "model.pe", f"implement one of {', '.join(POSITIONAL_HOOKS)}")
    hooks = [h for h in POSITIONAL_HOOKS if overrides(type(pe), PositionalEncoding, h)]
    if not hooks and not isinstance(pe, NoPE) and type(pe) is not PositionalEncoding:
        raise ConfigError(
            f"model.pe: {_name(pe)} overrides none of the PositionalEncoding hooks "
            f"{', '.join(POSITIONAL_HOOKS)}; implement one (or subclass NoPE for no positions)"
        )


def check_residual(res) -> None:
    """Refuse (ConfigError naming the class and the fix) a norm placement that is not a
    :class:`Residual` or lacks ``forward(x, f)``."""
    _require(res, Residual, "model.norm", "implement forward(x, f)")
    if not overrides(type(res), Residual, "forward"):
        raise ConfigError(
            f"model.norm: {_name(res)} does not implement forward(x, f), the one hook of "
            "xformer.model.Residual (return the block output for input x and sub-layer f)"
        )


def check_ffn(ffn) -> None:
    """Refuse (ConfigError naming the class and the fix) an FFN that is not an ``nn.Module`` with its
    own ``forward(x)``."""
    if not isinstance(ffn, nn.Module) or not overrides(type(ffn), nn.Module, "forward"):
        raise ConfigError(
            f"model.ffn: {_name(ffn)} must be an nn.Module that implements forward(x) ((B, T, D) -> (B, T, D))"
        )


class ModelBase(nn.Module):
    """Shared construction and the task glue every shape implements for the training module, so that
    module never asks which shape it trains (compare torchtitan's model spec):

    * :meth:`logits_and_labels`: the teacher-forced logits of a batch and the labels they predict;
    * :meth:`generate`: decoded token ids for a batch (BLEU, exact match);
    * :meth:`check_data`: can this shape train on a data module, and :meth:`positions_needed`;
    * :meth:`fit_to_positions`: cut an evaluation batch to the model's positions.

    Batches are dicts: ``src`` ``(B, S)`` and ``tgt`` ``(B, T)`` (``[BOS] + y + [EOS]``) right-padded
    for sequence-to-sequence data; ``tgt`` (plus ``loss_mask``, ``prompt_len``) for language modelling.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (the data module supplies them).
        d_model: model width ``D``.
        n_heads: attention heads ``H``.
        d_head: per-head value size ``d_v`` and, unless ``d_qk`` is set, query/key size (default ``D / H``).
        d_qk: per-head query/key size ``d_k`` (``None`` = ``d_head``; Vaswani et al. 2017 Table 3 row B);
            softmax-attention mixers only.
        ffn_ratio: ``d_ff = ffn_ratio · D`` (float allowed); ignored when ``d_ff`` is given.
        d_ff: explicit FFN inner width.
        n_encoder_layers, n_decoder_layers: stack depths.
        dropout: dropout rate everywhere (embeddings, attention weights, sub-layer outputs, FFN).
        tie_embeddings: output projection shares the target embedding; with equal vocab sizes the
            source embedding is shared too (Press & Wolf 2017; Vaswani et al. §3.4).
        max_len: longest sequence the positional scheme must support.
        attn_scale: scale scores by 1/√d_head (Vaswani et al. 2017 §3.2.1).
        pad_id: padding token id; a padding mask not passed is derived from ``ids == pad_id``.
        attention: encoder self-attention pattern (instance or factory) — default full.
        norm: residual/norm placement factory ``(d_model, dropout) -> Residual`` — default Post-LN.
        pe: positional scheme factory ``(d_model, n_heads, d_head, max_len, causal)`` — default sinusoidal.
        ffn: FFN factory ``(d_model, d_ff, dropout)`` — default ReLU.
        mixer: the attention mechanism (:class:`~.mixer.Mixer`) and the stacks it serves — default
            :class:`~.mixer.MultiHeadMixer`, which the other stacks use.
        n_kv_heads: key/value heads of grouped-query attention; ``None`` = ``n_heads``.
        param_budget: when set, ``budget_solves`` (``"d_model"`` or ``"d_ff"``) is chosen so that the
            total parameter count is closest to it (ablations at equal size).
        budget_solves: which size the budget solves for.
        bias: biases in every projection and norm (``False``: none anywhere, as nanoGPT's default;
            the output layer has none in the LM/translation shapes).
        init: the initialisation scheme (:mod:`.init`) — default :class:`~.init.Xavier`, which also sets
            the ``√D`` embedding scale of §3.4.

    Raises:
        ConfigError: for invalid sizes or an unreachable budget (message names the key and the fix).
    """

    #: the shape's name, as in ``conf/model/arch/<arch>.yaml`` (for messages and summaries)
    arch: str = "base"

    @classmethod
    def stack_patterns(cls, pattern: AttentionPattern) -> dict[str, AttentionPattern]:
        """The self-attention pattern of each stack this shape builds (``"encoder"``/``"decoder"``),
        given the configured ``model.attention`` pattern."""
        raise NotImplementedError

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: Annotated[int, Range(ge=1)] = 512,
        n_heads: Annotated[int, Range(ge=1)] = 8,
        d_head: Annotated[int, Range(ge=1)] | None = None,
        ffn_ratio: Annotated[float, Range(gt=0)] = 4.0,
        d_ff: Annotated[int, Range(ge=1)] | None = None,
        n_encoder_layers: Annotated[int, Range(ge=0)] = 6,
        n_decoder_layers: Annotated[int, Range(ge=0)] = 6,
        dropout: Annotated[float, Range(ge=0, lt=1)] = 0.1,
        tie_embeddings: bool = True,
        max_len: Annotated[int, Range(ge=1)] | None = 512,
        attn_scale: bool = True,
        pad_id: int = 0,
        attention: AttentionPattern | Callable | None = None,
        norm: Callable[..., Residual] | None = None,
        pe: Callable[..., PositionalEncoding] | None = None,
        ffn: Callable[..., nn.Module] | None = None,
        param_budget: Annotated[int, Range(ge=1)] | None = None,
        budget_solves: Literal["d_model", "d_ff"] = "d_model",
        bias: bool = True,
        init: InitScheme | None = None,
        mixer: Mixer | None = None,
        n_kv_heads: Annotated[int, Range(ge=1)] | None = None,
        d_qk: Annotated[int, Range(ge=1)] | None = None,
    ) -> None:
        super().__init__()
        # the arguments but the budget's own, to build candidate models with (first: locals() grows)
        kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__", "param_budget", "budget_solves")}
        if param_budget:
            d_model, d_ff = self._solve_budget(kwargs, int(param_budget), budget_solves)
        self.d_head, self.d_ff = resolve_sizes(d_model, n_heads, d_head, ffn_ratio, d_ff)
        #: query/key head width d_k (``model.d_qk``, else ``d_head``); ``_qk_set``: it was given
        self.d_qk, self._qk_set = (self.d_head if d_qk is None else int(d_qk)), d_qk is not None
        self.d_model, self.n_heads, self.max_len, self.pad_id = d_model, n_heads, max_len, pad_id
        self.dropout_p, self.attn_scale, self.bias = dropout, attn_scale, bool(bias)
        self.init_scheme: InitScheme = Xavier() if init is None else init
        _require(self.init_scheme, InitScheme, "model.init", "implement __call__(model)", "xformer.model.init")
        #: factor on the token embeddings before positions are added (§3.4: √d_model)
        self.embed_scale = float(self.init_scheme.embed_scale(d_model))
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        pattern = FullAttention if attention is None else attention
        if not isinstance(pattern, AttentionPattern) and callable(pattern):
            pattern = pattern()
        self.pattern: AttentionPattern = pattern
        _require(self.pattern, AttentionPattern, "model.attention", "implement blocked(q_pos, k_pos)")
        self.residual = PostNorm if norm is None else norm
        self.pe_factory = Sinusoidal if pe is None else pe
        self.ffn_factory = ReLUFFN if ffn is None else ffn
        self.mixer: Mixer = MultiHeadMixer() if mixer is None else mixer
        _require(self.mixer, Mixer, "model.mixer", "implement self_attention(...) (and cross_attention(...))")
        try:
            self.n_kv_heads = self.mixer.kv_heads(n_heads, n_kv_heads)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.embed_drop = Dropout(dropout)

    # -- construction helpers ---------------------------------------------------------------
    def _block(
        self,
        cls: type,
        pattern: AttentionPattern,
        pe: PositionalEncoding,
        mixer: Mixer,
        n_kv_heads: int | None,
        layer: int = 0,
    ) -> nn.Module:
        """One block (``layer``: its index in the stack), its modules built in the order
        self-attention, cross-attention, FFN (a seed gives the same weights)."""
        sizes = dict(
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_head=self.d_head,
            dropout=self.dropout_p,
            scale=self.attn_scale,
            bias=self.bias,
            n_kv_heads=n_kv_heads,
        )
        depth = {"layer": layer} if accepts(mixer.self_attention, "layer") else {}
        qk = {}
        if self._qk_set:
            if not accepts(mixer.self_attention, "d_qk"):
                raise ConfigError(
                    f"model.d_qk={self.d_qk}: {type(mixer).__name__} has no separate query/key width. "
                    "Fix: model.d_qk=null, or a softmax-attention mixer (model/mixer=mha or gqa)"
                )
            qk = {"d_qk": self.d_qk}
        parts = {"self_attn": mixer.self_attention(**sizes, pattern=pattern, pos_embeddings=pe, **depth, **qk)}
        if cls is DecoderLayer:
            parts["cross_attn"] = mixer.cross_attention(**sizes, **qk)
        parts["ffn"] = self.ffn_factory(
            d_model=self.d_model,
            d_ff=self.d_ff,
            dropout=self.dropout_p,
            **no_bias(self.bias, self.ffn_factory, "model/ffn"),
        )
        return cls(**parts, residual=self.residual, d_model=self.d_model, dropout=self.dropout_p, bias=self.bias)

    def _stack(self, cls: type, n: int, name: str, causal: bool) -> Stack:
        """A stack of ``n`` blocks of ``cls`` with its pattern from :meth:`stack_patterns`; ``name``
        (``"encoder"``/``"decoder"``) decides whether it uses the configured mixer."""
        pattern = self.stack_patterns(self.pattern)[name]
        try:
            pe = self.pe_factory(  # a relative scheme acts on queries and keys: their width d_k
                d_model=self.d_model, n_heads=self.n_heads, d_head=self.d_qk, max_len=self.max_len, causal=causal
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
        check_positional(pe)
        residual = self.residual(d_model=self.d_model, dropout=0.0, **no_bias(self.bias, self.residual))
        check_residual(residual)
        mixer, n_kv = (self.mixer, self.n_kv_heads) if self.mixer.applies_to(name) else (MultiHeadMixer(), None)
        why = mixer.refusal(pattern, type(pe))
        if why:
            raise ConfigError(f"model/mixer ({type(mixer).__name__}, {name}): {why}")
        try:
            blocks = [self._block(cls, pattern, pe, mixer, n_kv, layer=i) for i in range(n)]
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for block in blocks[:1]:  # every block is built by the same factories
            check_ffn(block.ffn)
        return Stack(blocks, pe, pattern, residual.make_final_norm())

    def _embedding(self, vocab: int) -> nn.Embedding:
        # no padding_idx: an all-zero fully padded input has a zero-variance LayerNorm whose gradients
        # overflow fp16; masks already hide padding
        emb = nn.Embedding(vocab, self.d_model)
        nn.init.normal_(emb.weight, std=self.d_model**-0.5)
        return emb

    def _head(self, vocab: int, tie: nn.Embedding | None, bias: bool = False) -> None:
        """The output layer ``D -> vocab``, then the init scheme over the built model; the layer then
        shares ``tie``'s weight when given."""
        self.head = nn.Linear(self.d_model, vocab, bias=bias)
        self.init_scheme(self)
        if tie is not None:
            self.head.weight = tie.weight

    def _embed(self, emb: nn.Embedding, stack: Stack, ids: Tensor, start: int = 0) -> Tensor:
        """Token ids ``(B, T)`` → ``Dropout(E[ids]·s + PE)`` ``(B, T, D)`` with ``s`` the init scheme's
        embedding scale (``√D`` by default; §3.4, §3.5, §5.4)."""
        x = emb(ids)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        pos = torch.arange(start, start + ids.shape[1], device=ids.device)
        return self.embed_drop(stack.pe.embed(x, pos))

    def _padding(self, ids: Tensor, mask: Tensor | None) -> Tensor | None:
        if mask is not None:
            return mask
        if self.pad_id is None or self.pad_id < 0:  # negative: the data has no padding token
            return None
        mask = ids == self.pad_id
        if self.training or torch.compiler.is_compiling():  # no device sync, no graph break
            return mask
        return mask if bool(mask.any()) else None

    @classmethod
    def _solve_budget(cls, kwargs: dict, budget: int, solves: str) -> tuple[int, int | None]:
        """Pick ``d_model`` (a multiple of ``2·n_heads``) or ``d_ff`` whose parameter count is closest
        to ``budget``; counts come from models built on the meta device (no memory, no compute)."""

        def count(**over) -> int:
            with torch.device("meta"):
                model = cls(**{**kwargs, **over})
            return model.param_breakdown()["total"]

        if solves == "d_ff":
            lo, hi = count(d_ff=1), count(d_ff=1025)
            per = (hi - lo) / 1024
            d_ff = round(1 + (budget - lo) / per)
            if d_ff < 1:
                raise ConfigError(
                    f"model.param_budget={budget}: below the {lo} parameters the model has "
                    "without an FFN; raise the budget or shrink d_model"
                )
            return kwargs["d_model"], d_ff
        if solves != "d_model":
            raise ConfigError(f"model.budget_solves={solves!r}: use 'd_model' or 'd_ff'")
        step = 2 * kwargs["n_heads"] if kwargs.get("d_head") is None else 2
        best, best_err = None, None
        for d in range(step, 16384 + 1, step):
            n = count(d_model=d)
            if best_err is None or abs(n - budget) < best_err:
                best, best_err = d, abs(n - budget)
            if n > budget:
                break
        smallest = count(d_model=step)
        if budget < smallest and abs(smallest - budget) > 0.5 * budget:
            raise ConfigError(
                f"model.param_budget={budget}: the smallest model of this shape (d_model={step}) already has "
                f"{smallest} parameters. Fix: raise the budget, or use fewer layers/heads or a smaller vocabulary"
            )
        return best, None

    @property
    def position_limit(self) -> int | None:
        """Longest sequence (tokens) a stack of this model may be given: ``max_len`` when a stack uses
        an absolute scheme bound to it (``bounded``: learned, sinusoidal), else ``None`` (no limit)."""
        return self.max_len if any(s.pe.bounded for s in self._stacks()) else None

    def _stacks(self) -> list[Stack]:
        return [s for s in (getattr(self, name, None) for name in ("encoder", "decoder")) if s is not None]

    def blocks(self) -> list[nn.Module]:
        """Every block of every stack (encoder first), e.g. the units FSDP shards."""
        return [layer for s in self._stacks() for layer in s.layers]

    # -- accounting -------------------------------------------------------------------------
    def param_breakdown(self) -> dict[str, int]:
        """Parameter counts by role: ``total``, ``attention`` (the blocks' self- and cross-attention
        modules, whatever the mechanism), ``ffn``, ``embedding`` (token embeddings and an untied output
        projection), ``positional`` (learned positions, bias tables), ``norm``. Tied tensors count once."""
        seen: set[int] = set()
        out = {"attention": 0, "ffn": 0, "embedding": 0, "positional": 0, "norm": 0}

        def add(module: nn.Module, key: str) -> None:
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out[key] += p.numel()

        for block in self.blocks():
            for name in ("self_attn", "cross_attn"):
                if getattr(block, name, None) is not None:
                    add(getattr(block, name), "attention")
            add(block.ffn, "ffn")
        for m in self.modules():
            if isinstance(m, PositionalEncoding):
                add(m, "positional")
            elif isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
                add(m, "norm")
            elif isinstance(m, nn.Embedding) or m is getattr(self, "head", None):
                add(m, "embedding")
        out["other"] = sum(p.numel() for p in self.parameters() if id(p) not in seen)
        out["total"] = sum(out.values())
        return out

    # -- task glue (called by the training module; each shape implements it) ------------------
    def logits_and_labels(self, batch: dict, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits ``(B, T, V)`` for ``batch`` and the aligned labels ``(B, T)`` they
        predict (``pad_id`` = no loss)."""
        raise NotImplementedError

    def generate(
        self,
        batch: dict,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        beam_size: int = 1,
        alpha: float = 0.6,
        logits: Tensor | None = None,
    ) -> list[list[int]]:
        """Decoded ids for each example of ``batch`` (no PAD, BOS or EOS), at most
        ``max_len_a · S + max_len_b`` tokens each; ``logits``, when given, are :meth:`logits_and_labels`'
        of the same batch (a shape that predicts from them saves a forward pass)."""
        raise NotImplementedError

    def check_data(self, dm) -> None:
        """Refuse a data module this shape cannot train on (``dm.task``, ``dm.length_preserving``,
        vocabulary sizes).

        Raises:
            ConfigError: one line naming ``model/arch`` and the fix.
        """

    def positions_needed(self, dm) -> int:
        """The most positions one of ``dm``'s examples occupies in this model's longest stack."""
        return max(dm.max_src_len, dm.max_tgt_len)

    def fit_to_positions(self, batch: dict, pad_id: int, eos_id: int) -> tuple[dict, Tensor]:
        """``batch`` cut to :attr:`position_limit` (see :func:`.tasks.fit_batch_to_positions`) and a
        ``(B,)`` bool tensor marking the examples that were cut."""
        return fit_batch_to_positions(batch, self.position_limit, pad_id, eos_id)

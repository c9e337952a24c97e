"""The three model shapes with their task glue: encoder–decoder (Vaswani et al. 2017 §3),
decoder-only language model and encoder-only tagger, on :class:`.base.ModelBase`.
"""

from __future__ import annotations

from torch import Tensor
from typing_extensions import override

from .attention import AttentionPattern, CausalAttention
from .base import ConfigError, ModelBase
from .decoding import ban, beam_search, greedy, greedy_lm, max_output_len
from .layers import DecoderLayer, EncoderLayer, StackCache
from .tasks import fit_batch_to_positions, prefix_lm_batch, tagger_labels


class EncoderDecoder(ModelBase):
    """The Transformer of Vaswani et al. 2017 (§3, Figure 1): encoder, causal decoder with
    cross-attention, linear output layer.

    ``forward(src (B, S), tgt (B, T)) -> logits (B, T, V_tgt)``. Padding masks are ``(B, S)`` /
    ``(B, T)`` bool, ``True`` at padding; when omitted they are derived from ``pad_id``. The encoder
    self-attention uses ``attention`` (full by default); decoder self-attention is always causal.
    """

    arch = "encoder_decoder"

    @classmethod
    def stack_patterns(cls, pattern: AttentionPattern) -> dict[str, AttentionPattern]:
        return {"encoder": pattern, "decoder": CausalAttention()}

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **kwargs) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **kwargs)
        n_enc, n_dec = kwargs.get("n_encoder_layers", 6), kwargs.get("n_decoder_layers", 6)
        if n_enc < 1 or n_dec < 1:
            raise ConfigError("model.n_encoder_layers/n_decoder_layers: an encoder-decoder needs >= 1 of each")
        tie = kwargs.get("tie_embeddings", True)
        self.tgt_embed = self._embedding(tgt_vocab_size)
        self.src_embed = self.tgt_embed if tie and src_vocab_size == tgt_vocab_size else self._embedding(src_vocab_size)
        self.encoder = self._stack(EncoderLayer, n_enc, "encoder", causal=self.pattern.is_causal)
        self.decoder = self._stack(DecoderLayer, n_dec, "decoder", causal=True)
        self._head(tgt_vocab_size, self.tgt_embed if tie else None)

    def encode(self, src: Tensor, src_key_padding_mask: Tensor | None = None) -> Tensor:
        """Encode source ids ``(B, S)`` to memory ``(B, S, D)``."""
        mask = self._padding(src, src_key_padding_mask)
        return self.encoder(self._embed(self.src_embed, self.encoder, src), key_padding_mask=mask)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        memory_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        cache: StackCache | None = None,
    ) -> Tensor:
        """Logits ``(B, T, V)`` for target ids ``tgt`` ``(B, T)`` given ``memory`` ``(B, S, D)``.

        Incremental decoding: pass ``cache = model.new_cache()`` and feed only the new tokens each call
        (step ``t`` costs O(t), not O(t²)); ``tgt_key_padding_mask`` then covers all tokens so far.
        """
        start = 0 if cache is None else cache.size
        mask = tgt_key_padding_mask if cache is not None else self._padding(tgt, tgt_key_padding_mask)
        x = self._embed(self.tgt_embed, self.decoder, tgt, start)
        x = self.decoder(
            x, key_padding_mask=mask, cache=cache, memory=memory, memory_key_padding_mask=memory_key_padding_mask
        )
        return self.head(x)

    def new_cache(self, capacity: int | None = None) -> StackCache:
        """Empty decoder caches for :meth:`decode`, with room for ``capacity`` target positions
        (``None``: they grow as needed)."""
        return self.decoder.new_cache(capacity)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Teacher-forced logits ``(B, T, V_tgt)`` for ``src`` ``(B, S)`` and ``tgt`` ``(B, T)``."""
        src_mask = self._padding(src, src_key_padding_mask)
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, memory_key_padding_mask=src_mask, tgt_key_padding_mask=tgt_key_padding_mask)

    # -- task glue ------------------------------------------------------------------------------
    @override
    def logits_and_labels(self, batch: dict, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
        """Teacher forcing: the decoder reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``."""
        src, tgt = batch["src"], batch["tgt"]
        return self(src, tgt[:, :-1]), tgt[:, 1:]

    @override
    def generate(  # the types are ModelBase.generate's
        self, batch, bos_id, eos_id, pad_id, max_len_a=1.5, max_len_b=10, beam_size=1, alpha=0.6, logits=None
    ) -> list[list[int]]:
        """Greedy decoding (``beam_size=1``) or beam search with length penalty ``alpha`` from
        ``batch["src"]``, at most ``max_len_a · S + max_len_b`` tokens (and ``max_len``)."""
        src = batch["src"]
        max_len = max_output_len(src.shape[1], max_len_a, max_len_b, self.max_len)
        if beam_size > 1:
            return beam_search(self, src, bos_id, eos_id, pad_id, max_len, beam_size, alpha)
        return greedy(self, src, bos_id, eos_id, pad_id, max_len)

    def check_data(self, dm) -> None:
        if dm.task == "lm":
            raise ConfigError(
                f"model/arch=encoder_decoder: data {type(dm).__name__} is a language-modelling "
                "task; use model/arch=decoder_only"
            )


class DecoderOnly(ModelBase):
    """A causal language model (GPT-style) from the same blocks: ``n_decoder_layers`` self-attention
    + FFN blocks under the causal version of ``attention``.

    ``forward(tgt (B, T)) -> logits (B, T, V)``; vocabulary ``tgt_vocab_size`` (sequence-to-sequence
    data is fed as ``src <sep> tgt`` by the training module, which needs a joint vocabulary).
    """

    arch = "decoder_only"

    @classmethod
    def stack_patterns(cls, pattern: AttentionPattern) -> dict[str, AttentionPattern]:
        return {"decoder": pattern.causal()}

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **kwargs) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **kwargs)
        n_dec = kwargs.get("n_decoder_layers", 6)
        if n_dec < 1:
            raise ConfigError("model.n_decoder_layers: a decoder-only model needs >= 1 layer")
        self.tgt_embed = self._embedding(tgt_vocab_size)
        self.decoder = self._stack(EncoderLayer, n_dec, "decoder", causal=True)
        self._head(tgt_vocab_size, self.tgt_embed if kwargs.get("tie_embeddings", True) else None)

    def new_cache(self, capacity: int | None = None) -> StackCache:
        """Empty caches for incremental :meth:`forward`, with room for ``capacity`` positions
        (``None``: they grow as needed)."""
        return self.decoder.new_cache(capacity)

    def forward(
        self, tgt: Tensor, tgt_key_padding_mask: Tensor | None = None, cache: StackCache | None = None
    ) -> Tensor:
        """Next-token logits ``(B, T, V)`` for ``tgt`` ``(B, T)``; with ``cache`` feed only new tokens."""
        start = 0 if cache is None else cache.size
        mask = tgt_key_padding_mask if cache is not None else self._padding(tgt, tgt_key_padding_mask)
        x = self._embed(self.tgt_embed, self.decoder, tgt, start)
        return self.head(self.decoder(x, key_padding_mask=mask, cache=cache))

    # -- task glue ------------------------------------------------------------------------------
    @override
    def logits_and_labels(self, batch: dict, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
        """Language-model batches: next-token prediction over ``tgt`` (positions outside
        ``loss_mask`` get no loss). Sequence-to-sequence batches: a prefix LM over
        ``src + tgt`` with the loss on the target part (:func:`.tasks.prefix_lm_batch`; kept at its
        static width in training, so no length is read on the host)."""
        if "src" not in batch:
            tgt = batch["tgt"]
            inp, labels = tgt[:, :-1], tgt[:, 1:].clone()
            if "loss_mask" in batch:
                labels.masked_fill_(~batch["loss_mask"][:, 1:], pad_id)
            return self(inp), labels
        seq, labels, _ = prefix_lm_batch(batch["src"], batch["tgt"], pad_id, trim=not self.training)
        return self(seq), labels

    @override
    def generate(  # the types are ModelBase.generate's
        self, batch, bos_id, eos_id, pad_id, max_len_a=1.5, max_len_b=10, beam_size=1, alpha=0.6, logits=None
    ) -> list[list[int]]:
        """Greedy continuation of each prompt (source + BOS, or the batch's own ``prompt_len``
        tokens), within ``max_len`` positions in all; ``beam_size`` and ``alpha`` are not used."""
        if "src" in batch:
            seq, _, plen = prefix_lm_batch(batch["src"], batch["tgt"], pad_id)
            src_len = batch["src"].shape[1]
        else:
            seq, plen = batch["tgt"], batch["prompt_len"]
            src_len = int(plen.max())
        max_len = max_output_len(src_len, max_len_a, max_len_b, None)
        if self.max_len:
            max_len = max(1, min(max_len, self.max_len - int(plen.max())))
        return greedy_lm(self, seq, plen, eos_id, pad_id, max_len, bos=bos_id)

    def check_data(self, dm) -> None:
        if dm.task != "lm" and dm.src_vocab_size != dm.tgt_vocab_size:
            raise ConfigError(
                "model/arch=decoder_only: source and target vocabularies differ; "
                "use a joint vocabulary for prefix-LM training"
            )

    def positions_needed(self, dm) -> int:
        """Source and target share one sequence in prefix-LM training; a language model reads all
        but the last token of its longest sequence (``max_len = block_size`` suffices)."""
        if dm.task == "lm":  # the model reads tgt[:, :-1]: block_size positions for windows of block_size + 1
            return max(1, dm.max_tgt_len - 1)
        return dm.max_src_len + dm.max_tgt_len

    def fit_to_positions(self, batch: dict, pad_id: int, eos_id: int) -> tuple[dict, Tensor]:
        return fit_batch_to_positions(batch, self.position_limit, pad_id, eos_id, prefix_lm=True)


class EncoderOnly(ModelBase):
    """A bidirectional encoder with a per-token classification head (tagger, BERT-style).

    ``forward(src (B, S)) -> logits (B, S, n_classes)`` with ``n_classes = tgt_vocab_size``; pool
    them (e.g. mean over non-padding positions) for sequence classification.
    """

    arch = "encoder_only"

    @classmethod
    def stack_patterns(cls, pattern: AttentionPattern) -> dict[str, AttentionPattern]:
        return {"encoder": pattern}

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, **kwargs) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, **kwargs)
        n_enc = kwargs.get("n_encoder_layers", 6)
        if n_enc < 1:
            raise ConfigError("model.n_encoder_layers: an encoder-only model needs >= 1 layer")
        self.src_embed = self._embedding(src_vocab_size)
        self.encoder = self._stack(EncoderLayer, n_enc, "encoder", causal=self.pattern.is_causal)
        tie = kwargs.get("tie_embeddings", True) and src_vocab_size == tgt_vocab_size
        self._head(tgt_vocab_size, self.src_embed if tie else None, bias=self.bias)

    def forward(self, src: Tensor, src_key_padding_mask: Tensor | None = None) -> Tensor:
        """Per-token logits ``(B, S, n_classes)``."""
        mask = self._padding(src, src_key_padding_mask)
        return self.head(self.encoder(self._embed(self.src_embed, self.encoder, src), key_padding_mask=mask))

    # -- task glue ------------------------------------------------------------------------------
    def logits_and_labels(self, batch: dict, pad_id: int, eos_id: int) -> tuple[Tensor, Tensor]:
        """Tagging: label ``i`` is target token ``i`` (:func:`.tasks.tagger_labels`)."""
        src = batch["src"]
        return self(src), tagger_labels(src, batch["tgt"], pad_id, eos_id)

    @override
    def generate(  # the types are ModelBase.generate's
        self, batch, bos_id, eos_id, pad_id, max_len_a=1.5, max_len_b=10, beam_size=1, alpha=0.6, logits=None
    ) -> list[list[int]]:
        """One label per source token: the best ordinary label (labels never hold PAD, BOS or EOS,
        so neither do predictions); the length limits and beam settings are not used."""
        if logits is None:
            logits, _ = self.logits_and_labels(batch, pad_id, eos_id)
        pred = ban(logits, pad_id, bos_id, eos_id).argmax(-1)
        lens = (batch["src"] != pad_id).sum(1).tolist()
        return [pred[b, : lens[b]].tolist() for b in range(pred.shape[0])]

    def check_data(self, dm) -> None:
        if dm.task == "lm":
            raise ConfigError(
                "model/arch=encoder_only: needs a length-preserving seq2seq task "
                "(data=copy, reverse or sort); got a language-modelling task"
            )
        if not getattr(dm, "length_preserving", False):
            raise ConfigError(
                f"model/arch=encoder_only: data {type(dm).__name__} is not length-preserving; "
                "use data=copy, reverse or sort (tagging needs one label per source token)"
            )

"""Optimizers that need to see the model, not only its parameters: weight decay by parameter group
(``optim=adamw``; ``optim=adam`` is a ``torch.optim.Adam`` partial called with the parameters)."""

from __future__ import annotations

from typing import Annotated, Callable

import torch
from torch import nn

from xformer.config_types import Range


def decay_split(
    model: nn.Module, decay_min_ndim: int = 2, decay_embeddings: bool = False
) -> tuple[list[str], list[str]]:
    """``(decay, no_decay)`` parameter names (each tensor once; frozen ones left out). A parameter decays when it
    has at least ``decay_min_ndim`` dimensions (2: the projection matrices, not biases and norm gains), except
    lookup tables (``nn.Embedding``, positional schemes; a tied output layer follows the embedding) unless
    ``decay_embeddings`` (nanoGPT decays every >= 2-D tensor; torchtune and Hugging Face's trainer keep embeddings
    and norms out of decay)."""
    from xformer.model.positional import PositionalEncoding

    tables: set[int] = set()
    if not decay_embeddings:
        for m in model.modules():
            if isinstance(m, (nn.Embedding, PositionalEncoding)):
                tables.update(id(p) for p in m.parameters(recurse=False))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= decay_min_ndim and id(p) not in tables else no_decay).append(name)
    return decay, no_decay


class DecayGroups:
    """An optimizer factory ``model -> optimizer`` with two parameter groups: ``weight_decay`` (AdamW's
    decoupled λ) on the parameters :func:`decay_split` selects, 0 on the rest. ``optimizer``: factory
    ``param_groups -> torch.optim.Optimizer`` (a Hydra ``_partial_`` node, e.g. ``torch.optim.AdamW``).
    """

    def __init__(
        self,
        optimizer: Callable,
        weight_decay: Annotated[float, Range(ge=0)] = 0.1,
        decay_min_ndim: Annotated[int, Range(ge=0)] = 2,
        decay_embeddings: bool = False,
    ) -> None:
        self.optimizer, self.weight_decay = optimizer, float(weight_decay)
        self.decay_min_ndim, self.decay_embeddings = int(decay_min_ndim), bool(decay_embeddings)

    def groups(self, model: nn.Module) -> list[dict]:
        """The two parameter groups of ``model`` (each dict also holds the parameter ``names``)."""
        decay, no_decay = decay_split(model, self.decay_min_ndim, self.decay_embeddings)
        params = dict(model.named_parameters())
        return [
            {"params": [params[n] for n in decay], "weight_decay": self.weight_decay, "names": decay},
            {"params": [params[n] for n in no_decay], "weight_decay": 0.0, "names": no_decay},
        ]

    def __call__(self, model: nn.Module) -> torch.optim.Optimizer:
        groups = [{k: v for k, v in g.items() if k != "names"} for g in self.groups(model) if g["params"]]
        return self.optimizer(groups)


def build_optimizer(factory: Callable, model: nn.Module) -> torch.optim.Optimizer:
    """``factory(model)`` for a :class:`DecayGroups`, else ``factory(model.parameters())``."""
    return factory(model) if isinstance(factory, DecayGroups) else factory(model.parameters())

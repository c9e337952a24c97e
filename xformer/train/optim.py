"""Optimizers that need to see the model, not only its parameters: weight decay by parameter group.

The ``optim`` config group (``conf/optim/``) gives the training module an optimizer factory. For
``adam`` that is a ``torch.optim.Adam`` partial called with the parameters; for ``adamw`` it is a
:class:`DecayGroups`, called with the model, which splits the parameters into a decayed and an
undecayed group before building the optimizer.
"""

from __future__ import annotations

from typing import Annotated, Callable

import torch
from torch import nn

from xformer.config_types import Range


def is_embedding_table(module: nn.Module) -> bool:
    """True for modules whose parameters are lookup tables: ``nn.Embedding`` and positional schemes
    (learned positions, T5's relative-bias table)."""
    from xformer.model.positional import PositionalEncoding

    return isinstance(module, (nn.Embedding, PositionalEncoding))


def decay_split(
    model: nn.Module, decay_min_ndim: int = 2, decay_embeddings: bool = False
) -> tuple[list[str], list[str]]:
    """Names of the parameters that get weight decay and of those that do not.

    Rule: a parameter decays when it has at least ``decay_min_ndim`` dimensions (with 2: the
    projection matrices; biases and norm gains are 1-D), except embedding tables
    (:func:`is_embedding_table`) unless ``decay_embeddings``. A tied output layer shares the token
    embedding's tensor, so it follows the embedding (nanoGPT, ``decay_embeddings=true``, decays every
    >= 2-D tensor; torchtune and Hugging Face's trainer keep embeddings and norms out of decay).

    Each tensor appears once (tied tensors under the first name ``named_parameters`` gives).
    Parameters with ``requires_grad=False`` are left out.

    Returns:
        ``(decay, no_decay)``: parameter names.
    """
    tables: set[int] = set()
    if not decay_embeddings:
        for m in model.modules():
            if is_embedding_table(m):
                tables.update(id(p) for p in m.parameters(recurse=False))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= decay_min_ndim and id(p) not in tables else no_decay).append(name)
    return decay, no_decay


class DecayGroups:
    """An optimizer factory ``model -> optimizer`` with two parameter groups: ``weight_decay`` on the
    parameters :func:`decay_split` selects, 0 on the rest.

    Args:
        optimizer: factory ``param_groups -> torch.optim.Optimizer`` (a Hydra ``_partial_`` node,
            e.g. ``torch.optim.AdamW``).
        weight_decay: decay of the decayed group (AdamW's decoupled λ).
        decay_min_ndim, decay_embeddings: the rule (see :func:`decay_split`).

    The ranges of ``weight_decay`` and ``decay_min_ndim`` (>= 0) are in their annotations, checked with
    the config.
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

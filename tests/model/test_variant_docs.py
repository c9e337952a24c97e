"""docs/variants.md gives each base class's constructor as the code has it, and its Residual example
builds and computes x + alpha * f(LayerNorm(x))."""

from __future__ import annotations

import functools
import inspect
import re

import torch

from tests.conftest import REPO
from xformer.model.attention import AttentionPattern, LocalAttention
from xformer.model.ffn import ReLUFFN
from xformer.model.init import GPT2, InitScheme
from xformer.model.mixer import Mixer
from xformer.model.norm import Residual
from xformer.model.positional import PositionalEncoding

DOC = (REPO / "docs" / "variants.md").read_text()


def test_each_documented_constructor_is_the_code_signature():
    for cls in (PositionalEncoding, AttentionPattern, Residual, ReLUFFN, Mixer, InitScheme, LocalAttention, GPT2):
        sig = str(inspect.signature(cls, eval_str=True)).removesuffix(" -> None").replace("typing.", "")
        written = f"`{cls.__name__}{sig}`".replace("|", "\\|")
        assert written in DOC, written


def test_the_documented_residual_subclass_builds_and_computes_what_it_says():
    code = re.search(r"```python\n(.*?)```", DOC[DOC.index("## Constructors") :], re.S).group(1)
    namespace: dict = {}
    exec(code, namespace)  # the example as written
    factory = functools.partial(namespace["ScaledResidual"], alpha=0.5)  # what `_partial_: true` makes
    res = factory(d_model=8, dropout=0.0)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    res = res.double()
    expected = x + 0.5 * 2 * torch.nn.functional.layer_norm(x, (8,), eps=1e-5)
    torch.testing.assert_close(res(x, lambda h: 2 * h), expected)

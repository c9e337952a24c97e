"""xformer data layer: tokenizers, batching, downloads and one LightningDataModule per data set.

Every DataModule follows the contract in :class:`xformer.data.base.XformerDataModule`.
"""

from xformer.data.base import XformerDataModule
from xformer.data.errors import DataError
from xformer.data.multi30k import Multi30kDataModule
from xformer.data.numbers import NumbersDataModule
from xformer.data.synthetic import SyntheticDataModule
from xformer.data.text import TextDataModule
from xformer.data.tinyshakespeare import TinyShakespeareDataModule
from xformer.data.tokenizers import BOS, EOS, PAD, UNK, BPETokenizer, CharTokenizer

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "UNK",
    "BPETokenizer",
    "CharTokenizer",
    "DataError",
    "Multi30kDataModule",
    "NumbersDataModule",
    "SyntheticDataModule",
    "TextDataModule",
    "TinyShakespeareDataModule",
    "XformerDataModule",
]

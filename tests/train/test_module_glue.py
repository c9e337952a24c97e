"""The training module asks the model for its task glue and never tests the model's shape."""

import torch
from typing_extensions import override

from xformer.model import EncoderDecoder
from xformer.train.module import TransformerLitModule

PAD, BOS, EOS = 0, 1, 2


class Probe(EncoderDecoder):
    """An encoder–decoder that records which glue the module calls."""

    calls: list

    def logits_and_labels(self, batch, pad_id, eos_id):
        self.calls.append(("logits_and_labels", pad_id, eos_id))
        return super().logits_and_labels(batch, pad_id, eos_id)

    @override
    def generate(self, batch, bos_id, eos_id, pad_id, max_len_a=1.5, max_len_b=10, beam_size=1, alpha=0.6, logits=None):
        self.calls.append(("generate", bos_id, eos_id, pad_id, max_len_a, max_len_b, beam_size, alpha))
        return [[7, 8]] * batch["src"].shape[0]


def test_module_delegates_loss_inputs_and_generation_to_the_model():
    model = Probe(20, 20, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    model.calls = []
    module = TransformerLitModule(
        model,
        optimizer=None,
        lr_lambda=None,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        decode={"beam_size": 3, "alpha": 0.2, "max_len_a": 1.0, "max_len_b": 4},
        detokenize=lambda ids: "-".join(map(str, ids)),
    )
    src = torch.randint(3, 20, (2, 5))
    tgt = torch.cat([torch.full((2, 1), BOS), torch.randint(3, 20, (2, 4)), torch.full((2, 1), EOS)], 1)
    logits, labels = module.logits_and_labels({"src": src, "tgt": tgt})
    assert logits.shape == (2, 5, 20) and torch.equal(labels, tgt[:, 1:])
    assert module.generate({"src": src}) == ["7-8", "7-8"]
    assert model.calls == [("logits_and_labels", PAD, EOS), ("generate", BOS, EOS, PAD, 1.0, 4, 3, 0.2)]

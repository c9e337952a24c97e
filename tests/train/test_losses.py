"""``CrossEntropy.sum_and_nll``: the training step's objective and its unsmoothed NLL from one
log-softmax, against PyTorch's own ``F.cross_entropy`` (the independent reference): the loss, its
gradient and the NLL must be bit for bit PyTorch's, so published runs reproduce by their own commands."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xformer.train.losses import CrossEntropy

PAD = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_sum_and_nll_is_bit_for_bit_torchs_cross_entropy(eps, dtype):
    g = torch.Generator().manual_seed(7)
    logits = (3 * torch.randn(5, 9, 301, generator=g)).to(dtype)
    labels = torch.randint(1, 301, (5, 9), generator=g)
    labels[1, 4:] = PAD  # padding: no loss
    labels[3, 7:] = PAD

    ref_in = logits.clone().requires_grad_()
    flat = ref_in.flatten(0, 1)
    ref = F.cross_entropy(flat, labels.flatten(), ignore_index=PAD, label_smoothing=eps, reduction="sum")
    ref.backward()
    ref_nll = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD, reduction="sum")

    got_in = logits.clone().requires_grad_()
    loss, nll = CrossEntropy(eps).sum_and_nll(got_in, labels, PAD)
    loss.backward()
    assert torch.equal(loss.detach(), ref.detach())
    assert torch.equal(got_in.grad, ref_in.grad)
    assert torch.equal(nll, ref_nll) and not nll.requires_grad
    if eps:
        assert not torch.equal(nll, loss.detach())  # smoothing changes the objective, so the check can fail

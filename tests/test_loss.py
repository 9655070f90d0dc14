"""The training loss: label-smoothed cross-entropy summed over real tokens, equal to PyTorch's own
definition, with padding ignored (no value, no gradient)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt.loss import alignment_loss, output_cross_entropy, sequence_loss
from nmt.vocab import PAD_ID

V = 11


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, V, generator=gen) * 3
    targets = torch.randint(1, V, (3, 5), generator=gen)
    targets[0, 3:] = PAD_ID
    targets[2, 1:] = PAD_ID
    return logits, targets


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_equals_torch_cross_entropy(eps: float) -> None:
    logits, targets = _inputs()
    loss, nll, count = sequence_loss(logits, targets, PAD_ID, eps)
    expected = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=PAD_ID, label_smoothing=eps,
                               reduction="sum")  # fmt: skip
    torch.testing.assert_close(loss, expected)
    expected_nll = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=PAD_ID, reduction="sum")
    torch.testing.assert_close(nll, expected_nll)
    assert count == int((targets != PAD_ID).sum()) == 15 - 2 - 4
    assert loss.dim() == nll.dim() == 0 and not nll.requires_grad


def test_flat_and_batched_inputs_agree() -> None:
    logits, targets = _inputs(1)
    batched = sequence_loss(logits, targets, PAD_ID, 0.1)
    flat = sequence_loss(logits.view(-1, V), targets.view(-1), PAD_ID, 0.1)
    torch.testing.assert_close(batched[0], flat[0])
    assert batched[2] == flat[2]


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_padding_positions_are_ignored(eps: float) -> None:
    logits, targets = _inputs(2)
    logits.requires_grad_(True)
    loss, nll, count = sequence_loss(logits, targets, PAD_ID, eps)
    loss.backward()
    pad = targets == PAD_ID
    assert torch.all(logits.grad[pad] == 0), "no gradient flows into padded positions"
    assert torch.all(logits.grad[~pad].abs().sum(-1) > 0)

    changed = logits.detach().clone()
    changed[pad] = torch.randn_like(changed[pad]) * 100
    loss2, nll2, count2 = sequence_loss(changed, targets, PAD_ID, eps)
    torch.testing.assert_close(loss2, loss.detach())
    torch.testing.assert_close(nll2, nll)
    assert count2 == count


def test_smoothing_pays_for_overconfidence() -> None:
    """With smoothing, a one-hot-confident correct prediction costs more than a softened one."""
    targets = torch.tensor([4])
    confident = torch.full((1, V), -50.0)
    confident[0, 4] = 50.0
    soft = torch.zeros((1, V))
    soft[0, 4] = 5.0
    assert sequence_loss(confident, targets, PAD_ID, 0.0)[0] < sequence_loss(soft, targets, PAD_ID, 0.0)[0]
    assert sequence_loss(confident, targets, PAD_ID, 0.1)[0] > sequence_loss(soft, targets, PAD_ID, 0.1)[0]


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_fused_output_loss_equals_projection_then_loss(eps: float, chunk: int) -> None:
    """The fused, chunked output layer + loss gives the value and the gradients of the plain path."""
    gen = torch.Generator().manual_seed(3)
    features = torch.randn(23, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(V, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(1, V, (23,), generator=gen)
    loss, nll = output_cross_entropy(features, weight, bias, targets, eps, chunk=chunk)
    grads = torch.autograd.grad(loss, (features, weight, bias))
    logits = features @ weight.t() + bias
    expected = F.cross_entropy(logits, targets, label_smoothing=eps, reduction="sum")
    expected_grads = torch.autograd.grad(expected, (features, weight, bias))
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, F.cross_entropy(logits.detach(), targets, reduction="sum"))
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


def _rows(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2, dim=-1)


def test_the_alignment_loss_is_smallest_exactly_where_attention_equals_the_links_distribution() -> None:
    guide = _rows(0, (2, 3, 5))  # (B, T, S) targets
    at_guide = alignment_loss(guide, guide)
    for seed in range(1, 20):
        assert alignment_loss(_rows(seed, (2, 3, 5)), guide) > at_guide
    scores = guide.log().clone().requires_grad_(True)  # attention = softmax(scores) = guide
    alignment_loss(torch.softmax(scores, dim=-1), guide).backward()
    torch.testing.assert_close(scores.grad, torch.zeros_like(scores), atol=1e-6, rtol=0)  # a stationary point
    torch.testing.assert_close(at_guide, -(guide * guide.log()).sum())  # the targets' entropy


def test_the_alignment_loss_ignores_positions_without_links() -> None:
    guide = _rows(0, (2, 4, 5))
    guide[0, 1] = 0.0  # target position without links
    guide[1, 3] = 0.0
    attention = _rows(1, (2, 4, 5)).requires_grad_(True)
    alignment_loss(attention, guide).backward()
    assert not attention.grad[0, 1].any() and not attention.grad[1, 3].any()
    changed = attention.detach().clone()
    changed[0, 1], changed[1, 3] = _rows(2, (5,)), _rows(3, (5,))
    torch.testing.assert_close(alignment_loss(changed, guide), alignment_loss(attention.detach(), guide))

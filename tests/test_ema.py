"""The moving average of the weights: the update rule, swapping the average in and out, tied
tensors, and reloading it from a checkpoint's weights."""

from __future__ import annotations

import pytest
import torch
from conftest import build_tiny_model

from nmt.training.ema import WeightAverage


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))


def test_average_follows_the_exponential_rule() -> None:
    net = _net()
    start = [p.detach().clone() for p in net.parameters()]
    ema = WeightAverage(net, decay=0.9)
    expected = [s.clone() for s in start]
    for step in range(5):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(float(step + 1))
        ema.update(net)
        current = [p.detach() for p in net.parameters()]
        expected = [0.9 * e + 0.1 * c for e, c in zip(expected, current)]
    for avg, exp in zip(ema.average, expected):
        torch.testing.assert_close(avg, exp)


def test_swapped_into_shows_the_average_then_restores_the_trained_weights() -> None:
    net = _net()
    ema = WeightAverage(net, decay=0.5)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    ema.update(net)
    trained = [p.detach().clone() for p in net.parameters()]
    with ema.swapped_into(net):
        for p, avg in zip(net.parameters(), ema.average):
            torch.testing.assert_close(p.detach(), avg)
    for p, own in zip(net.parameters(), trained):
        torch.testing.assert_close(p.detach(), own)
    with pytest.raises(RuntimeError, match="inside"), ema.swapped_into(net):  # restored on errors too
        raise RuntimeError("inside")
    for p, own in zip(net.parameters(), trained):
        torch.testing.assert_close(p.detach(), own)


def test_tied_tensors_are_averaged_once() -> None:
    model = build_tiny_model("bahdanau", "bahdanau", extra=("model.tie_embeddings=true", "model.decoder.output_dim=16"))
    ema = WeightAverage(model, decay=0.9)
    assert len(ema.average) == len(list(model.parameters()))  # parameters() lists a shared tensor once
    with ema.swapped_into(model):
        assert model.decoder.output.weight is model.decoder.embedding.weight


def test_load_from_a_state_dict() -> None:
    net = _net()
    ema = WeightAverage(net, decay=0.99)
    other = _net()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-3.0)
    ema.load_from(other.state_dict())
    for avg, p in zip(ema.average, other.parameters()):
        torch.testing.assert_close(avg, p.detach())


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5])
def test_decay_outside_the_open_interval_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match=r"train.ema=.*\(0, 1\)"):
        WeightAverage(_net(), decay)

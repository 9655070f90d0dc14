"""An exponential moving average of the weights (Polyak & Juditsky 1992; as used for NMT by e.g.
Marian's ``--exponential-smoothing``), kept beside the trained weights during training::

    w_ema <- decay * w_ema + (1 - decay) * w        after every update

It averages away the noise of the last few thousand updates, as checkpoint averaging does, but over
every update and without extra files. When ``train.ema`` is on, validation, the final test scores
and the checkpoints' ``model`` weights use the average; the trained weights travel in the
checkpoint's training state so that a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


class WeightAverage:
    """The moving average of a model's floating-point parameters.

    :param model: the model being trained; its current weights start the average.
    :param decay: the weight of the old average at each update, in (0, 1).
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"train.ema={decay}: the decay must be in (0, 1), e.g. 0.999 (0 turns the average off)")
        self.decay = decay
        self.names = [name for name, p in model.named_parameters() if p.is_floating_point()]  # tied tensors once
        self.average = [p.detach().clone() for _, p in self._pairs(model)]

    def _pairs(self, model: nn.Module) -> list[tuple[str, Tensor]]:
        params = dict(model.named_parameters())
        return [(name, params[name]) for name in self.names]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards the model's current weights (one fused op for all tensors)."""
        current = [p.detach() for _, p in self._pairs(model)]
        torch._foreach_lerp_(self.average, current, 1.0 - self.decay)  # avg += (1 - decay) * (w - avg)

    @contextmanager
    def swapped_into(self, model: nn.Module) -> Iterator[None]:
        """Inside the block the model holds the averaged weights; its own come back afterwards."""
        pairs = self._pairs(model)
        saved = [p.detach().clone() for _, p in pairs]
        with torch.no_grad():
            for (_, p), avg in zip(pairs, self.average):
                p.copy_(avg)
        try:
            yield
        finally:
            with torch.no_grad():
                for (_, p), own in zip(pairs, saved):
                    p.copy_(own)

    def load_from(self, state_dict: dict[str, Tensor]) -> None:
        """Take the average from a model state dict (a checkpoint's ``model`` entry)."""
        with torch.no_grad():
            for name, avg in zip(self.names, self.average):
                avg.copy_(state_dict[name])

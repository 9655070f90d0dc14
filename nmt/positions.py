"""Where a token is: position encodings added to the Transformer's embeddings (Vaswani et al. 2017,
section 3.5). Self-attention by itself is blind to order (permuting the keys permutes nothing in a
weighted average), so each embedding gets a vector that depends on its position.

    sinusoidal   PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
                 PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))
    learned      one trained vector per position, up to ``max_positions``

The sinusoids are computed when needed, for the positions asked for: they hold no state, work for
any length, and a decoder step at position t computes only row t.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

POSITIONS = ("sinusoidal", "learned")


def sinusoids(positions: Tensor, d_model: int) -> Tensor:
    """The sinusoidal encodings of ``positions``.

    :param positions: (T,) long, 0-based. :param d_model: D, even or odd.
    :return: (T, D) float32; even columns sines, odd columns cosines of the same frequency.
    """
    half = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)  # (ceil(D/2),) = 2i
    frequencies = torch.exp(-math.log(10000.0) * half / d_model)  # 1 / 10000^(2i / D)
    angles = positions.float().unsqueeze(1) * frequencies  # (T, 1) * (ceil(D/2),) -> (T, ceil(D/2))
    table = torch.zeros(positions.numel(), d_model, device=positions.device)  # (T, D)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


class PositionalEncoding(nn.Module):
    """Position vectors for the first T positions, or for one position of an incremental decoder.

    :param kind: ``sinusoidal`` or ``learned``.
    :param d_model: D.
    :param max_positions: the longest sequence a ``learned`` table covers (ignored by sinusoids).
    """

    def __init__(self, kind: str, d_model: int, max_positions: int) -> None:
        super().__init__()
        if kind not in POSITIONS:
            raise ValueError(f"positions={kind!r}: choose one of {', '.join(POSITIONS)}")
        if max_positions < 1:
            raise ValueError(f"max_positions={max_positions}: must be at least 1")
        self.kind, self.d_model, self.max_positions = kind, d_model, max_positions
        self.table = nn.Embedding(max_positions, d_model) if kind == "learned" else None
        if self.table is not None:
            nn.init.normal_(self.table.weight, std=d_model**-0.5)

    def forward(self, length: int, start: int = 0, device: torch.device | None = None) -> Tensor:
        """:param length: T positions, from ``start`` on. :return: (T, D) float."""
        if self.table is not None and start + length > self.max_positions:
            raise ValueError(
                f"a sequence of {start + length} positions is longer than the learned table's {self.max_positions} "
                "(model.*.max_positions); shorten the input or train with positions=sinusoidal"
            )
        positions = torch.arange(start, start + length, device=device)  # (T,)
        return sinusoids(positions, self.d_model) if self.table is None else self.table(positions)  # (T, D)

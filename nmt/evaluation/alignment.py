"""Summary statistics of attention alignments (numpy only): how peaked and how diagonal they are.

For one sentence the weights form a (T, S) matrix, row i the distribution over source positions
when emitting target token i (EOS rows and columns included), each row summing to one.

    entropy of row i       H_i = -sum_j a_ij log a_ij    (nats; 0 = all mass on one source token)
    normalised entropy     H_i / log S                   (1 = uniform over the source)
    diagonal mass of row i sum of a_ij over the band |(j + 0.5) / S - (i + 0.5) / T| <= band

The band compares relative positions (cell centres scaled to [0, 1]), so it is as wide, relative to
the sentence, for long and short sentences; with ``band = 0.1`` and S = T = 20 it holds the
diagonal cell and two neighbours either side. A monotonic, roughly length-preserving translation
puts most of its mass in the band; a reordering language pair or diffuse attention does not.
Statistics are averaged over all rows of all sentences (every target token weighs the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """(T, S) -> (T,) entropy in nats of each row (0 log 0 = 0)."""
    weights = np.asarray(weights, dtype=np.float64)
    logs = np.log(np.where(weights > 0, weights, 1.0))
    return -(weights * logs).sum(axis=1)


def diagonal_band(num_tgt: int, num_src: int, band: float) -> np.ndarray:
    """(T, S) bool: cells whose relative positions differ by at most ``band``."""
    rows = (np.arange(num_tgt) + 0.5) / num_tgt  # (T,)
    cols = (np.arange(num_src) + 0.5) / num_src  # (S,)
    return np.abs(cols[None, :] - rows[:, None]) <= band + 1e-12  # (1, S) - (T, 1) -> (T, S)


def diagonal_mass(weights: np.ndarray, band: float) -> np.ndarray:
    """(T, S) -> (T,) attention mass of each row inside the diagonal band."""
    weights = np.asarray(weights, dtype=np.float64)
    return (weights * diagonal_band(*weights.shape, band)).sum(axis=1)


@dataclass
class AttentionStats:
    """Averages over every target token of a set of alignments."""

    mean_entropy: float  # nats
    mean_normalized_entropy: float  # entropy / log S, over rows with S > 1
    diagonal_mass: float  # fraction of attention mass within the band
    band: float
    num_sentences: int
    num_rows: int

    def to_dict(self) -> dict:
        return asdict(self)


def attention_stats(alignments: Sequence[np.ndarray], band: float) -> AttentionStats:
    """Mean entropy and diagonal mass of ``alignments``, each (T, S) with rows summing to one."""
    entropies, normalized, masses = [], [], []
    for weights in alignments:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.size == 0:
            continue
        h = row_entropy(weights)
        entropies.append(h)
        if weights.shape[1] > 1:
            normalized.append(h / np.log(weights.shape[1]))
        masses.append(diagonal_mass(weights, band))
    if not entropies:
        nan = float("nan")
        return AttentionStats(nan, nan, nan, band, 0, 0)
    mean = lambda parts: float(np.concatenate(parts).mean()) if parts else float("nan")  # noqa: E731
    rows = int(sum(len(h) for h in entropies))
    return AttentionStats(mean(entropies), mean(normalized), mean(masses), band, len(entropies), rows)

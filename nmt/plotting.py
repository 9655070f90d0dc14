"""Figures from numpy arrays and labels (matplotlib, Agg backend): attention heatmaps and curves.
Nothing here imports torch or the model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def attention_figure(
    weights: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str], title: str = "", ax=None
) -> Figure:
    """Heatmap of one alignment: rows are target subwords, columns source subwords.

    :param weights: (T, S) attention weights, rows summing to one.
    :param src_labels: S source subwords (EOS included).
    :param tgt_labels: T target subwords (EOS included).
    """
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(f"weights {weights.shape} do not match {len(tgt_labels)} x {len(src_labels)} labels")
    if ax is None:
        height, width = weights.shape
        fig, ax = plt.subplots(figsize=(max(3.0, 0.35 * width + 1.5), max(3.0, 0.35 * height + 1.0)))
    else:
        fig = ax.figure
    ax.imshow(weights, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_labels)), labels=list(src_labels), rotation=90, fontsize=8)
    ax.set_yticks(range(len(tgt_labels)), labels=list(tgt_labels), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> None:
    """Save as PNG through a temporary name, then close the figure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)
    plt.close(fig)

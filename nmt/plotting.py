"""Figures from numpy arrays and labels (matplotlib): attention heatmaps, grids of them, and BLEU by
sentence length with confidence intervals. Nothing here imports torch or the model.

Figures are plain ``matplotlib.figure.Figure`` objects, not pyplot's: importing this module
changes no backend or global state (a notebook keeps its inline plots, and shows a returned figure
as it shows any), and :func:`figure_png` draws through the Agg canvas whatever the backend.
matplotlib itself is imported by the first figure drawn, so a command that draws none (most
translations) starts without it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(**kwargs) -> Figure:
    """A new ``Figure`` (matplotlib is imported here, on first use: it takes most of a second)."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def attention_figure(
    weights: np.ndarray, src_labels: Sequence[str], tgt_labels: Sequence[str], title: str = "", ax=None
) -> Figure:
    """Heatmap of one alignment: rows are target subwords, columns source subwords.

    :param weights: (T, S) attention weights, rows summing to one.
    :param src_labels: S source subwords (EOS included).
    :param tgt_labels: T target subwords (EOS included).
    :param ax: axes to draw into (the caller then lays out its figure); None makes a new figure.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(f"weights {weights.shape} do not match {len(tgt_labels)} x {len(src_labels)} labels")
    own_figure = ax is None
    if own_figure:
        height, width = weights.shape
        fig = _figure(figsize=(max(3.0, 0.35 * width + 1.5), max(3.0, 0.35 * height + 1.0)))
        ax = fig.subplots()
    else:
        fig = ax.figure
    ax.imshow(weights, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_labels)), labels=list(src_labels), rotation=90, fontsize=8)
    ax.set_yticks(range(len(tgt_labels)), labels=list(tgt_labels), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title, fontsize=9)
    if own_figure:  # a caller that passes ``ax`` lays out its own figure
        fig.tight_layout()
    return fig


def alignment_grid_figure(
    alignments: Sequence[tuple[np.ndarray, Sequence[str], Sequence[str], str]], ncols: int = 3, title: str = ""
) -> Figure:
    """Several alignments side by side, one heatmap per panel (see :func:`attention_figure`).

    :param alignments: ``(weights (T, S), src_labels, tgt_labels, panel title)`` per panel.
    :param ncols: panels per row.
    """
    if not alignments:
        raise ValueError("no alignments to draw")
    ncols = max(1, min(ncols, len(alignments)))
    nrows = -(-len(alignments) // ncols)  # ceil
    width = max(np.asarray(w).shape[1] for w, *_ in alignments)
    height = max(np.asarray(w).shape[0] for w, *_ in alignments)
    panel_w, panel_h = min(8.0, max(3.0, 0.12 * width + 1.5)), min(8.0, max(3.0, 0.12 * height + 1.2))
    fig = _figure(figsize=(panel_w * ncols, panel_h * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    small = max(width, height) > 30  # long sentences: label every token in a smaller font
    for ax, (weights, src_labels, tgt_labels, panel_title) in zip(axes.flat, alignments):
        attention_figure(weights, src_labels, tgt_labels, title=panel_title, ax=ax)
        if small:
            ax.tick_params(labelsize=5)
    for ax in axes.flat[len(alignments) :]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.97) if title else (0, 0, 1, 1))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def bleu_by_length_figure(
    bin_labels: Sequence[str],
    counts: Sequence[int],
    systems: Mapping[str, np.ndarray],
    min_count: int = 0,
    xlabel: str = "source length (words)",
    title: str = "",
    interval: str = "95% bootstrap interval",
    band: bool = False,
) -> Figure:
    """Corpus BLEU per length bin for several systems, with an interval per bin drawn as error bars
    or, with ``band``, as a shaded band around the line.

    :param bin_labels: B bin names, e.g. ``["<10", "10-14", "25+"]``.
    :param counts: B sentence counts (shown under the labels).
    :param systems: name -> (B, 3) float array of BLEU, interval low, interval high per bin; NaN
        where a bin is empty (no point is drawn).
    :param min_count: bins with fewer sentences get hollow markers (the caption says so).
    :param interval: what the interval is, for the caption (e.g. "mean over seeds, band: ±1 sd").
    """
    num_bins = len(bin_labels)
    if len(counts) != num_bins:
        raise ValueError(f"{len(counts)} counts for {num_bins} bins")
    x = np.arange(num_bins, dtype=float)
    few = np.asarray(counts) < min_count
    fig = _figure(figsize=(max(5.0, 1.1 * num_bins + 2.5), 4.0))
    ax = fig.subplots()
    offsets = np.linspace(-0.12, 0.12, len(systems)) if len(systems) > 1 else [0.0]
    for offset, (name, values) in zip(offsets, systems.items()):
        values = np.asarray(values, dtype=float)
        if values.shape != (num_bins, 3):
            raise ValueError(f"system {name}: values {values.shape}, expected ({num_bins}, 3)")
        bleu, low, high = values.T  # (B,) each
        xs = x if band else x + offset  # error bars side by side; bands share the bin's position
        if band:
            (line,) = ax.plot(xs, bleu, marker="o", label=name)
            color = line.get_color()
            ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)
        else:
            yerr = np.vstack([bleu - low, high - bleu])  # (2, B), NaN where unknown
            color = ax.errorbar(xs, bleu, yerr=np.nan_to_num(yerr), marker="o", capsize=3, label=name)[0].get_color()
        if few.any():  # hollow markers on top of the filled ones for flagged bins
            ax.plot(xs[few], bleu[few], linestyle="none", marker="o", color=color,
                    markerfacecolor="white", zorder=3)  # fmt: skip
    ax.set_xticks(x, labels=[f"{label}\n(n={n})" for label, n in zip(bin_labels, counts)], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("corpus BLEU")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    caption = interval if band else f"error bars: {interval}"
    if few.any():
        caption += f"; hollow: fewer than {min_count} sentences"
    ax.set_title(f"{title}\n{caption}" if title else caption, fontsize=9)
    fig.tight_layout()
    return fig


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (the figure is left as it is). No file is written here: the caller
    writes the bytes as it writes any file (:func:`nmt.files.atomic_write_bytes`)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()

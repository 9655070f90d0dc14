"""Figures: attention heatmaps, alignment grids and BLEU by length; plotting.py never needs torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from nmt.plotting import alignment_grid_figure, attention_figure, bleu_by_length_figure, figure_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def alignment(num_tgt: int, num_src: int, seed: int = 0) -> np.ndarray:
    weights = np.random.default_rng(seed).random((num_tgt, num_src))
    return weights / weights.sum(axis=1, keepdims=True)  # (T, S), rows sum to one


def test_plotting_imports_neither_torch_nor_the_model() -> None:
    code = "import sys, nmt.plotting; bad = [m for m in ('torch', 'nmt.model') if m in sys.modules]; print(bad)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_translating_starts_without_matplotlib_and_a_figure_brings_it() -> None:
    """matplotlib takes most of a second to import: the translation commands and the Translator
    load it only when they draw (here: a heatmap)."""
    code = ("import sys, nmt.translate, nmt.translator, nmt.evaluation.report, nmt.plotting as p, numpy as np; "
            "before = 'matplotlib' in sys.modules; p.attention_figure(np.eye(2), ['a', 'b'], ['x', 'y']); "
            "print(before, 'matplotlib' in sys.modules)")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_attention_figure_labels_match_the_weights() -> None:
    fig = attention_figure(alignment(3, 4), ["a", "b", "c", "</s>"], ["X", "Y", "</s>"], title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "</s>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["X", "Y", "</s>"]
    assert figure_png(fig)[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="do not match"):
        attention_figure(alignment(3, 4), ["a", "b"], ["X", "Y", "</s>"])


@pytest.mark.parametrize("count, ncols, shape", [(1, 3, (1, 1)), (4, 3, (2, 3)), (6, 3, (2, 3)), (5, 2, (3, 2))])
def test_alignment_grid_has_one_panel_per_alignment(count: int, ncols: int, shape) -> None:
    panels = []
    for i in range(count):
        num_tgt, num_src = 3 + i, 5 + 2 * i
        panels.append((alignment(num_tgt, num_src, i), [f"s{j}" for j in range(num_src)],
                       [f"t{j}" for j in range(num_tgt)], f"sentence {i}"))  # fmt: skip
    fig = alignment_grid_figure(panels, ncols=ncols, title="bahdanau")
    assert len(fig.axes) == shape[0] * shape[1]
    visible = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in visible] == [f"sentence {i}" for i in range(count)]
    for ax, (weights, *_) in zip(visible, panels):
        assert ax.images[0].get_array().shape == weights.shape
    assert fig._suptitle.get_text() == "bahdanau"
    assert figure_png(fig)[:8] == PNG_MAGIC


def test_alignment_grid_of_long_sentences_stays_a_sensible_size() -> None:
    fig = alignment_grid_figure([(alignment(61, 61), ["w"] * 61, ["W"] * 61, "long")] * 6, ncols=3)
    width, height = fig.get_size_inches()
    assert width <= 3 * 8.0 and height <= 2 * 8.0
    with pytest.raises(ValueError, match="no alignments"):
        alignment_grid_figure([])


def test_bleu_by_length_figure_draws_every_system_with_intervals() -> None:
    labels, counts = ["<10", "10-14", "15-19", "20-24", "25+"], [179, 500, 255, 64, 2]
    nan = float("nan")
    systems = {
        "none": np.array([[30, 28, 32], [25, 23, 27], [20, 18, 22], [15, 12, 18], [5, 0, 20]], dtype=float),
        "bahdanau": np.array([[35, 33, 37], [33, 31, 35], [32, 30, 34], [31, 28, 34], [nan, nan, nan]]),
    }  # (B, 3): BLEU, CI low, CI high; NaN = empty bin
    fig = bleu_by_length_figure(labels, counts, systems, min_count=30, title="test_2016_flickr")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["none", "bahdanau"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{lab}\n(n={n})" for lab, n in zip(labels, counts)]
    error_bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(error_bars) == 2
    segments = error_bars[0].get_segments()  # one vertical segment per bin, from CI low to CI high
    assert [tuple(np.round(s[:, 1], 6)) for s in segments] == [(28, 32), (23, 27), (18, 22), (12, 18), (0, 20)]
    assert "fewer than 30" in ax.get_title() and "95%" in ax.get_title()
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert [tuple(line.get_xdata()) for line in hollow] == [(4 - 0.12,), (4 + 0.12,)]  # the 25+ bin
    # hollow markers keep their system's colour, and systems keep distinct colours
    assert len({line.get_color() for line in ax.get_lines()}) == 2
    assert figure_png(fig)[:8] == PNG_MAGIC


def test_bleu_by_length_figure_draws_bands_over_seeds() -> None:
    """The study's plot over seeds: the mean as a line, the interval (e.g. +-1 sd) as a band."""
    labels, counts = ["<10", "10-19", "50+"], [70, 110, 20]
    systems = {"none (3 seeds)": np.array([[20, 18, 22], [10, 9, 11], [4, 3, 5]], dtype=float),
               "bahdanau": np.array([[98, 98, 98], [97, 97, 97], [95, 95, 95]], dtype=float)}  # fmt: skip
    fig = bleu_by_length_figure(labels, counts, systems, min_count=30, interval="mean over seeds, band: ±1 sd",
                                band=True)  # fmt: skip
    ax = fig.axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2 and not [c for c in ax.collections if isinstance(c, LineCollection)]  # no error bars
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(3) and ys.max() == pytest.approx(22)  # the band spans low..high
    means = [line for line in ax.get_lines() if line.get_markerfacecolor() != "white"]
    assert [tuple(line.get_ydata()) for line in means] == [(20, 10, 4), (98, 97, 95)]
    assert "band: ±1 sd" in ax.get_title() and "error bars" not in ax.get_title()


def test_bleu_by_length_figure_checks_shapes() -> None:
    with pytest.raises(ValueError, match="expected"):
        bleu_by_length_figure(["a", "b"], [1, 2], {"x": np.zeros((3, 3))})
    with pytest.raises(ValueError, match="counts"):
        bleu_by_length_figure(["a", "b"], [1], {"x": np.zeros((2, 3))})


@pytest.mark.slow
def test_importing_nmt_changes_no_process_wide_state(tmp_path: Path) -> None:
    """A notebook keeps its matplotlib backend when nmt is imported, and files nmt writes follow the
    umask of the moment they are written (not one read when nmt was imported)."""
    code = (
        "import os, sys, matplotlib\n"
        "matplotlib.use('svg')\n"
        "import nmt.plotting, nmt.evaluation.report, nmt.train, nmt.translate, nmt.evaluate\n"
        "from nmt.files import atomic_write_text\n"
        "os.umask(0o077)\n"
        "atomic_write_text(sys.argv[1], 'x')\n"
        "print(matplotlib.get_backend(), oct(os.stat(sys.argv[1]).st_mode & 0o777))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f.txt")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["svg", oct(0o600)]


def test_figures_render_without_pyplot() -> None:
    fig = attention_figure(np.eye(3), ["a", "b", "</s>"], ["x", "y", "</s>"], title="t")
    assert not plt_figures(), "no figure is registered with pyplot"
    assert figure_png(fig)[:8] == PNG_MAGIC


def plt_figures() -> list[int]:
    import matplotlib.pyplot as plt

    return plt.get_fignums()

"""The teaching notebook (docs/tutorial.ipynb) runs from top to bottom as a reader would run it, on a
small budget (``NMT_TUTORIAL_UPDATES``): every cell works and writes what the next one reads,
including the Transformer beside the RNN, and the Multi30k cell given the smoke model (any
checkpoint ``Translator`` can load). What
the notebook's figures show at its full budget (attention keeps long sentences, the fixed vector
loses them, the maps align far better than the diagonal) is what tests/test_study.py checks of
the study with the same budget."""

from __future__ import annotations

import json

import nbformat
import pytest
from conftest import REPO_ROOT
from nbclient import NotebookClient

NOTEBOOK = REPO_ROOT / "docs" / "tutorial.ipynb"


def test_the_notebook_is_stored_with_its_outputs() -> None:
    """The docs site shows the notebook as stored: every code cell has been run, in order."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    assert any(output.get("output_type") == "display_data" for cell in cells for output in cell.outputs)
    assert not any(output.get("output_type") == "error" for cell in cells for output in cell.outputs)


@pytest.mark.slow
def test_the_notebook_runs_from_top_to_bottom(tmp_path, smoke_run, monkeypatch) -> None:
    monkeypatch.setenv("NMT_CHECKPOINT", str(smoke_run.checkpoint))
    monkeypatch.setenv("NMT_TUTORIAL_UPDATES", "100")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    runs = tmp_path / "runs" / "tutorial"
    for name in ("none", "bahdanau", "transformer"):
        assert json.loads((runs / name / "results.json").read_text())["steps"] == 100
    report = json.loads((runs / "eval" / "eval.json").read_text())
    assert list(report["systems"]) == ["none", "bahdanau"] and report["num_sentences"] == 600
    assert report["bin_labels"] == ["<10", "10-19", "20-29", "30-39", "40-49", "50+"]
    assert report["systems"]["bahdanau"]["word_alignment"]["aer"] is not None
    assert report["word_alignment"]["diagonal"]["aer"] > 0.9  # the swaps: nearly every gold link off the diagonal
    both = json.loads((runs / "eval_transformer" / "eval.json").read_text())  # the Transformer beside the RNN
    assert list(both["systems"]) == ["bahdanau", "transformer"]
    assert len(both["systems"]["transformer"]["word_alignment"]["layers"]) == 2  # each layer as an aligner
    printed = "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for output in cell.outputs)  # fmt: skip
    assert "alignment error rate (%) by source length" in printed and "one word to its left:" in printed
    assert "NMT_CHECKPOINT is not set" not in printed  # the checkpoint cell translated with the given model
    last = [cell for cell in notebook.cells if cell.cell_type == "code"][-1]
    assert any(output.get("output_type") == "display_data" for output in last.outputs)  # its attention map

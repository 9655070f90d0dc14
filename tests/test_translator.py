"""The Python API: the README's example runs as written (with the smoke checkpoint), results carry
text, score, subwords and a (T, S) attention whose rows sum to 1, decoding defaults to the
checkpoint's own settings, and a single string gives a single result."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, SmokeRun
from matplotlib.figure import Figure

from nmt import Translator
from nmt.checkpoint import load_checkpoint
from nmt.search import SearchSettings
from nmt.translator import translate_lines


def _readme_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs(smoke_run: SmokeRun, in_process) -> None:
    code = _readme_example().replace("runs/best_de_en/checkpoints/best.pt", str(smoke_run.checkpoint))
    code = code.replace("Ein Hund rennt.", smoke_run.test_src[0]).replace("Zwei Männer spielen Fußball.",
                                                                            smoke_run.test_src[1])  # fmt: skip
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the documented example, verbatim
    out, one, fig = namespace["out"], namespace["one"], namespace["fig"]
    assert len(out) == 2 and isinstance(fig, Figure)
    assert out[0].attention.shape == (len(out[0].tgt_tokens), len(out[0].src_tokens))
    np.testing.assert_allclose(out[0].attention.sum(axis=1), 1.0, atol=1e-4)
    assert out[0].src_tokens[-1] == out[0].tgt_tokens[-1] == "</s>"
    assert one.text == out[0].text and one.attention is None, "a string gives one result; attention only when asked"


def test_defaults_come_from_the_checkpoint_and_keywords_replace_them(smoke_run: SmokeRun, tmp_path: Path,
                                                                     in_process) -> None:  # fmt: skip
    payload = load_checkpoint(smoke_run.checkpoint)
    payload["config"]["train"]["search"].update(beam_size=4, n_best=3)
    path = tmp_path / "tuned.pt"
    torch.save(payload, path)
    translator = Translator.from_checkpoint(path, device="cpu")
    assert (translator.settings.beam_size, translator.settings.n_best) == (4, 3)
    sources = smoke_run.test_src[:3]
    results = translator.translate(sources)
    assert all(len(r.nbest) == 3 for r in results), "n_best from the checkpoint"
    assert [len(r.nbest) for r in translator.translate(sources, n_best=1)] == [1, 1, 1]
    settings = SearchSettings(**asdict(translator.settings))
    expected = translate_lines(translator.model, translator.src_vocab, sources, settings, 64, "sentences",
                               torch.device("cpu"), 100)  # fmt: skip
    assert [r.text for r in results] == [translator.tgt_vocab.decode(t.hypotheses[0].tokens) for t in expected]


def test_empty_input_and_models_without_attention(smoke_run: SmokeRun, in_process) -> None:
    translator = Translator.from_checkpoint(smoke_run.checkpoint, device="cpu")
    blank = translator.translate("   ", return_attention=True)
    assert blank.text == "" and blank.attention is None
    with pytest.raises(ValueError, match="return_attention=True"):
        translator.plot_attention(blank)


@pytest.mark.slow
def test_the_python_api_and_translate_import_neither_datasets_nor_pyarrow() -> None:
    """``from nmt import Translator`` (and the translate command) load only torch and sentencepiece."""
    code = ("import sys\nfrom nmt import Translator\nTranslator.from_checkpoint\nimport nmt.translate\n"
            "print(sorted(m for m in ('datasets', 'pyarrow') if m in sys.modules))\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"

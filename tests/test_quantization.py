"""int8 translation (nmt.quantization): the linear layers and the encoder GRU are quantized, nothing
else; the quantized model translates nearly as the fp32 one does, in every command that loads a
checkpoint; and a precision that cannot run is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun
from sacrebleu.metrics import BLEU
from torch import nn

from nmt import Translator
from nmt.ensemble import load_system
from nmt.errors import ConfigError
from nmt.quantization import check_precision, quantize, quantized_modules

CPU = torch.device("cpu")


def test_linear_layers_and_the_encoder_gru_are_quantized_and_the_model_given_is_kept(smoke_run: SmokeRun) -> None:
    model, *_ = load_system(smoke_run.checkpoint, CPU)
    names = quantized_modules(model)
    assert "encoder.rnn" in names and "decoder.output" in names
    assert not any(name.endswith("energy") for name in names)  # read as a vector, not called: kept fp32
    quantized = quantize(model, "int8")
    modules = dict(quantized.named_modules())
    for name in names:
        assert type(modules[name]).__module__.startswith("torch.ao.nn.quantized.dynamic"), name
    assert isinstance(dict(model.named_modules())["decoder.output"], nn.Linear)  # the fp32 model is unchanged
    assert quantize(model, "fp32") is model


def test_int8_translates_nearly_as_fp32(smoke_run: SmokeRun) -> None:
    fp32 = Translator.from_checkpoint(smoke_run.checkpoint, device="cpu")
    int8 = Translator.from_checkpoint(smoke_run.checkpoint, device="cpu", precision="int8")
    sources = smoke_run.test_src
    a, b = fp32.translate(sources, beam_size=3), int8.translate(sources, beam_size=3)
    same = sum(x.text == y.text for x, y in zip(a, b))
    assert same >= 0.8 * len(sources), f"{same} of {len(sources)} translations unchanged"
    bleu = [BLEU().corpus_score([r.text for r in results], [smoke_run.test_tgt]).score for results in (a, b)]
    assert abs(bleu[0] - bleu[1]) <= 2.0, bleu
    scores_fp32 = fp32.score(sources, smoke_run.test_tgt)
    scores_int8 = int8.score(sources, smoke_run.test_tgt)
    gaps = [abs(x.logprob - y.logprob) / max(x.length, 1) for x, y in zip(scores_fp32, scores_int8)]
    assert max(gaps) < 0.1, max(gaps)  # per-token log-probabilities move a little, not a lot
    assert int8.translate(sources[0], return_attention=True).attention is not None


def test_a_precision_that_cannot_run_is_refused() -> None:
    with pytest.raises(ConfigError, match="precision='bf16': choose one of fp32, int8"):
        check_precision("bf16", CPU)
    with pytest.raises(ConfigError, match="precision=int8 runs on the CPU only"):
        check_precision("int8", torch.device("cuda"))
    check_precision("fp32", torch.device("cuda"))


@pytest.mark.slow
def test_the_commands_take_precision_int8(smoke_run: SmokeRun, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(smoke_run.test_src[:5]) + "\n", encoding="utf-8")
    run = lambda *args: subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True)  # noqa: E731
    fp32 = run("nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={source}", "threads=1")
    int8 = run("nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={source}", "threads=1", "precision=int8")
    assert fp32.returncode == int8.returncode == 0, int8.stderr
    assert len(int8.stdout.splitlines()) == 5
    assert "(precision int8)" in int8.stderr and "(precision fp32)" in fp32.stderr  # the load line says which
    bad = run("nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={source}", "precision=int4")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("precision='int4': choose one of fp32, int8")
    assert "Traceback" not in bad.stderr
    scored = run("nmt.evaluate", f"ckpt={smoke_run.checkpoint}", "split=test", f"out_dir={tmp_path / 'eval'}",
                 "precision=int8", "n_bootstrap=0", "significance=none", "alignments.num=0", "threads=1")  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert "(precision int8)" in scored.stderr
    target = tmp_path / "out.txt"
    target.write_text(int8.stdout, encoding="utf-8")
    for command in ("nmt.score", "nmt.align"):
        done = run(command, f"ckpt={smoke_run.checkpoint}", f"src={source}", f"tgt={target}", "precision=int8", "threads=1")
        assert done.returncode == 0 and f"loaded {smoke_run.checkpoint} (precision int8) on cpu" in done.stderr, done.stderr

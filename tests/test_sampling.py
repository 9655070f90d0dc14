"""Sampling: the distribution drawn from (temperature, top-k, nucleus), top_k=1 is greedy search,
a sample's score is the model's log-probability of it, and the samples of a sentence depend on
the seed and its number only: not on its batch, on batch sizes, or on the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun, build_tiny_model, random_batch

from nmt.search import SamplingSettings, force_decode, greedy_search, sample_search, sampling_distribution
from nmt.translator import Translator


def test_the_distribution_drawn_from() -> None:
    log_probs = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.5, -1.0, float("-inf")]]), dim=-1)
    probs = log_probs.exp()
    torch.testing.assert_close(sampling_distribution(log_probs, 1.0, 0, 1.0), probs)
    top2 = sampling_distribution(log_probs, 1.0, 2, 1.0)
    assert (top2[0, 2:] == 0).all() and top2.sum() == pytest.approx(1.0)
    torch.testing.assert_close(top2[0, :2], probs[0, :2] / probs[0, :2].sum())
    # nucleus: the smallest set of most probable tokens whose mass reaches p
    first_two = float(probs[0, :2].sum())
    assert (sampling_distribution(log_probs, 1.0, 0, first_two - 1e-4)[0] > 0).tolist() == [True, True, False, False, False]
    assert (sampling_distribution(log_probs, 1.0, 0, 1e-6)[0] > 0).tolist() == [True, False, False, False, False]
    cold, hot = sampling_distribution(log_probs, 0.25, 0, 1.0), sampling_distribution(log_probs, 4.0, 0, 1.0)
    assert cold[0, 0] > probs[0, 0] > hot[0, 0] and hot[0, 4] == 0  # a masked token stays impossible


@pytest.mark.parametrize(("bad", "key"), [({"n": 0}, "sample=0"), ({"temperature": 0.0}, "temperature=0.0"),
                                          ({"top_k": -1}, "top_k=-1"), ({"top_p": 0.0}, "top_p=0.0"),
                                          ({"top_p": 1.5}, "top_p=1.5")])  # fmt: skip
def test_bad_settings_are_refused(bad: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        SamplingSettings(**bad)


def test_top_k_1_is_greedy_and_a_samples_score_is_its_log_probability() -> None:
    model = build_tiny_model("bahdanau", "luong_feed", seed=6)
    src, src_lens, _ = random_batch([6, 4, 3], 2, seed=8)
    greedy = greedy_search(model, src, src_lens, 1.5, 3, return_attention=False)
    for greedy_top in (SamplingSettings(n=2, top_k=1, seed=3), SamplingSettings(n=2, top_p=1e-6, seed=3)):
        samples = sample_search(model, src, src_lens, greedy_top, 1.5, 3)
        assert [[s.tokens for s in row] for row in samples] == [[g[0].tokens] * 2 for g in greedy]
    samples = sample_search(model, src, src_lens, SamplingSettings(n=4, temperature=2.0, seed=3), 1.5, 3)
    for row, sentence in enumerate(samples):
        scored = force_decode(model, src[[row] * 4], src_lens[[row] * 4], [s.tokens for s in sentence])
        assert [s.score for s in sentence] == pytest.approx([one.total for one in scored], abs=1e-4)
    assert len({tuple(s.tokens) for row in samples for s in row}) > 3  # hot samples differ


def test_a_sentences_samples_do_not_depend_on_its_batch() -> None:
    model = build_tiny_model("bahdanau", "bahdanau", seed=7)
    src, src_lens, _ = random_batch([5, 7, 4], 2, seed=9)
    settings = SamplingSettings(n=3, temperature=1.5, seed=11)
    together = sample_search(model, src, src_lens, settings, 1.5, 3, keys=[10, 11, 12])
    alone = sample_search(model, src[1:2, :7], src_lens[1:2], settings, 1.5, 3, keys=[11])
    assert [s.tokens for s in together[1]] == [s.tokens for s in alone[0]]
    other_seed = sample_search(model, src, src_lens, SamplingSettings(n=3, temperature=1.5, seed=12), 1.5, 3,
                               keys=[10, 11, 12])  # fmt: skip
    assert [[s.tokens for s in r] for r in other_seed] != [[s.tokens for s in r] for r in together]


@pytest.mark.slow
def test_translate_samples_reproducibly(smoke_run: SmokeRun, tmp_path: Path, in_process) -> None:
    source = tmp_path / "src.txt"
    source.write_text("".join(s + "\n" for s in smoke_run.test_src[:6]), encoding="utf-8")
    outputs = []
    for batch_size in (64, 64, 1):
        proc = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={source}",
                               "sample=3", "temperature=1.5", "top_p=0.95", "seed=5", f"batch_size={batch_size}",
                               "threads=1"], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1]  # the same command, the same samples
    rows = [line.split("\t") for line in outputs[0].splitlines()]
    alone = [line.split("\t") for line in outputs[2].splitlines()]  # one sentence a batch: the same texts
    assert [r[2] for r in alone] == [r[2] for r in rows]
    assert [float(r[1]) for r in alone] == pytest.approx([float(r[1]) for r in rows], abs=1e-3)
    assert [int(r[0]) for r in rows] == [i for i in range(6) for _ in range(3)]
    translator = Translator.from_checkpoint(smoke_run.checkpoint, device="cpu")
    results = translator.translate(smoke_run.test_src[:6], sample=3, temperature=1.5, top_p=0.95, seed=5)
    assert [text for r in results for text, _ in r.nbest] == [r[2] for r in rows]
    proc = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={smoke_run.checkpoint}", f"input={source}",
                           "sample=2", "top_p=0"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and "top_p=0" in proc.stderr, proc.stderr[-2000:]

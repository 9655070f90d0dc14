"""The Transformer through the commands: ``experiment=smoke_transformer`` learns its toy corpus and
logs every cross-attention head; its checkpoint translates (greedy, beam, int8, with an RNN in an
ensemble), aligns from a chosen layer, with or without the shift; a crafted Transformer checkpoint
is refused like any other. Model invariants: tests/test_transformer.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CONFIG_DIR, SmokeRun, process_restored, train_smoke_run, write_lines
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nmt.align import align
from nmt.checkpoint import load_checkpoint, load_model
from nmt.errors import CheckpointError, ConfigError
from nmt.evaluate import evaluate
from nmt.evaluation.report import format_report
from nmt.evaluation.word_alignment import shifted, word_weights
from nmt.transformer import TransformerDecoder
from nmt.translate import translate

CPU = torch.device("cpu")
pytestmark = pytest.mark.slow  # each module trains a model first (~15 s on two idle cores)


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """``experiment=smoke_transformer`` trained once, in-process (~15 s on two cores)."""
    return train_smoke_run(tmp_path_factory.mktemp("transformer_run"), experiment="smoke_transformer")


def command_cfg(name: str, **values) -> object:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(name, overrides=[f"{key}={value}" for key, value in values.items()])


def test_the_toy_corpus_is_learned_and_every_head_is_logged(transformer_run: SmokeRun) -> None:
    results = json.loads((transformer_run.folder / "results.json").read_text())
    assert results["best_valid_bleu"] > 20, results
    events = EventAccumulator(str(transformer_run.folder / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert {"attention/valid_0", "cross_attention/valid_0"} <= set(events.Tags()["images"])
    loss = [e.value for e in events.Scalars("train/loss")]
    assert loss[-1] < 0.5 * loss[0]


@pytest.mark.parametrize("extra", [{}, {"beam_size": 4, "n_best": 2}, {"precision": "int8"}])
def test_the_checkpoint_translates(transformer_run: SmokeRun, tmp_path: Path, extra: dict) -> None:
    source = write_lines(tmp_path / "test.src", transformer_run.test_src[:10])
    output = tmp_path / "hyp.txt"
    with process_restored():
        translate(command_cfg("translate", ckpt=transformer_run.checkpoint, input=source, output=output, device="cpu",
                              **extra))  # fmt: skip
    lines = output.read_text().splitlines()
    assert len(lines) == 10 * extra.get("n_best", 1)
    if not extra:  # the run's own greedy translations of its test split are mostly right
        right = sum(h == r for h, r in zip(lines, transformer_run.test_tgt))
        assert right >= 3, lines


def test_an_rnn_and_a_transformer_translate_as_one_ensemble(transformer_run: SmokeRun, smoke_run: SmokeRun,
                                                            tmp_path: Path) -> None:  # fmt: skip
    """The two smoke runs share their synthetic corpus and subword settings, so their vocabularies agree."""
    source = write_lines(tmp_path / "test.src", transformer_run.test_src[:10])
    output = tmp_path / "hyp.txt"
    with process_restored():
        translate(command_cfg("translate", ckpt=f"{transformer_run.checkpoint}+{smoke_run.checkpoint}", input=source,
                              output=output, device="cpu", beam_size=3))  # fmt: skip
    assert len(output.read_text().splitlines()) == 10


def test_links_come_from_the_chosen_layer_the_shift_and_the_context(transformer_run: SmokeRun, tmp_path: Path) -> None:
    pairs = [f"{s} ||| {t}" for s, t in zip(transformer_run.test_src[:8], transformer_run.test_tgt[:8])]
    source = write_lines(tmp_path / "pairs.txt", pairs)
    outputs = {}
    choices = {"default": {}, "layer0": {"align.layer": 0}, "last": {"align.layer": -1},
               "head": {"align.layer": 0, "align.heads": "[1]"}, "shift": {"align.shift": "true"},
               "full_context": {"align.full_context": "true"}}  # fmt: skip
    for name, extra in choices.items():
        out = tmp_path / f"{name}.align"
        with process_restored():
            align(command_cfg("align", ckpt=transformer_run.checkpoint, pairs=source, output=out, device="cpu", **extra))
        outputs[name] = out.read_text().splitlines()
        assert len(outputs[name]) == 8
    assert outputs["default"] == outputs["layer0"]  # two layers: the penultimate is layer 0
    assert outputs["full_context"] != outputs["default"], "the pass that sees the whole target attends otherwise"
    assert len({tuple(v) for v in outputs.values()}) > 1, "the choices give other links"
    with pytest.raises(ConfigError, match="align.layer=2"), process_restored():
        align(command_cfg("align", ckpt=transformer_run.checkpoint, pairs=source, output=tmp_path / "x",
                          **{"align.layer": 2}))  # fmt: skip
    assert not (tmp_path / "x").exists()


def test_the_shift_reads_the_row_of_the_next_step() -> None:
    attention = np.array([[0.9, 0.1, 0.0],   # step 1: emits word 0, input <s>
                          [0.1, 0.2, 0.7],   # step 2: emits word 1, input word 0
                          [0.0, 0.8, 0.2],   # step 3: emits </s>, input word 1
                          ])  # fmt: skip
    rows = shifted(attention)
    np.testing.assert_array_equal(rows, attention[1:])
    # two target words, two source words (+ </s>): word 0 now reads step 2's row, word 1 step 3's
    np.testing.assert_allclose(word_weights(rows, [0, 1], [0, 1]), [[0.1, 0.2], [0.0, 0.8]])


def test_a_crafted_transformer_checkpoint_is_refused(transformer_run: SmokeRun, tmp_path: Path) -> None:
    model, *_ = load_model(transformer_run.checkpoint, CPU)
    assert isinstance(model.decoder, TransformerDecoder)
    payload = load_checkpoint(transformer_run.checkpoint)
    for key, value in (("num_layers", 3), ("d_model", 40_000), ("num_heads", 3), ("positions", "rotary")):
        crafted = json.loads(json.dumps(payload["config"]))
        crafted["model"]["decoder"][key] = value
        path = tmp_path / f"{key}.pt"
        torch.save({**payload, "config": crafted}, path)
        with pytest.raises(CheckpointError) as info:
            load_model(path, CPU)
        assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_evaluate_scores_every_layer_as_an_aligner(transformer_run: SmokeRun, tmp_path: Path) -> None:
    """On its synthetic split (gold links known) nmt.evaluate reports the chosen attention's AER
    and each cross-attention layer's, with and without the shift."""
    reports = {}
    for shift in ("false", "true"):
        with process_restored():
            reports[shift] = evaluate(command_cfg("evaluate", ckpt=transformer_run.checkpoint, out_dir=tmp_path / shift,
                                                  n_bootstrap=0, device="cpu", **{"alignments.shift": shift}))  # fmt: skip
    for report in reports.values():
        scores = report["systems"]["best"]["word_alignment"]
        assert len(scores["layers"]) == 2
        assert scores["aer"] == scores["layers"][0]["aer"]  # the default: the penultimate of two layers
        assert "best L2" in "\n".join(format_report(report).splitlines())
    assert reports["true"]["word_alignment"]["shift"] is True
    assert reports["true"]["systems"]["best"]["word_alignment"] != reports["false"]["systems"]["best"]["word_alignment"]
    with pytest.raises(ConfigError, match="align.layer=7"), process_restored():
        evaluate(command_cfg("evaluate", ckpt=transformer_run.checkpoint, out_dir=tmp_path / "x", n_bootstrap=0,
                             **{"alignments.layer": 7}))  # fmt: skip


def test_the_python_api_translates_and_shows_the_chosen_attention(transformer_run: SmokeRun) -> None:
    from nmt import Translator

    translator = Translator.from_checkpoint(transformer_run.checkpoint, device="cpu")
    result = translator.translate(transformer_run.test_src[0], beam_size=3, return_attention=True)
    assert result.attention.shape == (len(result.tgt_tokens), len(result.src_tokens))
    np.testing.assert_allclose(result.attention.sum(axis=1), 1.0, rtol=1e-4)
    # forced decoding of the beam's output gives the score the beam reported (one cache, two paths)
    assert translator.score(transformer_run.test_src[0], result.text).normalized == pytest.approx(result.score, abs=1e-4)


def test_the_runs_checkpoints_average_into_a_model(transformer_run: SmokeRun, tmp_path: Path) -> None:
    from nmt.checkpoint import average_checkpoints

    steps = sorted((transformer_run.folder / "checkpoints").glob("step*.pt"))
    assert len(steps) == 2
    average_checkpoints(steps, tmp_path / "averaged.pt")
    averaged, *_ = load_model(tmp_path / "averaged.pt", CPU)
    weights = [load_checkpoint(p)["model"] for p in steps]
    for name, tensor in averaged.state_dict().items():
        torch.testing.assert_close(tensor, (weights[0][name] + weights[1][name]) / 2, msg=name)


def test_samples_and_the_explorer_work_with_a_transformer(transformer_run: SmokeRun, smoke_run: SmokeRun,
                                                          tmp_path: Path) -> None:  # fmt: skip
    """Sampling draws reproducible translations; the explorer answers for a Transformer beside an
    RNN with each one's translation, n-best list and attention."""
    from nmt import Translator
    from nmt.demo import Explorer, Limits

    source = write_lines(tmp_path / "test.src", transformer_run.test_src[:5])
    outputs = []
    for run in range(2):
        output = tmp_path / f"samples{run}.txt"
        with process_restored():
            translate(command_cfg("translate", ckpt=transformer_run.checkpoint, input=source, output=output,
                                  device="cpu", sample=3, top_p=0.9))  # fmt: skip
        outputs.append(output.read_text())
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 15
    translators = {name: Translator.from_checkpoint(run.checkpoint, device="cpu")
                   for name, run in (("transformer", transformer_run), ("rnn", smoke_run))}  # fmt: skip
    explorer = Explorer(translators, Limits(max_chars=300, max_beam=8), paths={})
    answer = explorer.translate({"text": transformer_run.test_src[0], "beam_size": 3, "n_best": 2})
    for result in answer["results"]:
        weights = np.array(result["attention"])
        assert weights.shape == (len(result["tgt_tokens"]), len(result["src_tokens"])) and len(result["nbest"]) == 2
        np.testing.assert_allclose(weights.sum(1), 1.0, atol=1e-3)

"""Training end to end: ``python -m nmt.train experiment=smoke`` on a toy corpus learns, and writes
checkpoints, TensorBoard scalars, hypotheses and results; a run stopped after N updates resumes from
``last.pt`` exactly where it stopped; only training pairs are filtered."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, REPO_ROOT, ToyCorpus, make_toy_corpus, write_lines
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nmt.checkpoint import load_checkpoint, model_from_checkpoint
from nmt.data.batches import prepare_data
from nmt.errors import CheckpointError
from nmt.evaluation.metrics import teacher_forced_nll
from nmt.train import train
from nmt.training.runlog import read_run
from nmt.training.trainer import TokenRate

# Separate word-level vocabularies: every toy word is one piece, which the tiny model learns quickly.
TOY_VOCAB = ["data.vocab.joint=false", "data.vocab.size=40"]


def _scalars(folder: Path) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return events


def test_logged_tokens_per_second_leave_out_the_validation() -> None:
    """Tokens trained before a validation are divided by the seconds that trained them: a long
    validation neither slows the logged rate nor, once over, inflates the next one."""
    now = [0.0]
    rate = TokenRate(clock=lambda: now[0])
    rate.add(3000)
    now[0] = 2.0  # 3000 tokens in 2 s of training ...
    rate.pause()
    now[0] = 62.0  # ... then a minute of validation and checkpoints
    rate.resume()
    rate.add(1500)
    now[0] = 63.0  # and 1500 more in 1 s
    assert rate.take() == pytest.approx(1500.0)  # 4500 tokens / 3 s, not / 63 s nor / 1 s
    rate.add(1000)
    now[0] = 65.0
    assert rate.take() == pytest.approx(500.0)  # a new window: 1000 tokens / 2 s
    assert rate.take() == 0.0  # nothing trained, no division by zero


@pytest.mark.slow
def test_train_cli_end_to_end(tmp_path: Path) -> None:
    corpus = make_toy_corpus(tmp_path / "corpus", train_size=600)
    run = tmp_path / "run"
    command = [
        sys.executable, "-m", "nmt.train", "experiment=smoke", *corpus.overrides(), *TOY_VOCAB,
        f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}",
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]

    # it learned: the validation loss falls from about log(V) to a fraction of a nat per token
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] > 50
    assert results["best_valid_bleu"] > 40, results
    assert {"test_bleu", "test_chrf"} <= set(results)
    events = _scalars(run / "tensorboard")
    assert {"train/loss", "train/lr", "valid/loss", "valid/bleu", "valid/chrf"} <= set(events.Tags()["scalars"])
    assert any(tag.startswith("attention/") for tag in events.Tags()["images"]), "an alignment heatmap is logged"
    train_loss = [e.value for e in events.Scalars("train/loss")]
    valid_loss = [e.value for e in events.Scalars("valid/loss")]
    valid_bleu = [e.value for e in events.Scalars("valid/bleu")]
    assert all(math.isfinite(v) for v in train_loss + valid_loss)
    assert train_loss[-1] < 0.6 * train_loss[0]
    assert valid_loss[-1] < 0.8 < math.log(40) / 2, valid_loss
    assert max(valid_bleu) == pytest.approx(results["best_valid_bleu"], abs=1e-3)
    steps = [e.step for e in events.Scalars("valid/loss")]
    assert steps == sorted(steps) and steps[-1] == results["steps"]

    # checkpoints load and describe themselves
    for name in ("best.pt", "last.pt"):
        payload = load_checkpoint(run / "checkpoints" / name)
        model, src_vocab, tgt_vocab, config = model_from_checkpoint(payload)
        assert config.data.kind == "files" and len(tgt_vocab) == model.decoder.output.out_features
        assert payload["train_state"]["progress"]["step"] <= results["steps"]
    assert load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]["step"] == results["steps"]
    smoke = OmegaConf.load(CONFIG_DIR / "experiment" / "smoke.yaml")
    assert len(list((run / "checkpoints").glob("step*.pt"))) == smoke.train.keep_checkpoints

    # hypotheses, log and config
    hypotheses = run / "hypotheses"
    assert len((hypotheses / "test.txt").read_text().splitlines()) == 30
    valid_files = list(hypotheses.glob("valid-step*.txt"))
    assert len(valid_files) == len(steps)
    assert all(len(f.read_text().splitlines()) == 30 for f in valid_files)
    assert "validation at update" in (run / "train.log").read_text()
    if hasattr(os, "getloadavg"):  # the log says how busy the machine was, as the tables read it
        record = read_run(run)
        assert record.cpu_load is not None and record.cores == os.cpu_count() and record.threads == 1
        assert "train/cpu_load" in events.Tags()["scalars"]
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.data.train_src == str(corpus.train_src)
    assert saved.data.max_tokens == smoke.data.max_tokens


def _toy_cfg(compose_cfg, corpus: ToyCorpus, *overrides: str, experiment: str = "smoke"):
    return compose_cfg(f"experiment={experiment}", *corpus.overrides(), *TOY_VOCAB, "data.max_tokens=200",
                       "train.log_every=1", "train.num_heatmaps=0", "model.dropout=0.2", *overrides)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("experiment", "ema"), [("smoke", "0.0"), ("smoke", "0.8"), ("smoke_transformer", "0.0")])
def test_resume_continues_exactly(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path, in_process, experiment: str,
                                  ema: str) -> None:  # fmt: skip
    """6 updates, then 6 more resumed from ``last.pt``, give the same weights as 12 in one go (and
    the same moving average, when one is kept), for an RNN and a Transformer."""
    _toy_cfg = functools.partial(globals()["_toy_cfg"], experiment=experiment)
    straight = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=12", f"train.ema={ema}"), tmp_path / "straight")
    first = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=6", f"train.ema={ema}"), tmp_path / "first")
    assert (straight["steps"], first["steps"]) == (12.0, 6.0)
    last = tmp_path / "first" / "checkpoints" / "last.pt"
    assert load_checkpoint(last)["train_state"]["progress"]["step"] == 6

    resumed = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=12", f"train.resume={last}",
                             f"train.ema={ema}"), tmp_path / "resumed")  # fmt: skip
    assert resumed["steps"] == 12.0
    logged = [e.step for e in _scalars(tmp_path / "resumed" / "tensorboard").Scalars("train/loss")]
    assert logged == list(range(7, 13)), "the resumed run continues at update 7"

    expected = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    actual = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    # the same position in the data (validation history differs: the split run validated at update 6 too)
    position = lambda payload: {  # noqa: E731
        k: v for k, v in payload["train_state"]["progress"].items() if k not in ("best_bleu", "stale_validations")
    }
    assert position(actual) == position(expected)
    assert position(actual)["step"] == 12
    for name, tensor in expected["model"].items():
        torch.testing.assert_close(actual["model"][name], tensor, msg=name)
    if float(ema):  # the trained weights travel in the training state
        for name, tensor in expected["train_state"]["trained_model"].items():
            torch.testing.assert_close(actual["train_state"]["trained_model"][name], tensor, msg=name)


@pytest.mark.slow
def test_ema_weights_are_validated_and_saved(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path, in_process) -> None:
    """With ``train.ema`` the checkpoints' weights are the average (not the trained weights) and
    validation scores exactly those weights."""
    cfg = _toy_cfg(compose_cfg, toy_corpus, "train.max_steps=8", "train.eval_every=8", "train.ema=0.7")
    train(cfg, tmp_path / "run")
    payload = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    averaged, trained = payload["model"], payload["train_state"]["trained_model"]
    assert averaged.keys() == trained.keys()
    assert any(not torch.allclose(averaged[k], trained[k]) for k in averaged), "the file holds the average"
    model = model_from_checkpoint(payload)[0]
    valid = prepare_data(cfg.data).evaluation["valid"][0]
    nll, _ = teacher_forced_nll(model, valid, cfg.data.max_tokens, torch.device("cpu"))
    (logged,) = _scalars(tmp_path / "run" / "tensorboard").Scalars("valid/loss")
    assert logged.value == pytest.approx(nll, rel=1e-5)
    results = json.loads((tmp_path / "run" / "results.json").read_text())  # the scores name their decoding
    assert results["search"] == OmegaConf.to_container(cfg.train.search) and results["provenance"]["versions"]["nmt"]
    # the trained weights can be taken out of the training state, to score them beside the average
    out = tmp_path / "trained.pt"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "trained_weights.py"),
                           str(tmp_path / "run" / "checkpoints" / "last.pt"), "--output", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written = load_checkpoint(out)
    assert written["train_state"] is None
    for name, tensor in trained.items():
        torch.testing.assert_close(written["model"][name], tensor)


@pytest.mark.slow
def test_weights_only_checkpoint_cannot_be_resumed(compose_cfg, toy_corpus, tmp_path: Path, in_process) -> None:
    train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=2"), tmp_path / "run")
    (periodic,) = (tmp_path / "run" / "checkpoints").glob("step*.pt")
    with pytest.raises(CheckpointError, match="cannot be resumed"):
        train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=4", f"train.resume={periodic}"), tmp_path / "again")


def test_prepare_data_filters_training_pairs_only(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    long_src = " ".join(["ana"] * 30)
    long_tgt = " ".join(["ZUP"] * 30)
    extra_src, extra_tgt = ["", "bel", long_src], ["ZUP", "   ", long_tgt]
    paths = {}
    for split, src, tgt in (("train", toy_corpus.src_lines[:50], toy_corpus.tgt_lines[:50]),
                            ("valid", toy_corpus.src_lines[50:60], toy_corpus.tgt_lines[50:60])):  # fmt: skip
        paths[f"{split}_src"] = write_lines(tmp_path / f"{split}.src", src + extra_src)
        paths[f"{split}_tgt"] = write_lines(tmp_path / f"{split}.tgt", tgt + extra_tgt)
    cfg = compose_cfg("data=files", "data.max_len=20", *TOY_VOCAB,
                      *(f"data.{key}={path}" for key, path in paths.items()))  # fmt: skip
    splits = prepare_data(cfg.data)
    assert len(splits.train) == 50, "empty, whitespace-only and over-long training pairs are dropped"
    valid, sources, references = splits.evaluation["valid"]
    assert len(valid) == len(sources) == len(references) == 13, "evaluation sets are never filtered"
    assert set(splits.evaluation) == {"valid"}
    assert (tmp_path / "cache" / "spm").is_dir() and (tmp_path / "cache" / "tokenized").is_dir()

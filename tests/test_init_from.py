"""A new run from a trained model (``train.init_from``, ``nmt/training/init_from.py``): it starts from
the checkpoint's weights and subword models with a fresh optimizer, schedule and progress, and gets
ahead of training from scratch on a new corpus; a config that would change the model's shapes or
the subword settings is refused in one line; dropout and everything under ``train`` may change; a
resumed fine-tuning run continues its own ``last.pt``; a corpus the subword models do not cover is
reported."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
from conftest import CONFIG_DIR, REPO_ROOT, ToyCorpus, make_toy_corpus, process_restored, toy_pairs, write_lines
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.data.batches import prepare_data
from nmt.errors import CheckpointError, ConfigError
from nmt.model import build_model
from nmt.train import build, train
from nmt.training.checks import init_changes
from nmt.training.distributed import Dist
from nmt.training.init_from import start_from
from nmt.training.runlog import read_metrics

# word-level vocabularies (every toy word one piece) and small batches: tiny runs learn quickly
TOY = ["data.vocab.joint=false", "data.vocab.size=40", "data.max_tokens=200", "train.num_heatmaps=0",
       "train.log_every=1", "train.threads=1", "train.device=cpu"]  # fmt: skip
CPU = Dist(0, 1, torch.device("cpu"))


def _compose(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def _run_cfg(corpus: ToyCorpus, cache: Path, *overrides: str, experiment: str = "smoke") -> DictConfig:
    return _compose(f"experiment={experiment}", *corpus.overrides(), *TOY, f"data.cache_dir={cache}", *overrides)


def _untrained_checkpoint(folder: Path, corpus: ToyCorpus, experiment: str = "smoke") -> Path:
    """A checkpoint of an initialised (untrained) model with subword models trained on ``corpus``:
    enough to start from, without a training run."""
    cfg = _run_cfg(corpus, folder / "cache", experiment=experiment)
    data = prepare_data(cfg.data)
    torch.manual_seed(0)
    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    path = folder / f"{experiment}.pt"
    save_checkpoint(path, model, cfg, data.src_vocab, data.tgt_vocab)
    return path


@pytest.fixture(scope="module")
def corpus_a(tmp_path_factory: pytest.TempPathFactory) -> ToyCorpus:
    return make_toy_corpus(tmp_path_factory.mktemp("corpus_a"), train_size=400)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, corpus_a: ToyCorpus) -> Path:
    return _untrained_checkpoint(tmp_path_factory.mktemp("untrained"), corpus_a)


def _other_corpus(folder: Path, min_words: int, max_words: int, seed: int, uncovered: str = "") -> ToyCorpus:
    """Other sentences of the toy language pair (another length range); with ``uncovered``, every
    other source sentence ends in a word of those characters."""
    paths = {}
    for offset, (split, size) in enumerate((("train", 300), ("valid", 30), ("test", 30))):
        src, tgt = toy_pairs(size, seed=seed + offset, min_words=min_words, max_words=max_words)
        if uncovered:
            src = [f"{line} {uncovered}" if i % 2 else line for i, line in enumerate(src)]
        paths[f"{split}_src"] = write_lines(folder / f"{split}.src", src)
        paths[f"{split}_tgt"] = write_lines(folder / f"{split}.tgt", tgt)
    return ToyCorpus(folder, **paths, src_lines=[], tgt_lines=[])


# --------------------------------------------------------------------------- the config check


def test_only_dropout_and_train_and_data_settings_may_differ_from_the_checkpoint(corpus_a: ToyCorpus,
                                                                                 tmp_path: Path) -> None:  # fmt: skip
    saved = OmegaConf.to_container(_run_cfg(corpus_a, tmp_path), resolve=True)
    accepted = _run_cfg(corpus_a, tmp_path, "model.dropout=0.3", "model.tgt_word_dropout=0.1", "train.optimizer.lr=5e-4",
                        "train/scheduler=warmup", "train.label_smoothing=0.2", "train.max_epochs=3", "train.patience=2",
                        "data.max_tokens=500", "data.vocab.sample_size=5000")  # fmt: skip
    changes = init_changes(saved, accepted, "x.pt")  # the rates that follow model.dropout change with it
    assert "model.dropout: 0.0 -> 0.3" in changes and "model.tgt_word_dropout: 0.0 -> 0.1" in changes
    assert "model.decoder.emb_dropout: 0.0 -> 0.3" in changes
    assert all(change.split(":")[0].endswith("dropout") for change in changes), changes
    refused = _run_cfg(corpus_a, tmp_path, "model.emb_dim=48", "data.vocab.size=60", "model/attention=luong_general")
    with pytest.raises(ConfigError) as e:
        init_changes(saved, refused, "x.pt")
    message = str(e.value)
    assert "\n" not in message
    assert "model.emb_dim: 32 in the checkpoint, 48 now" in message
    assert "data.vocab.size: 40 in the checkpoint, 60 now" in message
    assert "model.attention._target_: 'nmt.attention.BahdanauAttention' in the checkpoint" in message
    assert "model.emb_dim=32" in message and "data.vocab.size=40" in message, "the overrides that fit"


@pytest.mark.parametrize(("override", "key", "values"), [
    ("model.emb_dim=48", "model.emb_dim", "32 in the checkpoint, 48 now"),
    ("model.decoder.hidden_dim=16", "model.decoder.hidden_dim", "64 in the checkpoint, 16 now"),
    ("data.vocab.joint=true", "data.vocab.joint", "False in the checkpoint, True now"),
])  # fmt: skip
def test_a_shape_changing_key_is_refused_in_one_line_before_anything_is_written(
    override: str, key: str, values: str, checkpoint: Path, corpus_a: ToyCorpus, tmp_path: Path, in_process
) -> None:
    cfg = _run_cfg(corpus_a, tmp_path / "cache", f"train.init_from={checkpoint}", override)
    with pytest.raises(ConfigError) as e:
        train(cfg, tmp_path / "run")
    message = str(e.value)
    assert "\n" not in message and f"cannot start from {checkpoint}" in message
    assert f"{key}: {values}" in message
    assert not (tmp_path / "run").exists()


def test_the_new_run_begins_with_the_checkpoints_weights_and_subword_models(checkpoint: Path, tmp_path: Path,
                                                                             in_process) -> None:  # fmt: skip
    """On a corpus of other sentences, with another dropout and lr: the vocabularies are the
    checkpoint's (not trained on this corpus) and so are the weights."""
    other = _other_corpus(tmp_path / "b", 3, 8, seed=300)
    cfg = _run_cfg(other, tmp_path / "cache", f"train.init_from={checkpoint.parent}/{checkpoint.name}",
                   "model.dropout=0.3", "train.optimizer.lr=3e-3")  # fmt: skip
    start = start_from(cfg, None)
    assert start is not None and start.path == checkpoint.resolve()
    data, model, optimizer, _ = build(start.recorded_in(cfg), CPU, None, start)
    saved = load_checkpoint(checkpoint)
    assert data.src_vocab.model_proto == saved["vocab"]["src"] and data.tgt_vocab.model_proto == saved["vocab"]["tgt"]
    assert not list((tmp_path / "cache" / "spm").glob("*")), "no subword models trained on the new corpus"
    for name, tensor in saved["model"].items():
        torch.testing.assert_close(model.state_dict()[name], tensor, msg=name)
    assert optimizer.param_groups[0]["lr"] == 3e-3 and not optimizer.state, "a fresh optimizer"


@pytest.mark.parametrize("experiment", ["smoke", "smoke_transformer"])
def test_a_run_folder_stands_for_its_best_checkpoint(experiment: str, corpus_a: ToyCorpus, tmp_path: Path) -> None:
    parent = _untrained_checkpoint(tmp_path, corpus_a, experiment)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    parent.rename(tmp_path / "run" / "checkpoints" / "best.pt")
    cfg = _run_cfg(corpus_a, tmp_path / "cache", f"train.init_from={tmp_path / 'run'}", experiment=experiment)
    start = start_from(cfg, None)
    assert start.path == (tmp_path / "run" / "checkpoints" / "best.pt").resolve()
    assert start.recorded_in(cfg).train.init_from == str(start.path)
    assert cfg.train.init_from == str(tmp_path / "run"), "the given config is left as it was"
    model = build(cfg, CPU, None, start)[1]
    for name, tensor in start.payload["model"].items():
        torch.testing.assert_close(model.state_dict()[name], tensor, msg=name)


def test_a_hugging_face_corpus_is_encoded_with_the_checkpoints_subword_models(checkpoint: Path, tmp_path: Path) -> None:
    """``data=hf`` (a local parquet dataset) starts from a ``data=files`` checkpoint like files do."""
    corpus = _other_corpus(tmp_path / "b", 3, 8, seed=700)
    overrides = ["data=hf", "data.path=parquet", "data.src_column=source", "data.tgt_column=target"]
    for split, (src, tgt) in {"train": (corpus.train_src, corpus.train_tgt), "validation": (corpus.valid_src,
                              corpus.valid_tgt), "test": (corpus.test_src, corpus.test_tgt)}.items():  # fmt: skip
        rows = {"source": src.read_text().splitlines(), "target": tgt.read_text().splitlines()}
        datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / f"{split}.parquet"))
        overrides.append(f"data.data_files.{split}={tmp_path / f'{split}.parquet'}")
    cfg = _compose("experiment=smoke", *overrides, *TOY, f"data.cache_dir={tmp_path / 'cache'}",
                   f"train.init_from={checkpoint}")  # fmt: skip
    start = start_from(cfg, None)
    data, model, _, _ = build(cfg, CPU, None, start)
    assert data.src_vocab.model_proto == start.payload["vocab"]["src"] and len(data.train) == 300
    for name, tensor in start.payload["model"].items():
        torch.testing.assert_close(model.state_dict()[name], tensor, msg=name)


def test_init_from_a_missing_file_or_beside_an_explicit_resume_is_refused(checkpoint: Path, corpus_a: ToyCorpus,
                                                                         tmp_path: Path, in_process) -> None:  # fmt: skip
    cfg = _run_cfg(corpus_a, tmp_path / "cache", f"train.init_from={tmp_path / 'none.pt'}")
    with pytest.raises(CheckpointError, match=r"^train.init_from: .*none.pt: no such checkpoint file"):
        train(cfg, tmp_path / "run")
    cfg = _run_cfg(corpus_a, tmp_path / "cache", f"train.init_from={checkpoint}", f"train.resume={checkpoint}")
    with pytest.raises(ConfigError, match=r"train.init_from=.* with train.resume=.*give one of them"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- a corpus the subword models miss


def test_a_corpus_the_subword_models_do_not_cover_is_reported(checkpoint: Path, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    covered = _other_corpus(tmp_path / "covered", 2, 6, seed=400)
    uncovered = _other_corpus(tmp_path / "uncovered", 2, 6, seed=400, uncovered="жщы")
    for corpus, warned in ((covered, False), (uncovered, True)):
        caplog.clear()
        cfg = _run_cfg(corpus, tmp_path / "cache", f"train.init_from={checkpoint}")
        with caplog.at_level(logging.INFO, logger="nmt"):
            build(cfg, CPU, None, start_from(cfg, None))
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if not warned:
            assert not warnings
            assert any("<unk> is 0.00% of the source and 0.00% of the target" in r.getMessage() for r in caplog.records)
            continue
        (warning,) = warnings
        # one unknown word (one <unk> piece) in every other source sentence of ~4 words: ~10% of the pieces
        share = float(warning.split("<unk> is ")[1].split("%")[0])
        assert 5 < share < 25, warning
        assert "and 0.0% of the target" in warning
        assert "source 'ж' x15, 'щ' x15, 'ы' x15" in warning, "the characters, counted in the validation data"


# --------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory, corpus_a: ToyCorpus) -> Path:
    """A tiny model trained on corpus A (60 updates): its run folder."""
    folder = tmp_path_factory.mktemp("parent")
    cfg = _run_cfg(corpus_a, folder / "cache", "train.max_steps=60", "train.eval_every=60")
    with process_restored():
        train(cfg, folder / "run")
    return folder / "run"


def _validation_losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run / "metrics.jsonl") if r["event"] == "valid"}


@pytest.mark.slow
def test_fine_tuning_gets_ahead_of_training_from_scratch(parent: Path, tmp_path: Path, in_process) -> None:
    """On corpus B (other, longer sentences of the language pair), a run from the model trained on
    corpus A has at its first validation a lower loss than a run from scratch reaches at twice as
    many updates. It is a new run (its updates, optimizer and best score start at zero) with the
    parent's subword models, with another dropout and lr, and it records where it started from."""
    corpus_b = _other_corpus(tmp_path / "b", 5, 9, seed=500)
    schedule = ["train.max_steps=10", "train.eval_every=5"]
    scratch = tmp_path / "scratch"
    train(_run_cfg(corpus_b, tmp_path / "cache", *schedule), scratch)
    tuned = tmp_path / "tuned"
    train(_run_cfg(corpus_b, tmp_path / "cache", *schedule, f"train.init_from={parent}", "model.dropout=0.1",
                   "train.optimizer.lr=5e-3"), tuned)  # fmt: skip

    from_scratch, fine_tuned = _validation_losses(scratch), _validation_losses(tuned)
    assert sorted(from_scratch) == sorted(fine_tuned) == [5, 10]
    assert fine_tuned[5] < from_scratch[10], (fine_tuned, from_scratch)
    assert fine_tuned[10] < from_scratch[10]

    best = parent / "checkpoints" / "best.pt"
    saved, started = load_checkpoint(best), load_checkpoint(tuned / "checkpoints" / "last.pt")
    assert started["vocab"] == saved["vocab"], "the parent's sentencepiece models, byte for byte"
    assert started["config"]["train"]["init_from"] == str(best.resolve())
    assert OmegaConf.load(tuned / "config.yaml").train.init_from == str(best.resolve())
    state = started["train_state"]
    assert state["progress"]["step"] == 10 and state["progress"]["epoch"] < 2
    assert max(s["step"] for s in state["optimizer"]["state"].values()) == 10, "a fresh optimizer"
    assert state["optimizer"]["param_groups"][0]["lr"] == 5e-3
    log = (tuned / "train.log").read_text()
    assert f"a new run from the weights of {best.resolve()}" in log
    assert "model.dropout: 0.0 -> 0.1" in log and "WARNING" not in log
    assert [r["step"] for r in read_metrics(tuned / "metrics.jsonl") if r["event"] == "train"][0] == 1


@pytest.mark.slow
def test_a_fine_tuning_run_resumes_from_its_own_last_checkpoint(parent: Path, tmp_path: Path, in_process) -> None:
    """Interrupted after 4 updates and continued with ``train.resume=auto`` (``train.init_from``
    still set), a fine-tuning run ends with the weights of one that made its 8 updates in one go."""
    corpus_b = _other_corpus(tmp_path / "b", 5, 9, seed=500)
    overrides = [f"train.init_from={parent}", "train.eval_every=4", "model.dropout=0.1"]
    train(_run_cfg(corpus_b, tmp_path / "cache", *overrides, "train.max_steps=8"), tmp_path / "straight")
    run = tmp_path / "split"
    train(_run_cfg(corpus_b, tmp_path / "cache", *overrides, "train.max_steps=4"), run)
    train(_run_cfg(corpus_b, tmp_path / "cache", *overrides, "train.max_steps=8", "train.resume=auto"), run)

    log = (run / "train.log").read_text()
    assert f"train.init_from={parent} is ignored: the run continues from its own checkpoint" in log
    assert f"resumed from {run / 'checkpoints' / 'last.pt'} at update 4" in log
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["event"] == "train"]
    assert steps == list(range(1, 9))
    expected = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")["model"]
    actual = load_checkpoint(run / "checkpoints" / "last.pt")["model"]
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, msg=name)


@pytest.mark.slow
def test_torchrun_starts_every_rank_from_the_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    """Two processes (gloo on the CPU) start from the checkpoint; rank 0 alone logs it."""
    corpus_b = _other_corpus(tmp_path / "b", 2, 6, seed=600)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    overrides = ["experiment=smoke", *corpus_b.overrides(), *TOY, f"data.cache_dir={tmp_path / 'cache'}",
                 f"train.init_from={checkpoint}", "train.max_steps=2", "train.eval_every=2", "train.search.beam_size=1",
                 f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
               "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "nmt.train", *overrides]  # fmt: skip
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.count(f"a new run from the weights of {checkpoint}") == 1 and "x 2 process(es)" in log
    assert "WARNING" not in log
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["steps"] == 2.0

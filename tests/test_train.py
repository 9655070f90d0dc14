"""Training end to end: ``python -m nmt.train experiment=smoke`` on a toy corpus learns, and writes
checkpoints, TensorBoard scalars, hypotheses and results; a run stopped after N updates resumes from
``last.pt`` exactly where it stopped; only training pairs are filtered."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, REPO_ROOT, ToyCorpus, make_toy_corpus, write_lines
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nmt.checkpoint import load_checkpoint, model_from_checkpoint
from nmt.data.batches import prepare_data
from nmt.errors import CheckpointError
from nmt.evaluation.metrics import teacher_forced_nll
from nmt.train import train
from nmt.training.checks import continued_config, merge_overrides, resume_changes
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
@pytest.mark.parametrize(("experiment", "ema", "guided"), [("smoke", "0.0", False), ("smoke", "0.8", False),
                                                      ("smoke_transformer", "0.0", False), ("smoke", "0.0", True),
                                                      ("smoke_transformer", "0.0", True)])  # fmt: skip
def test_resume_continues_exactly(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path, in_process, experiment: str,
                                  ema: str, guided: bool) -> None:  # fmt: skip
    """6 updates, then 6 more resumed from ``last.pt``, give the same weights as 12 in one go (and
    the same moving average, when one is kept), for an RNN and a Transformer, with and without
    guided alignment."""
    links = write_lines(tmp_path / "train.links", [" ".join(f"{i}-{i}" for i in range(len(line.split())))
                                                   for line in toy_corpus.src_lines])  # fmt: skip
    extra = [f"train.ema={ema}"] + ([f"train.guided_alignment.path={links}", "train.guided_alignment.weight=0.5",
                                     "train.guided_alignment.decay=0.5"] if guided else [])  # fmt: skip
    _toy_cfg = functools.partial(globals()["_toy_cfg"], experiment=experiment)
    straight = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=12", *extra), tmp_path / "straight")
    first = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=6", *extra), tmp_path / "first")
    assert (straight["steps"], first["steps"]) == (12.0, 6.0)
    last = tmp_path / "first" / "checkpoints" / "last.pt"
    assert load_checkpoint(last)["train_state"]["progress"]["step"] == 6

    resumed = train(_toy_cfg(compose_cfg, toy_corpus, "train.max_steps=12", f"train.resume={last}", *extra),
                    tmp_path / "resumed")  # fmt: skip
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


def test_a_continued_runs_overrides_are_its_own_with_the_command_lines_in_their_place() -> None:
    saved = ["experiment=smoke", "train.max_steps=50", "+extra.note=a"]
    assert merge_overrides(saved, ["train.resume=auto"]) == [*saved, "train.resume=auto"]
    assert merge_overrides(saved, ["train.max_steps=80", "experiment=smoke", "extra.note=b"]) == [
        "train.max_steps=80", "experiment=smoke", "++extra.note=b"]  # fmt: skip


def test_a_continued_run_keeps_its_saved_settings_and_takes_the_command_lines(tmp_path: Path) -> None:
    """Only what the command line changes comes from it: a default changed since the run started
    (here label_smoothing) keeps the run's value; a changed dropout reaches the keys that follow it."""
    saved_overrides = ["experiment=smoke", f"data.cache_dir={tmp_path}", "train.max_steps=50"]
    given = ["train.resume=auto", "train.max_steps=80", "model.dropout=0.3"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        before = compose("train", overrides=saved_overrides)
        after = compose("train", overrides=merge_overrides(saved_overrides, given))
    saved = OmegaConf.to_container(before, resolve=True)
    saved["train"]["label_smoothing"] = 0.25  # the default when the run started
    cfg = continued_config(saved, before, after)
    assert cfg.train.label_smoothing == 0.25 and cfg.data.kind == "synthetic" and cfg.model.emb_dim == 32
    assert (cfg.train.resume, cfg.train.max_steps) == ("auto", 80)
    assert cfg.model.dropout == cfg.model.encoder.hidden_dropout == 0.3
    changed = resume_changes(saved, cfg, "last.pt")
    assert [c.split(":")[0] for c in changed if not c.startswith("model.")] == ["train.max_steps"]


def _resume_hint(output: str) -> list[str]:
    """The command an interrupted run's log says continues it, ready to run here."""
    line = next(line for line in output.splitlines() if "continue the run with: " in line)
    command = shlex.split(line.split("continue the run with: ", 1)[1])
    assert command[:3] == ["python", "-m", "nmt.train"], line
    return [sys.executable, *command[1:]]


@pytest.mark.slow
def test_the_hint_of_an_interrupted_run_alone_continues_it(tmp_path: Path) -> None:
    """Ctrl-C, then exactly the command the log prints (from another folder): the run continues from
    last.pt with the settings it started with; a change to a training setting is applied, and a
    change to the model is refused in one line naming only that key."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    started = ["experiment=smoke", f"data.cache_dir={cache}", "model.emb_dim=16", "model.encoder.hidden_dim=16",
               "model.decoder.hidden_dim=32", "train.max_steps=24", "train.eval_every=6", "train.log_every=1",
               "train.num_heatmaps=0", "train.device=cpu"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "nmt.train", *started, f"hydra.run.dir={run}"], cwd=REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    log = run / "train.log"
    deadline = time.monotonic() + 240
    while not (log.exists() and "update 8: loss" in log.read_text()):  # between the checkpoints of updates 6 and 12
        assert proc.poll() is None and time.monotonic() < deadline, "training ended before update 8"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, output = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-3000:]
    stopped = load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]["step"]
    logged = [int(n) for n in re.findall(r"update (\d+): loss", log.read_text())]
    assert 8 <= stopped < 24 and max(logged) == stopped  # saved where it stopped, not at a periodic checkpoint
    assert f"run folder {run.resolve()} (a new run)" in output  # where the run is, said at its start
    hint = _resume_hint(output)
    assert f"hydra.run.dir={run.resolve()}" in hint

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(hint, cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed from {run / 'checkpoints' / 'last.pt'} at update {stopped} " in done.stderr
    assert "with the same config" in done.stderr
    assert json.loads((run / "results.json").read_text())["steps"] == 24.0
    assert OmegaConf.load(run / "config.yaml").model.emb_dim == 16
    assert OmegaConf.load(run / ".hydra" / "overrides.yaml")[: len(started)] == started
    assert f"run folder {run.resolve()} (continuing {run.resolve() / 'checkpoints' / 'last.pt'})" in done.stderr
    assert f"run folder {run.resolve()}: results.json" in done.stderr  # and at its end

    refused = subprocess.run([*hint, "model.emb_dim=8"], cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    (line,) = [line for line in refused.stderr.splitlines() if "cannot resume" in line]
    assert "model.emb_dim: 16 in the checkpoint, 8 now" in line
    assert "train." not in line and "data." not in line, line

    more = subprocess.run([*hint, "train.max_steps=30"], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr[-3000:]
    assert json.loads((run / "results.json").read_text())["steps"] == 30.0
    assert "#   train.max_steps: 24 -> 30" in (run / "config.yaml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--config-dir", "hydra.searchpath"])
def test_a_run_started_with_configs_of_its_own_resumes_from_its_folder_alone(tmp_path: Path, how: str) -> None:
    """A run whose experiment lives in the user's folder (``--config-dir`` or ``hydra.searchpath``)
    continues with ``train.resume=auto hydra.run.dir=RUN`` alone: the folder remembers where its
    configs are."""
    configs = tmp_path / "my_configs" / "experiment"
    configs.mkdir(parents=True)
    (configs / "mine.yaml").write_text("# @package _global_\ndefaults:\n  - override /data: synthetic\n"
                                       "data:\n  train_size: 200\n  valid_size: 20\n  test_size: 20\n"
                                       "train:\n  max_steps: 4\n  num_heatmaps: 0\n")  # fmt: skip
    run, cache = tmp_path / "run", tmp_path / "cache"
    tiny = ["model.emb_dim=16", "model.encoder.hidden_dim=16", "model.decoder.hidden_dim=16", "train.threads=1"]
    where = tmp_path / "my_configs"
    folder = ["--config-dir", str(where)] if how == "--config-dir" else [f"hydra.searchpath=[file://{where}]"]
    started = subprocess.run([sys.executable, "-m", "nmt.train", *folder, "experiment=mine", f"data.cache_dir={cache}",
                              *tiny, f"hydra.run.dir={run}"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    more = subprocess.run([sys.executable, "-m", "nmt.train", "train.resume=auto", f"hydra.run.dir={run}",
                           "train.max_steps=6"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    assert json.loads((run / "results.json").read_text())["steps"] == 6.0


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

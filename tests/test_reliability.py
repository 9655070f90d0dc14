"""Faults and bad input (README "Reliability"): a run killed with SIGKILL at any moment, even in the
middle of a checkpoint write, resumes to exactly the weights and losses of an uninterrupted run;
SIGINT/SIGTERM save a resumable checkpoint and exit 0; non-finite losses are skipped, counted and
limited; a full disk stops training with the previous checkpoint intact; invalid configs and empty
corpora fail before training with one line naming the key or the file.

The uninterrupted reference run is trained once, in-process; interrupted runs are real
``python -m nmt.train`` subprocesses of the same tiny model (same seed, one thread), so the two
must agree bit for bit.
"""

from __future__ import annotations

import errno
import io
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hydra
import pytest
import torch
from conftest import CONFIG_DIR, REPO_ROOT, ToyCorpus, make_toy_corpus, train_in_process, write_lines
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from omegaconf import DictConfig

import nmt.files
import nmt.model
import nmt.training.trainer
from nmt.checkpoint import load_checkpoint
from nmt.data.batches import prepare_data
from nmt.data.text import DataError
from nmt.errors import CheckpointError
from nmt.model import build_model
from nmt.training.checks import ConfigError, instantiation_message
from nmt.training.trainer import Objective

STEPS, EVAL_EVERY = 40, 4  # ~3 epochs of 14 updates; a checkpoint every 4 updates
TINY_RUN = [
    "experiment=smoke", "data.vocab.joint=false", "data.vocab.size=40", "data.max_tokens=200",
    "model.emb_dim=16", "model.encoder.hidden_dim=16", "model.decoder.hidden_dim=32",
    "model.dropout=0.2",  # dropout on, so that resuming must restore the random state
    f"train.eval_every={EVAL_EVERY}", "train.log_every=1", "train.threads=1", "train.num_heatmaps=0",
    "train.device=cpu",
]  # fmt: skip
UPDATE_LINE = re.compile(r"(?<!at )update (\d+): loss (\S+),")  # not "validation at update N: loss"
RESUMED_LINE = re.compile(r"resumed from .* at update (\d+) ")


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> ToyCorpus:
    return make_toy_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sentencepiece models and tokenized data, shared by every run of this module."""
    return tmp_path_factory.mktemp("cache")


def _overrides(corpus: ToyCorpus, cache: Path, *extra: str) -> list[str]:
    return [*TINY_RUN, *corpus.overrides(), f"data.cache_dir={cache}", *extra]


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.fixture(scope="module")
def reference(corpus: ToyCorpus, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run of ``STEPS`` updates (its folder)."""
    run = tmp_path_factory.mktemp("reference") / "run"
    train_in_process(_overrides(corpus, cache, f"train.max_steps={STEPS}"), run)
    return run


def _start(overrides: list[str], run: Path, code: str | None = None, env: dict | None = None) -> subprocess.Popen:
    """``python -m nmt.train`` (or ``python -c code``, which must run it) in the background."""
    run.mkdir(parents=True, exist_ok=True)
    head = ["-c", code] if code else ["-m", "nmt.train"]
    command = [sys.executable, *head, *overrides, f"hydra.run.dir={run}"]
    out = open(run.parent / f"{run.name}.{time.monotonic_ns()}.out", "w")  # closed by _finish
    proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    proc.output_file = out
    return proc


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Wait for ``proc``; its exit code and output."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.output_file.close()
    return proc.returncode, Path(proc.output_file.name).read_text()


def _wait_until(condition: Callable[[], bool], proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            _, output = _finish(proc)
            raise AssertionError(f"training ended (exit code {proc.returncode}) before {what}:\n{output[-3000:]}")
        if time.monotonic() > deadline:
            _finish(proc, timeout=0)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _logged(run: Path) -> list[tuple[int, str]]:
    """(update, loss as logged) for every training log line of ``run``, in order."""
    log = run / "train.log"
    return [(int(m[1]), m[2]) for m in UPDATE_LINE.finditer(log.read_text())] if log.exists() else []


def _has_logged(run: Path, step: int) -> Callable[[], bool]:
    return lambda: any(s >= step for s, _ in _logged(run))


def _assert_resumed_exactly(run: Path, reference: Path) -> None:
    """``run`` (interrupted, then resumed) ends with the reference weights and optimizer state, and
    logs the reference losses for every update since it last resumed."""
    text = (run / "train.log").read_text()
    resumed_at = [int(m[1]) for m in RESUMED_LINE.finditer(text)]
    assert resumed_at, "the run did not resume"
    after = [(int(m[1]), m[2]) for m in UPDATE_LINE.finditer(text[text.rindex("resumed from") :])]
    expected = dict(_logged(reference))
    assert [s for s, _ in after] == list(range(resumed_at[-1] + 1, STEPS + 1))
    assert after == [(s, expected[s]) for s, _ in after], "losses after resuming differ from the uninterrupted run"
    for step, loss in _logged(run):  # also before each interruption
        assert loss == expected[step], f"update {step}"

    actual, wanted = load_checkpoint(run / "checkpoints" / "last.pt"), load_checkpoint(reference / "checkpoints" / "last.pt")
    assert actual["train_state"]["progress"]["step"] == STEPS
    for name, tensor in wanted["model"].items():
        assert torch.equal(actual["model"][name], tensor), name
    moments = lambda payload: [s["exp_avg_sq"] for s in payload["train_state"]["optimizer"]["state"].values()]  # noqa: E731
    assert all(torch.equal(a, b) for a, b in zip(moments(actual), moments(wanted), strict=True))


def _assert_complete_files(run: Path) -> None:
    """Every checkpoint under a final name loads (none is half written)."""
    for path in (run / "checkpoints").glob("*.pt"):
        load_checkpoint(path)


# --------------------------------------------------------------------------- kill -9


@pytest.mark.slow
def test_kill_at_a_random_moment_then_resume_is_exact(corpus, cache, reference: Path, tmp_path: Path) -> None:
    """SIGKILL shortly after a random update (in an update, a validation or a checkpoint write),
    then ``train.resume=auto`` in the same folder: the result is the uninterrupted run's."""
    kill_after = random.randrange(EVAL_EVERY + 1, STEPS - 2 * EVAL_EVERY)
    delay = random.uniform(0, 0.05)
    context = f"killed after update {kill_after} + {delay:.3f}s"
    run = tmp_path / "run"
    overrides = _overrides(corpus, cache, f"train.max_steps={STEPS}")

    proc = _start(overrides, run)
    _wait_until(_has_logged(run, kill_after), proc, f"update {kill_after}")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    code, output = _finish(proc)
    assert code == -signal.SIGKILL, f"{context}: the run ended by itself first:\n{output[-2000:]}"
    _assert_complete_files(run)
    saved = load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]["step"]
    assert saved % EVAL_EVERY == 0 and saved >= EVAL_EVERY, context

    code, output = _finish(_start([*overrides, "train.resume=auto"], run))
    assert code == 0, f"{context}:\n{output[-3000:]}"
    assert f"resumed from {run / 'checkpoints' / 'last.pt'} at update {saved} " in (run / "train.log").read_text()
    _assert_resumed_exactly(run, reference)


# ``python -m nmt.train`` whose write of the checkpoint of update STALL_AT_STEP stops half way: half
# the bytes reach the temporary file, then the process hangs (until the test kills it).
STALLING_WRITER = """
import io, os, runpy, sys, time
import torch

stall_step, marker = int(os.environ["STALL_AT_STEP"]), os.environ["STALL_MARKER"]
real_save, real_fdopen, armed = torch.save, os.fdopen, []

def save(obj, f, *args, **kwargs):  # nmt serializes a checkpoint in memory, then writes the bytes
    state = obj.get("train_state") if isinstance(obj, dict) else None
    if state is not None and state["progress"]["step"] >= stall_step:
        armed.append(True)
    return real_save(obj, f, *args, **kwargs)

class Stalling(io.FileIO):
    def write(self, data):
        super().write(bytes(data[: len(data) // 2]))
        os.fsync(self.fileno())
        open(marker, "w").close()
        time.sleep(600)

def fdopen(fd, *args, **kwargs):
    return Stalling(fd, "wb") if armed else real_fdopen(fd, *args, **kwargs)

torch.save, os.fdopen = save, fdopen
sys.argv[0] = "nmt.train"
runpy.run_module("nmt.train", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_keeps_the_previous_one(corpus, cache, reference: Path, tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "stalled"
    overrides = _overrides(corpus, cache, f"train.max_steps={STEPS}")
    env = {"STALL_AT_STEP": str(2 * EVAL_EVERY), "STALL_MARKER": str(marker)}
    proc = _start(overrides, run, code=STALLING_WRITER, env=env)
    _wait_until(marker.exists, proc, "the stalled checkpoint write")
    proc.send_signal(signal.SIGKILL)
    assert _finish(proc)[0] == -signal.SIGKILL

    checkpoints = run / "checkpoints"
    (partial,) = checkpoints.glob(".last.pt.*.tmp")  # the write in progress, under a temporary name
    assert 0 < partial.stat().st_size
    _assert_complete_files(run)
    assert load_checkpoint(checkpoints / "last.pt")["train_state"]["progress"]["step"] == EVAL_EVERY

    train_in_process([*overrides, "train.resume=auto"], run)  # resuming in-process: the same result
    assert not list(checkpoints.glob(".*.tmp")), "the leftover temporary file is removed"
    _assert_resumed_exactly(run, reference)


# --------------------------------------------------------------------------- SIGINT / SIGTERM


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_saves_a_resumable_checkpoint_and_exits_0(signum, corpus, cache, reference, tmp_path: Path) -> None:
    run = tmp_path / "run"
    overrides = _overrides(corpus, cache, f"train.max_steps={STEPS}")
    proc = _start(overrides, run)
    _wait_until(_has_logged(run, EVAL_EVERY + 2), proc, f"update {EVAL_EVERY + 2}")  # between two checkpoints
    proc.send_signal(signum)
    code, output = _finish(proc)
    assert code == 0, output[-3000:]
    assert f"signal {int(signum)}: saved" in output
    progress = load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]
    assert EVAL_EVERY + 2 <= progress["step"] < STEPS, "saved at once, not at the next validation"
    assert not (run / "results.json").exists()

    train_in_process([*overrides, "train.resume=auto"], run)
    _assert_resumed_exactly(run, reference)


# --------------------------------------------------------------------------- NaN / inf losses


def _poison_losses(monkeypatch: pytest.MonkeyPatch, bad: Callable[[int], bool]) -> None:
    """Make the loss of the n-th training forward pass NaN wherever ``bad(n)`` (n from 1)."""
    real, calls = Objective.forward, []

    def forward(self, batch, label_smoothing, guide_weight=0.0):
        loss, nll, alignment = real(self, batch, label_smoothing, guide_weight)
        calls.append(1)
        return (loss * float("nan") if bad(len(calls)) else loss), nll, alignment

    monkeypatch.setattr(Objective, "forward", forward)


def test_nan_losses_are_skipped_and_counted(corpus, cache, tmp_path: Path, monkeypatch, caplog) -> None:
    _poison_losses(monkeypatch, lambda n: n in (3, 4, 5))
    results = train_in_process(_overrides(corpus, cache, "train.max_steps=8", "train.max_bad_steps=4"), tmp_path)
    assert results["steps"] == 8, "three skipped updates do not count as steps"
    assert "skipped (3 in a row, 3 in all)" in caplog.text
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert payload["train_state"]["progress"]["skipped_updates"] == 3
    assert all(torch.isfinite(t).all() for t in payload["model"].values()), "a NaN update reached the weights"
    assert [s for s, _ in _logged(tmp_path)] == list(range(1, 9))
    assert all(loss != "nan" for _, loss in _logged(tmp_path))


def test_too_many_nan_losses_in_a_row_stop_training(corpus, cache, tmp_path: Path, monkeypatch) -> None:
    _poison_losses(monkeypatch, lambda n: n > 2 * EVAL_EVERY)  # from update 9 on
    overrides = _overrides(corpus, cache, f"train.max_steps={STEPS}", "train.max_bad_steps=3")
    with pytest.raises(FloatingPointError, match=r"3 non-finite losses in a row \(train.max_bad_steps=3\)") as info:
        train_in_process(overrides, tmp_path)
    assert str(tmp_path / "checkpoints" / "last.pt") in str(info.value)
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")  # the last good checkpoint
    assert payload["train_state"]["progress"]["step"] == 2 * EVAL_EVERY
    assert all(torch.isfinite(t).all() for t in payload["model"].values())


# --------------------------------------------------------------------------- full disk


class _FullDisk(io.FileIO):
    """A file on a disk with 100 bytes left: the write past those fails with ENOSPC."""

    room = 100

    def write(self, data) -> int:
        data = bytes(data)
        written = super().write(data[: self.room])
        self.room -= written
        if written < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return written


@pytest.mark.parametrize("full_for", ["checkpoints", "every file"])
def test_full_disk_stops_training_and_keeps_the_previous_checkpoint(
    full_for: str, corpus, cache, tmp_path: Path, monkeypatch
) -> None:
    """The disk fills up after the checkpoint of update 4, at update 8: for ``checkpoints``, just
    before its checkpoint is written; for ``every file``, the validation hypotheses fail first."""
    real_save, real_fdopen, real_update, full = torch.save, os.fdopen, nmt.training.trainer.train_update, []

    def save(obj, f, *args, **kwargs):  # nmt serializes a checkpoint in memory, then writes the bytes
        state = obj.get("train_state") if isinstance(obj, dict) else None
        if state is not None and state["progress"]["step"] == 2 * EVAL_EVERY:
            full.append(True)
        return real_save(obj, f, *args, **kwargs)

    def train_update(*args, **kwargs):
        updates.append(1)
        if len(updates) == 2 * EVAL_EVERY:
            full.append(True)
        return real_update(*args, **kwargs)

    def fdopen(fd, *args, **kwargs):  # below nmt.files.atomic_write: the file it writes
        return _FullDisk(fd, "wb") if full else real_fdopen(fd, *args, **kwargs)

    updates = []
    monkeypatch.setattr(nmt.files.os, "fdopen", fdopen)
    if full_for == "checkpoints":
        monkeypatch.setattr(torch, "save", save)
    else:
        monkeypatch.setattr(nmt.training.trainer, "train_update", train_update)
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(OSError if full_for == "every file" else CheckpointError) as info:
        train_in_process(_overrides(corpus, cache, f"train.max_steps={STEPS}"), tmp_path)
    message = str(info.value)
    assert "No space left on device" in message
    if full_for == "checkpoints":
        assert message.startswith(f"cannot write the checkpoint {checkpoints / 'last.pt'}"), message
        assert "the previous last.pt is intact" in message
    else:
        hypotheses = tmp_path / "hypotheses" / f"valid-step{2 * EVAL_EVERY}.txt"
        assert str(hypotheses) in message
        assert not hypotheses.exists(), "no half-written file under the final name"
    assert load_checkpoint(checkpoints / "last.pt")["train_state"]["progress"]["step"] == EVAL_EVERY
    assert not [p for folder in (tmp_path, checkpoints, tmp_path / "hypotheses") for p in folder.glob(".*.tmp")]
    _assert_complete_files(tmp_path)


# --------------------------------------------------------------------------- bad configs


@pytest.fixture(scope="module")
def cli_failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    """Bad command lines run at once, in parallel: name -> (exit code, output, run folder)."""
    folder = tmp_path_factory.mktemp("cli")
    commands = {
        "unknown key": ["train.foo=1"],
        "misspelled group option": ["model/attention=bahdanu"],
        "invalid value": ["model.dropout=1.5"],
    }
    common = ["experiment=smoke", f"data.cache_dir={folder / 'cache'}"]
    procs = {name: _start([*common, *extra], folder / name.replace(" ", "_")) for name, extra in commands.items()}
    return {name: (*_finish(proc), folder / name.replace(" ", "_")) for name, proc in procs.items()}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("unknown key", "train.foo: no such setting"),
        ("misspelled group option", "Could not find 'model/attention/bahdanu'"),
        ("invalid value", "model.dropout=1.5: must be a probability in [0, 1)"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_bad_command_line_fails_at_start_up(name: str, message: str, cli_failures) -> None:
    code, output, run = cli_failures[name]
    assert code != 0 and message in output, output[-3000:]
    assert "Traceback" not in output
    assert not (run / "checkpoints").exists() and not (run / "tensorboard").exists()
    # one line, exit status 2: a value nmt refuses, and a command line that does not compose
    assert code == 2 and len([line for line in output.splitlines() if "ERROR" in line]) == 1, output


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.emb_dim=0", "model.emb_dim=0: must be an integer >= 1"),
        ("model.encoder.hidden_dim=-4", "model.encoder.hidden_dim=-4: must be an integer >= 1"),
        ("model.encoder.num_layers=0", "model.encoder.num_layers=0: must be an integer >= 1"),
        ("model.decoder.hidden_dim=-1", "model.decoder.hidden_dim=-1: must be an integer >= 1"),
        ("model.decoder.output_dim=0", "model.decoder.output_dim=0: must be an integer >= 1"),
        ("model.attention.attn_dim=0", "model.attention.attn_dim=0: must be an integer >= 1"),
        ("model.emb_dim=big", "model.emb_dim='big': must be an integer >= 1"),
        ("model.dropout=1.0", "model.dropout=1.0: must be a probability in [0, 1)"),
        ("model.dropout=-0.1", "model.dropout=-0.1: must be a probability in [0, 1)"),
        ("model.decoder.output_dropout=1.2", "model.decoder.output_dropout=1.2: must be a probability in [0, 1)"),
        ("model.src_word_dropout=1", "model.src_word_dropout=1: must be a probability in [0, 1)"),
        ("model.decoder.num_layers=0", "model.decoder.num_layers=0: must be an integer >= 1"),
        ("model.decoder.layer_norm=yes", "model.decoder.layer_norm='yes': choose one of true, false"),
        ("model.share_embeddings=true data.vocab.joint=false", "model.share_embeddings=true needs one vocabulary"),
        ("train.ema=1.0", "train.ema=1.0: must be 0 (off) or a decay in (0, 1)"),
        ("train.label_smoothing=1.0", "train.label_smoothing=1.0: must be a number in [0, 1)"),
        ("train.optimizer.lr=0", "train.optimizer.lr=0: must be a number > 0"),
        ("train.optimizer.lr=-1e-3", "train.optimizer.lr=-0.001: must be a number > 0"),
        ("data.max_tokens=0", "data.max_tokens=0: must be an integer >= 1"),
        ("data.max_len=-5", "data.max_len=-5: must be an integer >= 1"),
        ("data.vocab.size=3", "data.vocab.size=3: must be an integer >= 8"),
        ("data.vocab.type=wordpiece", "data.vocab.type='wordpiece': choose one of unigram, bpe"),
        ("train.accum_steps=0", "train.accum_steps=0: must be an integer >= 1"),
        ("train.max_epochs=0", "train.max_epochs=0: must be an integer >= 1"),
        ("train.max_steps=-1", "train.max_steps=-1: must be an integer >= 0"),
        ("train.patience=-1", "train.patience=-1: must be an integer >= 0"),
        ("train.log_every=0", "train.log_every=0: must be an integer >= 1"),
        ("train.max_bad_steps=0", "train.max_bad_steps=0: must be an integer >= 1"),
        ("train.val_beam_size=0", "train.val_beam_size=0: must be an integer >= 1"),
        ("train.search.length_penalty=wu", "train.search.length_penalty='wu': choose one of none, average, gnmt"),
        ("train.search.n_best=7", "train.search.n_best=7: must be between 1 and train.search.beam_size=5"),
        ("train.device=gpu0", "train.device='gpu0': choose auto, cpu, cuda or cuda:<index>"),
        ("train.resume=/no/such.pt", "train.resume=/no/such.pt: no such checkpoint file"),
        ("data.train_src=/no/such/train.src", "data.train_src=/no/such/train.src: no such file"),
        ("train.optimizer.betas=[1.5,0.9]", "train.optimizer: Invalid beta parameter at index 0: 1.5"),
        ("model.decoder.init_state=random", "model.decoder (nmt.decoder.BahdanauDecoder): model.decoder.init_state="),
        ("model/attention=luong_dot model/encoder=gru", "model.attention (nmt.attention.LuongDotAttention): luong_dot "
         "attention needs the decoder hidden size (32) to equal the encoder output size (16)"),
        ("+model.encoder.hiden_dim=3", "model.encoder.hiden_dim is not a setting of nmt.encoder.RNNEncoder"),
        ("train.guided_alignment.path=/no/such.links", "train.guided_alignment.path=/no/such.links: no such file"),
        ("train.guided_alignment.path=gold", "train.guided_alignment.path=gold: only the synthetic task knows its gold"),
        ("train.guided_alignment.decay=0", "train.guided_alignment.decay=0.0: must be a factor in (0, 1]"),
        ("train.guided_alignment.weight=-1", "train.guided_alignment.weight=-1.0: must be a number >= 0"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_invalid_value_fails_before_training(override: str, message: str, corpus, cache, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        train_in_process(_overrides(corpus, cache, *override.split()), tmp_path / "run")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert not (tmp_path / "run").exists(), "nothing is written"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.src_lang=es"], "data.src_lang='es': Multi30k has languages en, de, fr, cs"),
        (["data.tgt_lang=de"], "data.src_lang and data.tgt_lang are both 'de'"),
        (["data.tgt_lang=cs", "data.test_splits=[test_2017_mscoco]"],
         "data.test_splits[0]='test_2017_mscoco': this split has no 'cs' side (it has en, de, fr)"),
        (["data.valid_split=dev"], "data.valid_split='dev': Multi30k has the splits train, val, "),
        (["data.dir=/no/such/folder"], "data.dir=/no/such/folder: no such folder"),
    ],
)  # fmt: skip
def test_invalid_multi30k_settings_fail_before_training(overrides: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        train_in_process(["data=multi30k", *overrides], tmp_path / "run")
    assert str(info.value).startswith(message)
    assert not (tmp_path / "run").exists()


def test_unset_data_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.train_src is required but not set"):
        train_in_process(["data=files"], tmp_path / "run")


def test_a_constructors_refusal_is_one_line_naming_the_key() -> None:
    """What ``python -m nmt.train`` prints when a model class refuses its settings."""
    cfg = _compose(["model/attention=luong_dot", "model.decoder.hidden_dim=20"])
    with pytest.raises(ConfigError) as info:
        build_model(cfg.model, 10, 10)
    assert str(info.value) == (
        "model.attention (nmt.attention.LuongDotAttention): luong_dot attention needs the decoder hidden size (20) "
        "to equal the encoder output size (512); use model/attention=luong_general or scaled_dot instead"
    )



def test_hydras_instantiation_error_is_one_line() -> None:
    """What ``python -m nmt.train`` prints for an optimizer that Hydra cannot build."""
    cfg = _compose(["train.optimizer._target_=torch.optim.NoSuchOptimizer"])
    with pytest.raises(InstantiationException) as info:
        hydra.utils.instantiate(cfg.train.optimizer)
    assert "\n" in str(info.value)
    message = instantiation_message(info.value)
    assert "\n" not in message and "NoSuchOptimizer" in message


# --------------------------------------------------------------------------- bad data


def _bad_data(kind: str, split: str, corpus: ToyCorpus, folder: Path) -> list[str]:
    """Overrides pointing ``split`` (train or valid) at a broken copy of the toy files."""
    src, tgt = Path(getattr(corpus, f"{split}_src")).read_bytes(), Path(getattr(corpus, f"{split}_tgt")).read_bytes()
    if kind == "empty files":
        src = tgt = b""
    elif kind == "only empty lines":
        src, tgt = b"\n" * 20, b"   \n" * 20
    elif kind == "mismatched line counts":
        tgt += b"one more\n"
    elif kind == "invalid UTF-8":
        src = src.replace(b"\n", b"\n\xff\xfe", 1)
    (folder / f"{split}.src").write_bytes(src)
    (folder / f"{split}.tgt").write_bytes(tgt)
    return [f"data.{split}_src={folder / f'{split}.src'}", f"data.{split}_tgt={folder / f'{split}.tgt'}"]


@pytest.mark.parametrize("split", ["train", "valid"])
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty files", "split {src} / {tgt} are empty (0 lines)"),
        ("only empty lines", "split {src} / {tgt} have 20 lines but none with text on both sides"),
        ("mismatched line counts", "parallel files differ in length: {src} has"),
        ("invalid UTF-8", "{src}, line 2: invalid UTF-8"),
    ],
)
def test_bad_corpus_is_refused_naming_the_file(kind, message, split, corpus, tmp_path: Path) -> None:
    overrides = _bad_data(kind, split, corpus, tmp_path)
    cfg = _compose([*corpus.overrides(), *TINY_RUN, f"data.cache_dir={tmp_path / 'cache'}", *overrides])
    with pytest.raises(DataError) as info:
        prepare_data(cfg.data)
    assert message.format(src=tmp_path / f"{split}.src", tgt=tmp_path / f"{split}.tgt") in str(info.value)


# --------------------------------------------------------------------------- bad checkpoints


def test_truncated_last_checkpoint_is_refused_on_resume(corpus, cache, tmp_path: Path) -> None:
    last = tmp_path / "checkpoints" / "last.pt"
    write_lines(last, ["not a checkpoint"])
    with pytest.raises(CheckpointError, match=f"{re.escape(str(last))}: not a readable checkpoint"):
        train_in_process(_overrides(corpus, cache, "train.max_steps=2", "train.resume=auto"), tmp_path)


# --------------------------------------------------------------------------- resuming with another config


def _folder_state(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(corpus: ToyCorpus, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run of 4 updates through the command line (so Hydra's own files are there too); (run, cache)."""
    folder = tmp_path_factory.mktemp("resume_config")
    run, cache = folder / "run", folder / "cache"
    code, output = _finish(_start(_overrides(corpus, cache, "train.max_steps=4"), run))
    assert code == 0, output[-3000:]
    return run, cache


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["model.emb_dim=48"], "model.emb_dim: 16 in the checkpoint, 48 now"),
        (["train.optimizer.lr=1e-3"], "train.optimizer.lr: 0.01 in the checkpoint, 0.001 now"),
        (["data.vocab.size=50", "train.seed=7"], "data.vocab.size: 40 in the checkpoint, 50 now; train.seed: 1234"),
    ],
    ids=["model", "learning_rate", "subwords_and_seed"],
)
@pytest.mark.slow
def test_resume_with_a_changed_model_or_optimizer_is_refused_and_changes_nothing(
    finished_run, corpus: ToyCorpus, change: list[str], named: str
) -> None:
    run, cache = finished_run
    before = _folder_state(run)
    code, output = _finish(_start(_overrides(corpus, cache, "train.max_steps=8", "train.resume=auto", *change), run))
    assert code == 2 and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and named in errors[0] and "cannot resume" in errors[0], output[-3000:]
    assert _folder_state(run) == before, "config.yaml, .hydra/, train.log and checkpoints are left as they were"


@pytest.mark.slow
def test_resume_applies_changed_training_settings_and_says_so(finished_run, corpus: ToyCorpus, tmp_path: Path) -> None:
    run, cache = finished_run
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    train_in_process(_overrides(corpus, cache, "train.max_steps=6", "train.resume=auto", "model.dropout=0.1"), copy)
    log = (copy / "train.log").read_text()
    assert "with changed settings, applied from now on:" in log
    assert "model.dropout: 0.2 -> 0.1" in log and "train.max_steps: 4 -> 6" in log
    config = (copy / "config.yaml").read_text()
    assert config.startswith(f"# resumed from {copy / 'checkpoints' / 'last.pt'} with changed settings:")
    assert "#   train.max_steps: 4 -> 6" in config and "max_steps: 6" in config
    assert load_checkpoint(copy / "checkpoints" / "last.pt")["train_state"]["progress"]["step"] == 6


def test_resume_auto_without_a_checkpoint_says_it_starts_a_new_run(corpus: ToyCorpus, tmp_path: Path) -> None:
    run = tmp_path / "typo"
    train_in_process(_overrides(corpus, tmp_path / "cache", "train.max_steps=1", "train.resume=auto"), run)
    expected = f"train.resume=auto: no checkpoint at {run / 'checkpoints' / 'last.pt'}, so this is a new run"
    assert expected in (run / "train.log").read_text()


def test_resume_changes_sorts_keys_into_applied_and_refused() -> None:
    from omegaconf import OmegaConf

    from nmt.training.checks import resume_changes

    saved = {"model": {"emb_dim": 8, "decoder": {"output_dropout": 0.1}}, "data": {"dir": "/a", "max_tokens": 100},
             "train": {"max_epochs": 2, "resume": None, "scheduler": {"gamma": 0.5}}}  # fmt: skip
    same = OmegaConf.create(saved)
    assert resume_changes(saved, same, "x.pt") == []
    applied = OmegaConf.create(saved)
    applied.model.decoder.output_dropout, applied.data.dir, applied.train.max_epochs = 0.3, "/b", 5
    applied.train.resume = "auto"
    assert resume_changes(saved, applied, "x.pt") == [
        "data.dir: '/a' -> '/b'", "model.decoder.output_dropout: 0.1 -> 0.3", "train.max_epochs: 2 -> 5"]  # fmt: skip
    for key, new in (("data.max_tokens", 200), ("train.scheduler.gamma", 0.1), ("model.emb_dim", 9)):
        refused = OmegaConf.create(saved)
        OmegaConf.update(refused, key, new)
        with pytest.raises(ConfigError, match=rf"cannot resume x.pt: .*{re.escape(key)}: "):
            resume_changes(saved, refused, "x.pt")


def test_a_checkpoint_from_before_data_kind_resumes_without_config_changes(corpus: ToyCorpus, tmp_path: Path) -> None:
    """Checkpoints written before ``data=hf`` named the corpus ``data.name`` and lacked the keys added
    with it; loading upgrades their config to today's, with the values their runs used."""
    from omegaconf import OmegaConf

    from nmt.checkpoint import upgrade_config
    from nmt.training.checks import resume_changes

    cfg = _compose(_overrides(corpus, tmp_path / "cache"))
    old = OmegaConf.to_container(cfg, resolve=True)
    old["data"]["name"] = old["data"].pop("kind")
    for key in ("max_train_pairs", "num_proc"):
        del old["data"][key]
    del old["data"]["vocab"]["sample_size"]
    upgraded = upgrade_config(old)
    assert upgraded["data"]["kind"] == "files" and "name" not in upgraded["data"]
    assert upgraded["data"]["vocab"]["sample_size"] == 2_000_000, "what those runs sampled"
    # the only difference, allowed because a resumed run keeps its checkpoint's subword models
    assert resume_changes(upgraded, cfg, "old.pt") == ["data.vocab.sample_size: 2000000 -> 1000000"]


def test_resume_uses_the_checkpoints_subword_models(corpus: ToyCorpus, tmp_path: Path, monkeypatch) -> None:
    """A resumed run tokenizes with the vocabularies saved in its checkpoint, not with whatever the
    sentencepiece cache holds (or would train) now."""
    run = tmp_path / "run"
    train_in_process(_overrides(corpus, tmp_path / "cache", "train.max_steps=2"), run)

    def no_training(*args, **kwargs):
        raise AssertionError("a resumed run must not build vocabularies")

    monkeypatch.setattr("nmt.data.batches.build_vocabs", no_training)
    results = train_in_process(_overrides(corpus, tmp_path / "cache", "train.max_steps=3", "train.resume=auto"), run)
    assert results["steps"] == 3.0

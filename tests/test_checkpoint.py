"""Checkpoints: they round-trip exactly (weights, config, vocabularies, training state,
provenance), are read without running code, and fail with one clear error naming the file when
missing, truncated, corrupt, foreign, of another version or of another architecture."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_batch

from nmt.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, load_checkpoint, model_from_checkpoint, save_checkpoint
from nmt.errors import CheckpointError
from nmt.model import build_model
from nmt.vocab import Vocab

LENGTHS = [4, 6, 2]
TGT_LEN = 5


@pytest.fixture
def trained_setup(compose_cfg, tiny_vocab: Vocab):
    """A composed tiny config, a model built from it (random weights) and the vocabulary."""
    cfg = compose_cfg(
        "model/decoder=luong", "model.emb_dim=16", "model.encoder.hidden_dim=16", "model.decoder.hidden_dim=32",
        "model.decoder.output_dim=16",
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(cfg.model, len(tiny_vocab), len(tiny_vocab)).eval()
    return cfg, model, tiny_vocab


def test_checkpoint_round_trip_gives_identical_outputs(trained_setup, tmp_path: Path) -> None:
    cfg, model, vocab = trained_setup
    path = tmp_path / "ckpt" / "model.pt"
    save_checkpoint(path, model, cfg, vocab, vocab, train_state={"progress": {"step": 7}})
    assert not [p for p in path.parent.iterdir() if p.name != "model.pt"], "no temporary files left behind"

    payload = load_checkpoint(path)
    assert payload["format"] == CHECKPOINT_FORMAT and payload["version"] == CHECKPOINT_VERSION
    assert payload["train_state"] == {"progress": {"step": 7}}
    assert payload["provenance"]["versions"]["torch"] == torch.__version__
    assert isinstance(payload["config"], dict)
    assert payload["config"]["model"]["decoder"]["emb_dim"] == 16  # interpolations resolved
    loaded, src_vocab, tgt_vocab, config = model_from_checkpoint(payload)
    assert not loaded.training
    assert src_vocab.model_proto == tgt_vocab.model_proto == vocab.model_proto
    assert config.model.decoder.hidden_dim == 32

    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN)
    with torch.no_grad():
        expected = model(src, src_lens, tgt_in)
        actual = loaded(src, src_lens, tgt_in)
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_weights_only_checkpoint_has_no_train_state(trained_setup, tmp_path: Path) -> None:
    cfg, model, vocab = trained_setup
    save_checkpoint(tmp_path / "w.pt", model, cfg, vocab, vocab)
    assert load_checkpoint(tmp_path / "w.pt")["train_state"] is None


def _write_valid(trained_setup, path: Path) -> Path:
    cfg, model, vocab = trained_setup
    save_checkpoint(path, model, cfg, vocab, vocab)
    return path


def _truncated(trained_setup, path: Path) -> None:
    _write_valid(trained_setup, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _random_bytes(trained_setup, path: Path) -> None:
    path.write_bytes(np.random.default_rng(0).bytes(5000))


def _text(trained_setup, path: Path) -> None:
    path.write_text("hello world\nthis is a translation, not a checkpoint\n")


def _empty(trained_setup, path: Path) -> None:
    path.write_bytes(b"")


def _foreign(trained_setup, path: Path) -> None:
    torch.save({"a": 1}, path)


def _foreign_list(trained_setup, path: Path) -> None:
    torch.save([torch.zeros(3)], path)


def _wrong_version(trained_setup, path: Path) -> None:
    _write_valid(trained_setup, path)
    payload = torch.load(path, weights_only=True)
    payload["version"] = CHECKPOINT_VERSION + 1
    torch.save(payload, path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (None, "no such checkpoint file"),
        (_truncated, "not a readable checkpoint"),
        (_random_bytes, "not a readable checkpoint"),
        (_empty, "not a readable checkpoint"),
        (_text, "not a readable checkpoint"),
        (_foreign, "not an nmt checkpoint"),
        (_foreign_list, "not an nmt checkpoint"),
        (_wrong_version, f"version {CHECKPOINT_VERSION + 1} is not supported"),
    ],
    ids=["missing", "truncated", "random-bytes", "empty", "text", "foreign-dict", "foreign-list", "wrong-version"],
)
def test_bad_checkpoints_give_one_clear_error(make, message: str, trained_setup, tmp_path: Path) -> None:
    path = tmp_path / "bad.pt"
    if make is not None:
        make(trained_setup, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_arbitrary_bytes_give_checkpoint_error(tmp_path: Path) -> None:
    """Whatever the unpickler trips over (KeyError, IndexError...), the caller sees one CheckpointError."""
    path = tmp_path / "noise.pt"
    for seed in range(100):  # with torch 2.13, seeds 17, 21, 58... raise IndexError or KeyError inside torch.load
        path.write_bytes(np.random.default_rng(seed).bytes(2000))
        with pytest.raises(CheckpointError, match="noise.pt"):
            load_checkpoint(path)


def test_checkpoint_of_another_architecture_is_refused(trained_setup, tmp_path: Path) -> None:
    path = _write_valid(trained_setup, tmp_path / "model.pt")
    payload = load_checkpoint(path)
    payload["config"]["model"]["decoder"]["hidden_dim"] = 48  # the weights no longer fit
    with pytest.raises(CheckpointError, match="do not fit"):
        model_from_checkpoint(payload)


class _Exploit:
    """Unpickling this runs ``os.mkdir(marker)``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_loading_is_weights_only_and_never_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "x": _Exploit(marker)}, path)
    assert zipfile.is_zipfile(path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        load_checkpoint(path)
    assert not marker.exists(), "loading a checkpoint executed code from it"
    # the file really is malicious: an unrestricted load would have run it
    torch.load(path, weights_only=False)
    assert marker.exists()

"""Checkpoints: they round-trip exactly (weights, config, vocabularies, training state,
provenance), are read without running code, and fail with one clear error naming the file when
missing, truncated, corrupt, foreign, of another version or of another architecture; a crafted
config cannot make loading allocate or build more than the file's weights; a run folder stands
for its best checkpoint."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_batch

from nmt.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    average_checkpoints,
    load_checkpoint,
    load_model,
    model_from_checkpoint,
    save_checkpoint,
)
from nmt.ensemble import load_system, split_members
from nmt.errors import CheckpointError
from nmt.model import build_model
from nmt.translator import Translator
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


# --------------------------------------------------------------------------- a crafted file's work is bounded

# Loads each file named on the command line under a 3 GB address-space limit and prints, per file,
# what happened, how long it took and how far the peak resident memory grew (the first file, an
# honest one, brings the process to its working size).
PROBE = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from nmt.checkpoint import load_model
from nmt.errors import CheckpointError
for path in sys.argv[1:]:
    start, peak = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        result = {"loaded": load_model(path, "cpu")[0].num_parameters()}
    except CheckpointError as e:
        result = {"refused": str(e)}
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    print(json.dumps({**result, "seconds": time.perf_counter() - start, "grew_mb": grew_mb}), flush=True)
"""

OVERSIZED = {  # a key of config.model -> a value whose model would take hundreds of MB, or hours to build
    "decoder.hidden_dim": 6000,  # the decoder GRU alone: 3 x 6000 x 6000 floats
    "decoder.emb_dim": 1_000_000,
    "encoder.num_layers": 100_000,
}


def _with_model_key(payload: dict, dotted: str, value) -> dict:
    role, key = dotted.split(".")
    config = {**payload["config"], "model": {**payload["config"]["model"]}}
    config["model"][role] = {**config["model"][role], key: value}
    return {**payload, "config": config}


@pytest.mark.slow
def test_a_config_declaring_more_than_its_weights_is_refused_before_anything_is_allocated(
    trained_setup, tmp_path: Path
) -> None:
    honest = _write_valid(trained_setup, tmp_path / "honest.pt")
    payload = load_checkpoint(honest)
    crafted = []
    for dotted, value in OVERSIZED.items():
        crafted.append(tmp_path / f"{dotted}.pt")
        torch.save(_with_model_key(payload, dotted, value), crafted[-1])
    proc = subprocess.run([sys.executable, "-c", PROBE, str(honest), *map(str, crafted)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "loaded" in results[0]
    for path, result in zip(crafted, results[1:]):
        assert str(path) in result.get("refused", ""), result
        assert "do not fit" in result["refused"] or "declares a model of more than" in result["refused"], result
        assert result["grew_mb"] < 100 and result["seconds"] < 10, (path.name, result)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda search: search.pop("alpha"), "train.search.alpha is missing"),
        (lambda search: search.update(beam=4), "train.search.beam is not a decoding setting"),
        (lambda search: search.update(beam_size="5"), "train.search.beam_size='5'"),
        (lambda search: search.update(max_len_b=10**12), "train.search.max_len_b=1000000000000"),
        (lambda search: search.update(alpha=float("nan")), "train.search.alpha=nan"),
    ],
    ids=["missing", "extra", "string", "huge", "nan"],
)
def test_a_checkpoints_decoding_settings_are_checked(change, message: str, trained_setup, tmp_path: Path) -> None:
    path = _write_valid(trained_setup, tmp_path / "model.pt")
    payload = load_checkpoint(path)
    change(payload["config"]["train"]["search"])
    torch.save(payload, path)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert str(path) in str(error.value) and message in str(error.value) and "\n" not in str(error.value)


def test_a_file_that_is_not_a_checkpoint_gets_no_advice_to_run_its_code(tmp_path: Path) -> None:
    """PyTorch's message suggests ``weights_only=False``, which runs a stranger's code: never passed on."""
    log = tmp_path / "train.log"
    log.write_text("[2024-05-01 12:00:00,000][nmt.train][INFO] - update 10: loss 3.2\n", encoding="utf-8")
    evil = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "x": _Exploit(tmp_path / "pwned")}, evil)
    for path, reason in ((log, "this is text"), (evil, "holds Python objects")):
        with pytest.raises(CheckpointError) as error:
            load_checkpoint(path)
        message = str(error.value)
        assert message.startswith(f"{path}: ") and "not an nmt checkpoint" in message and reason in message
        assert "weights_only" not in message and "Re-running" not in message and "\n" not in message


def test_a_run_folder_stands_for_its_best_checkpoint(trained_setup, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    run = tmp_path / "run"
    best = _write_valid(trained_setup, run / "checkpoints" / "best.pt")
    caplog.set_level(logging.INFO, logger="nmt.checkpoint")
    model, *_ = load_model(run, torch.device("cpu"))
    assert model.num_parameters() == trained_setup[1].num_parameters()
    assert f"{run} is a run folder: using its best checkpoint, {best}" in caplog.text
    assert split_members(f"{run}+{run}") == [best, best]
    ensemble, *_ = load_system([run, best], torch.device("cpu"))
    assert len(ensemble.members) == 2
    assert Translator.from_checkpoint(run, device="cpu").translate(["ab"])
    with pytest.raises(CheckpointError, match="holds no checkpoints/best.pt"):
        load_checkpoint(tmp_path)


def test_checkpoints_of_two_directions_are_not_averaged(trained_setup, tmp_path: Path) -> None:
    """A joint vocabulary gives a de->en and an en->de model the same config and subword models."""
    forward = _write_valid(trained_setup, tmp_path / "de-en.pt")
    payload = load_checkpoint(forward)
    data = payload["config"]["data"]
    data["src_lang"], data["tgt_lang"] = data["tgt_lang"], data["src_lang"]
    backward = tmp_path / "en-de.pt"
    torch.save(payload, backward)
    with pytest.raises(CheckpointError) as error:
        average_checkpoints([forward, backward], tmp_path / "averaged.pt")
    assert f"{backward} translates en->de and {forward} de->en" in str(error.value)
    assert not (tmp_path / "averaged.pt").exists()


def test_a_checkpoint_from_before_extra_pairs_and_text_forms_resumes_unchanged(compose_cfg, toy_corpus) -> None:
    """A checkpoint whose config lacks data.text_form and data.extra_train is upgraded to the values
    its run used (the text as given, no extra pairs), so that it resumes without a config change;
    a run that asks for another form or for extra pairs is refused."""
    from omegaconf import OmegaConf

    from nmt.checkpoint import upgrade_config
    from nmt.errors import ConfigError
    from nmt.training.checks import resume_changes

    cfg = compose_cfg(*toy_corpus.overrides())
    old = OmegaConf.to_container(cfg, resolve=True)
    del old["data"]["text_form"], old["data"]["extra_train"]
    upgraded = upgrade_config(old)
    assert upgraded["data"]["text_form"] == "as_is" and upgraded["data"]["extra_train"]["pairs"] is None
    assert resume_changes(upgraded, cfg, "old.pt") == []
    for change in ("data.text_form=lowercase_tokenized", f"data.extra_train.pairs={toy_corpus.train_src}"):
        with pytest.raises(ConfigError, match=rf"cannot resume old.pt: .*{change.split('=')[0]}: "):
            resume_changes(upgraded, compose_cfg(*toy_corpus.overrides(), change), "old.pt")
    without_repeat = OmegaConf.to_container(cfg, resolve=True)
    del without_repeat["data"]["extra_train"]["repeat"]
    assert upgrade_config(without_repeat)["data"]["extra_train"]["repeat"] == 1, "extra pairs were read once an epoch"
    causal = OmegaConf.to_container(cfg, resolve=True)
    del causal["train"]["guided_alignment"]["full_context"]
    assert upgrade_config(causal)["train"]["guided_alignment"]["full_context"] is False, "guidance was causal"
    again = upgrade_config(OmegaConf.to_container(cfg, resolve=True) | {"data": {"vocab": {}}})
    again["data"]["extra_train"]["pairs"] = "x"
    assert upgrade_config({"data": {"vocab": {}}})["data"]["extra_train"]["pairs"] is None, "the defaults are not shared"

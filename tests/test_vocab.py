"""Sentencepiece vocabularies: the fixed special ids, text round trips, and the content-keyed cache
of :func:`nmt.data.subwords.build_vocabs`."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import sentencepiece as spm
import torch
from conftest import DICTIONARY, SmokeRun, ToyCorpus, write_lines

import nmt.data.subwords
from nmt.data.corpora import pairs_from_files
from nmt.data.subwords import VocabSettings, build_vocabs, train_sentencepiece
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab

SETTINGS = VocabSettings(type="unigram", size=60, joint=True, character_coverage=1.0)


def test_special_ids(tiny_vocab: Vocab) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (tiny_vocab.pad_id, tiny_vocab.unk_id, tiny_vocab.bos_id, tiny_vocab.eos_id) == (0, 1, 2, 3)
    assert tiny_vocab.pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert 20 < len(tiny_vocab) <= 60


def test_encode_decode_round_trip(tiny_vocab: Vocab, toy_corpus: ToyCorpus) -> None:
    lines = toy_corpus.src_lines[:20] + toy_corpus.tgt_lines[:20] + ["ana  bel", "  LAZ ZUP "]
    ids = tiny_vocab.encode(lines)
    assert len(ids) == len(lines)
    for line, seq in zip(lines, ids):
        assert seq and all(isinstance(i, int) for i in seq)
        assert all(i > EOS_ID for i in seq), "encode adds no BOS/EOS and never produces pad"
        assert tiny_vocab.decode(seq) == " ".join(line.split())


def test_decode_skips_special_ids(tiny_vocab: Vocab) -> None:
    (ids,) = tiny_vocab.encode(["ana bel"])
    assert tiny_vocab.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "ana bel"


def test_unknown_characters_map_to_unk(tiny_vocab: Vocab) -> None:
    (ids,) = tiny_vocab.encode(["ana \u4e2d"])
    assert UNK_ID in ids


def test_vocab_load_from_file(tiny_vocab: Vocab, tmp_path: Path) -> None:
    path = tmp_path / "m.model"
    path.write_bytes(tiny_vocab.model_proto)
    loaded = Vocab.load(path)
    assert loaded.sha256 == tiny_vocab.sha256 and len(loaded) == len(tiny_vocab)


def test_foreign_special_ids_are_refused(toy_corpus: ToyCorpus) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(toy_corpus.src_lines), model_writer=model,
                                   vocab_size=30, hard_vocab_limit=False, minloglevel=2)  # default ids  # fmt: skip
    with pytest.raises(ValueError, match="special ids"):
        Vocab(model.getvalue())


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _message_field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def with_long_piece(model_proto: bytes, length: int = 400_000) -> bytes:
    """``model_proto`` with one more piece of ``length`` bytes (ModelProto field 1, its string
    field 1): a repeated field appended to a serialized message adds an element."""
    return model_proto + _message_field(1, _message_field(1, b"a" * length))


@pytest.mark.slow
def test_a_vocabulary_with_a_huge_piece_is_an_error_not_a_crash(tiny_vocab: Vocab, smoke_run: SmokeRun,
                                                                tmp_path: Path) -> None:  # fmt: skip
    """sentencepiece 0.2.1 overflows its stack (SIGSEGV) loading a piece of ~100 KB or more
    (google/sentencepiece#1263); the floor in pyproject.toml keeps it out. In a subprocess, so
    that a crash shows as a signal: loading the vocabulary raises, and a checkpoint holding it is
    refused in one line, exit status 2."""
    crafted = with_long_piece(tiny_vocab.model_proto)
    (tmp_path / "crafted.model").write_bytes(crafted)
    load = f"from nmt.vocab import Vocab; Vocab.load({str(tmp_path / 'crafted.model')!r})"
    proc = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith("RuntimeError: "), proc

    payload = torch.load(smoke_run.checkpoint, map_location="cpu", weights_only=True)
    evil = tmp_path / "evil.pt"
    torch.save({**payload, "vocab": {**payload["vocab"], "src": crafted}}, evil)
    source = write_lines(tmp_path / "in.txt", ["ana bel"])
    proc = subprocess.run([sys.executable, "-m", "nmt.translate", f"ckpt={evil}", f"input={source}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
    assert len(errors) == 1 and str(evil) in errors[0], proc.stderr


def test_empty_corpus_is_refused() -> None:
    with pytest.raises(ValueError, match="empty corpus"):
        train_sentencepiece(["", "   "], SETTINGS)


def _pairs(src: list[str], tgt: list[str]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def test_sampling_is_reproducible_and_bounded(toy_corpus: ToyCorpus, monkeypatch) -> None:
    """A sample smaller than the corpus: sentencepiece is asked for that many sentences, and the seeded
    sampling gives the same model every time."""
    settings = VocabSettings("unigram", 60, True, 1.0, sample_size=150)
    seen: list[dict] = []
    real = spm.SentencePieceTrainer.train
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", lambda **kw: seen.append(kw) or real(**kw))
    lines = toy_corpus.src_lines + toy_corpus.tgt_lines
    assert len(lines) > 150
    first, second = train_sentencepiece(lines, settings), train_sentencepiece(iter(lines), settings)
    assert first == second
    assert all(kw["input_sentence_size"] == 150 and kw["shuffle_input_sentence"] for kw in seen)
    assert train_sentencepiece(lines, VocabSettings("unigram", 60, True, 1.0, sample_size=10_000)) != first


def _spy_training(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = nmt.data.subwords.train_sentencepiece

    def spy(lines, settings):
        calls.append(1)
        return real(lines, settings)

    monkeypatch.setattr(nmt.data.subwords, "train_sentencepiece", spy)
    return calls


def test_build_vocabs_caches_by_content(toy_corpus: ToyCorpus, tmp_path: Path, monkeypatch) -> None:
    calls = _spy_training(monkeypatch)
    cache = tmp_path / "spm"
    src, tgt = build_vocabs(_pairs(toy_corpus.src_lines, toy_corpus.tgt_lines), SETTINGS, cache)
    assert len(calls) == 1
    assert src is tgt, "a joint vocabulary is one object"
    folders = list(cache.iterdir())
    assert len(folders) == 1 and {p.name for p in folders[0].iterdir()} == {"src.model", "tgt.model"}

    # the same text under other file names, read from Arrow files on disk: reused, not retrained
    src_copy = write_lines(tmp_path / "copy" / "other-name.de", toy_corpus.src_lines)
    tgt_copy = write_lines(tmp_path / "copy" / "other-name.en", toy_corpus.tgt_lines)
    again, again_tgt = build_vocabs(pairs_from_files(src_copy, tgt_copy, tmp_path / "arrow").pairs, SETTINGS, cache)
    assert len(calls) == 1
    assert again is again_tgt and again.model_proto == src.model_proto
    assert len(list(cache.iterdir())) == 1

    # changed settings or changed text: retrained into a new folder
    build_vocabs(_pairs(toy_corpus.src_lines, toy_corpus.tgt_lines), VocabSettings("unigram", 70, True, 1.0), cache)
    assert len(calls) == 2
    build_vocabs(_pairs(toy_corpus.src_lines, toy_corpus.tgt_lines), VocabSettings("bpe", 60, True, 1.0), cache)
    assert len(calls) == 3
    build_vocabs(_pairs(toy_corpus.src_lines[:-1], toy_corpus.tgt_lines[:-1]), SETTINGS, cache)
    assert len(calls) == 4
    assert len(list(cache.iterdir())) == 4


def test_separate_vocabularies(toy_corpus: ToyCorpus, tmp_path: Path, monkeypatch) -> None:
    calls = _spy_training(monkeypatch)
    settings = VocabSettings(type="unigram", size=40, joint=False, character_coverage=1.0)
    src, tgt = build_vocabs(_pairs(toy_corpus.src_lines, toy_corpus.tgt_lines), settings, tmp_path)
    assert src is not tgt and src.model_proto != tgt.model_proto
    assert len(calls) == 2
    # each side's model knows its own language: target words are unknown to the source model
    target_word = next(iter(DICTIONARY.values()))
    assert UNK_ID in src.encode([target_word])[0]
    assert UNK_ID not in tgt.encode([target_word])[0]
    src2, tgt2 = build_vocabs(_pairs(toy_corpus.src_lines, toy_corpus.tgt_lines), settings, tmp_path)
    assert len(calls) == 2
    assert (src2.sha256, tgt2.sha256) == (src.sha256, tgt.sha256)

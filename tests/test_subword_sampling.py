"""Subword regularisation of training pairs (``data.subword_sampling``): the samplers draw
sentencepiece's distributions (BPE without dropout is plain BPE), spell the same text, follow their
seed alone; training batches are resampled per (seed, epoch, batch) within their token budget,
with guided alignment on the sampled pieces; evaluation splits keep one segmentation; bad settings
are refused naming the key; a run with sampling resumes exactly, and old checkpoints still resume.

(Not to be confused with ``test_sampling.py``, sampling in decoding.)"""

from __future__ import annotations

import collections
import functools
import re
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import ToyCorpus, toy_pairs, write_lines
from omegaconf import OmegaConf

from nmt.checkpoint import load_checkpoint, upgrade_config
from nmt.data.batches import PairData, prepare_data
from nmt.data.guidance import AlignmentGuide
from nmt.data.subword_sampling import PairSampler, SegmentationSampler, SubwordSampling, pair_sampler
from nmt.data.subwords import VocabSettings, train_sentencepiece
from nmt.errors import ConfigError
from nmt.train import train
from nmt.training.checks import resumable, resume_changes, validate_config
from nmt.vocab import UNK_ID, Vocab

# lines sentencepiece treats specially: unknown characters (X, Ω, Ä), extra and non-space whitespace, nothing
ODD_LINES = ["anaXbel  cor", "Ωana", "  ", "", "ana\tbel", "ÄÖÜ ana", "anabelcordun ZUPYEX", " lom  "]
SHORT = "ana bel cor"  # a few segmentations, each likely enough to be counted


@pytest.fixture(scope="module")
def bpe_vocab(toy_corpus: ToyCorpus) -> Vocab:
    """A joint BPE model of ~60 pieces on the toy corpus."""
    settings = VocabSettings(type="bpe", size=60, joint=True, character_coverage=1.0)
    return Vocab(train_sentencepiece(toy_corpus.src_lines + toy_corpus.tgt_lines, settings))


@pytest.fixture
def vocabs(tiny_vocab: Vocab, bpe_vocab: Vocab) -> dict[str, Vocab]:
    return {"unigram": tiny_vocab, "bpe": bpe_vocab}


# (model type, alpha, nbest_size): unigram over the whole lattice and among the n best, BPE-dropout
SETTINGS = [("unigram", 0.1, -1), ("unigram", 0.5, -1), ("unigram", 0.2, 4), ("bpe", 0.1, -1), ("bpe", 0.4, -1)]


def test_bpe_without_dropout_is_sentencepieces_bpe(bpe_vocab: Vocab, toy_corpus: ToyCorpus) -> None:
    sampler = SegmentationSampler(bpe_vocab, "bpe", 0.0)
    rng = np.random.default_rng(0)
    for line in toy_corpus.src_lines + toy_corpus.tgt_lines + ODD_LINES:
        assert sampler.encode(line, rng) == bpe_vocab.sp.encode(line), line


@pytest.mark.parametrize(("kind", "alpha", "nbest_size"), SETTINGS)
def test_samples_spell_the_text_and_vary(vocabs, toy_corpus: ToyCorpus, kind: str, alpha: float, nbest_size: int) -> None:
    vocab = vocabs[kind]
    sampler = SegmentationSampler(vocab, kind, alpha, nbest_size)
    rng = np.random.default_rng(1)
    for line in toy_corpus.src_lines[:50] + ODD_LINES:
        usual = vocab.sp.encode(line)
        for _ in range(3):
            ids = sampler.encode(line, rng)
            assert vocab.decode(ids) == vocab.decode(usual), line
            assert all(0 <= i < len(vocab) for i in ids)
            assert not any(a == b == UNK_ID for a, b in zip(ids, ids[1:], strict=False)), "a run of unknowns is one <unk>"
    assert len({tuple(sampler.encode(SHORT, rng)) for _ in range(200)}) > 1


@pytest.mark.parametrize(("kind", "alpha", "nbest_size"), SETTINGS)
def test_samples_follow_sentencepieces_distribution(vocabs, kind: str, alpha: float, nbest_size: int) -> None:
    """The frequencies of the segmentations match those of ``encode(enable_sampling=True)`` (total
    variation distance over 4000 draws each)."""
    vocab = vocabs[kind]
    sampler, rng, draws = SegmentationSampler(vocab, kind, alpha, nbest_size), np.random.default_rng(2), 4000
    for line in (SHORT, "anaXbel dun"):
        ours = collections.Counter(tuple(sampler.encode(line, rng)) for _ in range(draws))
        theirs = collections.Counter(tuple(vocab.sp.encode(line, enable_sampling=True, alpha=alpha, nbest_size=nbest_size))
                                     for _ in range(draws))  # fmt: skip
        distance = sum(abs(ours[k] - theirs[k]) for k in ours.keys() | theirs.keys()) / (2 * draws)
        assert distance < 0.05, (line, ours.most_common(3), theirs.most_common(3))


def test_samples_depend_on_the_generator_alone(tiny_vocab: Vocab) -> None:
    """The same seed gives the same samples, whatever was drawn before from other generators."""
    sampler = SegmentationSampler(tiny_vocab, "unigram", 0.1)
    lines = toy_pairs(30, seed=5)[0]
    first = [sampler.encode(line, np.random.default_rng([7, 1])) for line in lines]
    for line in lines:  # draw a lot in between, from other generators
        sampler.encode(line, np.random.default_rng(99))
    assert [sampler.encode(line, np.random.default_rng([7, 1])) for line in lines] == first


# --------------------------------------------------------------------------- batches


def _pairs(vocab: Vocab, count: int = 60) -> datasets.Dataset:
    """``count`` toy pairs: their text and usual segmentations, as :func:`tokenize` keeps them."""
    src, tgt = toy_pairs(count, seed=3)
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt, "src_ids": vocab.encode(src), "tgt_ids": vocab.encode(tgt)})


def _sampled(vocab: Vocab, kind: str = "unigram", alpha: float = 0.1, max_tokens: int = 10_000, max_len: int = 100,
             links: list[np.ndarray] | None = None) -> PairData:  # fmt: skip
    sampler = pair_sampler(SubwordSampling(alpha, -1, 1.0), kind, vocab, vocab, max_tokens, max_len)
    guide = None if links is None else AlignmentGuide(links, vocab, vocab)
    return PairData(_pairs(vocab), guide=guide, sampler=sampler)


def _ids(batch) -> list:
    return [batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()]


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_a_batch_is_resampled_per_seed_and_epoch(vocabs, kind: str) -> None:
    data, indices = _sampled(vocabs[kind], kind, alpha=0.3), np.arange(0, 60, 3)
    same = _ids(data.collate(indices, sample_seed=(1234, 0, 0))), _ids(data.collate(indices, sample_seed=(1234, 0, 0)))
    assert same[0] == same[1]
    assert _ids(data.collate(indices, sample_seed=(1234, 1, 0))) != same[0], "another epoch, other segmentations"
    assert _ids(data.collate(indices, sample_seed=(1235, 0, 0))) != same[0], "another seed, other segmentations"
    usual = PairData(_pairs(vocabs[kind]))
    assert _ids(data.collate(indices)) == _ids(usual.collate(indices)), "no seed: the usual segmentation"
    assert _ids(data.collate(indices, sample_seed=(1234, 0, 0))) != _ids(usual.collate(indices))
    assert data.collate(indices, sample_seed=(1234, 0, 0)).src_lens.tolist() != usual.collate(indices).src_lens.tolist()


def test_a_sampled_batch_stays_within_its_token_budget(tiny_vocab: Vocab) -> None:
    """Samples that would make rows x (longest side + 1) exceed the budget, or a side exceed
    ``max_len``, keep their usual segmentation; the rest stay sampled."""
    usual = PairData(_pairs(tiny_vocab))
    indices = np.arange(20)
    width = int(np.maximum(usual.src_lens, usual.tgt_lens)[indices].max())
    for budget, max_len in ((20 * width, 100), (20 * (width + 3), 100), (10**6, width + 1)):
        data = _sampled(tiny_vocab, alpha=0.05, max_tokens=budget, max_len=max_len)
        batch = data.collate(indices, sample_seed=(0, 0, 0))
        longest = max(batch.src.size(1), batch.tgt_in.size(1))
        assert len(indices) * longest <= budget and longest <= max_len + 1
        kept = sum(batch.src_lens[r].item() == usual.src_lens[i] for r, i in enumerate(indices))
        assert kept < len(indices), "sampled where they fit"


def test_guided_alignment_targets_follow_the_sampled_pieces(tiny_vocab: Vocab) -> None:
    src, _ = toy_pairs(60, seed=3)
    links = [np.array([(i, i) for i in range(len(line.split()))], dtype=np.int64).reshape(-1, 2) for line in src]
    data = _sampled(tiny_vocab, alpha=0.1, links=links)
    indices = np.arange(10, 30)
    batch = data.collate(indices, sample_seed=(5, 2, 10))
    assert batch.guide.shape == (len(indices), batch.tgt_in.size(1), batch.src.size(1))
    for row, i in enumerate(indices):
        s = batch.src[row, : batch.src_lens[row] - 1].numpy()
        t = batch.tgt_out[row, : int((batch.tgt_out[row] > 0).sum()) - 1].numpy()
        expected = data.guide.targets(links[i], s, t, batch.src.size(1), batch.tgt_in.size(1))
        torch.testing.assert_close(batch.guide[row], torch.from_numpy(expected))
    usual = data.collate(indices)
    assert batch.guide.shape != usual.guide.shape or not torch.equal(batch.guide, usual.guide)


def test_only_training_pairs_are_sampled(compose_cfg, toy_corpus: ToyCorpus) -> None:
    """Validation and test splits segment one way, whatever seed their batches are given."""
    cfg = compose_cfg("experiment=smoke", *toy_corpus.overrides(), "data.vocab.size=60", "data.subword_sampling.alpha=0.1")
    splits = prepare_data(cfg.data)
    assert isinstance(splits.train.sampler, PairSampler)
    for role, (split, sources, _) in splits.evaluation.items():
        assert split.sampler is None, role
        indices = np.arange(len(split))
        assert _ids(split.collate(indices, sample_seed=(1, 2, 3))) == _ids(split.collate(indices))
        assert split.sources() == splits.src_vocab.encode(sources)
    off = prepare_data(compose_cfg("experiment=smoke", *toy_corpus.overrides(), "data.vocab.size=60").data)
    assert off.train.sampler is None


# --------------------------------------------------------------------------- config and resuming


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.subword_sampling.alpha=-0.1"], "data.subword_sampling.alpha=-0.1: must be a number >= 0 (0 = off)"),
        (["data.vocab.type=bpe", "data.subword_sampling.alpha=1.0"], "data.subword_sampling.alpha=1.0: for a BPE model"),
        (["data.subword_sampling.alpha=0.1", "data.subword_sampling.nbest_size=1"], "data.subword_sampling.nbest_size=1: "),
        (["data.subword_sampling.nbest_size=0"], "data.subword_sampling.nbest_size=0: must be -1"),
        (["data.subword_sampling.max_growth=0.5"], "data.subword_sampling.max_growth=0.5: must be a number >= 1"),
    ],
)  # fmt: skip
def test_bad_sampling_settings_are_refused_naming_the_key(compose_cfg, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(compose_cfg("experiment=smoke", *overrides))


@pytest.mark.parametrize("overrides", [["data.subword_sampling.alpha=0.2"], ["data.subword_sampling.alpha=0.1",
                                       "data.subword_sampling.nbest_size=64"], ["data.vocab.type=bpe",
                                       "data.subword_sampling.alpha=0.1"]])  # fmt: skip
def test_good_sampling_settings_are_accepted(compose_cfg, overrides: list[str]) -> None:
    validate_config(compose_cfg("experiment=smoke", *overrides))


def test_a_checkpoint_without_the_sampling_keys_resumes_unchanged(compose_cfg) -> None:
    """A checkpoint written before ``data.subword_sampling`` existed is upgraded with sampling off;
    and the keys may change on resume (they are read as each batch is made)."""
    cfg = compose_cfg("experiment=smoke")
    old = OmegaConf.to_container(cfg, resolve=True)
    del old["data"]["subword_sampling"]
    assert resume_changes(upgrade_config(old), cfg, "old.pt") == []
    assert all(resumable(f"data.subword_sampling.{key}") for key in ("alpha", "nbest_size", "max_growth"))


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "guided"), [("unigram", True), ("bpe", False)])
def test_a_run_with_sampling_resumes_exactly(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path, in_process,
                                             monkeypatch, kind: str, guided: bool) -> None:  # fmt: skip
    """12 updates straight and 6 + 6 resumed from ``last.pt`` give the same weights: a batch's
    segmentations are drawn again the same after the resume. The batches were sampled."""
    changed = []
    sample = PairSampler.sample

    def counting(self, *args):
        out = sample(self, *args)
        changed.append(any(len(a) != len(b) or (a != b).any() for a, b in zip(out[0], args[2], strict=True)))
        return out

    monkeypatch.setattr(PairSampler, "sample", counting)
    links = write_lines(tmp_path / "train.links", [" ".join(f"{i}-{i}" for i in range(len(line.split())))
                                                   for line in toy_corpus.src_lines])  # fmt: skip
    extra = [f"train.guided_alignment.path={links}", "train.guided_alignment.weight=0.5"] if guided else []
    cfg = functools.partial(compose_cfg, "experiment=smoke", *toy_corpus.overrides(), "data.vocab.joint=false",
                            "data.vocab.size=40", f"data.vocab.type={kind}", "data.subword_sampling.alpha=0.2",
                            "data.max_tokens=200", "train.num_heatmaps=0", "model.dropout=0.2", *extra)  # fmt: skip
    train(cfg("train.max_steps=12"), tmp_path / "straight")
    train(cfg("train.max_steps=6"), tmp_path / "first")
    last = tmp_path / "first" / "checkpoints" / "last.pt"
    train(cfg("train.max_steps=12", f"train.resume={last}"), tmp_path / "resumed")
    assert any(changed), "some training batches were segmented otherwise than usual"
    expected = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    actual = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    assert actual["train_state"]["progress"]["step"] == expected["train_state"]["progress"]["step"] == 12
    for name, tensor in expected["model"].items():
        torch.testing.assert_close(actual["model"][name], tensor, msg=name)

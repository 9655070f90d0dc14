"""Guided alignment's targets (nmt.data.guidance): a links file is read and checked line by line,
and each target subword of a linked word gets a distribution over the source subwords of the
words it is linked to; everything else gets nothing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SmokeRun, ToyCorpus, train_in_process, train_smoke_run, write_lines

from nmt.checkpoint import load_checkpoint, model_from_checkpoint
from nmt.data.batches import prepare_data
from nmt.data.guidance import AlignmentGuide, LinksError, guide_matrix, parse_links, piece_words, read_links
from nmt.data.synthetic import gold_links
from nmt.errors import ConfigError
from nmt.evaluation.word_alignment import GoldAlignment, alignment_error_rate, hard_links, word_attention
from nmt.training.checks import validate_config
from nmt.vocab import EOS_ID, PAD_ID, Vocab


def test_a_piece_belongs_to_the_word_its_first_piece_starts() -> None:
    starts = np.array([False, False, False, False, True, False, True, False])  # ids 4 and 6 start words
    assert piece_words(np.array([4, 5, 7, 6, 4, 5]), starts).tolist() == [0, 0, 0, 1, 2, 2]


def test_each_linked_target_piece_spreads_one_over_the_pieces_of_its_linked_words() -> None:
    # source words: 0 = two pieces, 1 = one piece, 2 = one piece; target words: 0 = one piece, 1 = two pieces, 2 unlinked
    src_words, tgt_words = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])
    links = parse_links("0-0 1-1 2-1", "test")
    q = guide_matrix(links, src_words, tgt_words)  # (T', S')
    assert q.shape == (4, 4)
    np.testing.assert_allclose(q[0], [0.5, 0.5, 0, 0])  # target word 0 -> source word 0's two pieces
    np.testing.assert_allclose(q[1], [0, 0, 0.5, 0.5])  # target word 1 -> source words 1 and 2
    np.testing.assert_allclose(q[2], q[1])  # both pieces of target word 1 get the word's targets
    np.testing.assert_allclose(q[3], 0)  # target word 2 has no links: no target
    np.testing.assert_allclose(q.sum(axis=1), [1, 1, 1, 0])


def test_a_batch_carries_targets_that_sum_to_one_per_linked_piece_and_none_at_eos_or_padding(
    toy_corpus: ToyCorpus, tiny_vocab: Vocab
) -> None:
    links = [np.array([[i, i] for i in range(len(s.split()))]) for s in toy_corpus.src_lines]  # the toy pair is monotone
    guide = AlignmentGuide(links, tiny_vocab, tiny_vocab)
    src = [tiny_vocab.encode([s])[0] for s in toy_corpus.src_lines[:3]]
    tgt = [tiny_vocab.encode([t])[0] for t in toy_corpus.tgt_lines[:3]]
    width, height = max(map(len, src)) + 2, max(map(len, tgt)) + 2  # room for EOS and padding
    for row in range(3):
        q = guide.targets(links[row], np.array(src[row]), np.array(tgt[row]), width, height)
        assert q.shape == (height, width)
        np.testing.assert_allclose(q[: len(tgt[row])].sum(axis=1), 1.0, rtol=1e-6)  # every word is linked
        assert not q[len(tgt[row]) :].any() and not q[:, len(src[row]) :].any()  # EOS row/column, padding
        src_words = piece_words(np.array(src[row]), guide.src_starts)
        tgt_words = piece_words(np.array(tgt[row]), guide.tgt_starts)
        on = np.argwhere(q > 0)
        assert all(src_words[s] == tgt_words[t] for t, s in on)  # mass only on the linked word's pieces


def test_training_batches_carry_the_guide_of_their_own_pairs(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    lines = [" ".join(f"{i}-{i}" for i in range(len(s.split()))) for s in toy_corpus.src_lines]
    path = write_lines(tmp_path / "train.links", lines)
    cfg = compose_cfg(*toy_corpus.overrides(), "data.vocab.size=60", "data.vocab.joint=true")
    splits = prepare_data(cfg.data, links=str(path))
    indices = np.array([5, 0, 17])
    batch = splits.train.collate(indices)
    assert batch.guide is not None and batch.guide.shape == (3, batch.tgt_out.size(1), batch.src.size(1))
    real = (batch.tgt_out != PAD_ID) & (batch.tgt_out != EOS_ID)
    torch.testing.assert_close(batch.guide.sum(-1)[real], torch.ones(int(real.sum())))
    assert not batch.guide.sum(-1)[~real].any()
    eos_columns = (batch.src == EOS_ID)[:, None, :].expand_as(batch.guide)  # (B, T, S)
    assert not batch.guide[eos_columns].any()
    assert prepare_data(cfg.data).train.collate(indices).guide is None  # without links, no guide


def test_links_cover_the_corpus_pairs_then_the_extra_pairs(compose_cfg, toy_corpus: ToyCorpus, tmp_path: Path) -> None:
    """With data.extra_train the links file has a line for every corpus pair, then one for every extra
    pair; a file of the corpus's pairs only is refused, naming the file."""
    extra = write_lines(tmp_path / "extra.pairs", ["ana bel ||| ZUP YEX", "cor ||| WOB"])
    cfg = compose_cfg(*toy_corpus.overrides(), f"data.extra_train.pairs={extra}", "data.vocab.size=60",
                      "data.vocab.joint=true")  # fmt: skip
    corpus_lines = [" ".join(f"{i}-{i}" for i in range(len(s.split()))) for s in toy_corpus.src_lines]
    short = write_lines(tmp_path / "corpus.links", corpus_lines)
    with pytest.raises(LinksError, match=rf"{re.escape(str(short))}: 400 lines of links for 402 training pairs; .* then "
                                         "data.extra_train's"):  # fmt: skip
        prepare_data(cfg.data, links=str(short))
    full = write_lines(tmp_path / "all.links", [*corpus_lines, "1-0", "0-0"])
    splits = prepare_data(cfg.data, links=str(full))
    assert splits.train.guide is not None
    assert [links.tolist() for links in splits.train.guide.links[-2:]] == [[[1, 0]], [[0, 0]]]
    batch = splits.train.collate(np.array([len(splits.train) - 2]))  # the first extra pair: ana bel -> ZUP YEX
    assert batch.guide is not None and batch.guide.sum() > 0


def test_repeated_extra_pairs_share_their_links_and_subword_models(compose_cfg, toy_corpus: ToyCorpus,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    """data.extra_train.repeat=3 reads the extra pairs three times an epoch; the links file keeps one
    line a pair, each copy gets its pair's targets, and the subword models are those of repeat=1."""
    extra = write_lines(tmp_path / "extra.pairs", ["ana bel ||| ZUP YEX", "cor ||| WOB"])
    overrides = [*toy_corpus.overrides(), f"data.extra_train.pairs={extra}", "data.vocab.size=60", "data.vocab.joint=true"]
    corpus_lines = [" ".join(f"{i}-{i}" for i in range(len(s.split()))) for s in toy_corpus.src_lines]
    links = write_lines(tmp_path / "all.links", [*corpus_lines, "1-0", "0-0"])
    once = prepare_data(compose_cfg(*overrides).data, links=str(links))
    thrice = prepare_data(compose_cfg(*overrides, "data.extra_train.repeat=3").data, links=str(links))
    assert len(thrice.train) == len(once.train) + 2 * 2
    assert thrice.src_vocab.sp.serialized_model_proto() == once.src_vocab.sp.serialized_model_proto()
    copies = np.flatnonzero(thrice.train.rows == thrice.train.rows[len(once.train) - 2])  # ana bel -> ZUP YEX
    assert len(copies) == 3
    first, *others = (thrice.train.collate(np.array([i])) for i in copies)
    assert first.guide is not None and first.guide.sum() > 0
    for batch in others:
        assert torch.equal(batch.src, first.src) and torch.equal(batch.guide, first.guide)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["0-0"], "1 lines of links for 3 training pairs"),
        (["0-0", "0-0 1x2", "0-0"], "line 2: '1x2' is not a link i-j"),
        (["0-0", "0-0", "0-0 0-5"], "line 3: link 0-5 is outside the pair, whose source has 2 words and target 2"),
        (["0-0", "-1-0", ""], "line 2: '-1-0' is not a link"),
    ],
)
def test_a_links_file_with_an_error_is_refused_naming_the_file_and_line(tmp_path: Path, lines, message) -> None:
    path = write_lines(tmp_path / "bad.links", lines)
    with pytest.raises(LinksError, match=message) as caught:
        read_links(path, ["a b", "c d", "e f"], ["A B", "C D", "E F"])
    assert str(path) in str(caught.value)


def test_an_empty_line_means_a_pair_without_links(tmp_path: Path) -> None:
    links = read_links(write_lines(tmp_path / "l", ["1-0 0-1", ""]), ["a b", "c"], ["B A", "C"])
    assert links[0].tolist() == [[1, 0], [0, 1]] and links[1].shape == (0, 2)


def _synthetic_aer(run: SmokeRun, full_context: bool = False) -> float:
    """AER of the run's attention (argmax links of the force-decoded references) on its synthetic
    test split; with ``full_context``, read from the pass that sees the whole target."""
    model, src_vocab, tgt_vocab, _ = model_from_checkpoint(load_checkpoint(run.checkpoint))
    model.set_alignment(None, None, full_context)
    weights = word_attention(model, src_vocab, tgt_vocab, run.test_src, run.test_tgt, 64, torch.device("cpu"))
    gold = [GoldAlignment(gold_links(s), gold_links(s)) for s in run.test_src]
    return alignment_error_rate([hard_links(w) for w in weights], gold)["aer"]


@pytest.mark.slow
@pytest.mark.parametrize(("experiment", "epochs", "full_context"),
                         [("smoke", 3, False), ("smoke_transformer", 6, False), ("smoke_transformer", 6, True)])  # fmt: skip
def test_guided_training_towards_the_gold_links_aligns_better(tmp_path: Path, experiment: str, epochs: int,
                                                             full_context: bool) -> None:  # fmt: skip
    """The same run, seed and budget, with and without guidance towards the synthetic corpus's own
    links: guidance lowers the attention's AER well below the unguided run's, for an RNN and a
    Transformer (whose guided layer, the penultimate, is the one word_attention reads), and for a
    Transformer guided and read with the full target context."""
    budget = [f"train.max_epochs={epochs}", "train.num_heatmaps=0", "train.keep_checkpoints=0"]
    plain = train_smoke_run(tmp_path / "plain", *budget, experiment=experiment)
    guided = train_smoke_run(tmp_path / "guided", *budget, "train.guided_alignment.path=gold",
                             "train.guided_alignment.weight=1.0", f"train.guided_alignment.full_context={full_context}",
                             experiment=experiment)  # fmt: skip
    before, after = _synthetic_aer(plain), _synthetic_aer(guided, full_context)
    assert after < 0.25 and after < before - 0.15, (before, after)
    log = (guided.folder / "train.log").read_text()
    assert ", alignment " in log and ", alignment " not in (plain.folder / "train.log").read_text()


@pytest.mark.parametrize(
    ("experiment", "override", "message"),
    [
        ("smoke", "train.guided_alignment.weight=0", "train.guided_alignment.weight=0 with a links file"),
        ("smoke", "model/attention=none", "train.guided_alignment.path is set but model.attention=none has no attention"),
        ("smoke", "train.guided_alignment.layer=0", "train.guided_alignment.layer and train.guided_alignment.heads choose"),
        ("smoke_transformer", "train.guided_alignment.layer=2", "train.guided_alignment.layer=2: the decoder has 2 layers"),
        ("smoke_transformer", "train.guided_alignment.heads=[4]", "train.guided_alignment.heads=[4]: choose among the 4"),
        ("smoke", "train.guided_alignment.full_context=true", "train.guided_alignment.full_context reads a Transformer"),
    ],
)  # fmt: skip
def test_a_guidance_the_model_cannot_take_is_refused_naming_the_key(compose_cfg, experiment, override, message) -> None:
    cfg = compose_cfg(f"experiment={experiment}", "train.guided_alignment.path=gold", override)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(cfg)


@pytest.mark.slow
def test_a_run_with_a_bad_links_file_stops_naming_the_line_and_leaves_no_folder(toy_corpus: ToyCorpus, tmp_path: Path,
                                                                               in_process) -> None:  # fmt: skip
    lines = ["0-0"] * len(toy_corpus.src_lines)
    lines[41] = "0-0 9-0"  # no toy sentence has 10 words
    links = write_lines(tmp_path / "train.links", lines)
    overrides = ["experiment=smoke", *toy_corpus.overrides(), f"data.cache_dir={tmp_path / 'cache'}",
                 f"train.guided_alignment.path={links}"]  # fmt: skip
    with pytest.raises(LinksError, match=re.escape(f"{links}, line 42: link 9-0 is outside the pair")):
        train_in_process(overrides, tmp_path / "run")
    assert not (tmp_path / "run").exists()

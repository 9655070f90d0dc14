"""Word alignments from attention: subwords map to the original words, subword attention becomes
word attention (rows: mean, columns: sum), links are extracted (a word attending most to ``</s>``
left unaligned on request) and symmetrised, gold files in both formats are read, and AER, precision
and recall follow Och & Ney's definitions; the layer and heads a Transformer shows are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CONFIG_DIR, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE, build_tiny_model
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.ensemble import Ensemble
from nmt.errors import ConfigError
from nmt.evaluation.word_alignment import (
    GoldAlignment,
    aer_by_bin,
    alignment_error_rate,
    attention_shown,
    choose_attention,
    describe_attention,
    diagonal_links,
    drop_eos,
    format_links,
    hard_links,
    parse_pharaoh,
    piece_words,
    read_gold,
    shifted,
    symmetrize,
    word_offsets,
    word_weights,
)
from nmt.model import build_model


def test_every_subword_maps_to_the_word_it_spells(tiny_vocab, toy_corpus) -> None:
    spaced = "  " + "   ".join(toy_corpus.src_lines[0].split()) + " "
    for text in [*toy_corpus.src_lines[:30], spaced]:
        ids, words = piece_words(tiny_vocab.sp, text)
        assert len(ids) == len(words) and words == sorted(words)
        tokens = text.split()
        assert set(words) == set(range(len(tokens)))  # every word has a subword, in order
        for k, token in enumerate(tokens):
            spelled = tiny_vocab.sp.decode([i for i, w in zip(ids, words) if w == k])
            assert spelled == token


@pytest.mark.parametrize("space", ["\u00a0", "\u202f", "\u3000"], ids=["no-break", "narrow-no-break", "ideographic"])
def test_a_unicode_space_separates_words_as_str_split_does(tiny_vocab, space: str) -> None:
    """A subword after a no-break or ideographic space belongs to the word it spells, not to the
    last word of the sentence."""
    text = f"ana{space}bel cor{space}{space}dun eki"
    ids, words = piece_words(tiny_vocab.sp, text)
    tokens = text.split()
    assert len(tokens) == 5 and words == sorted(words) and set(words) == set(range(5))
    for k, token in enumerate(tokens):
        assert tiny_vocab.sp.decode([i for i, w in zip(ids, words) if w == k]) == token


def test_word_offsets_are_byte_spans() -> None:
    assert word_offsets(" für  a") == [(1, 5), (7, 8)]


def test_word_weights_average_target_rows_and_sum_source_columns() -> None:
    # source subwords: w0 w0 w1 </s>; target subwords: v0 v1 v1 </s>
    weights = np.array([[0.5, 0.2, 0.2, 0.1],
                        [0.1, 0.1, 0.7, 0.1],
                        [0.3, 0.3, 0.3, 0.1],
                        [0.0, 0.0, 0.0, 1.0]])  # fmt: skip
    matrix = word_weights(weights, src_words=[0, 0, 1], tgt_words=[0, 1, 1])
    np.testing.assert_allclose(matrix, [[0.7, 0.2], [0.4, 0.5]])


# source subwords: w0 w0 w1 </s>; target subwords: v0 v1 v2 v2 </s>. Target word 1 attends most to
# </s> (0.6) and then to w1 (0.3); target word 0 gives </s> 0.4, more than either subword of w0 (0.3
# each), but w0 as a word has 0.6; target word 2 (mean of its two rows) attends most to w1.
EOS_HEAVY = torch.tensor([[0.3, 0.3, 0.0, 0.4],
                          [0.05, 0.05, 0.3, 0.6],
                          [0.0, 0.1, 0.7, 0.2],
                          [0.1, 0.1, 0.5, 0.3],
                          [0.0, 0.0, 0.0, 1.0]])  # fmt: skip
EOS_SRC_WORDS, EOS_TGT_WORDS = [0, 0, 1], [0, 1, 2, 2]


def test_word_weights_can_keep_the_eos_column() -> None:
    kept = word_weights(EOS_HEAVY, EOS_SRC_WORDS, EOS_TGT_WORDS, keep_eos=True)
    np.testing.assert_allclose(kept, [[0.6, 0.0, 0.4], [0.1, 0.3, 0.6], [0.15, 0.6, 0.25]])
    plain = word_weights(EOS_HEAVY, EOS_SRC_WORDS, EOS_TGT_WORDS)
    np.testing.assert_allclose(plain, kept[:, :-1])  # the default drops the </s> column
    np.testing.assert_array_equal(drop_eos(kept), plain)
    assert drop_eos(np.zeros((0, 1))).shape == (0, 0)  # a pair with an empty side


@pytest.mark.parametrize(("method", "threshold", "without"), [
    ("argmax", 0.0, {(0, 0), (1, 1), (1, 2)}),
    ("threshold", 0.1, {(0, 0), (0, 1), (1, 1), (0, 2), (1, 2)}),
])  # fmt: skip
def test_a_word_attending_most_to_eos_is_left_unaligned(method: str, threshold: float, without: set) -> None:
    kept = word_weights(EOS_HEAVY, EOS_SRC_WORDS, EOS_TGT_WORDS, keep_eos=True)
    assert hard_links(drop_eos(kept), method, threshold) == without  # target word 1 linked to its runner-up
    # eos_unaligned: exactly target word 1 loses its links (word 0's </s> weight is below its word's sum)
    assert hard_links(drop_eos(kept, eos_unaligned=True), method, threshold) == {(i, j) for i, j in without if j != 1}


def test_a_tie_with_eos_keeps_the_word() -> None:
    matrix = np.array([[0.5, 0.0, 0.5], [0.2, 0.2, 0.6], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(drop_eos(matrix, eos_unaligned=True), [[0.5, 0.0], [0.0, 0.0], [0.0, 0.0]])


def test_hard_links() -> None:
    matrix = np.array([[0.7, 0.2, 0.1], [0.1, 0.45, 0.45], [0.05, 0.05, 0.9]])
    assert hard_links(matrix) == {(0, 0), (1, 1), (2, 2)}  # ties: the first source word
    assert hard_links(matrix, "argmax", threshold=0.5) == {(0, 0), (2, 2)}
    assert hard_links(matrix, "threshold", threshold=0.4) == {(0, 0), (1, 1), (2, 1), (2, 2)}
    with pytest.raises(ValueError, match="method='best'"):
        hard_links(matrix, "best")


def test_symmetrization_of_a_known_pair() -> None:
    forward = {(0, 0), (1, 1), (2, 1)}
    backward = {(0, 0), (1, 1), (2, 2), (3, 3)}
    assert symmetrize(forward, backward, "intersection") == {(0, 0), (1, 1)}
    assert symmetrize(forward, backward, "union") == forward | backward
    # (2, 2) neighbours (1, 1) and source word 2 is unaligned; (2, 1) too; then (3, 3) next to (2, 2)
    assert symmetrize(forward, backward, "grow_diag") == {(0, 0), (1, 1), (2, 1), (2, 2), (3, 3)}


links = st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(forward=links, backward=links)
def test_symmetrizations_are_nested(forward, backward) -> None:
    inter, union = symmetrize(forward, backward, "intersection"), symmetrize(forward, backward, "union")
    grow, final = symmetrize(forward, backward, "grow_diag"), symmetrize(forward, backward, "grow_diag_final")
    assert inter <= grow <= final <= union


def test_aer_precision_recall() -> None:
    gold = [GoldAlignment(sure={(0, 0), (1, 1)}, possible={(0, 0), (1, 1), (1, 2)})]
    assert alignment_error_rate([{(0, 0), (1, 1)}], gold) == {"aer": 0.0, "precision": 1.0, "recall": 1.0, "links": 2.0}
    # A = {(0,0), (1,2), (2,2)}: |A&S| = 1, |A&P| = 2, |A| = 3, |S| = 2
    scores = alignment_error_rate([{(0, 0), (1, 2), (2, 2)}], gold)
    assert scores["aer"] == pytest.approx(1 - 3 / 5)
    assert (scores["precision"], scores["recall"]) == (pytest.approx(2 / 3), 0.5)
    with pytest.raises(ValueError):
        alignment_error_rate([set(), set()], gold)  # one prediction a gold pair


def test_aer_of_a_bin_is_the_aer_of_its_pairs() -> None:
    gold = [GoldAlignment({(0, 0)}, {(0, 0)}), GoldAlignment({(0, 1)}, {(0, 1)}), GoldAlignment({(1, 1)}, {(1, 1)})]
    predicted = [{(0, 0)}, {(0, 0)}, {(1, 1)}]  # right, wrong, right
    bins = aer_by_bin(predicted, gold, np.array([0, 1, 0]), num_bins=3)
    assert bins[0] == {"count": 2, **alignment_error_rate([predicted[0], predicted[2]], [gold[0], gold[2]])}
    assert (bins[0]["aer"], bins[1]["aer"]) == (0.0, 1.0)
    assert bins[2] == {"count": 0, "aer": None, "precision": None, "recall": None, "links": None}


def test_gold_files_in_both_formats(tmp_path) -> None:
    pharaoh = tmp_path / "gold.pharaoh"
    pharaoh.write_text("1-1 2p3\n\n3-2\n", encoding="utf-8")
    gold = read_gold(pharaoh, one_based=True)
    assert [(g.sure, g.possible) for g in gold] == [({(0, 0)}, {(0, 0), (1, 2)}), (set(), set()), ({(2, 1)}, {(2, 1)})]
    naacl = tmp_path / "gold.naacl"
    naacl.write_text("1 1 1 S\n1 2 3 P\n3 3 2\n", encoding="utf-8")
    assert [(g.sure, g.possible) for g in read_gold(naacl, num_pairs=3)] == [
        ({(0, 0)}, {(0, 0), (1, 2)}), (set(), set()), ({(2, 1)}, {(2, 1)})]  # fmt: skip
    bad = tmp_path / "bad.txt"
    bad.write_text("0-0\n1-x\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: '1-x' is not a link"):
        read_gold(bad)
    with pytest.raises(ValueError, match="index 0, but the links are 1-based"):
        parse_pharaoh("0-1", one_based=True)


def test_naacl_links_to_the_null_word_are_dropped(tmp_path) -> None:
    """Word 0 is NULL in the NAACL format: ``1 0 3 S`` says target word 3 is aligned to nothing."""
    naacl = tmp_path / "gold.naacl"
    naacl.write_text("1 0 3 S\n1 1 1 S\n1 2 0 P\n2 0 1\n", encoding="utf-8")
    assert [(g.sure, g.possible) for g in read_gold(naacl, num_pairs=2)] == [({(0, 0)}, {(0, 0)}), (set(), set())]


def test_pharaoh_output_and_the_diagonal() -> None:
    assert format_links({(1, 0), (0, 1), (2, 1)}) == "1-0 0-1 2-1"
    assert diagonal_links(4, 2) == {(1, 0), (3, 1)}
    assert diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    assert diagonal_links(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert diagonal_links(0, 3) == set()


def test_the_shifted_reading_drops_the_first_step_and_keeps_the_rest() -> None:
    weights = np.arange(12.0).reshape(4, 3)  # 3 subwords and </s>, 2 source subwords and </s>
    np.testing.assert_array_equal(shifted(weights), weights[1:])  # row t: the step whose input is subword t


def _tiny_transformer(layers: int, seed: int = 0):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["model=transformer", "model.emb_dim=16", "model.encoder.num_layers=1",
                                          "model.encoder.num_heads=2", "model.encoder.ff_dim=16",
                                          "model.attention.num_heads=4", f"model.decoder.num_layers={layers}",
                                          "model.decoder.num_heads=2", "model.decoder.ff_dim=16"])  # fmt: skip
    torch.manual_seed(seed)
    return build_model(cfg.model, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE).eval()


def test_the_attention_shown_names_the_layer_and_heads_chosen() -> None:
    """What a figure or the explorer says it shows: a Transformer's chosen layer and heads, nothing
    for an RNN, each Transformer member of an ensemble."""
    rnn, model = build_tiny_model("bahdanau", "bahdanau"), _tiny_transformer(3)
    assert attention_shown(rnn) == [] and describe_attention(attention_shown(rnn)) == ""
    assert attention_shown(model) == [{"layer": 1, "num_layers": 3, "heads": None, "num_heads": 4}]  # the penultimate
    assert describe_attention(attention_shown(model)) == "cross-attention layer 1 of 0-2, mean of all 4 heads"
    choose_attention(model, -1, [0, 2])
    assert attention_shown(model) == [{"layer": 2, "num_layers": 3, "heads": [0, 2], "num_heads": 4}]
    assert describe_attention(attention_shown(model)) == "cross-attention layer 2 of 0-2, mean of heads 0, 2 of 4"
    with pytest.raises(ConfigError, match="align.heads"):
        choose_attention(model, 0, [4])
    two = Ensemble([_tiny_transformer(2), _tiny_transformer(2, seed=1)])
    assert describe_attention(attention_shown(two)) == "cross-attention layer 0 of 0-1, mean of all 4 heads"  # once
    mixed = Ensemble([model, _tiny_transformer(2)])
    assert describe_attention(attention_shown(mixed)) == ("cross-attention layer 2 of 0-2, mean of heads 0, 2 of 4; "
                                                          "layer 0 of 0-1, mean of all 4 heads")  # fmt: skip

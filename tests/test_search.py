"""Search: beam 1 is greedy; a wider beam never scores worse than greedy; a beam wider than the
search space is exact (so it stops only when nothing can beat its finished hypotheses); scores are
the model's own log-probabilities; n-best lists are sorted and distinct; translations do not depend
on the batch; output limits hold; decoding stops once every sentence has finished."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from conftest import DECODERS, SRC_VOCAB_SIZE, build_tiny_model, compose_model_cfg

from nmt.attention import Memory
from nmt.checkpoint import load_checkpoint, model_from_checkpoint
from nmt.model import Seq2Seq, build_model
from nmt.search import (
    SearchSettings,
    beam_search,
    greedy_search,
    length_batches,
    length_penalty,
    max_lengths,
    translate_ids,
)
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

PENALTIES = ["none", "average", "gnmt"]
TINY = [("bahdanau", "bahdanau"), ("luong_general", "luong_feed"), ("scaled_dot", "luong_nofeed"), ("none", "bahdanau")]
assert all(decoder in DECODERS for _, decoder in TINY)


def settings(**changes) -> SearchSettings:
    base = dict(beam_size=5, n_best=1, length_penalty="none", alpha=0.6, max_len_a=1.5, max_len_b=10)
    return SearchSettings(**{**base, **changes})


def pad(src_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources (without EOS) -> src (B, S) long, EOS-terminated, and src_lens (B,)."""
    lens = torch.tensor([len(ids) + 1 for ids in src_ids])
    src = torch.full((len(src_ids), int(lens.max())), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(src_ids):
        src[row, : len(ids) + 1] = torch.tensor([*ids, EOS_ID])
    return src, lens


def random_sources(count: int, seed: int, max_len: int = 9) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, SRC_VOCAB_SIZE) for _ in range(rng.randint(1, max_len))] for _ in range(count)]


@torch.no_grad()
def model_scores(model: Seq2Seq, src_ids: list[int], targets: list[list[int]]) -> tuple[list[float], torch.Tensor]:
    """Teacher-forced summed log-probabilities (EOS included) of ``targets`` given one source, and
    their attention weights (N, T, S)."""
    src, lens = pad([src_ids] * len(targets))
    width = max(len(t) for t in targets) + 1
    tgt_in = torch.full((len(targets), width), PAD_ID, dtype=torch.long)
    gold = torch.full((len(targets), width), PAD_ID, dtype=torch.long)
    for row, tokens in enumerate(targets):
        tgt_in[row, : len(tokens) + 1] = torch.tensor([BOS_ID, *tokens])
        gold[row, : len(tokens) + 1] = torch.tensor([*tokens, EOS_ID])
    logits, weights = model(src, lens, tgt_in)  # (N, T, V), (N, T, S)
    log_probs = torch.log_softmax(logits.float(), dim=-1).gather(2, gold.unsqueeze(2)).squeeze(2)  # (N, T)
    return (log_probs * (gold != PAD_ID)).sum(dim=1).tolist(), weights


@pytest.fixture(scope="module")
def smoke(smoke_run) -> tuple[Seq2Seq, list[list[int]]]:
    """The trained smoke model and 140 sources: its 40 test sentences and 100 random word strings."""
    model, src_vocab, _, _ = model_from_checkpoint(load_checkpoint(smoke_run.checkpoint))
    words = sorted({word for line in smoke_run.test_src for word in line.split()})
    rng = random.Random(0)
    extra = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(100)]
    return model, src_vocab.encode(smoke_run.test_src + extra)


def test_length_penalties() -> None:
    lengths = torch.arange(1.0, 60.0)
    assert torch.equal(length_penalty(lengths, "none", 0.6), torch.ones_like(lengths))
    assert torch.equal(length_penalty(lengths, "average", 0.6), lengths)
    gnmt = length_penalty(lengths, "gnmt", 0.6)
    assert gnmt[0] == 1.0 and bool((gnmt.diff() > 0).all())  # lp(1) = 1, growing: the stop bound needs it
    assert torch.equal(length_penalty(lengths, "gnmt", 0.0), torch.ones_like(lengths))
    with pytest.raises(ValueError, match="length_penalty='avg'"):
        length_penalty(lengths, "avg", 0.6)


def test_max_lengths_include_eos_and_are_at_least_one() -> None:
    src_lens = torch.tensor([1, 5, 10])
    assert max_lengths(src_lens, 1.5, 10).tolist() == [11, 17, 25]
    assert max_lengths(src_lens, 0.0, 0).tolist() == [1, 1, 1]


@pytest.mark.parametrize(
    ("changes", "key"),
    [({"beam_size": 0}, "beam_size"), ({"n_best": 6}, "n_best"), ({"length_penalty": "avg"}, "length_penalty"),
     ({"alpha": -0.5}, "alpha"), ({"beam_size": 2.0}, "beam_size"), ({"max_len_a": -1.0}, "max_len_a"),
     ({"max_len_b": True}, "max_len_b"), ({"max_len_a": 0.0, "max_len_b": 0}, "both 0")],
)  # fmt: skip
def test_impossible_settings_are_refused(changes: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        settings(**changes)


def _beam_one_equals_greedy(model: Seq2Seq, sources: list[list[int]]) -> None:
    src, lens = pad(sources)
    greedy = greedy_search(model, src, lens, 1.5, 10, return_attention=False)
    beam = beam_search(model, src, lens, 1, 1, "none", 0.0, 1.5, 10, return_attention=False)
    for (g,), (b,) in zip(greedy, beam):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)


def test_beam_of_one_is_greedy_on_a_trained_model(smoke) -> None:
    model, sources = smoke
    _beam_one_equals_greedy(model, sources)


@pytest.mark.parametrize(("attention", "decoder"), TINY)
def test_beam_of_one_is_greedy_on_random_models(attention: str, decoder: str) -> None:
    _beam_one_equals_greedy(build_tiny_model(attention, decoder, seed=3), random_sources(30, seed=1))


def _never_worse_than_greedy(model: Seq2Seq, sources: list[list[int]], beam_size: int) -> None:
    src, lens = pad(sources)
    greedy = greedy_search(model, src, lens, 1.5, 10, return_attention=False)
    beam = beam_search(model, src, lens, beam_size, 1, "none", 0.0, 1.5, 10, return_attention=False)
    for i, ((g,), (b,)) in enumerate(zip(greedy, beam)):
        assert b.score >= g.score - 1e-5, (i, sources[i], g, b)


@pytest.mark.parametrize("beam_size", [2, 5])
def test_wider_beam_never_scores_worse_than_greedy(smoke, beam_size: int) -> None:
    model, sources = smoke
    _never_worse_than_greedy(model, sources, beam_size)


@pytest.mark.parametrize(("attention", "decoder"), TINY)
def test_wider_beam_never_scores_worse_than_greedy_on_random_models(attention: str, decoder: str) -> None:
    _never_worse_than_greedy(build_tiny_model(attention, decoder, seed=4), random_sources(40, seed=2), 5)


@pytest.mark.parametrize("penalty", PENALTIES)
def test_scores_and_attention_are_the_models_own(smoke, penalty: str) -> None:
    """Each returned hypothesis, re-scored by the teacher-forced model, gives back its score (times
    its length penalty) and its attention: the tokens were traced back correctly."""
    model, sources = smoke
    src, lens = pad(sources[:30])
    beam = beam_search(model, src, lens, 5, 5, penalty, 0.6, 1.5, 10, return_attention=True)
    greedy = greedy_search(model, src, lens, 1.5, 10, return_attention=True)  # scores are plain sums
    for results, kind in ((beam, penalty), (greedy, "none")):
        for ids, hyps in zip(sources[:30], results):
            _check_against_teacher_forcing(model, ids, hyps, kind)


def _check_against_teacher_forcing(model: Seq2Seq, ids: list[int], hyps: list, penalty: str) -> None:
    sums, weights = model_scores(model, ids, [h.tokens for h in hyps])
    for h, total, attention in zip(hyps, sums, weights):
        lp = float(length_penalty(torch.tensor(len(h.tokens) + 1.0), penalty, 0.6))
        assert h.score * lp == pytest.approx(total, abs=1e-4)
        assert h.attention.shape == (len(h.tokens) + 1, len(ids) + 1)
        torch.testing.assert_close(h.attention, attention[: len(h.tokens) + 1, : len(ids) + 1], atol=1e-5, rtol=0)
        torch.testing.assert_close(h.attention.sum(dim=1), torch.ones(len(h.tokens) + 1))


def test_n_best_lists_are_sorted_distinct_and_full(smoke) -> None:
    model, sources = smoke
    for hyps in translate_ids(model, sources, settings(n_best=5, length_penalty="gnmt"), 64, torch.device("cpu")):
        assert len(hyps) == 5
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 5
        assert all(EOS_ID not in h.tokens and PAD_ID not in h.tokens and BOS_ID not in h.tokens for h in hyps)


def _all_outputs(tokens: list[int], max_len: int) -> list[list[int]]:
    return [list(seq) for n in range(max_len) for seq in itertools.product(tokens, repeat=n)]


@pytest.mark.parametrize(("penalty", "alpha"), [("none", 0.0), ("average", 0.0), ("gnmt", 0.6), ("gnmt", 2.0)])
def test_a_beam_wider_than_the_search_space_is_exact(penalty: str, alpha: float) -> None:
    """Target vocabulary: the 4 specials and 2 words; outputs of at most 4 tokens with EOS: 40 in all.
    With K=40 no candidate is ever pruned (at most 9 x 4 per step), so the search must return exactly
    the 5 best of the 40."""
    torch.manual_seed(5)
    model = build_model(compose_model_cfg("bahdanau", "bahdanau"), SRC_VOCAB_SIZE, 6).eval()
    with torch.no_grad():
        model.decoder.output.weight.mul_(3.0)  # peakier distributions: the penalties disagree more
    sources = random_sources(16, seed=6, max_len=6)
    outputs = _all_outputs([UNK_ID, 4, 5], max_len=4)  # 1 + 3 + 9 + 27 = 40
    src, lens = pad(sources)
    found = beam_search(model, src, lens, 40, 5, penalty, alpha, 0.0, 4, return_attention=False)
    lps = [float(length_penalty(torch.tensor(len(o) + 1.0), penalty, alpha)) for o in outputs]
    for ids, hyps in zip(sources, found):
        sums, _ = model_scores(model, ids, outputs)
        exact = sorted(zip((s / lp for s, lp in zip(sums, lps)), map(tuple, outputs)), reverse=True)[:5]
        assert [h.score for h in hyps] == pytest.approx([score for score, _ in exact], abs=1e-4)
        assert [tuple(h.tokens) for h in hyps] == [tokens for _, tokens in exact]


class ScriptedModel:
    """A stand-in for ``Seq2Seq`` whose next-token log-probabilities depend only on the previous
    token, ``table[prev]``, whatever the source: search outcomes can be worked out by hand."""

    def __init__(self, rows: dict[int, dict[int, float]], vocab_size: int) -> None:
        self.table = torch.full((vocab_size, vocab_size), 1e-9)
        for prev, probs in rows.items():
            self.table[prev, list(probs)] = torch.tensor(list(probs.values()))
        self.table = (self.table / self.table.sum(dim=1, keepdim=True)).log()  # (V, V) log-probs

    def encode(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple[Memory, tuple[torch.Tensor]]:
        mask = torch.arange(src.size(1)) < src_lens.unsqueeze(1)  # (B, S)
        states = torch.zeros(*src.shape, 1)  # (B, S, 1)
        return Memory(states, states, mask, torch.zeros(src.size(0), 1)), (torch.zeros(src.size(0), 1),)

    def decode_step(self, prev: torch.Tensor, memory: Memory, state: tuple[torch.Tensor]):
        weights = memory.mask.float() / memory.mask.sum(dim=1, keepdim=True)  # (R, S), uniform
        return self.table[prev], state, weights


A, B, C, D, E, X = 4, 5, 6, 7, 8, 9


@pytest.mark.parametrize(("penalty", "alpha", "best"), [("none", 0.0, []), ("average", 0.0, [A]), ("gnmt", 2.0, [A])])
def test_search_goes_on_while_an_alive_hypothesis_can_still_win(penalty: str, alpha: float, best: list[int]) -> None:
    """After BOS, EOS and A are equally likely; after A, EOS is almost certain. Under ``none`` the
    empty output is best (one factor 0.5 against 0.5 x 0.999); under ``average`` and ``gnmt`` "A" is,
    but only a search that waits for it finds it: stopping once a hypothesis has ended (or bounding
    the alive ones with the penalty of their current length) returns the empty output."""
    model = ScriptedModel({BOS_ID: {EOS_ID: 0.5, A: 0.5}, A: {EOS_ID: 0.999, B: 0.001}}, vocab_size=10)
    src, lens = pad([[A, B, C]])
    (hyps,) = beam_search(model, src, lens, 2, 1, penalty, alpha, 1.0, 10, return_attention=False)
    assert hyps[0].tokens == best


def test_the_greedy_path_survives_in_the_beam() -> None:
    """Greedy: A (0.4), X (0.34), EOS (1): log 0.136 = -2.0. With K=2, plain beam search keeps A and
    B at step 1, then B D (0.3 x 0.5) and B E (0.3 x 0.49) at step 2, dropping A X; but after D or E
    every token costs log 0.125 = -2.1, so it would end near -4.0, worse than greedy. The greedy
    path is kept in the beam, so beam search finds it."""
    spread = {t: 0.125 for t in (UNK_ID, EOS_ID, A, B, C, D, E, X)}
    after_b = {D: 0.5, E: 0.49, EOS_ID: 0.01}
    model = ScriptedModel(
        {BOS_ID: {A: 0.4, B: 0.3, C: 0.3}, A: {X: 0.34, B: 0.33, C: 0.33}, B: after_b, C: after_b,
         X: {EOS_ID: 1.0}, D: spread, E: spread},
        vocab_size=10,
    )  # fmt: skip
    src, lens = pad([[A, B, C]])
    ((greedy,),) = greedy_search(model, src, lens, 1.0, 10, return_attention=False)
    ((beam,),) = beam_search(model, src, lens, 2, 1, "none", 0.0, 1.0, 10, return_attention=False)
    assert greedy.tokens == [A, X] and greedy.score == pytest.approx(np.log(0.4 * 0.34), abs=1e-4)
    assert beam.tokens == [A, X] and beam.score == pytest.approx(greedy.score, abs=1e-6)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_translations_do_not_depend_on_the_batch(smoke, beam_size: int) -> None:
    model, sources = smoke
    chosen = settings(beam_size=beam_size, length_penalty="gnmt")
    alone = translate_ids(model, sources[:60], chosen, 1, torch.device("cpu"))
    for batch_size, unit in ((64, "sentences"), (40, "tokens")):
        together = translate_ids(model, sources[:60], chosen, batch_size, torch.device("cpu"), batch_unit=unit)
        for (a,), (b,) in zip(alone, together):
            assert a.tokens == b.tokens
            assert a.score == pytest.approx(b.score, abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_outputs_respect_the_length_limit(beam_size: int) -> None:
    """A random model seldom ends on its own, so most outputs run into ``0.5 * src_len + 2``."""
    model, sources = build_tiny_model("bahdanau", "bahdanau", seed=7), random_sources(30, seed=3)
    results = translate_ids(model, sources, settings(beam_size=beam_size, max_len_a=0.5, max_len_b=2), 8,
                            torch.device("cpu"))  # fmt: skip
    limits = [int(0.5 * (len(ids) + 1) + 2) for ids in sources]
    assert all(len(h.tokens) + 1 <= limit for hyps, limit in zip(results, limits) for h in hyps)
    assert any(len(hyps[0].tokens) + 1 == limit for hyps, limit in zip(results, limits))


@pytest.mark.parametrize(("beam_size", "penalty"), [(1, "none"), (5, "none"), (5, "gnmt")])
def test_decoding_stops_once_every_sentence_has_finished(smoke, beam_size: int, penalty: str, monkeypatch) -> None:
    model, sources = smoke
    calls = []  # rows of each decoder step
    step = model.decode_step

    def counting_step(prev, memory, state):
        calls.append(len(prev))
        return step(prev, memory, state)

    monkeypatch.setattr(model, "decode_step", counting_step)
    src, lens = pad(sources[:40])  # the test sentences, which the model translates well
    chosen = settings(beam_size=beam_size, length_penalty=penalty)
    results = beam_search(model, src, lens, beam_size, 1, penalty, 0.6, 1.5, 10, False) if beam_size > 1 else \
        greedy_search(model, src, lens, 1.5, 10, False)  # fmt: skip
    longest = max(len(hyps[0].tokens) + 1 for hyps in results)
    limit = int(max_lengths(lens, chosen.max_len_a, chosen.max_len_b).max())
    assert longest <= len(calls) < limit
    if beam_size == 1:
        assert len(calls) == longest  # greedy stops with its last EOS
    assert calls[0] == 40  # step 1: one row per sentence, all beams being BOS alone
    assert calls[1:] == sorted(calls[1:], reverse=True) and calls[-1] < calls[1]  # finished sentences left


def test_translate_ids_keeps_the_input_order(smoke) -> None:
    model, sources = smoke
    chosen = settings(beam_size=3)
    forward = translate_ids(model, sources[:20], chosen, 7, torch.device("cpu"))
    backward = translate_ids(model, sources[:20][::-1], chosen, 7, torch.device("cpu"))
    assert [h[0].tokens for h in forward] == [h[0].tokens for h in backward[::-1]]
    assert translate_ids(model, [], chosen, 7, torch.device("cpu")) == []


@pytest.mark.parametrize(("batch_size", "unit"), [(1, "sentences"), (3, "sentences"), (12, "tokens"), (2, "tokens")])
def test_length_batches_cover_every_sentence_once(batch_size: int, unit: str) -> None:
    lengths = np.array([3, 9, 1, 4, 4, 7, 2, 5])
    batches = length_batches(lengths, batch_size, unit)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    for batch in batches:
        size = len(batch) if unit == "sentences" else len(batch) * int(lengths[batch].max())
        assert size <= batch_size or len(batch) == 1


def test_length_batches_refuse_unknown_units() -> None:
    with pytest.raises(ValueError, match="batch_unit='words'"):
        length_batches(np.array([3, 4]), 10, "words")

"""The synthetic language pair: the same arguments give the same corpus (in any process), and each
target is the dictionary translation of its source with neighbouring words swapped."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from nmt.data.synthetic import gold_links, swap_neighbours, swap_order, synthetic_corpus

SIZES = {"train": 300, "valid": 20, "test": 30}


def _corpus(seed: int = 7, vocab_size: int = 20, min_len: int = 3, max_len: int = 12):
    return synthetic_corpus(seed=seed, vocab_size=vocab_size, min_len=min_len, max_len=max_len, sizes=SIZES)


def _digest(corpus) -> str:
    return hashlib.sha256(json.dumps({k: [v.src, v.tgt] for k, v in corpus.items()}).encode()).hexdigest()


def test_swap_neighbours() -> None:
    assert swap_neighbours(["a", "b", "c", "d", "e"]) == ["b", "a", "d", "c", "e"]
    assert swap_neighbours(["a", "b"]) == ["b", "a"]
    assert swap_neighbours(["a"]) == ["a"]
    assert swap_neighbours([]) == []
    words = ["a", "b", "c"]
    swap_neighbours(words)
    assert words == ["a", "b", "c"], "the input is not modified"


def test_same_arguments_same_corpus() -> None:
    first, second = _corpus(), _corpus()
    assert _digest(first) == _digest(second)
    assert _digest(_corpus(seed=8)) != _digest(first)
    assert {role: len(text) for role, text in first.items()} == SIZES


def test_same_corpus_in_another_process() -> None:
    """No dependence on Python's per-process string hashing (e.g. set order)."""
    code = (
        "import hashlib, json; from nmt.data.synthetic import synthetic_corpus; "
        f"c = synthetic_corpus(seed=7, vocab_size=20, min_len=3, max_len=12, sizes={SIZES!r}); "
        "print(hashlib.sha256(json.dumps({k: [v.src, v.tgt] for k, v in c.items()}).encode()).hexdigest())"
    )
    hash_seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"  # differs from this process
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == _digest(_corpus())


def test_targets_translate_sources_word_by_word_with_swaps() -> None:
    corpus = _corpus()
    dictionary: dict[str, str] = {}
    for text in corpus.values():
        for src, tgt in zip(text.src, text.tgt):
            src_words, tgt_words = src.split(), tgt.split()
            assert 3 <= len(src_words) <= 12
            assert len(tgt_words) == len(src_words)
            for s, t in zip(swap_neighbours(src_words), tgt_words):
                assert dictionary.setdefault(s, t) == t, f"{s} translated two ways"
    assert len(dictionary) == 20, "every source word is used"
    assert len(set(dictionary.values())) == 20, "the dictionary is one-to-one"
    assert all(s.islower() and t.isupper() for s, t in dictionary.items())
    assert set(corpus["train"].src) != set(corpus["test"].src)


def test_gold_links_point_each_target_word_at_the_source_word_it_translates() -> None:
    """The corpus's own alignment is exact: every target word is linked to the one source word it
    translates (the dictionary learned from the corpus agrees), swaps included."""
    corpus = _corpus()
    dictionary = {}
    for src, tgt in zip(corpus["train"].src, corpus["train"].tgt):
        for s, t in zip(swap_neighbours(src.split()), tgt.split()):
            dictionary[s] = t
    for src, tgt in zip(corpus["test"].src, corpus["test"].tgt):
        src_words, tgt_words = src.split(), tgt.split()
        links = gold_links(src)
        assert sorted(j for _, j in links) == list(range(len(tgt_words))), "one link per target word"
        assert sorted(i for i, _ in links) == list(range(len(src_words))), "every source word once"
        assert all(dictionary[src_words[i]] == tgt_words[j] for i, j in links)
    assert gold_links("bo ka mi") == {(1, 0), (0, 1), (2, 2)}
    assert gold_links("") == set()
    assert swap_order(4) == [1, 0, 3, 2]


def test_lengths_cover_the_range() -> None:
    lengths = {len(s.split()) for s in _corpus(min_len=2, max_len=6)["train"].src}
    assert lengths == {2, 3, 4, 5, 6}
    assert {len(s.split()) for s in _corpus(min_len=4, max_len=4)["valid"].src} == {4}


@pytest.mark.parametrize(("min_len", "max_len"), [(0, 5), (6, 5)])
def test_bad_lengths_are_refused(min_len: int, max_len: int) -> None:
    with pytest.raises(ValueError, match="min_words"):
        _corpus(min_len=min_len, max_len=max_len)


def test_too_many_words_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct words"):
        _corpus(vocab_size=5000)  # only 14 x 5 x 14 x 5 two-syllable words exist

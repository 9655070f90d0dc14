"""A deterministic toy language pair for studying the fixed-vector bottleneck.

Each source word has one target word (a fixed random dictionary), and every two neighbouring words
swap places, so the model must align rather than copy:

    source   bo ka mi tu re          target   KA' BO' TU' MI' RE'
             0  1  2  3  4                    1   0   3   2   4

Sentence lengths are uniform between ``min_len`` and ``max_len`` words (up to 60 and beyond), far
longer than Multi30k's, so the no-attention encoder-decoder must squeeze long sentences through one
vector while the attentional model need not.

Because the task is made, its word alignment is known exactly: target word j is the translation of
source word ``swap_order(n)[j]`` (:func:`gold_links`), so attention can be scored against it
(alignment error rate, :mod:`nmt.evaluation.word_alignment`).
"""

from __future__ import annotations

import itertools

import numpy as np

from nmt.data.text import ParallelText

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _words(rng: np.random.Generator, count: int, syllables: int) -> list[str]:
    """``count`` distinct pseudo-words of ``syllables`` consonant-vowel syllables, in random order."""
    pool = ["".join(s) for s in itertools.product(_CONSONANTS, _VOWELS)]
    words = sorted({"".join(rng.choice(pool, size=syllables)) for _ in range(count * 4)})
    if len(words) < count:
        raise ValueError(f"cannot make {count} distinct words")
    return list(rng.permutation(words)[:count])


def swap_order(num_words: int) -> list[int]:
    """The source position of each target position: 0<->1, 2<->3, ...; an odd last word stays.

    ``swap_order(5) == [1, 0, 3, 2, 4]``.
    """
    return [j ^ 1 if (j ^ 1) < num_words else j for j in range(num_words)]


def swap_neighbours(words: list[str]) -> list[str]:
    """The words in target order: positions 0<->1, 2<->3, ... swapped (:func:`swap_order`)."""
    return [words[i] for i in swap_order(len(words))]


def gold_links(source: str) -> set[tuple[int, int]]:
    """The exact word alignment of a synthetic sentence pair, from its source alone: links
    ``(source word i, target word j)``, 0-based, one per target word (all of them sure).

    ``gold_links("bo ka mi") == {(1, 0), (0, 1), (2, 2)}``.
    """
    return {(i, j) for j, i in enumerate(swap_order(len(source.split())))}


def synthetic_corpus(
    seed: int, vocab_size: int, min_len: int, max_len: int, sizes: dict[str, int]
) -> dict[str, ParallelText]:
    """Splits of the toy language pair; the same arguments always give the same corpus.

    :param seed: fixes the dictionary and the sentences.
    :param vocab_size: number of source words (and of target words).
    :param min_len: shortest sentence, in words.
    :param max_len: longest sentence, in words.
    :param sizes: sentences per split, e.g. ``{"train": 20000, "valid": 500, "test": 1000}``.
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= data.min_words ({min_len}) <= data.max_words ({max_len})")
    rng = np.random.default_rng(seed)
    src_words = _words(rng, vocab_size, 2)
    tgt_words = [w.upper() for w in _words(rng, vocab_size, 3)]
    dictionary = dict(zip(src_words, tgt_words))
    corpus = {}
    for split, size in sizes.items():
        src, tgt = [], []
        for length in rng.integers(min_len, max_len + 1, size=size):
            words = list(rng.choice(src_words, size=int(length)))
            src.append(" ".join(words))
            tgt.append(" ".join(dictionary[w] for w in swap_neighbours(words)))
        corpus[split] = ParallelText(src, tgt, f"<synthetic:{split}.src>", f"<synthetic:{split}.tgt>")
    return corpus

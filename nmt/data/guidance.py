"""The targets of guided alignment training: word links of the training pairs, read and checked,
and turned into a distribution over source subwords for every target subword.

Guided alignment (Chen et al. 2016; Garg et al. 2019) adds to the translation loss the
cross-entropy between the attention of each target position and the links an external aligner
(eflomal, fast_align, GIZA++, or a corpus's gold) gives its word (:func:`nmt.loss.alignment_loss`).
The links are words; the model attends over subwords:

    source words    a   big  house        links   0-1 1-0 2-2   (source word i - target word j)
    source pieces   ▁a  ▁bi g ▁house </s>
    target pieces   ▁grand  ▁une  ▁mai son </s>

    target piece ▁mai (word 2, linked to source word 2): weight 1 on ▁house
    target piece ▁grand (word 0, linked to word 1):      weight 1/2 on ▁bi and 1/2 on g
    </s>, and a word without links:                       no target (the row is all zero)

Each guided row sums to one, spread evenly over the subwords of the source words its word is
linked to; ``</s>`` on either side is never a target. A piece belongs to the word it starts or
continues: sentencepiece marks a word's first piece with ``▁``, so the word of piece k is the
number of ``▁``-pieces up to k, minus one (:func:`piece_words`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nmt.data.synthetic import gold_links
from nmt.data.text import read_lines
from nmt.errors import ConfigError, DataError
from nmt.vocab import WORD_START, Vocab

log = logging.getLogger(__name__)

GOLD = "gold"  # train.guided_alignment.path=gold: a synthetic corpus's own exact links


class LinksError(DataError):
    """A links file that cannot guide the training pairs; the message names the file and line."""


def word_starts(vocab: Vocab) -> np.ndarray:
    """(V,) bool: whether piece id v begins a whitespace word (its text starts with ``▁``)."""
    return np.array([vocab.sp.id_to_piece(v).startswith(WORD_START) for v in range(len(vocab))], dtype=bool)


def piece_words(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(L,) long: the word each of ``ids`` (L,) belongs to, 0-based (a first piece that starts no
    word, which sentencepiece does not make, counts as word 0)."""
    return np.maximum(np.cumsum(starts[ids]) - 1, 0)


def parse_links(line: str, where: str) -> np.ndarray:
    """``"0-1 1-0 2-2"`` -> (K, 2) int64 array of (source word, target word).

    :raise LinksError: a token that is not ``i-j`` with non-negative integers, naming ``where``.
    """
    links = []
    for token in line.split():
        left, sep, right = token.partition("-")
        if not (sep and left.isdigit() and right.isdigit()):
            raise LinksError(f"{where}: {token!r} is not a link i-j (source word i, target word j, 0-based)")
        links.append((int(left), int(right)))
    return np.array(links, dtype=np.int64).reshape(-1, 2)


def read_links(path: str | Path, sources: Sequence[str], targets: Sequence[str]) -> list[np.ndarray]:
    """The links of every training pair from a Pharaoh file: line n holds pair n's links (the
    corpus's pairs, then those of ``data.extra_train``).

    :param sources: the training sources as given (words = their whitespace tokens); ``targets`` likewise.
    :raise LinksError: a file with another number of lines than pairs, a malformed link, or a word
        index beyond its sentence, naming the file and line and saying what to do.
    """
    lines = read_lines(path)
    if len(lines) != len(sources):
        raise LinksError(f"{path}: {len(lines)} lines of links for {len(sources)} training pairs; the file needs one "
                         "line per training pair, in the corpus's order and then data.extra_train's (an empty line for "
                         "a pair without links)")  # fmt: skip
    out = []
    for n, (line, src, tgt) in enumerate(zip(lines, sources, targets, strict=True), start=1):
        links = parse_links(line, f"{path}, line {n}")
        n_src, n_tgt = len(src.split()), len(tgt.split())
        bad = (links[:, 0] >= n_src) | (links[:, 1] >= n_tgt)
        if bad.any():
            i, j = links[np.argmax(bad)]
            raise LinksError(f"{path}, line {n}: link {i}-{j} is outside the pair, whose source has {n_src} words "
                             f"and target {n_tgt} (words are the whitespace tokens of the lines as given, counted "
                             "from 0)")  # fmt: skip
        out.append(links)
    return out


def guide_matrix(links: np.ndarray, src_words: np.ndarray, tgt_words: np.ndarray) -> np.ndarray:
    """One pair's attention targets over subwords.

    :param links: (K, 2) of (source word, target word).
    :param src_words: (S',) the word of each source piece (:func:`piece_words`); ``tgt_words`` (T',).
    :return: (T', S') float32: row t spreads 1 evenly over the pieces of the source words that
        target piece t's word is linked to; a row of a word without links is all zero.
    """
    if len(links) == 0 or len(src_words) == 0 or len(tgt_words) == 0:
        return np.zeros((len(tgt_words), len(src_words)), dtype=np.float32)
    linked = np.zeros((int(src_words.max()) + 1, int(tgt_words.max()) + 1), dtype=bool)  # (source words, target words)
    inside = (links[:, 0] < linked.shape[0]) & (links[:, 1] < linked.shape[1])
    linked[links[inside, 0], links[inside, 1]] = True
    rows = linked[src_words][:, tgt_words].T.astype(np.float32)  # (S', T') -> (T', S')
    total = rows.sum(axis=1, keepdims=True)  # (T', 1) source pieces each row spreads over
    return rows / np.maximum(total, 1.0)


class AlignmentGuide:
    """The links of a split's pairs and the vocabularies' word starts: builds a batch's targets.

    :param links: one (K, 2) array per row of the split's dataset (``PairData.rows`` index it).
    :param src_vocab: the source subword model; ``tgt_vocab`` the target's.
    """

    def __init__(self, links: list[np.ndarray], src_vocab: Vocab, tgt_vocab: Vocab) -> None:
        self.links = links
        self.src_starts, self.tgt_starts = word_starts(src_vocab), word_starts(tgt_vocab)

    def targets(self, links: np.ndarray, src_ids: np.ndarray, tgt_ids: np.ndarray, width: int, height: int) -> np.ndarray:
        """(height, width) float32 targets of one pair: its :func:`guide_matrix` at the top left,
        zero in the rows and columns of ``</s>`` and padding.

        :param src_ids: (S',) the source pieces, without EOS; ``tgt_ids`` (T',) the target's.
        """
        out = np.zeros((height, width), dtype=np.float32)
        src_words, tgt_words = piece_words(src_ids, self.src_starts), piece_words(tgt_ids, self.tgt_starts)
        out[: len(tgt_ids), : len(src_ids)] = guide_matrix(links, src_words, tgt_words)
        return out

    def check_words(self, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray], sources_text: Sequence[str],
                    targets_text: Sequence[str]) -> int:  # fmt: skip
        """Drop the links of pairs whose pieces make another number of words than their text (a
        normaliser that turns a character into a space, or removes one); :return: how many."""
        dropped = 0
        for row, (src, tgt) in enumerate(zip(sources, targets, strict=True)):
            if not len(self.links[row]):
                continue
            src_count = int(self.src_starts[src].sum()) if len(src) else 0
            tgt_count = int(self.tgt_starts[tgt].sum()) if len(tgt) else 0
            if src_count != len(sources_text[row].split()) or tgt_count != len(targets_text[row].split()):
                self.links[row] = self.links[row][:0]
                dropped += 1
        if dropped:
            log.warning("guided alignment: %d training pairs lose their links: their subwords make another number of "
                        "words than their text", dropped)  # fmt: skip
        return dropped


def check_gold(kind: str) -> None:
    """``train.guided_alignment.path=gold`` is for a corpus that knows its links: the synthetic task.

    :raise ConfigError: for any other ``data.kind``.
    """
    if kind != "synthetic":
        raise ConfigError(f"train.guided_alignment.path=gold: only the synthetic task knows its gold links "
                          f"(data.kind={kind}); give a links file of the training pairs "
                          "(python -m nmt.links writes one)")  # fmt: skip


def gold_links_of(sources: Sequence[str]) -> list[np.ndarray]:
    """A synthetic corpus's exact links (:func:`nmt.data.synthetic.gold_links`), as :func:`read_links` gives them."""
    return [np.array(sorted(gold_links(src)), dtype=np.int64).reshape(-1, 2) for src in sources]

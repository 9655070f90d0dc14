"""Subword regularisation: a training pair gets a new segmentation each time it is batched.

- Unigram models (Kudo 2018, "Subword regularization", Sec. 3.2) sample a segmentation x of a
  sentence X from the model's distribution sharpened or flattened by ``alpha``:
  P(x | X) ~ P(x)^alpha = exp(alpha * sum of the pieces' log-probabilities). With ``nbest_size=-1``
  the sample is drawn from every segmentation of the lattice (forward filtering, backward
  sampling); with ``nbest_size=n`` from the n best. A small alpha (0.1) gives varied, longer
  segmentations; a large one (1 and above) stays close to the best one.
- BPE models (Provilkov et al. 2020, "BPE-dropout") apply the merges as usual, best first, but
  skip each one with probability ``alpha``.

These are sentencepiece's ``encode(..., enable_sampling=True, alpha, nbest_size)`` distributions
(the tests compare them), drawn here from a numpy generator that the caller seeds: sentencepiece's
own generator is salted differently in every process, so a resumed run could not draw the same
segmentations again. Here a batch's segmentations follow from its seed alone.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from nmt.tokens import UNK_ID
from nmt.vocab import WORD_START, Vocab

UNK_PENALTY = 10.0  # sentencepiece's: an unknown character scores the lowest piece's log-probability - 10
_CACHED_WORDS = 200_000  # unigram lattices kept per model; the cache is emptied when full


@dataclass(frozen=True)
class SubwordSampling:
    """The ``data.subword_sampling`` config node.

    :param alpha: 0 = off. Unigram: the exponent of the model's probabilities (e.g. 0.1-0.5; smaller
        = more varied); BPE: the probability of skipping a merge, in [0, 1) (e.g. 0.1).
    :param nbest_size: unigram: sample among every segmentation (-1) or among the n best (n >= 2).
    :param max_growth: a sampled batch holds at most ``max_growth`` x ``data.max_tokens`` padded
        tokens; a side sampled longer than that allows keeps its usual segmentation.
    """

    alpha: float
    nbest_size: int
    max_growth: float

    @property
    def enabled(self) -> bool:
        return self.alpha > 0


def check_subword_sampling(model_type: str, alpha: float, nbest_size: int, max_growth: float,
                           prefix: str = "data.subword_sampling.") -> None:  # fmt: skip
    """The one place the sampling settings are checked (the training config's checks call it).

    :param model_type: ``unigram`` or ``bpe`` (``data.vocab.type``).
    :raise ValueError: one line naming the first bad key (``prefix`` + name) and what it accepts.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha >= 0:
        raise ValueError(f"{prefix}alpha={alpha!r}: must be a number >= 0 (0 = off)")
    if model_type == "bpe" and alpha >= 1:
        raise ValueError(f"{prefix}alpha={alpha!r}: for a BPE model it is the probability of skipping a merge "
                         "(BPE-dropout); give one in [0, 1), e.g. 0.1")  # fmt: skip
    if isinstance(nbest_size, bool) or not isinstance(nbest_size, int) or not (nbest_size == -1 or nbest_size >= 2):
        raise ValueError(f"{prefix}nbest_size={nbest_size!r}: must be -1 (sample among every segmentation) or an "
                         "integer >= 2 (among the n best); 1 would always give the best one: turn sampling off with "
                         f"{prefix}alpha=0 instead")  # fmt: skip
    if isinstance(max_growth, bool) or not isinstance(max_growth, int | float) or not max_growth >= 1:
        raise ValueError(f"{prefix}max_growth={max_growth!r}: must be a number >= 1 (1 = a sampled batch holds no "
                         "more padded tokens than data.max_tokens)")  # fmt: skip


class SegmentationSampler:
    """Draws segmentations of text with one sentencepiece model (made by :mod:`nmt.data.subwords`).

    :param vocab: the model.
    :param model_type: its type, ``unigram`` or ``bpe``.
    :param alpha: see :class:`SubwordSampling` (0 with BPE: plain BPE, no merge skipped).
    :param nbest_size: see :class:`SubwordSampling` (unigram only).
    """

    def __init__(self, vocab: Vocab, model_type: str, alpha: float, nbest_size: int = -1) -> None:
        if model_type not in ("unigram", "bpe"):
            raise ValueError(f"model_type={model_type!r}: choose unigram or bpe")
        check_subword_sampling(model_type, alpha, nbest_size, 1.0, prefix="")
        if model_type == "unigram" and alpha <= 0:
            raise ValueError(f"alpha={alpha!r}: unigram sampling needs an alpha > 0")
        sp = vocab.sp
        self.sp, self.model_type, self.alpha, self.nbest_size = sp, model_type, float(alpha), nbest_size
        special = (sp.is_control, sp.is_unknown, sp.is_unused, sp.is_byte)
        normal = [i for i in range(len(vocab)) if not any(test(i) for test in special)]
        self.pieces = {sp.id_to_piece(i): (i, sp.get_score(i)) for i in normal}  # piece -> (id, log-probability)
        self.longest = max(map(len, self.pieces), default=1)
        self.unk_score = min((score for _, score in self.pieces.values()), default=0.0) - UNK_PENALTY
        self._cache: dict[str, list] = {}  # word -> its unigram lattice, or its first BPE agenda

    def encode(self, line: str, rng: np.random.Generator) -> list[int]:
        """A sampled segmentation of ``line`` as subword ids (a run of unknown characters is one
        ``<unk>``, as sentencepiece writes it)."""
        if self.model_type == "unigram" and self.nbest_size != -1:
            return self._among_nbest(line, rng)
        normalized = self.sp.normalize(line)
        # uniform draws: unigram takes one a piece (at most one a character); BPE one a merge candidate
        # taken off its agenda (a word of n characters starts with n - 1 and each merge adds at most 2)
        draws = iter(rng.random(len(normalized) * (3 if self.model_type == "bpe" else 1) + 1).tolist())
        ids: list[int] = []
        for word in _words(normalized):
            ids += self._unigram_word(word, draws) if self.model_type == "unigram" else self._bpe_word(word, draws)
        return _merge_unknowns(ids)

    # ----------------------------------------------------------------- unigram

    def _unigram_word(self, word: str, draws: Iterator[float]) -> list[int]:
        """Backward sampling through the word's lattice: from its end, pick the last piece with
        probability exp(F[start] + alpha * score - F[end]) among the pieces ending there, F being
        the forward log-sums; then the piece before it, and so on."""
        lattice = self._lattice(word)
        ids, end = [], len(word)
        while end > 0:
            starts, piece_ids, cumulative = lattice[end - 1]
            k = min(bisect.bisect_right(cumulative, next(draws)), len(starts) - 1)
            ids.append(piece_ids[k])
            end = starts[k]
        return ids[::-1]

    def _lattice(self, word: str) -> list[tuple[list[int], list[int], list[float]]]:
        """For each end position ``j`` = 1..n of ``word``: the pieces ending there as (starts, ids,
        cumulative probabilities of being the last piece of a sample of ``word[:j]``). Cached.

        Example, ``word = "▁ab"`` with pieces ▁, a, b, ▁a, ab: end 3 has (starts [1, 2], ids [ab, b]);
        the probability of ``ab`` is exp(F[1] + alpha * score(ab) - F[3])."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        forward = [0.0]  # F[j]: log of the summed exp(alpha * score) of every segmentation of word[:j]
        lattice = []
        for end in range(1, len(word) + 1):
            starts, ids, weights = [], [], []
            for start in range(max(0, end - self.longest), end):
                found = self.pieces.get(word[start:end])
                if found is None and start == end - 1:
                    found = (UNK_ID, self.unk_score)  # a character that is no piece
                if found is not None:
                    starts.append(start)
                    ids.append(found[0])
                    weights.append(forward[start] + self.alpha * found[1])
            top = max(weights)
            total = top + math.log(sum(math.exp(w - top) for w in weights))
            forward.append(total)
            cumulative = np.cumsum([math.exp(w - total) for w in weights]).tolist()
            lattice.append((starts, ids, cumulative))
        self._remember(word, lattice)
        return lattice

    def _remember(self, word: str, value: list) -> None:
        if len(self._cache) >= _CACHED_WORDS:
            self._cache.clear()
        self._cache[word] = value

    def _among_nbest(self, line: str, rng: np.random.Generator) -> list[int]:
        """One of sentencepiece's n best segmentations, drawn with probability ~ exp(alpha * score)."""
        candidates = self.sp.nbest_encode(line, nbest_size=self.nbest_size, out_type=int)
        if len(candidates) <= 1:
            return candidates[0] if candidates else []
        # a merged run of unknown characters scores one penalty (sentencepiece counts one per character)
        scores = np.array([sum(self._score(i) for i in ids) for ids in candidates]) * self.alpha
        weights = np.exp(scores - scores.max())
        return candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]

    def _score(self, piece_id: int) -> float:
        return self.unk_score if piece_id == UNK_ID else self.sp.get_score(piece_id)

    # ----------------------------------------------------------------- BPE

    def _bpe_word(self, word: str, draws: Iterator[float]) -> list[int]:
        """BPE-dropout on one word: start from its characters; repeatedly take the best-scoring
        pair of neighbours whose concatenation is a piece (the leftmost among equals) and merge it,
        unless it is skipped (probability ``alpha``: a skipped pair comes back only once a merge
        beside it makes it anew). Merged symbols keep the left one's slot:

            ▁ l o w    merge (l, o) -> slots [▁, lo, "", w]; new candidates (▁, lo), (lo, w)
        """
        symbols = list(word)
        agenda = self._first_agenda(word)
        after = list(range(1, len(symbols))) + [-1]  # the next live slot, -1 at the end
        before = list(range(-1, len(symbols) - 1))

        def propose(left: int, right: int) -> None:
            merged = symbols[left] + symbols[right]
            found = self.pieces.get(merged)
            if found is not None:
                heapq.heappush(agenda, (-found[1], left, right, len(merged)))

        while agenda:
            _, left, right, size = heapq.heappop(agenda)
            if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
                continue  # stale: one side has been merged since
            if self.alpha > 0 and next(draws) < self.alpha:
                continue
            symbols[left], symbols[right] = symbols[left] + symbols[right], ""
            after[left] = after[right]
            if after[left] >= 0:
                before[after[left]] = left
                propose(left, after[left])
            if before[left] >= 0:
                propose(before[left], left)
        return [self.pieces.get(symbol, (UNK_ID, 0.0))[0] for symbol in symbols if symbol]

    def _first_agenda(self, word: str) -> list[tuple[float, int, int, int]]:
        """A fresh copy of the word's first merge candidates, a heap of (-score, left slot, right
        slot, merged length): the neighbouring characters whose concatenation is a piece. Cached."""
        cached = self._cache.get(word)
        if cached is None:
            cached = []
            for left in range(len(word) - 1):
                found = self.pieces.get(word[left : left + 2])
                if found is not None:
                    cached.append((-found[1], left, left + 1, 2))
            heapq.heapify(cached)
            self._remember(word, cached)
        return list(cached)


def _words(normalized: str) -> list[str]:
    """``"▁ab▁c"`` -> ``["▁ab", "▁c"]``: the text cut before each word-start mark."""
    cuts = [i for i, char in enumerate(normalized) if char == WORD_START and i > 0]
    return [normalized[a:b] for a, b in zip([0, *cuts], [*cuts, len(normalized)], strict=True) if b > a]


def _merge_unknowns(ids: list[int]) -> list[int]:
    """``[5, UNK, UNK, 6]`` -> ``[5, UNK, 6]``."""
    return [i for k, i in enumerate(ids) if not (i == UNK_ID and k > 0 and ids[k - 1] == UNK_ID)]


class PairSampler:
    """Sampled segmentations of a training batch's pairs, within the limits the batch was cut for.

    Batches are cut on the usual (deterministic) lengths, and sampled segmentations are mostly
    longer. A side keeps its usual segmentation when its sample is longer than ``max_len``
    subwords, or than the batch can hold: rows x (longest side + 1) may reach ``max_tokens``
    (or the usual segmentations' size, for a batch that exceeds it anyway).

    :param src: the source side's sampler; ``tgt``: the target side's (the same object for a joint model).
    :param max_tokens: padded tokens a sampled batch may hold (``max_growth`` x ``data.max_tokens``).
    :param max_len: subwords a sampled side may have (``data.max_len``).
    """

    def __init__(self, src: SegmentationSampler, tgt: SegmentationSampler, max_tokens: int, max_len: int) -> None:
        self.src, self.tgt, self.max_tokens, self.max_len = src, tgt, max_tokens, max_len

    def sample(self, src_text: Sequence[str], tgt_text: Sequence[str], src_ids: Sequence[np.ndarray],
               tgt_ids: Sequence[np.ndarray], seed: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:  # fmt: skip
        """:param src_text: the batch's sources; ``tgt_text`` its targets.
        :param src_ids: their usual segmentations (without EOS); ``tgt_ids`` the same.
        :param seed: the entropy of the generator the samples are drawn from (the same seed, the same samples).
        :return: the sources' and targets' ids, sampled where they fit.
        """
        rng = np.random.default_rng(list(seed))
        sources = [self.src.encode(line, rng) for line in src_text]
        targets = [self.tgt.encode(line, rng) for line in tgt_text]
        usual = max(max(len(s), len(t)) for s, t in zip(src_ids, tgt_ids, strict=True)) + 1  # + EOS / BOS
        # the longest side + 1 the batch may have: e.g. 3000 tokens // 100 rows = 30, at most max_len + 1
        width = max(min(self.max_tokens // len(sources), self.max_len + 1), usual)
        keep = lambda sampled, fixed: np.asarray(sampled if len(sampled) < width else fixed, dtype=np.int64)  # noqa: E731
        return ([keep(s, f) for s, f in zip(sources, src_ids, strict=True)],
                [keep(t, f) for t, f in zip(targets, tgt_ids, strict=True)])  # fmt: skip


def pair_sampler(settings: SubwordSampling, model_type: str, src_vocab: Vocab, tgt_vocab: Vocab, max_tokens: int,
                 max_len: int) -> PairSampler | None:  # fmt: skip
    """The sampler of a run's training pairs (``data.subword_sampling``), or None when it is off.

    :param max_tokens: ``data.max_tokens`` (a sampled batch may hold ``max_growth`` times as many).
    """
    if not settings.enabled:
        return None
    src = SegmentationSampler(src_vocab, model_type, settings.alpha, settings.nbest_size)
    tgt = src if tgt_vocab is src_vocab else SegmentationSampler(tgt_vocab, model_type, settings.alpha, settings.nbest_size)
    return PairSampler(src, tgt, int(settings.max_growth * max_tokens), max_len)

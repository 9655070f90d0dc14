"""Corpus BLEU by sentence length, with bootstrap confidence intervals and paired significance.

Sentences are binned by their length in words (whitespace-separated tokens of the detokenized
source, or of the reference as compare-mt does). Edges ``[10, 15, 20, 25]`` give the bins

    [0, 10)  [10, 15)  [15, 20)  [20, 25)  [25, inf)       lo inclusive, hi exclusive

and each bin is scored with sacreBLEU *corpus* BLEU over its own sentences, never an average of
sentence BLEU. Everything rests on sacreBLEU's per-sentence sufficient statistics (hypothesis and
reference length, matching and total n-grams for n = 1..4): corpus BLEU of any subset, or of any
bootstrap resample, is BLEU of the summed statistics, so they are extracted once per system.

Confidence intervals: resample the bin's sentences with replacement ``n_bootstrap`` times, score
each resample, report the 2.5th and 97.5th percentiles. Paired significance (Koehn 2004) uses
``sacrebleu.significance.PairedTest`` on each bin's sentences: paired bootstrap (``bs``) or
approximate randomisation (``ar``), every system against the first (the baseline). Testing every
bin is testing several hypotheses at once, so each system's per-bin p-values are also given
Holm-adjusted (:func:`holm`): a bin is called significant at 0.05 when its adjusted p-value is
below 0.05, which keeps the chance of any false call over the bins at 5%.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

FEW_SENTENCES = "few sentences"
EMPTY = "empty"
# No 4-gram can match (every reference, or the whole output, is under 4 tokens): corpus BLEU is 0
# there even for a perfect translation, so the bin's BLEU says nothing; read its chrF instead.
NO_NGRAMS = "too short for 4-grams"
SIGNIFICANCE_TESTS = ("bs", "ar", "none")


@dataclass(frozen=True)
class LengthBin:
    """Sentences with ``lo <= length < hi`` words; ``hi`` is None for the open last bin."""

    lo: int
    hi: int | None

    @property
    def label(self) -> str:
        """``<10``, ``10-14``, ``25+`` (``15`` when the bin holds one length)."""
        if self.hi is None:
            return f"{self.lo}+"
        if self.lo == 0:
            return f"<{self.hi}"
        return f"{self.lo}" if self.hi - 1 == self.lo else f"{self.lo}-{self.hi - 1}"


def word_lengths(sentences: Sequence[str]) -> np.ndarray:
    """(N,) int: whitespace-separated words of each sentence."""
    return np.array([len(s.split()) for s in sentences], dtype=np.int64)


def bin_edges(spec: Sequence[int] | str, lengths: np.ndarray) -> list[int]:
    """Inner edges of the bins from a spec: a list of increasing positive integers, or
    ``"quantile:K"`` for (up to) K bins of about equal counts drawn from ``lengths``.

    Quantile edges are rounded up to whole words and duplicates dropped, so heavily tied lengths
    give fewer than K bins. With lengths 1..100 and ``quantile:4`` the edges are ``[26, 51, 76]``.
    """
    if isinstance(spec, str):
        kind, _, count = spec.partition(":")
        if kind != "quantile" or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bins={spec!r}: give a list of edges like [10,15,20,25] or 'quantile:K'")
        if len(lengths) == 0:
            return []
        qs = np.quantile(lengths, np.arange(1, int(count)) / int(count))
        edges = sorted({int(np.ceil(q)) for q in qs} - {0})
        return [e for e in edges if e > int(np.min(lengths))]
    edges = [int(e) for e in spec]
    if any(e <= 0 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"bins={list(spec)}: edges must be positive and strictly increasing")
    return edges


def make_bins(edges: Sequence[int]) -> list[LengthBin]:
    """``[10, 15]`` -> ``[0, 10), [10, 15), [15, inf)``."""
    bounds = [0, *edges]
    return [LengthBin(lo, hi) for lo, hi in zip(bounds, [*edges, None])]


def assign_bins(lengths: np.ndarray, edges: Sequence[int]) -> np.ndarray:
    """(N,) int: index of each sentence's bin. With edges [10, 15]: 9 -> 0, 10 -> 1, 15 -> 2."""
    return np.searchsorted(np.asarray(edges, dtype=np.int64), lengths, side="right")


# --------------------------------------------------------------------------- BLEU statistics


def bleu_statistics(bleu: BLEU, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """(N, 2 + 2n) int64 per-sentence sufficient statistics of ``bleu`` (n = max n-gram order):
    hypothesis length, reference length, matching n-grams, total n-grams.

    These come from sacreBLEU's internal ``_extract_corpus_statistics``, the call its own
    ``PairedTest`` and ``corpus_score(n_bootstrap=...)`` make; tests/test_evaluate.py checks that
    summed statistics give exactly ``BLEU().corpus_score`` of any subset.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if len(hypotheses) == 0:
        return np.zeros((0, 2 + 2 * bleu.max_ngram_order), dtype=np.int64)
    return np.asarray(bleu._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.int64)


def bleu_from_statistics(bleu: BLEU, summed: np.ndarray) -> float:
    """Corpus BLEU of statistics summed over sentences, (2 + 2n,) -> float (as corpus_score)."""
    return float(bleu._compute_score_from_stats([int(x) for x in summed]).score)


def bootstrap_ci(
    bleu: BLEU, stats: np.ndarray, n_bootstrap: int, rng: np.random.Generator
) -> tuple[float, float] | tuple[None, None]:
    """95% percentile interval of corpus BLEU over ``n_bootstrap`` resamples of the sentences.

    Each resample is a count vector (how often each sentence was drawn), so its statistics are a
    matrix product: counts (R, N) @ stats (N, C) -> (R, C), one row per resample.
    """
    num = len(stats)
    if num == 0 or n_bootstrap < 1:
        return None, None
    counts = rng.multinomial(num, np.full(num, 1.0 / num), size=n_bootstrap)  # (R, N)
    scores = np.array([bleu_from_statistics(bleu, row) for row in counts @ stats])  # (R, C) -> (R,)
    low, high = np.percentile(scores, [2.5, 97.5])
    return float(low), float(high)


# --------------------------------------------------------------------------- scores per bin


@dataclass
class BinScore:
    """One bin of one system; ``bleu``/``chrf``/CI are None when the bin is empty."""

    lo: int
    hi: int | None
    count: int
    bleu: float | None
    chrf: float | None
    ci_low: float | None
    ci_high: float | None
    flag: str | None  # None, "empty", or "few sentences" and/or "too short for 4-grams" joined by "; "
    p_value: float | None = None  # paired test against the baseline (None for the baseline itself)
    p_holm: float | None = None  # p_value adjusted by Holm's method over the system's tested bins


def bin_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    bin_ids: np.ndarray,
    bins: Sequence[LengthBin],
    min_count: int,
    n_bootstrap: int,
    seed: int,
) -> list[BinScore]:
    """Corpus BLEU, chrF and a bootstrap CI for every bin, empty ones included.

    :param bin_ids: (N,) int, the bin of each sentence (from :func:`assign_bins`).
    :param min_count: bins with fewer sentences are flagged ``"few sentences"`` (still scored).
    :param n_bootstrap: resamples per bin for the CI; 0 disables the CI.
    :param seed: seeds the resampling (bin ``b`` uses ``[seed, b + 1]``; ``[seed, 0]`` is left for
        the whole corpus), so a bin's interval does not depend on the other bins.
    """
    bleu, chrf = BLEU(), CHRF()
    stats = bleu_statistics(bleu, hypotheses, references)
    out = []
    for b, length_bin in enumerate(bins):
        members = np.flatnonzero(bin_ids == b)
        if len(members) == 0:
            out.append(BinScore(length_bin.lo, length_bin.hi, 0, None, None, None, None, EMPTY))
            continue
        score = bleu_from_statistics(bleu, stats[members].sum(axis=0))
        chrf_score = chrf.corpus_score([hypotheses[i] for i in members], [[references[i] for i in members]]).score
        low, high = bootstrap_ci(bleu, stats[members], n_bootstrap, np.random.default_rng([seed, b + 1]))
        order = bleu.max_ngram_order
        too_short = stats[members, 1].max() < order or stats[members, -1].sum() == 0  # reference lengths; top-order totals
        flags = [name for name, on in ((FEW_SENTENCES, len(members) < min_count), (NO_NGRAMS, too_short)) if on]
        flag = "; ".join(flags) or None
        out.append(BinScore(length_bin.lo, length_bin.hi, len(members), score, chrf_score, low, high, flag))
    return out


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of m p-values (None = not tested, left out of m and kept None).

    Sort the tested p-values p_(1) <= ... <= p_(m); the adjusted value of p_(i) is
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``. Rejecting where the adjusted value is below alpha
    controls the family-wise error rate at alpha, with no assumption about how the tests depend on
    each other. ``[0.01, 0.04, None, 0.03]`` -> ``[0.03, 0.06, None, 0.06]``.
    """
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        out[i] = running
    return out


def paired_test(
    systems: dict[str, Sequence[str]],
    references: Sequence[str],
    test: str,
    n_samples: int,
    with_chrf: bool = True,
) -> tuple[dict[str, dict[str, float]], str]:
    """sacreBLEU's paired test of every system against the first one, on BLEU (and chrF).

    :param systems: name -> hypotheses, the baseline first.
    :param test: ``bs`` (paired bootstrap) or ``ar`` (approximate randomisation).
    :param n_samples: resamples or trials; 0 = sacreBLEU's default (1000 for bs, 10000 for ar).
    :param with_chrf: test chrF as well as BLEU.
    :return: name -> ``{"bleu": p, "chrf": p}`` for every system but the baseline, and the test's
        BLEU signature (e.g. ``nrefs:1|...|seed:12345|bs:1000``); ``({}, "")`` with one system.
    """
    if test not in ("bs", "ar"):
        raise ValueError(f"significance={test!r}: choose one of {', '.join(SIGNIFICANCE_TESTS)}")
    if len(systems) < 2 or len(references) == 0:
        return {}, ""
    named = [(name, list(hyps)) for name, hyps in systems.items()]
    metrics = {"BLEU": BLEU(), "chrF": CHRF()} if with_chrf else {"BLEU": BLEU()}
    sacrebleu_log = logging.getLogger("sacrebleu")
    level = sacrebleu_log.level
    sacrebleu_log.setLevel(logging.WARNING)  # it logs every stage at INFO
    try:
        signatures, results = PairedTest(named, metrics, [list(references)], test, n_samples)()
    finally:
        sacrebleu_log.setLevel(level)
    columns = dict(zip(("bleu", "chrf"), (key for key in results if key != "System")))  # "BLEU", "chrF2"
    p_values = {}
    for i, name in enumerate(results["System"][1:], start=1):
        p_values[name] = {short: float(results[key][i].p_value) for short, key in columns.items()}
    return p_values, str(signatures[columns["bleu"]])


def paired_test_by_bin(
    systems: dict[str, Sequence[str]],
    references: Sequence[str],
    bin_ids: np.ndarray,
    num_bins: int,
    test: str,
    n_samples: int,
) -> dict[str, list[float | None]]:
    """:func:`paired_test` on BLEU within every bin: name -> one p-value per bin (None when the
    bin holds fewer than two sentences), for every system but the baseline."""
    out: dict[str, list[float | None]] = {name: [] for name in list(systems)[1:]}
    for b in range(num_bins):
        members = np.flatnonzero(bin_ids == b)
        if len(members) < 2:
            for name in out:
                out[name].append(None)
            continue
        subset = {name: [hyps[i] for i in members] for name, hyps in systems.items()}
        p_values, _ = paired_test(subset, [references[i] for i in members], test, n_samples, with_chrf=False)
        for name in out:
            out[name].append(p_values[name]["bleu"])
    return out

"""Word alignments from attention, and how good they are (alignment error rate).

A model attends from target subwords to source subwords; a word alignment links the words of the
original, whitespace-tokenized sentences. The steps:

1. :func:`piece_words`: which whitespace word each subword belongs to (from sentencepiece's
   offsets into the text, so any normalisation is accounted for).
   Which attention: an RNN decoder has one; a Transformer decoder has one per layer and head, and
   shows the chosen layer's chosen heads, averaged (:func:`choose_attention`; by default the
   penultimate layer and all heads; with ``full_context``, read from a second pass that sees the
   whole target, Garg et al. 2019). With ``shift`` a target subword's row is the attention of the
   step at which that subword is the decoder's *input*, one step later than the step that emitted
   it (Chen et al. 2020, "Shift-Att"): the attention that emits y_t is computed before y_t is known.
2. :func:`word_weights`: the (T, S) subword attention as a (target words x source words) matrix:
   a target word's row is the mean of its subwords' rows, a source word's column the sum of its
   subwords' columns (the attention mass the word received); the ``</s>`` row is dropped, and
   the ``</s>`` column too unless it is kept for :func:`drop_eos`. With ``eos_unaligned``
   (:func:`drop_eos`), a target word that attends to the source ``</s>`` more than to any source
   word is left unaligned: decoders park attention there when no source word explains the target
   word, and its runner-up is then a guess.
3. :func:`hard_links`: links from that matrix, each target word to its most attended source word
   (``argmax``), or every pair with weight >= a threshold (``threshold``).
4. :func:`symmetrize`: the links of a model of each direction combined (intersection, union,
   grow-diag, grow-diag-final; Koehn et al. 2003).
5. :func:`alignment_error_rate`: AER, precision and recall against gold sure (S) and possible
   (P) links, S a subset of P (Och & Ney 2003), over a corpus or per length bin (:func:`aer_by_bin`):

       precision = |A & P| / |A|,  recall = |A & S| / |S|,  AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)

A link is ``(i, j)``: source word i, target word j, both 0-based, written ``i-j`` (Pharaoh format).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.ensemble import Ensemble
from nmt.errors import ConfigError
from nmt.search import Decodable, score_ids
from nmt.transformer import TransformerDecoder
from nmt.vocab import Vocab

Link = tuple[int, int]
EXTRACTIONS = ("argmax", "threshold")
SYMMETRIZATIONS = ("intersection", "union", "grow_diag", "grow_diag_final")


def word_offsets(text: str) -> list[tuple[int, int]]:
    """UTF-8 byte spans (begin, end) of the whitespace-separated words of ``text``."""
    spans, pos, data = [], 0, text.encode("utf-8")
    for word in text.split():
        raw = word.encode("utf-8")
        begin = data.index(raw, pos)
        spans.append((begin, begin + len(raw)))
        pos = begin + len(raw)
    return spans


def whitespace_bytes(text: str) -> bytes:
    """For each UTF-8 byte of ``text``, 1 if it belongs to a whitespace character, else 0.
    Whitespace is what ``str.split`` splits words on (``str.isspace``): Unicode's, so a no-break
    space (U+00A0, U+202F) or an ideographic space (U+3000) separates words as a space does."""
    return b"".join((b"\x01" if char.isspace() else b"\x00") * len(char.encode("utf-8")) for char in text)


def piece_words(sp, text: str) -> tuple[list[int], list[int]]:
    """Subword ids of ``text`` and, for each, the index of the whitespace word it belongs to.

    :param sp: a ``sentencepiece.SentencePieceProcessor`` (``Vocab.sp``).
    :return: ids (without EOS) and word indices, one each; a piece made of whitespace only (a
        lone ``▁``) belongs to the word after it.
    """
    proto = sp.encode(text, return_type="proto")
    spans = word_offsets(text)
    space = whitespace_bytes(text)
    ids, words, pending = [], [], []
    for piece in proto.pieces:
        begin = piece.begin
        while begin < piece.end and space[begin]:
            begin += 1
        ids.append(piece.id)
        if begin >= piece.end:  # whitespace only: it joins the next word
            words.append(-1)
            pending.append(len(words) - 1)
            continue
        word = next((k for k, (b, e) in enumerate(spans) if b <= begin < e), len(spans) - 1)
        words.append(word)
        for k in pending:
            words[k] = word
        pending = []
    for k in pending:  # trailing whitespace pieces: the last word
        words[k] = max(len(spans) - 1, 0)
    return ids, words


def word_weights(weights: np.ndarray, src_words: Sequence[int], tgt_words: Sequence[int],
                 keep_eos: bool = False) -> np.ndarray:  # fmt: skip
    """(target words, source words) attention from (T, S) subword attention.

    :param weights: (T, S), rows the target subwords and ``</s>`` (last), columns the source
        subwords and ``</s>`` (last); extra trailing rows or columns (padding) are ignored.
    :param src_words: the word of each source subword (S - 1 of them); ``tgt_words`` likewise.
    :param keep_eos: keep the source ``</s>`` column, as one more column after the words (for
        :func:`drop_eos`).
    :return: (max(tgt_words) + 1, max(src_words) + 1) float, one more column with ``keep_eos``:
        row j the mean of target word j's subword rows, column i the sum of source word i's
        subword columns, the last column (``keep_eos``) the mean of its rows' ``</s>`` weights.
    """
    n_src, n_tgt = max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1
    width = len(src_words) + keep_eos  # the source subwords, then </s>
    sub = np.asarray(weights, dtype=np.float64)[: len(tgt_words), :width]
    cols = np.zeros((sub.shape[0], n_src + keep_eos))
    np.add.at(cols.T, np.asarray(src_words), sub[:, : len(src_words)].T)  # sum the columns of each source word
    if keep_eos:
        cols[:, n_src] = sub[:, len(src_words)]  # (T, S) -> (T, words + 1): </s> after the words
    rows = np.zeros((n_tgt, cols.shape[1]))
    np.add.at(rows, np.asarray(tgt_words), cols)
    counts = np.bincount(np.asarray(tgt_words, dtype=np.int64), minlength=n_tgt)[:, None]
    return rows / np.maximum(counts, 1)


def drop_eos(matrix: np.ndarray, eos_unaligned: bool = False) -> np.ndarray:
    """The source words' weights of a :func:`word_weights` matrix kept with its ``</s>`` column.

    :param matrix: (target words, source words + 1), the last column the source ``</s>``.
    :param eos_unaligned: zero the row of each target word whose ``</s>`` weight is larger than
        each of its source words' weights (a tie keeps the word), so that :func:`hard_links`
        links it to nothing, by either method.
    :return: (target words, source words), a new array.
    """
    words = np.array(matrix[:, :-1], dtype=np.float64)  # (n_tgt, n_src + 1) -> (n_tgt, n_src)
    if eos_unaligned and words.size:
        words[matrix[:, -1] > words.max(axis=1)] = 0.0
    return words


def hard_links(matrix: np.ndarray, method: str = "argmax", threshold: float = 0.0) -> set[Link]:
    """Links ``(source word, target word)`` from a (target words, source words) weight matrix.

    :param method: ``argmax`` (each target word to its most attended source word; with a
        ``threshold``, only where that weight reaches it) or ``threshold`` (every pair whose
        weight reaches ``threshold``). A weight of 0 is never a link.
    """
    if method not in EXTRACTIONS:
        raise ValueError(f"method={method!r}: choose one of {', '.join(EXTRACTIONS)}")
    if matrix.size == 0:
        return set()
    if method == "threshold":
        rows, cols = np.nonzero((matrix >= threshold) & (matrix > 0))
        return {(int(i), int(j)) for j, i in zip(rows, cols)}
    best = matrix.argmax(axis=1)
    return {(int(i), j) for j, i in enumerate(best) if matrix[j, i] > 0 and matrix[j, i] >= threshold}


def symmetrize(forward: set[Link], backward: set[Link], method: str) -> set[Link]:
    """Combine the links of a source->target model (``forward``) and of a target->source model
    (``backward``, already flipped to ``(source word, target word)``).

    ``grow_diag`` starts from the intersection and adds the union links next to a link (also
    diagonally) one of whose words is not aligned yet, until nothing changes; ``grow_diag_final``
    then adds the remaining union links one of whose words is still unaligned.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"symmetrization={method!r}: choose one of {', '.join(SYMMETRIZATIONS)}")
    both, either = forward & backward, forward | backward
    if method == "intersection":
        return both
    if method == "union":
        return either
    links = set(both)
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for di, dj in neighbours:
                cand = (i + di, j + dj)
                if cand in either and cand not in links:
                    src_free = all(a != cand[0] for a, _ in links)
                    tgt_free = all(b != cand[1] for _, b in links)
                    if src_free or tgt_free:
                        links.add(cand)
                        grew = True
    if method == "grow_diag_final":
        for cand in sorted(either - links):
            if all(a != cand[0] for a, _ in links) or all(b != cand[1] for _, b in links):
                links.add(cand)
    return links


@dataclass
class GoldAlignment:
    """One sentence pair's gold links: ``sure`` ⊆ ``possible``."""

    sure: set[Link]
    possible: set[Link]


def parse_pharaoh(line: str, one_based: bool = False, where: str = "") -> GoldAlignment:
    """``i-j`` (sure) and ``ipj`` (possible) links of one line; sure links are possible too.

    :param one_based: the indices count from 1 (as in the NAACL 2003 English-French set).
    :raise ValueError: a token that is neither, naming ``where``.
    """
    sure, possible = set(), set()
    shift = 1 if one_based else 0
    for token in line.split():
        sep = "-" if "-" in token else "p" if "p" in token else None
        left, _, right = token.partition(sep) if sep else ("", "", "")
        if not (left.isdigit() and right.isdigit()):
            raise ValueError(f"{where}: {token!r} is not a link i-j or ipj")
        link = (int(left) - shift, int(right) - shift)
        if link[0] < 0 or link[1] < 0:
            raise ValueError(f"{where}: {token!r} has index 0, but the links are 1-based (one_based=true)")
        possible.add(link)
        if sep == "-":
            sure.add(link)
    return GoldAlignment(sure, possible)


def read_gold(path: str | Path, num_pairs: int | None = None, one_based: bool = False) -> list[GoldAlignment]:
    """Gold alignments from a file: Pharaoh (one line a pair, ``i-j`` / ``ipj``), or the NAACL
    2003 format (``pair i j [S|P] [confidence]`` a line, pairs and words 1-based; word 0 is NULL,
    and a link to NULL is dropped), told apart by their first line.

    :param num_pairs: the number of sentence pairs (NAACL lists only pairs with links).
    :raise ValueError: a malformed line, naming the file and line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((line.split() for line in lines if line.strip()), [])
    if len(first) >= 3 and all(part.isdigit() for part in first[:3]):
        return _read_naacl(lines, path, num_pairs)
    gold = [parse_pharaoh(line, one_based, f"{path}, line {n}") for n, line in enumerate(lines, start=1)]
    if num_pairs is not None and len(gold) != num_pairs:
        raise ValueError(f"{path}: {len(gold)} lines of links for {num_pairs} sentence pairs")
    return gold


def _read_naacl(lines: list[str], path: Path, num_pairs: int | None) -> list[GoldAlignment]:
    pairs: dict[int, GoldAlignment] = {}
    for n, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]) or (len(parts) > 3 and parts[3] not in "SP"):
            raise ValueError(f"{path}, line {n}: expected 'pair i j [S|P] [confidence]', got {line[:60]!r}")
        pair, link = int(parts[0]), (int(parts[1]) - 1, int(parts[2]) - 1)
        gold = pairs.setdefault(pair, GoldAlignment(set(), set()))
        if min(link) < 0:  # word 0 is NULL: a word aligned to nothing, which is no link
            continue
        gold.possible.add(link)
        if len(parts) == 3 or parts[3] == "S":
            gold.sure.add(link)
    count = num_pairs if num_pairs is not None else max(pairs, default=0)
    return [pairs.get(k, GoldAlignment(set(), set())) for k in range(1, count + 1)]


def alignment_error_rate(predicted: Iterable[set[Link]], gold: Iterable[GoldAlignment]) -> dict[str, float]:
    """AER, precision and recall over a corpus (counts summed over its pairs, then divided).

    :return: ``aer``, ``precision``, ``recall`` (fractions in [0, 1]) and ``links`` (predicted).
    """
    a = s = a_s = a_p = 0
    for links, g in zip(predicted, gold, strict=True):
        possible = g.possible | g.sure
        a, s = a + len(links), s + len(g.sure)
        a_s, a_p = a_s + len(links & g.sure), a_p + len(links & possible)
    return {"aer": 1.0 - (a_s + a_p) / max(a + s, 1), "precision": a_p / max(a, 1), "recall": a_s / max(s, 1),
            "links": float(a)}  # fmt: skip


def aer_by_bin(predicted: Sequence[set[Link]], gold: Sequence[GoldAlignment], bin_ids: np.ndarray,
               num_bins: int) -> list[dict[str, float | int | None]]:  # fmt: skip
    """:func:`alignment_error_rate` of the pairs of each length bin.

    :param bin_ids: (N,) int, each pair's bin (:func:`nmt.evaluation.length_bins.assign_bins`).
    :return: one dict a bin: ``count`` (pairs) and ``aer``, ``precision``, ``recall``, ``links``
        (None for an empty bin).
    """
    out: list[dict[str, float | int | None]] = []
    for b in range(num_bins):
        members = np.flatnonzero(np.asarray(bin_ids) == b)
        if len(members) == 0:
            out.append({"count": 0, "aer": None, "precision": None, "recall": None, "links": None})
            continue
        scores = alignment_error_rate([predicted[i] for i in members], [gold[i] for i in members])
        out.append({"count": len(members), **scores})
    return out


def format_links(links: set[Link]) -> str:
    """Pharaoh ``i-j`` pairs, sorted by target then source word."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda link: (link[1], link[0])))


def diagonal_links(num_src: int, num_tgt: int) -> set[Link]:
    """The baseline that aligns target word j (of T) to the source word (of S) under the middle of
    its position: floor((j + 0.5) * S / T)."""
    if num_src == 0 or num_tgt == 0:
        return set()
    return {(min(num_src - 1, int((j + 0.5) * num_src / num_tgt)), j) for j in range(num_tgt)}


def encode_words(vocab: Vocab, texts: Sequence[str]) -> tuple[list[list[int]], list[list[int]]]:
    """:func:`piece_words` of each text: the subword ids and the word of each subword."""
    encoded = [piece_words(vocab.sp, text) for text in texts]
    return [ids for ids, _ in encoded], [words for _, words in encoded]


def choose_attention(model: Decodable, layer: int | None, heads: Sequence[int] | None,
                     full_context: bool = False) -> None:  # fmt: skip
    """Make ``model`` (a model or an ensemble) show the cross-attention of Transformer decoder layer
    ``layer`` averaged over ``heads`` (None: the default layer, all heads); with ``full_context``,
    force-decoding reads it from a pass that sees the whole target (Garg et al. 2019).

    :raise ConfigError: naming ``align.layer``, ``align.heads`` or ``align.full_context``, for a
        choice the model does not have.
    """
    try:
        model.set_alignment(layer, None if heads is None else [int(h) for h in heads], full_context)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def attention_shown(model: Decodable) -> list[dict]:
    """Which cross-attention ``model`` shows as its attention (:func:`choose_attention`), one entry
    per Transformer decoder in it (the model's own, or each Transformer member's of an ensemble).

    :return: ``{"layer": 0-based, "num_layers", "heads": 0-based list or None (all), "num_heads"}``
        each; empty for RNN decoders, which have one attention.
    """
    members = model.members if isinstance(model, Ensemble) else [model]
    decoders = [m.decoder for m in members if isinstance(m.decoder, TransformerDecoder)]
    return [{"layer": d.align_layer, "num_layers": d.num_layers,
             "heads": None if d.align_heads is None else list(d.align_heads), "num_heads": d.cross_heads}
            for d in decoders]  # fmt: skip


def describe_attention(shown: Sequence[dict]) -> str:
    """:func:`attention_shown` in words, for a figure title or a page: e.g. ``cross-attention layer
    4 of 0-5, mean of all 8 heads``; members that differ are listed one by one; "" for none."""

    def one(choice: dict) -> str:
        count, heads = choice["num_heads"], choice["heads"]
        heads = f"all {count} heads" if heads is None else f"heads {', '.join(map(str, heads))} of {count}"
        return f"layer {choice['layer']} of 0-{choice['num_layers'] - 1}, mean of {heads}"

    described = list(dict.fromkeys(one(choice) for choice in shown))  # distinct, in order
    return f"cross-attention {'; '.join(described)}" if described else ""


def shifted(weights: np.ndarray) -> np.ndarray:
    """Shift-Att: (T, S) attention of the steps emitting subwords 0..T-2 and ``</s>`` -> (T - 1, S),
    row t the attention of the step whose *input* is subword t (the step after it was emitted).
    The ``</s>`` row has no later step and is left out (it is never a word)."""
    return weights[1:]


def word_attention(
    model: Decodable, src_vocab: Vocab, tgt_vocab: Vocab, sources: Sequence[str], targets: Sequence[str],
    batch_size: int, device: torch.device, shift: bool = False, keep_eos: bool = False,
) -> list[np.ndarray]:  # fmt: skip
    """Force-decode each (source, target) pair and return its (target words, source words)
    attention (:func:`word_weights`), in input order. Words are the whitespace tokens of the
    texts as given; a pair with an empty side gives an empty matrix. With ``shift``, each target
    subword's attention is read one step later (:func:`shifted`); with ``keep_eos``, each matrix
    has the source ``</s>`` as one more column, last (then :func:`drop_eos` gives the words')."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: one target a source")
    src_ids, src_words = encode_words(src_vocab, sources)
    tgt_ids, tgt_words = encode_words(tgt_vocab, targets)
    scored = score_ids(model, src_ids, tgt_ids, batch_size, device, return_attention=True)
    read = shifted if shift else (lambda weights: weights)
    return [word_weights(read(one.attention.numpy()), src_words[i], tgt_words[i], keep_eos)
            if src_ids[i] and tgt_ids[i] else np.zeros((0, int(keep_eos))) for i, one in enumerate(scored)]  # fmt: skip

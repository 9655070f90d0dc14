"""Translating from Python: :class:`Translator` loads a checkpoint once and translates strings,
returning text, score, subwords and the attention matrix of each sentence; :func:`translate_lines`
is the batched core that ``python -m nmt.translate`` uses too.

    from nmt import Translator
    t = Translator.from_checkpoint("runs/x/checkpoints/best.pt", device="cpu")
    out = t.translate(["Ein Hund rennt.", "Zwei Männer spielen Fußball."], beam_size=5, return_attention=True)
    out[0].text, out[0].score, out[0].src_tokens, out[0].tgt_tokens, out[0].attention  # (T, S) numpy
    t.plot_attention(out[0])  # a matplotlib Figure
    Translator.from_checkpoint(["a/best.pt", "b/best.pt", "c/best.pt"])  # an ensemble of three

Decoding defaults to the checkpoint's own (its recipe's ``train.search``); each keyword given
replaces one setting.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from omegaconf import DictConfig

from nmt.ensemble import Ensemble, load_system
from nmt.model import Seq2Seq
from nmt.plotting import attention_figure
from nmt.runtime import resolve_device, set_threads
from nmt.search import (
    Hypothesis,
    SamplingSettings,
    Scored,
    SearchSettings,
    length_penalty,
    score_ids,
    translate_ids,
)
from nmt.text_form import AS_IS, in_text_form
from nmt.vocab import Vocab

if TYPE_CHECKING:
    from matplotlib.figure import Figure  # imported by nmt.plotting when a figure is drawn

log = logging.getLogger("nmt.translate")


@dataclass
class Translation:
    """The result for one input line.

    :ivar src_ids: the source subwords translated (after truncation; [] for an empty line).
    :ivar hypotheses: best first; [] for an empty line.
    """

    src_ids: list[int]
    hypotheses: list[Hypothesis]


def encode_sources(lines: list[str], src_vocab: Vocab, max_src_len: int, first_line: int = 1) -> list[list[int]]:
    """Subword ids of each line, truncated to ``max_src_len`` with a warning naming the line
    (numbered from ``first_line``)."""
    if max_src_len < 1:
        raise ValueError(f"max_src_len={max_src_len}: must be at least 1")
    ids = src_vocab.encode(lines)
    for number, line_ids in enumerate(ids, start=first_line):
        if len(line_ids) > max_src_len:
            log.warning("line %d: %d subwords, translating only the first %d (max_src_len=%d)",
                        number, len(line_ids), max_src_len, max_src_len)  # fmt: skip
            ids[number - first_line] = line_ids[:max_src_len]
    return ids


def translate_lines(
    model: Seq2Seq,
    src_vocab: Vocab,
    lines: list[str],
    settings: SearchSettings,
    batch_size: int,
    batch_unit: str,
    device: torch.device,
    max_src_len: int,
    return_attention: bool = False,
    progress=None,
    first_line: int = 1,
    sampling: SamplingSettings | None = None,
) -> list[Translation]:
    """Translate ``lines``; one :class:`Translation` per line, in order.

    Lines without any subword (empty, blank, or only characters the normaliser removes) are not
    given to the model: their translation is empty.

    :param settings: greedy or beam search, length penalty, output limit.
    :param batch_size: sentences, or padded source subwords, per batch (``batch_unit``).
    :param batch_unit: ``sentences`` or ``tokens``.
    :param max_src_len: longer sources are cut to their first ``max_src_len`` subwords (warning).
    :param return_attention: keep the best hypotheses' attention (T, S) for alignments.
    :param progress: optional callable ``progress(sentences_done)``, called after each batch.
    :param first_line: the number of ``lines[0]`` in warnings (a stream translated in parts).
    :param sampling: draw ``sampling.n`` samples per line instead of searching.
    """
    src_ids = encode_sources(lines, src_vocab, max_src_len, first_line)
    nonempty = [i for i, ids in enumerate(src_ids) if ids]
    hyps = translate_ids(
        model, [src_ids[i] for i in nonempty], settings, batch_size, device, return_attention, progress, batch_unit,
        sampling, [first_line + i for i in nonempty],  # a line's samples depend on its number, not its batch
    )  # fmt: skip
    out = [Translation(ids, []) for ids in src_ids]
    for i, sentence_hyps in zip(nonempty, hyps):
        out[i].hypotheses = sentence_hyps
    return out


@dataclass
class Score:
    """A given translation scored by the model (:func:`score_pairs`).

    :ivar logprob: the summed log-probability of its subwords and EOS.
    :ivar normalized: ``logprob / lp(length)`` with the length penalty of beam search (comparable
        with a beam hypothesis's score; with ``none`` the same as ``logprob``).
    :ivar tokens: its subwords, ``</s>`` last (``length`` of them).
    :ivar token_logprobs: the log-probability of each, in order.
    """

    logprob: float
    normalized: float
    tokens: list[str]
    token_logprobs: list[float]

    @property
    def length(self) -> int:
        return len(self.tokens)


def score_pairs(
    model: Seq2Seq | Ensemble, src_vocab: Vocab, tgt_vocab: Vocab, sources: list[str], targets: list[str],
    penalty: str, alpha: float, batch_size: int, device: torch.device, max_src_len: int,
    return_attention: bool = False,
) -> tuple[list[Score], list[Scored]]:  # fmt: skip
    """Score ``targets[i]`` as the translation of ``sources[i]`` (forced decoding), in batches of
    similar source length.

    :return: one :class:`Score` per pair, in order, and the raw :class:`~nmt.search.Scored`
        (subword log-probabilities, and attention if asked for).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: give one translation per source")
    src_ids = encode_sources(sources, src_vocab, max_src_len)
    tgt_ids = tgt_vocab.encode(targets)
    raw = score_ids(model, src_ids, tgt_ids, batch_size, device, return_attention)
    out = []
    for ids, one in zip(tgt_ids, raw):
        total = one.total
        lp = float(length_penalty(torch.tensor(float(len(ids) + 1)), penalty, alpha))
        out.append(Score(total, total / lp, tgt_vocab.pieces(ids) + ["</s>"], one.log_probs.tolist()))
    return out, raw


@dataclass
class TranslationResult:
    """One sentence translated by :meth:`Translator.translate`.

    :ivar source: the input sentence.
    :ivar text: the best translation, detokenized ("" for an input without any subword).
    :ivar score: its model score (log-probability, length-normalised by the length penalty).
    :ivar src_tokens: the source subwords the model read, ``</s>`` last (S of them).
    :ivar tgt_tokens: the translation's subwords, ``</s>`` last (T of them).
    :ivar attention: (T, S) float32 numpy array, row t the weights over the source when emitting
        target t; None unless asked for, or when the model has no attention.
    :ivar nbest: the ``n_best`` hypotheses as (text, score), best first (the first is ``text``).
    """

    source: str
    text: str
    score: float
    src_tokens: list[str]
    tgt_tokens: list[str]
    attention: np.ndarray | None = None
    nbest: list[tuple[str, float]] = field(default_factory=list)


def in_checkpoint_form(lines: list[str], config: DictConfig, side: str = "source") -> list[str]:
    """``lines`` in the text form the checkpoint's model read in training (its ``data.text_form``,
    :mod:`nmt.text_form`), by the rules of the ``side``'s language (``source`` or ``target``);
    as given for ``as_is``. A model trained on lower-cased, tokenized text gets its input that way."""
    data = config.data
    form = data.get("text_form", AS_IS)
    return in_text_form(lines, form, data.src_lang if side == "source" else data.tgt_lang)


class Translator:
    """A loaded model with its vocabularies and its checkpoint's decoding settings.

    :param model: the model, or an ensemble of models (eval mode, on ``device``).
    :param src_vocab: source vocabulary.
    :param tgt_vocab: target vocabulary.
    :param config: the checkpoint's config (its ``train.search`` is the default decoding).
    :param device: where the model runs.
    """

    def __init__(self, model: Seq2Seq | Ensemble, src_vocab: Vocab, tgt_vocab: Vocab, config: DictConfig,
                 device: torch.device):  # fmt: skip
        self.model, self.src_vocab, self.tgt_vocab, self.config, self.device = model, src_vocab, tgt_vocab, config, device
        self.settings = SearchSettings(**config.train.search)

    @classmethod
    def from_checkpoint(cls, path: str | Path | Sequence[str | Path], device: str = "auto", threads: int = 0,
                        ensemble_rule: str = "log_mean", precision: str = "fp32") -> Translator:  # fmt: skip
        """Load a checkpoint written by ``nmt.train`` (or an averaged or trained-weights file), or
        several as one ensemble.

        :param path: the checkpoint file, read as data (it cannot run code), or a run folder (its
            ``checkpoints/best.pt``); a list of files (or ``"a.pt+b.pt"``) decodes as an ensemble
            (:mod:`nmt.ensemble`) with the first one's decoding settings.
        :param ensemble_rule: how an ensemble combines its members: ``log_mean`` or ``mean``.
        :param precision: ``fp32``, or ``int8``: dynamically quantized linear layers and encoder GRU,
            for faster translation on a CPU (:mod:`nmt.quantization`).
        :param device: ``auto`` (a GPU if there is one), ``cpu``, ``cuda``, ``cuda:1``...
        :param threads: torch threads; 0 keeps torch's default.
        :raise CheckpointError: one line naming the file, for any checkpoint that cannot be used.
        """
        set_threads(threads)
        resolved = resolve_device(device)
        spec = list(path) if isinstance(path, Sequence) and not isinstance(path, str) else path
        return cls(*load_system(spec, resolved, ensemble_rule, precision), resolved)

    @property
    def has_attention(self) -> bool:
        return self.model.has_alignment

    def translate(
        self,
        sentences: str | Sequence[str],
        beam_size: int | None = None,
        n_best: int | None = None,
        length_penalty: str | None = None,
        alpha: float | None = None,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        return_attention: bool = False,
        batch_size: int = 64,
        sample: int = 0,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 1,
    ) -> TranslationResult | list[TranslationResult]:
        """Translate one sentence (a string: one result) or several (a list: one result each, in order).

        The decoding keywords default to the checkpoint's ``train.search``; ``return_attention``
        fills :attr:`TranslationResult.attention` (None for a model without attention).
        ``sample=N`` draws N translations at random instead of searching, with ``temperature``,
        ``top_k``, ``top_p`` and ``seed`` (:class:`~nmt.search.SamplingSettings`): ``nbest``
        holds them in the order drawn, ``text`` is the first.
        """
        single = isinstance(sentences, str)
        lines = [sentences] if single else list(sentences)
        given = dict(beam_size=beam_size, n_best=n_best, length_penalty=length_penalty, alpha=alpha,
                     max_len_a=max_len_a, max_len_b=max_len_b)  # fmt: skip
        settings = SearchSettings.from_checkpoint(asdict(self.settings), given)
        attend = return_attention and self.has_attention
        sampling = SamplingSettings(sample, temperature, top_k, top_p, seed) if sample else None
        formed = in_checkpoint_form(lines, self.config)
        translations = translate_lines(self.model, self.src_vocab, formed, settings, batch_size, "sentences",
                                       self.device, self.config.data.max_len, return_attention=attend,
                                       sampling=sampling)  # fmt: skip
        results = [self._result(line, t, attend) for line, t in zip(lines, translations)]
        return results[0] if single else results

    def score(self, sources: str | Sequence[str], targets: str | Sequence[str], length_penalty: str | None = None,
              alpha: float | None = None, batch_size: int = 64) -> Score | list[Score]:  # fmt: skip
        """The model's log-probability of given translations (forced decoding): one source and
        target (strings: one :class:`Score`) or lists of them (one each, in order). The
        normalised score uses the checkpoint's length penalty unless given."""
        single = isinstance(sources, str)
        src = in_checkpoint_form([sources] if single else list(sources), self.config)
        tgt = in_checkpoint_form([targets] if isinstance(targets, str) else list(targets), self.config, "target")
        penalty = length_penalty if length_penalty is not None else self.settings.length_penalty
        exponent = alpha if alpha is not None else self.settings.alpha
        scores, _ = score_pairs(self.model, self.src_vocab, self.tgt_vocab, src, tgt, penalty, exponent, batch_size,
                                self.device, self.config.data.max_len)  # fmt: skip
        return scores[0] if single else scores

    def _result(self, line: str, translation: Translation, attend: bool) -> TranslationResult:
        src_tokens = self.src_vocab.pieces(translation.src_ids) + ["</s>"]
        if not translation.hypotheses:  # no subword in the line: nothing was translated
            return TranslationResult(line, "", 0.0, src_tokens, ["</s>"], None, [("", 0.0)])
        best = translation.hypotheses[0]
        nbest = [(self.tgt_vocab.decode(h.tokens), float(h.score)) for h in translation.hypotheses]
        attention = best.attention.float().numpy() if attend and best.attention is not None else None
        return TranslationResult(line, nbest[0][0], float(best.score), src_tokens,
                                 self.tgt_vocab.pieces(best.tokens) + ["</s>"], attention, nbest)  # fmt: skip

    def plot_attention(self, result: TranslationResult, title: str = "") -> Figure:
        """The heatmap of ``result.attention``: target subwords down, source subwords across."""
        if result.attention is None:
            raise ValueError("this result has no attention: translate with return_attention=True "
                             "(and a model with attention)")  # fmt: skip
        return attention_figure(result.attention, result.src_tokens, result.tgt_tokens, title=title or result.source)

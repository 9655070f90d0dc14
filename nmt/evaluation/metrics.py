"""The scores of a model on a split, as training and evaluation both compute them: sacreBLEU
corpus BLEU and chrF on detokenized text (Post 2018), the teacher-forced loss (and perplexity), and
decoding a whole split. No command line here: :mod:`nmt.train` and :mod:`nmt.evaluate` import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from sacrebleu.metrics import BLEU, CHRF

from nmt.data.batches import PairData
from nmt.model import Seq2Seq
from nmt.search import Hypothesis, SearchSettings, translate_ids
from nmt.vocab import Vocab


@dataclass
class CorpusScores:
    """Corpus-level scores with their sacreBLEU signatures."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def corpus_scores(hypotheses: list[str], references: list[str]) -> CorpusScores:
    """sacreBLEU corpus BLEU (13a tokenization, cased) and chrF of detokenized text."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return CorpusScores(bleu_score.score, chrf_score.score, str(bleu.get_signature()), str(chrf.get_signature()))


@torch.no_grad()
def teacher_forced_nll(model: Seq2Seq, data: PairData, max_tokens: int, device: torch.device) -> tuple[float, int]:
    """Mean negative log-likelihood per target token (EOS included) and the token count."""
    model.eval()
    total, tokens = 0.0, 0
    for indices in data.token_batches(max_tokens, shuffle=False):
        batch = data.collate(indices).to(device)
        _, nll = model.loss(batch.src, batch.src_lens, batch.tgt_in, batch.tgt_out, 0.0)  # fused, real tokens only
        total, tokens = total + float(nll), tokens + batch.num_tgt_tokens
    return total / max(tokens, 1), tokens


def translate_data(
    model: Seq2Seq,
    data: PairData,
    tgt_vocab: Vocab,
    settings: SearchSettings,
    batch_size: int,
    device: torch.device,
    return_attention: bool = False,
) -> tuple[list[str], list[Hypothesis]]:
    """Decode every source of ``data``; return detokenized best hypotheses and the hypotheses."""
    nbest = translate_ids(model, data.sources(), settings, batch_size, device, return_attention)
    best = [hyps[0] if hyps else Hypothesis([], float("-inf")) for hyps in nbest]
    return [tgt_vocab.decode(h.tokens) for h in best], best


def perplexity(nll: float) -> float:
    return math.exp(min(nll, 50.0))

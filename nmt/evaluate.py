"""Scoring translations: sacreBLEU corpus BLEU and chrF on detokenized text (Post 2018), and the
teacher-forced loss of a split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from sacrebleu.metrics import BLEU, CHRF

from nmt.data import PairData
from nmt.loss import sequence_loss
from nmt.model import Seq2Seq
from nmt.search import Hypothesis, SearchSettings, translate_ids
from nmt.vocab import PAD_ID, Vocab


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
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        _, nll, count = sequence_loss(logits, batch.tgt_out, PAD_ID, 0.0)
        total, tokens = total + float(nll), tokens + count
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
    src_ids = [ids.tolist() for ids in data.src_ids]
    nbest = translate_ids(model, src_ids, settings, batch_size, device, return_attention)
    best = [hyps[0] if hyps else Hypothesis([], float("-inf")) for hyps in nbest]
    return [tgt_vocab.decode(h.tokens) for h in best], best


def perplexity(nll: float) -> float:
    return math.exp(min(nll, 50.0))

"""Greedy and beam search, batched over sentences; the only place that loops over output steps.

Beam search keeps, per sentence, K alive hypotheses and a pool of the ``n_best`` best finished ones.
Scores are sums of log-probabilities, compared after dividing by a length penalty ``lp(L)``:

    none      lp(L) = 1
    average   lp(L) = L
    gnmt      lp(L) = ((5 + L) / 6) ** alpha        (Wu et al. 2016, eq. 14)

A sentence's search ends when no alive hypothesis can still beat the worst of its ``n_best`` best
finished ones, or at its maximum length ``max_len_a * source_length + max_len_b``, not as soon as the
top hypothesis ends. Since log-probabilities are <= 0, an alive hypothesis with score s can reach
at best ``s / lp(max_len)`` (for the penalties above), which is the bound used. Finished sentences
leave the batch, and the batch stops as soon as every sentence is finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmt.model import Seq2Seq
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID

LENGTH_PENALTIES = ("none", "average", "gnmt")


@dataclass
class Hypothesis:
    """One output: ``tokens`` without EOS, its ``score`` (length-normalised log-probability, the
    plain sum for greedy search), and ``attention`` (T, S) with one row per emitted token and EOS."""

    tokens: list[int]
    score: float
    attention: Tensor | None = None


def length_penalty(length: Tensor, kind: str, alpha: float) -> Tensor:
    """``lp(L)`` for lengths ``length`` (any shape, float)."""
    if kind == "none":
        return torch.ones_like(length)
    if kind == "average":
        return length
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    raise ValueError(f"length_penalty={kind!r}: choose one of {', '.join(LENGTH_PENALTIES)}")


def max_lengths(src_lens: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence output limit (EOS included), at least 1: (B,) long."""
    return (src_lens.float() * max_len_a + max_len_b).long().clamp(min=1)


def _forbid_specials(log_probs: Tensor) -> Tensor:
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    return log_probs


@torch.no_grad()
def greedy_search(
    model: Seq2Seq, src: Tensor, src_lens: Tensor, max_len_a: float, max_len_b: int, return_attention: bool
) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step.

    :param src: (B, S) long. :param src_lens: (B,) long.
    :return: for each sentence, a list with one :class:`Hypothesis` (score = sum of log-probs).
    """
    batch_size, device = src.size(0), src.device
    memory, state = model.encode(src, src_lens)
    limits = max_lengths(src_lens, max_len_a, max_len_b).to(device)  # (B,)
    prev = torch.full((batch_size,), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    scores = torch.zeros(batch_size, device=device)
    tokens, weights = [], []
    for t in range(1, int(limits.max()) + 1):
        logits, state, step_weights = model.decode_step(prev, memory, state)
        log_probs = _forbid_specials(torch.log_softmax(logits.float(), dim=-1))  # (B, V)
        at_limit = limits <= t
        log_probs[at_limit] = log_probs[at_limit].masked_fill(
            torch.arange(log_probs.size(1), device=device) != EOS_ID, float("-inf")
        )  # the last allowed step can only end the sentence
        best, prev = log_probs.max(dim=-1)  # (B,), (B,)
        prev = prev.masked_fill(finished, PAD_ID)
        scores += best.masked_fill(finished, 0.0)
        tokens.append(prev)
        weights.append(step_weights)
        finished |= prev == EOS_ID
        if bool(finished.all()):
            break
    tokens = torch.stack(tokens, dim=1).tolist()  # T x (B,) -> (B, T)
    attention = torch.stack(weights, dim=1) if return_attention else None  # (B, T, S)
    out = []
    for i in range(batch_size):
        length = tokens[i].index(EOS_ID) if EOS_ID in tokens[i] else len(tokens[i])
        attn = attention[i, : length + 1, : int(src_lens[i])].cpu() if attention is not None else None
        out.append([Hypothesis(tokens[i][:length], float(scores[i]), attn)])
    return out


@dataclass
class _Pool:
    """The ``n_best`` best finished hypotheses of every sentence of the batch: (B, N, ...)."""

    scores: Tensor  # (B, N) length-normalised, -inf where empty
    tokens: Tensor  # (B, N, T_max) long, EOS-terminated, PAD after
    attention: Tensor | None  # (B, N, T_max, S)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lens: Tensor,
    beam_size: int,
    n_best: int,
    penalty: str,
    alpha: float,
    max_len_a: float,
    max_len_b: int,
    return_attention: bool,
) -> list[list[Hypothesis]]:
    """Batched beam search: all beams of all unfinished sentences advance together.

    :param src: (B, S) long. :param src_lens: (B,) long.
    :param beam_size: K. :param n_best: hypotheses returned per sentence (<= K).
    :param penalty: ``none``, ``average`` or ``gnmt``; ``alpha`` is the GNMT exponent.
    :return: per sentence, up to ``n_best`` hypotheses, best first.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best={n_best} must be between 1 and beam_size={beam_size}")
    k, device = beam_size, src.device
    batch_size, src_len = src.shape
    memory, state = model.encode(src, src_lens)
    memory = memory.repeat_interleave(k)  # (B, ...) -> (B*K, ...): beam j of sentence b is row b*K + j
    state = tuple(s.repeat_interleave(k, dim=0) for s in state)
    limits = max_lengths(src_lens, max_len_a, max_len_b).to(device)  # (B,)
    t_max = int(limits.max())
    bound_lp = length_penalty(limits.float(), penalty, alpha)  # (B,) lp at the longest allowed output

    pool = _Pool(
        torch.full((batch_size, n_best), float("-inf"), device=device),
        torch.full((batch_size, n_best, t_max), PAD_ID, dtype=torch.long, device=device),
        torch.zeros(batch_size, n_best, t_max, src_len, device=device) if return_attention else None,
    )
    active = torch.arange(batch_size, device=device)  # (A,) the unfinished sentences
    alive = torch.full((batch_size, k), float("-inf"), device=device)  # (A, K) summed log-probs
    alive[:, 0] = 0.0  # at step 1 only one beam per sentence, or all K would be the same
    alive_tokens = torch.empty(batch_size * k, 0, dtype=torch.long, device=device)  # (A*K, t-1)
    alive_attn = torch.empty(batch_size * k, 0, src_len, device=device)  # (A*K, t-1, S)
    prev = torch.full((batch_size * k,), BOS_ID, dtype=torch.long, device=device)

    for t in range(1, t_max + 1):
        num_active = active.numel()
        logits, state, weights = model.decode_step(prev, memory, state)
        log_probs = _forbid_specials(torch.log_softmax(logits.float(), dim=-1))  # (A*K, V)
        vocab = log_probs.size(1)
        at_limit = (limits[active] <= t).repeat_interleave(k)  # (A*K,)
        log_probs[at_limit] = log_probs[at_limit].masked_fill(
            torch.arange(vocab, device=device) != EOS_ID, float("-inf")
        )
        candidates = (alive.view(-1, 1) + log_probs).view(num_active, k * vocab)  # (A, K*V)
        top_scores, top_ids = candidates.topk(2 * k, dim=1)  # (A, 2K): at most K of them end in EOS
        top_beams, top_tokens = top_ids // vocab, top_ids % vocab  # flat id = beam * V + token
        rows = (torch.arange(num_active, device=device) * k).unsqueeze(1) + top_beams  # (A, 2K) rows of A*K
        if return_attention:
            alive_attn = torch.cat([alive_attn, weights.unsqueeze(1)], dim=1)  # (A*K, t, S)

        # 1. candidates ending in EOS among the top K are finished (so K=1 is exactly greedy)
        ends = top_tokens[:, :k] == EOS_ID  # (A, K)
        lp = length_penalty(torch.tensor(float(t), device=device), penalty, alpha)
        new_scores = torch.where(ends, top_scores[:, :k] / lp, float("-inf"))  # (A, K)
        pool_scores = pool.scores[active]  # (A, N)
        if bool((new_scores.max(dim=1).values > pool_scores[:, -1]).any()):
            _add_finished(pool, active, new_scores, rows[:, :k], alive_tokens, alive_attn, t)

        # 2. the K best candidates not ending in EOS stay alive
        open_scores = top_scores.masked_fill(top_tokens == EOS_ID, float("-inf"))  # (A, 2K)
        alive, keep = open_scores.topk(k, dim=1)  # (A, K), sorted best first
        keep_rows = rows.gather(1, keep).view(-1)  # (A*K,)
        prev = top_tokens.gather(1, keep).view(-1)  # (A*K,)
        alive_tokens = torch.cat([alive_tokens[keep_rows], prev.unsqueeze(1)], dim=1)  # (A*K, t)
        if return_attention:
            alive_attn = alive_attn[keep_rows]
        state = tuple(s[keep_rows] for s in state)

        # 3. a sentence is done when its best alive hypothesis cannot beat its n-th best finished one
        best_possible = alive[:, 0] / bound_lp[active]  # (A,)
        done = (pool.scores[active, -1] >= best_possible) | (limits[active] <= t)
        if bool(done.all()):
            break
        if bool(done.any()):  # drop finished sentences from the batch
            still = (~done).nonzero().squeeze(1)  # (A',)
            still_rows = (still.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)  # (A'*K,)
            active, alive = active[still], alive[still]
            memory = type(memory)(*(m[still_rows] for m in memory))
            state = tuple(s[still_rows] for s in state)
            prev, alive_tokens = prev[still_rows], alive_tokens[still_rows]
            if return_attention:
                alive_attn = alive_attn[still_rows]
    return _pool_to_hypotheses(pool, src_lens)


def _add_finished(
    pool: _Pool, active: Tensor, new_scores: Tensor, new_rows: Tensor, alive_tokens: Tensor,
    alive_attn: Tensor, t: int,
) -> None:  # fmt: skip
    """Merge the EOS candidates of step ``t`` (scores (A, K), source rows (A, K)) into the pool."""
    num_active, k = new_scores.shape
    n_best, t_max = pool.tokens.shape[1:]
    flat_rows = new_rows.reshape(-1)  # (A*K,)
    tokens = torch.full((num_active * k, t_max), PAD_ID, dtype=torch.long, device=new_scores.device)
    tokens[:, : t - 1] = alive_tokens[flat_rows]
    tokens[:, t - 1] = EOS_ID
    merged_scores = torch.cat([pool.scores[active], new_scores], dim=1)  # (A, N+K)
    pool_scores, pick = merged_scores.topk(n_best, dim=1)  # (A, N), indices into N+K
    merged_tokens = torch.cat([pool.tokens[active], tokens.view(num_active, k, t_max)], dim=1)
    pool.tokens[active] = merged_tokens.gather(1, pick.unsqueeze(2).expand(-1, -1, t_max))
    pool.scores[active] = pool_scores
    if pool.attention is not None:
        src_len = pool.attention.size(-1)
        attn = alive_attn.new_zeros(num_active * k, t_max, src_len)
        attn[:, :t] = alive_attn[flat_rows]
        merged = torch.cat([pool.attention[active], attn.view(num_active, k, t_max, src_len)], dim=1)
        pool.attention[active] = merged.gather(
            1, pick.view(num_active, n_best, 1, 1).expand(-1, -1, t_max, src_len)
        )


def _pool_to_hypotheses(pool: _Pool, src_lens: Tensor) -> list[list[Hypothesis]]:
    scores, tokens = pool.scores.cpu().tolist(), pool.tokens.cpu().tolist()
    out = []
    for i, (sentence_scores, sentence_tokens) in enumerate(zip(scores, tokens)):
        hyps = []
        for j, (score, toks) in enumerate(zip(sentence_scores, sentence_tokens)):
            if score == float("-inf"):
                continue
            length = toks.index(EOS_ID)
            attn = pool.attention[i, j, : length + 1, : int(src_lens[i])].cpu() if pool.attention is not None else None
            hyps.append(Hypothesis(toks[:length], score, attn))
        out.append(hyps)
    return out


# --------------------------------------------------------------------------- many sentences


@dataclass(frozen=True)
class SearchSettings:
    """How to decode (the ``search`` settings of training validation and ``nmt.translate``).

    :param beam_size: 1 means greedy search.
    :param n_best: hypotheses kept per sentence.
    :param length_penalty: ``none``, ``average`` or ``gnmt``.
    :param alpha: GNMT length-penalty exponent.
    :param max_len_a: output limit = ``max_len_a * source length + max_len_b``.
    :param max_len_b: see ``max_len_a``.
    """

    beam_size: int = 5
    n_best: int = 1
    length_penalty: str = "gnmt"
    alpha: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 10


def search(
    model: Seq2Seq, src: Tensor, src_lens: Tensor, settings: SearchSettings, return_attention: bool = False
) -> list[list[Hypothesis]]:
    """Greedy search when ``beam_size == 1`` and ``n_best == 1``, else beam search."""
    if settings.beam_size == 1 and settings.n_best == 1:
        return greedy_search(model, src, src_lens, settings.max_len_a, settings.max_len_b, return_attention)
    return beam_search(
        model, src, src_lens, settings.beam_size, settings.n_best, settings.length_penalty, settings.alpha,
        settings.max_len_a, settings.max_len_b, return_attention,
    )  # fmt: skip


def translate_ids(
    model: Seq2Seq,
    src_ids: list[list[int]],
    settings: SearchSettings,
    batch_size: int,
    device: torch.device,
    return_attention: bool = False,
    progress=None,
) -> list[list[Hypothesis]]:
    """Decode many sources (subword ids, without EOS), in batches of similar length, in input order.

    :param batch_size: sentences per batch.
    :param progress: optional callable ``progress(num_sentences_done)``.
    """
    model.eval()
    lengths = np.array([len(ids) + 1 for ids in src_ids])
    order = np.argsort(-lengths, kind="stable")
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = torch.full((len(chunk), int(lengths[chunk].max())), PAD_ID, dtype=torch.long)
        for row, i in enumerate(chunk):
            src[row, : len(src_ids[i])] = torch.as_tensor(src_ids[i], dtype=torch.long)
            src[row, len(src_ids[i])] = EOS_ID
        src_lens = torch.from_numpy(lengths[chunk])
        for i, hyps in zip(chunk, search(model, src.to(device), src_lens, settings, return_attention)):
            results[i] = hyps
        if progress is not None:
            progress(len(chunk))
    return results

"""Greedy and beam search, batched over sentences; the only place that loops over output steps.

Beam search keeps, per sentence, K alive hypotheses and a pool of the ``n_best`` best finished ones
(Sutskever et al. 2014; Wu et al. 2016, section 7). A hypothesis's score is its summed
log-probability ``s`` (EOS included) divided by a length penalty ``lp(L)``, L = its length with EOS:

    none      lp(L) = 1
    average   lp(L) = L
    gnmt      lp(L) = ((5 + L) / 6) ** alpha        (Wu et al. 2016, eq. 14; alpha >= 0)

A sentence's search ends when no alive hypothesis can still beat the worst of its ``n_best`` best
finished ones (with ``n_best=1``: its best finished one), or at its maximum length
``max_len_a * source length + max_len_b`` (EOS included), where EOS is forced. Not when the top
hypothesis first ends. The bound: extending a hypothesis only adds log-probabilities <= 0, and all
three penalties grow with L, so an alive hypothesis with sum ``s`` can at best reach
``s / lp(max length)``. Finished sentences leave the batch, and the batch stops as soon as every
sentence is finished. Sentences never interact, so a translation does not depend on its batch.

The greedy path is never pruned: when its continuation is not among the K best it replaces the K-th
one, and it joins the finished pool when it ends. Plain beam search can drop the greedy prefix and then
see every survivor fall below it; with this, a beam never ends with a lower score than greedy search,
and K=1 is exactly greedy search.

Tokens are not copied at every step: each step records, per alive row, its new token and the row it
came from, and the finished hypotheses are traced back once at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, make_dataclass
from typing import Any, NamedTuple, Optional, Protocol, get_type_hints

import numpy as np
import torch
from torch import Tensor

from nmt.decoder import DecoderState
from nmt.tokens import pad_sources
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID

LENGTH_PENALTIES = ("none", "average", "gnmt")


class Decodable(Protocol):
    """What search needs of a model: a :class:`~nmt.model.Seq2Seq`, or an
    :class:`~nmt.ensemble.Ensemble` of them. The memory moves with the batch
    (``index_select``, ``repeat_interleave``), the state is a tuple of (B, ...) tensors."""

    def encode(self, src: Tensor, src_lens: Tensor) -> tuple[Any, DecoderState]: ...

    def decode_step(self, prev: Tensor, memory: Any, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]: ...

    @property
    def full_context(self) -> bool: ...

    def teacher_forced_attention(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor: ...

    def eval(self) -> Any: ...
BATCH_UNITS = ("sentences", "tokens")


@dataclass
class Hypothesis:
    """One output.

    :ivar tokens: target ids, without EOS.
    :ivar score: beam search: summed log-probability (EOS included) / ``lp(len(tokens) + 1)``;
        greedy search: the plain sum.
    :ivar attention: (T, S) float CPU, T = ``len(tokens) + 1`` (one row per emitted token and EOS),
        S = the source length with EOS; None unless asked for.
    """

    tokens: list[int]
    score: float
    attention: Tensor | None = None


def length_penalty(length: Tensor, kind: str, alpha: float) -> Tensor:
    """``lp(L)`` for lengths ``length`` (any shape, float) -> the same shape."""
    if kind == "none":
        return torch.ones_like(length)
    if kind == "average":
        return length
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    raise ValueError(f"length_penalty={kind!r}: choose one of {', '.join(LENGTH_PENALTIES)}")


def max_lengths(src_lens: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence output limit (EOS included), at least 1: (B,) long -> (B,) long."""
    return (src_lens.double() * max_len_a + max_len_b).long().clamp(min=1)


def _step(
    model: Decodable, prev: Tensor, memory: Any, state: DecoderState, at_limit: Tensor | None
) -> tuple[Tensor, DecoderState, Tensor]:
    """One decoder step with the search's constraints.

    :param prev: (R,) long, the previous tokens of the R decoder rows.
    :param at_limit: (R,) bool, rows that must end now (only EOS allowed), or None.
    :return: log-probabilities (R, V) float with PAD and BOS at -inf (they still count in the
        normalisation, as in the training objective), the new state and attention weights (R, S).
    """
    logits, state, weights = model.decode_step(prev, memory, state)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (R, V)
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    if at_limit is not None:
        not_eos = torch.arange(log_probs.size(1), device=log_probs.device) != EOS_ID  # (V,)
        log_probs.masked_fill_(at_limit.unsqueeze(1) & not_eos, float("-inf"))
    return log_probs, state, weights


def _limits(src_lens: Tensor, max_len_a: float, max_len_b: int) -> tuple[Tensor, int, set[int]]:
    """Limits (B,) on the CPU, the longest, and the set of steps at which some sentence must end."""
    limits = max_lengths(src_lens.cpu(), max_len_a, max_len_b)
    return limits, int(limits.max()), set(limits.tolist())


@torch.inference_mode()
def greedy_search(
    model: Decodable, src: Tensor, src_lens: Tensor, max_len_a: float, max_len_b: int, return_attention: bool
) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step; finished sentences leave the batch.

    :param src: (B, S) long, EOS-terminated, PAD after. :param src_lens: (B,) long, EOS included.
    :param max_len_a: output limit = ``max_len_a * src_len + max_len_b`` (EOS included).
    :param max_len_b: see ``max_len_a``.
    :param return_attention: fill :attr:`Hypothesis.attention`.
    :return: for each sentence, a list with one :class:`Hypothesis` (score = sum of log-probs).
    """
    best = lambda log_probs, _active: log_probs.max(dim=-1)  # noqa: E731
    return _one_path(model, src, src_lens, max_len_a, max_len_b, return_attention, best)


def _one_path(
    model: Decodable, src: Tensor, src_lens: Tensor, max_len_a: float, max_len_b: int, return_attention: bool,
    pick: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
) -> list[list[Hypothesis]]:  # fmt: skip
    """Decode one output per row, ``pick(log_probs, active)`` choosing each next token from the
    step's (A, V) log-probabilities of the active rows (A,): (its log-probability (A,), the token
    (A,)). Greedy search and sampling."""
    batch_size, src_len = src.shape
    device = src.device
    memory, state = model.encode(src, src_lens)
    limits_cpu, t_max, limit_steps = _limits(src_lens, max_len_a, max_len_b)
    limits = limits_cpu.to(device)  # (A,) limits of the active sentences
    tokens = torch.full((batch_size, t_max), PAD_ID, dtype=torch.long, device=device)  # (B, T)
    scores = torch.zeros(batch_size, device=device)  # (B,)
    attention = torch.zeros(batch_size, t_max, src_len, device=device) if return_attention else None
    active = torch.arange(batch_size, device=device)  # (A,) sentences still decoding
    prev = torch.full((batch_size,), BOS_ID, dtype=torch.long, device=device)
    for t in range(1, t_max + 1):
        at_limit = limits <= t if t in limit_steps else None
        log_probs, state, weights = _step(model, prev, memory, state, at_limit)
        best, prev = pick(log_probs, active)  # (A,), (A,)
        tokens[active, t - 1] = prev
        scores.index_add_(0, active, best)
        if attention is not None:
            attention[active, t - 1] = weights.float()
        ended = prev == EOS_ID  # (A,)
        num_ended = int(ended.sum())  # the one host sync of the step
        if num_ended == active.numel():
            break
        if num_ended:
            keep = (~ended).nonzero().squeeze(1)  # (A',)
            active, prev, limits = active[keep], prev[keep], limits[keep]
            memory, state = memory.index_select(keep), tuple(s.index_select(0, keep) for s in state)
    lengths = (tokens == EOS_ID).int().argmax(dim=1).tolist()  # first EOS of each row
    tokens_list, scores_list = tokens.tolist(), scores.tolist()
    out = []
    for i, length in enumerate(lengths):
        attn = attention[i, : length + 1, : int(src_lens[i])].cpu() if attention is not None else None
        out.append([Hypothesis(tokens_list[i][:length], scores_list[i], attn)])
    return out


# --------------------------------------------------------------------------- beam search


class _Pool:
    """The ``n_best`` best finished hypotheses of each sentence, best first, as references into
    the :class:`_Trace`: the step at which EOS was chosen and the decoder row it extended.

    :param batch_size: B. :param n_best: N.
    """

    def __init__(self, batch_size: int, n_best: int, device: torch.device) -> None:
        self.scores = torch.full((batch_size, n_best), float("-inf"), device=device)  # (B, N), -inf = empty
        self.steps = torch.zeros(batch_size, n_best, dtype=torch.long, device=device)  # (B, N)
        self.rows = torch.zeros(batch_size, n_best, dtype=torch.long, device=device)  # (B, N)

    def add(self, active: Tensor, scores: Tensor, rows: Tensor, step: int) -> Tensor:
        """Merge the hypotheses that end at ``step`` into the pools of the ``active`` sentences.

        :param active: (A,) sentence ids. :param scores: (A, C) normalised, -inf for no hypothesis.
        :param rows: (A, C) long, the decoder rows they extend. :return: the new scores (A, N).
        """
        n_best = self.scores.size(1)
        merged = torch.cat([self.scores[active], scores], dim=1)  # (A, N+C)
        best, pick = merged.topk(n_best, dim=1)  # (A, N), indices into the N+C
        self.rows[active] = torch.cat([self.rows[active], rows], dim=1).gather(1, pick)
        self.steps[active] = torch.cat([self.steps[active], torch.full_like(rows, step)], dim=1).gather(1, pick)
        self.scores[active] = best
        return best


@dataclass
class _Trace:
    """What each step chose, per row of the step's alive layout (R_t = A_t * K rows):

    ``tokens[t-1]`` (R_t,) the token appended at step t; ``parents[t-1]`` (R_t,) the row of step t-1
    it extends; ``weights[t-1]`` (R_{t-1}, S) the attention of the rows of step t-1 when predicting
    step t (only when attention is returned). Layouts shrink when sentences finish, and each step's
    record is written in the shrunk layout, so parents always point into the previous record.
    """

    tokens: list[Tensor]
    parents: list[Tensor]
    weights: list[Tensor] | None

    def backtrack(self, steps: Tensor, rows: Tensor, valid: Tensor) -> tuple[Tensor, Tensor | None]:
        """Token sequences (and attention) of finished hypotheses.

        :param steps: (H,) long, the step at which each ended. :param rows: (H,) long, the row of step
            ``steps - 1`` it extended. :param valid: (H,) bool, False for empty pool slots.
        :return: tokens (H, T) long (EOS at ``steps - 1``, PAD after) and attention (H, T, S) or None.
        """
        num, t_last = steps.numel(), len(self.tokens)
        tokens = torch.full((num, t_last), PAD_ID, dtype=torch.long, device=steps.device)
        tokens[valid, steps[valid] - 1] = EOS_ID
        attention = None
        if self.weights is not None:
            attention = torch.zeros(num, t_last, self.weights[0].size(1), device=steps.device)
        cur = torch.zeros_like(rows)  # (H,) each hypothesis's row at the step being visited
        # Walk back from the last step: a hypothesis joins the walk at its own final step.
        # Example: ended at step 3 from row 4 -> weights[2][4]; token 2 = tokens[1][4];
        # r = parents[1][4] -> weights[1][r]; token 1 = tokens[0][r].
        for s in range(t_last, 0, -1):
            cur = torch.where(steps == s, rows, cur)
            live = valid & (steps >= s)  # (H,)
            if attention is not None:
                step_weights = self.weights[s - 1]  # (R_{s-1}, S)
                picked = step_weights[cur.clamp(max=step_weights.size(0) - 1)].float()  # (H, S)
                attention[:, s - 1] = picked * live.unsqueeze(1)
            if s == 1:
                break
            safe = cur.clamp(max=self.tokens[s - 2].numel() - 1)  # rows of dead hypotheses are junk
            tokens[:, s - 2] = torch.where(live, self.tokens[s - 2][safe], PAD_ID)
            cur = torch.where(live, self.parents[s - 2][safe], cur)
        return tokens, attention


@dataclass(frozen=True)
class SamplingSettings:
    """Drawing translations at random instead of searching (for back-translation and diversity).

    At each step the next token is drawn from the model's distribution sharpened or flattened by
    ``temperature`` (p_i ** (1/T), renormalised), restricted to the ``top_k`` most probable tokens
    (0 = all) and to the smallest set of most probable tokens whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al. 2020; 1.0 = all). EOS is forced at the output limit.

    :param n: samples per sentence (>= 1).
    :param seed: of the random draws: the same seed gives a sentence the same samples, whatever
        its batch.
    """

    n: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"sample={self.n!r}: must be an integer >= 1 (samples per sentence)")
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature!r}: must be > 0")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r}: must be an integer >= 0 (0 = every token)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r}: must be in (0, 1] (1 = every token)")


def sampling_distribution(log_probs: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    """The (R, V) probabilities tokens are drawn from, given the model's (R, V) log-probabilities."""
    scaled = log_probs / temperature
    if top_k and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (R, 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the tokens ranked above each
        sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)  # the first token is always kept
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


@torch.inference_mode()
def sample_search(
    model: Decodable, src: Tensor, src_lens: Tensor, sampling: SamplingSettings, max_len_a: float, max_len_b: int,
    return_attention: bool = False, keys: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:  # fmt: skip
    """``sampling.n`` translations of each sentence drawn at random (see :class:`SamplingSettings`).

    Sample j of the sentence with key k draws from its own random stream, seeded with
    (``sampling.seed``, k, j): the samples of a sentence do not depend on its batch.

    :param keys: (B,) a number per sentence, e.g. its input line (default 0, 1, ...).
    :return: per sentence its samples in the order drawn; a score is the model's summed
        log-probability of the sample (untempered, EOS included).
    """
    n, batch_size = sampling.n, src.size(0)
    keys = list(range(batch_size)) if keys is None else list(keys)
    streams = [torch.Generator().manual_seed(int(np.random.SeedSequence([sampling.seed, key, j]).generate_state(1)[0]))
               for key in keys for j in range(n)]  # fmt: skip

    def pick(log_probs: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        probs = sampling_distribution(log_probs, sampling.temperature, sampling.top_k, sampling.top_p)  # (A, V)
        draws = torch.cat([torch.rand(1, generator=streams[row], dtype=torch.float64) for row in active.tolist()])
        cumulative = probs.double().cumsum(dim=-1)  # (A, V)
        draws = (draws.to(probs.device) * cumulative[:, -1]).unsqueeze(1)  # (A, 1), inside the total mass
        tokens = torch.searchsorted(cumulative, draws, right=True).squeeze(1).clamp(max=probs.size(-1) - 1)
        tokens = torch.where(probs.gather(1, tokens.unsqueeze(1)).squeeze(1) > 0, tokens, probs.argmax(dim=-1))
        return log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1), tokens

    rows = _one_path(model, src.repeat_interleave(n, dim=0), src_lens.repeat_interleave(n), max_len_a, max_len_b,
                     return_attention, pick)  # fmt: skip
    return [[hyps[0] for hyps in rows[i * n : (i + 1) * n]] for i in range(batch_size)]


@dataclass
class Scored:
    """A given target scored by the model (forced decoding).

    :ivar log_probs: (T,) float CPU, the log-probability of each target token and of EOS (last),
        under the distribution search uses (PAD and BOS excluded, no length limit).
    :ivar attention: (T, S) float CPU, the weights with which each token was emitted; None unless
        asked for.
    """

    log_probs: Tensor
    attention: Tensor | None = None

    @property
    def total(self) -> float:
        return float(self.log_probs.sum())


@torch.inference_mode()
def force_decode(
    model: Decodable, src: Tensor, src_lens: Tensor, targets: list[list[int]], return_attention: bool = False
) -> list[Scored]:
    """Score given targets: feed each target token as the next input and read the probability the
    model gave it, step by step through the same ``decode_step`` and normalisation as search, so
    the score of a search output is the score search reported for it (greedy: the plain sum).

    With ``return_attention`` and a model that reads its attention with the full target context
    (:meth:`nmt.model.Seq2Seq.set_alignment`), the attention comes from one teacher-forced pass in
    which every position sees the whole target (its EOS excepted: no training input holds one).

    :param src: (B, S) long. :param src_lens: (B,) long. :param targets: B lists of target ids,
        without EOS (it is scored last). :return: one :class:`Scored` per sentence.
    """
    batch_size, src_len = src.shape
    device = src.device
    lengths = [len(t) + 1 for t in targets]  # + EOS
    t_max = max(lengths, default=1)
    gold = torch.full((batch_size, t_max), PAD_ID, dtype=torch.long)  # (B, T)
    for row, ids in enumerate(targets):
        gold[row, : lengths[row]] = torch.tensor([*ids, EOS_ID], dtype=torch.long)
    gold = gold.to(device)
    log_probs = torch.zeros(batch_size, t_max, device=device)  # (B, T)
    attention = torch.zeros(batch_size, t_max, src_len, device=device) if return_attention else None
    memory, state = model.encode(src, src_lens)
    prev = torch.full((batch_size,), BOS_ID, dtype=torch.long, device=device)
    for t in range(t_max):
        step_log_probs, state, weights = _step(model, prev, memory, state, None)  # (B, V)
        log_probs[:, t] = step_log_probs.gather(1, gold[:, t : t + 1]).squeeze(1)
        if attention is not None:
            attention[:, t] = weights.float()
        prev = gold[:, t]  # PAD after a row's EOS: its later steps are not read
    if attention is not None and model.full_context:  # the attention of a pass that sees the whole target
        tgt_in = torch.cat([torch.full_like(gold[:, :1], BOS_ID), gold[:, :-1]], dim=1)  # (B, T): BOS + target
        attention = model.teacher_forced_attention(src, src_lens, tgt_in.masked_fill(tgt_in == EOS_ID, PAD_ID)).float()
    log_probs_cpu = log_probs.cpu()
    return [Scored(log_probs_cpu[row, : lengths[row]].clone(),
                   attention[row, : lengths[row], : int(src_lens[row])].cpu() if attention is not None else None)
            for row in range(batch_size)]  # fmt: skip


# The largest decoding a setting may ask for: the beam's work and memory grow with K x V a step,
# and the output limit sizes arrays before the first step. Far beyond any useful value, but a
# checkpoint's train.search (a stranger's file) cannot make a command allocate without bound.
MAX_BEAM_SIZE = 1000
MAX_LEN_A = 100.0
MAX_LEN_B = 10_000


def check_search_settings(
    beam_size: int, n_best: int, penalty: str, alpha: float, max_len_a: float, max_len_b: int, prefix: str = ""
) -> None:
    """The one check of decoding settings (``train.search``, translate's and evaluate's keys, and
    :class:`SearchSettings`): refuse impossible values, and values past :data:`MAX_BEAM_SIZE`,
    :data:`MAX_LEN_A` and :data:`MAX_LEN_B`, with a message naming the key.

    :param prefix: put before every key name in messages, e.g. ``train.search.``.
    """
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    is_number = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
    if not is_int(beam_size) or not 1 <= beam_size <= MAX_BEAM_SIZE:
        raise ValueError(f"{prefix}beam_size={beam_size!r}: must be an integer from 1 to {MAX_BEAM_SIZE}")
    if not is_int(n_best) or not 1 <= n_best <= beam_size:
        raise ValueError(f"{prefix}n_best={n_best!r}: must be between 1 and {prefix}beam_size={beam_size}")
    if penalty not in LENGTH_PENALTIES:
        raise ValueError(f"{prefix}length_penalty={penalty!r}: choose one of {', '.join(LENGTH_PENALTIES)}")
    if not is_number(alpha) or not 0 <= alpha < math.inf:  # NaN fails both comparisons
        raise ValueError(f"{prefix}alpha={alpha!r}: must be a finite number >= 0 (the stopping bound needs lp to grow "
                         "with length)")  # fmt: skip
    if not is_number(max_len_a) or not 0 <= max_len_a <= MAX_LEN_A:
        raise ValueError(f"{prefix}max_len_a={max_len_a!r}: must be a number from 0 to {MAX_LEN_A:g}")
    if not is_int(max_len_b) or not 0 <= max_len_b <= MAX_LEN_B:
        raise ValueError(f"{prefix}max_len_b={max_len_b!r}: must be an integer from 0 to {MAX_LEN_B}")
    if max_len_a == 0 and max_len_b == 0:
        raise ValueError(f"{prefix}max_len_a and {prefix}max_len_b are both 0: no output could be produced")


@torch.inference_mode()
def beam_search(
    model: Decodable,
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

    :param src: (B, S) long, EOS-terminated, PAD after. :param src_lens: (B,) long, EOS included.
    :param beam_size: K. :param n_best: hypotheses returned per sentence (<= K).
    :param penalty: ``none``, ``average`` or ``gnmt``. :param alpha: the GNMT exponent.
    :param max_len_a: output limit = ``max_len_a * src_len + max_len_b`` (EOS included).
    :param max_len_b: see ``max_len_a``.
    :param return_attention: fill :attr:`Hypothesis.attention`.
    :return: per sentence, up to ``n_best`` distinct hypotheses, best first.
    """
    check_search_settings(beam_size, n_best, penalty, alpha, max_len_a, max_len_b)
    k, device = beam_size, src.device
    batch_size = src.size(0)
    memory, state = model.encode(src, src_lens)  # repeated K times after step 1
    limits_cpu, t_max, limit_steps = _limits(src_lens, max_len_a, max_len_b)
    lp = length_penalty(torch.arange(t_max + 1, dtype=torch.float64), penalty, alpha).tolist()  # lp[L]
    limits = limits_cpu.to(device)  # (A,) of the active sentences
    bounds = length_penalty(limits_cpu.double(), penalty, alpha).float().to(device)  # (A,) lp(limit)

    pool = _Pool(batch_size, n_best, device)
    trace = _Trace([], [], [] if return_attention else None)
    active = torch.arange(batch_size, device=device)  # (A,) unfinished sentences
    alive = torch.full((batch_size, k), float("-inf"), device=device)  # (A, K) summed log-probs
    alive[:, 0] = 0.0  # at step 1 only one beam per sentence, or all K would be the same
    greedy = torch.zeros(batch_size, dtype=torch.long, device=device)  # (A,) beam of the greedy path, -1 ended
    prev = torch.full((batch_size * k,), BOS_ID, dtype=torch.long, device=device)  # (A*K,)
    for t in range(1, t_max + 1):
        num_active = active.numel()
        at_limit = (limits <= t).repeat_interleave(k) if t in limit_steps else None  # (A*K,)
        if t == 1:  # the K beams of a sentence are all BOS yet: run the decoder once per sentence
            log_probs, state, weights = _step(model, prev[::k], memory, state, None if at_limit is None else at_limit[::k])
            log_probs, weights = log_probs.repeat_interleave(k, dim=0), weights.repeat_interleave(k, dim=0)
            # (B, ...) -> (B*K, ...): beam j of sentence b is row b*K + j
            memory, state = memory.repeat_interleave(k), tuple(s.repeat_interleave(k, dim=0) for s in state)
        else:
            log_probs, state, weights = _step(model, prev, memory, state, at_limit)  # (A*K, V), ..., (A*K, S)
        if trace.weights is not None:
            trace.weights.append(weights)
        scores, rows, tokens, best, best_tokens = _expand(log_probs, alive, k)  # (A, 2K) x3, (A, K) x2
        path = _GreedyStep.of(greedy, best, best_tokens)

        # 1. the candidates among the top K that end in EOS are finished (so K=1 is greedy), and so
        # is the greedy path when it ends
        pool_scores = pool.add(active, *_finished(scores, rows, tokens, path, lp[t]), t)  # (A, N)

        # 2. the K best candidates that do not end stay alive (there are >= K: at most K end), and
        # the greedy path's continuation takes the last place if it is not among them
        alive, keep = scores.masked_fill(tokens == EOS_ID, float("-inf")).topk(k, dim=1)  # (A, K), best first
        keep_rows, prev = rows.gather(1, keep), tokens.gather(1, keep)  # (A, K) each
        greedy = _keep_greedy_path(greedy, path, alive, keep_rows, prev)
        keep_rows, prev = keep_rows.view(-1), prev.view(-1)  # (A*K,) rows of this step's decoder batch

        # 3. done: the n-th best finished beats anything still reachable, or the limit is reached
        done = (pool_scores[:, -1] >= alive[:, 0] / bounds) | (limits <= t)  # (A,)
        num_done = int(done.sum())  # the one host sync of the step
        if 0 < num_done < num_active:  # finished sentences leave the batch
            still = (~done).nonzero().squeeze(1)  # (A',)
            # rows of the kept sentences, e.g. K=2, still=[0, 2] -> rows [0, 1, 4, 5]
            still_rows = (still.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)  # (A'*K,)
            keep_rows, prev = keep_rows[still_rows], prev[still_rows]
            active, alive, limits, bounds, greedy = (x[still] for x in (active, alive, limits, bounds, greedy))
            memory = memory.index_select(still_rows)  # beams of a sentence share their memory rows
        trace.tokens.append(prev)
        trace.parents.append(keep_rows)
        if num_done == num_active:
            break
        state = tuple(s.index_select(0, keep_rows) for s in state)  # reorder (and shrink) the beams
    return _hypotheses(pool, trace, src_lens)


class _GreedyStep(NamedTuple):
    """The greedy path's best extension at this step, per sentence: (A,) each."""

    row: Tensor  # decoder row of the path (junk once it has ended)
    token: Tensor  # its most probable next token
    score: Tensor  # the path's summed log-probability with that token
    ends: Tensor  # bool: that token is EOS (and the path had not ended before)

    @classmethod
    def of(cls, greedy: Tensor, best: Tensor, best_tokens: Tensor) -> _GreedyStep:
        """:param greedy: (A,) the path's beam, -1 once ended. :param best: (A, K) and
        ``best_tokens`` (A, K): each beam's best extension (from :func:`_expand`)."""
        beam = greedy.clamp(min=0).unsqueeze(1)  # (A, 1)
        token = best_tokens.gather(1, beam).squeeze(1)  # (A,)
        row = torch.arange(best.size(0), device=best.device) * best.size(1) + beam.squeeze(1)  # (A,)
        return cls(row, token, best.gather(1, beam).squeeze(1), (greedy >= 0) & (token == EOS_ID))


def _finished(scores: Tensor, rows: Tensor, tokens: Tensor, path: _GreedyStep, lp: float) -> tuple[Tensor, Tensor]:
    """The hypotheses that end now: EOS among the top K candidates (A, 2K), plus the greedy path
    if it ends and is not among them. :return: normalised scores (A, K+1), -inf for none, and rows."""
    k = scores.size(1) // 2
    ends = tokens[:, :k] == EOS_ID  # (A, K)
    finished = torch.where(ends, scores[:, :k] / lp, float("-inf"))  # (A, K)
    listed = (ends & (rows[:, :k] == path.row.unsqueeze(1))).any(dim=1)  # (A,)
    greedy = torch.where(path.ends & ~listed, path.score / lp, float("-inf"))  # (A,)
    return torch.cat([finished, greedy.unsqueeze(1)], dim=1), torch.cat([rows[:, :k], path.row.unsqueeze(1)], dim=1)


def _keep_greedy_path(greedy: Tensor, path: _GreedyStep, alive: Tensor, keep_rows: Tensor, prev: Tensor) -> Tensor:
    """Keep the greedy path among the alive hypotheses, so that beam search never ends with a lower
    score than greedy search: plain beam search can prune the greedy prefix and then see all its
    survivors fall below it. When the greedy continuation was not chosen it is, of all candidates,
    no better than the K-th chosen one, so putting it in place of that one keeps ``alive`` sorted.

    :param greedy: (A,) the greedy path's beam, -1 once it has ended.
    :param alive: (A, K), ``keep_rows`` (A, K), ``prev`` (A, K): the chosen beams, changed in place.
    :return: the greedy path's new beam (A,), -1 once ended.
    """
    going_on = (greedy >= 0) & ~path.ends  # (A,)
    match = (keep_rows == path.row.unsqueeze(1)) & (prev == path.token.unsqueeze(1))  # (A, K)
    missing = going_on & ~match.any(dim=1)  # (A,)
    last = alive.size(1) - 1
    keep_rows[:, last] = torch.where(missing, path.row, keep_rows[:, last])
    prev[:, last] = torch.where(missing, path.token, prev[:, last])
    alive[:, last] = torch.where(missing, path.score, alive[:, last])
    beam = torch.where(missing, last, match.int().argmax(dim=1))  # (A,)
    return torch.where(going_on, beam, -1)


def _expand(log_probs: Tensor, alive: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The 2K best one-token extensions of each sentence's K alive hypotheses.

    Only a row's 2K best tokens can be among its sentence's 2K best, so the (A, K*V) matrix of all
    candidates is never formed: (A, K*C) with C = min(2K, V) is enough.

    :param log_probs: (A*K, V). :param alive: (A, K) summed log-probs.
    :return: scores (A, 2K) summed log-probs, best first; rows (A, 2K) long, the decoder row each
        extends; tokens (A, 2K) long; and each beam's best extension: its sum (A, K) and token (A, K).
    """
    num_active = alive.size(0)
    per_row = min(2 * k, log_probs.size(1))  # C
    row_top, row_tokens = log_probs.topk(per_row, dim=1)  # (A*K, C)
    candidates = (alive.view(-1, 1) + row_top).view(num_active, k * per_row)  # (A, K*C)
    scores, flat = candidates.topk(2 * k, dim=1)  # (A, 2K)
    # flat id = beam * C + rank, e.g. K=2, C=4: flat 5 = beam 1's second-best token, row a*K + 1
    base = torch.arange(num_active, device=log_probs.device).unsqueeze(1) * k  # (A, 1)
    rows = base + flat.div(per_row, rounding_mode="floor")  # (A, 2K)
    row_tokens = row_tokens.view(num_active, k * per_row)  # (A, K*C)
    tokens = row_tokens.gather(1, flat)  # (A, 2K)
    best = candidates.view(num_active, k, per_row)[:, :, 0]  # (A, K)
    return scores, rows, tokens, best, row_tokens.view(num_active, k, per_row)[:, :, 0]


def _hypotheses(pool: _Pool, trace: _Trace, src_lens: Tensor) -> list[list[Hypothesis]]:
    """Trace the pools back into per-sentence lists of :class:`Hypothesis`, best first."""
    batch_size, n_best = pool.scores.shape
    valid = torch.isfinite(pool.scores.view(-1))  # (B*N,)
    tokens, attention = trace.backtrack(pool.steps.view(-1), pool.rows.view(-1), valid)
    scores, steps = pool.scores.view(-1).tolist(), pool.steps.view(-1).tolist()
    tokens_list = tokens.tolist()
    out: list[list[Hypothesis]] = []
    for b in range(batch_size):
        hyps = []
        for h in range(b * n_best, (b + 1) * n_best):
            if scores[h] == float("-inf"):
                continue
            length = steps[h] - 1  # tokens before EOS
            attn = attention[h, : length + 1, : int(src_lens[b])].cpu() if attention is not None else None
            hyps.append(Hypothesis(tokens_list[h][:length], scores[h], attn))
        out.append(hyps)
    return out


# --------------------------------------------------------------------------- many sentences


@dataclass(frozen=True)
class SearchSettings:
    """How to decode: ``train.search``, saved in checkpoints; ``translate.yaml`` and ``evaluate.yaml``
    override it key by key.

    :param beam_size: K; 1 with ``n_best=1`` means greedy search.
    :param n_best: hypotheses kept per sentence (<= K).
    :param length_penalty: ``none``, ``average`` or ``gnmt`` (unused by greedy search).
    :param alpha: GNMT length-penalty exponent (>= 0).
    :param max_len_a: output limit = ``max_len_a * source length + max_len_b`` (EOS included).
    :param max_len_b: see ``max_len_a``.
    """

    beam_size: int
    n_best: int
    length_penalty: str
    alpha: float
    max_len_a: float
    max_len_b: int

    def __post_init__(self) -> None:
        check_search_settings(self.beam_size, self.n_best, self.length_penalty, self.alpha, self.max_len_a,
                              self.max_len_b)  # fmt: skip

    @classmethod
    def from_checkpoint(cls, saved: Mapping[str, Any], given: Mapping[str, Any]) -> SearchSettings:
        """The decoding a checkpoint was trained and scored with (its config's ``train.search``),
        with every key of ``given`` that is not None in its place: ``nmt.translate`` and
        ``nmt.evaluate`` leave their keys at null, so a recipe's tuned beam and length penalty are
        what a user gets without knowing them.

        :param saved: the checkpoint's ``train.search``.
        :param given: the command line's settings, None where not set.
        """
        return cls(**{f.name: given[f.name] if given[f.name] is not None else saved[f.name] for f in fields(cls)})


# The schemas of the ``search`` group (configs/search/): its keys are those of SearchSettings,
# typed the same; in the ``checkpoint`` option (nmt.translate, nmt.evaluate, nmt.demo) each is
# optional (None = the checkpoint's own value).
_SEARCH_TYPES = get_type_hints(SearchSettings)
SearchSchema = make_dataclass("SearchSchema", list(_SEARCH_TYPES.items()))
SearchSchema.__doc__ = "The ``search`` group's ``default`` option: every key of :class:`SearchSettings`, typed."
SearchOverrides = make_dataclass(
    "SearchOverrides", [(name, Optional[kind], None) for name, kind in _SEARCH_TYPES.items()]  # noqa: UP045
)
SearchOverrides.__doc__ = "Decoding settings given on the command line; None keeps the checkpoint's own."


def search(
    model: Decodable, src: Tensor, src_lens: Tensor, settings: SearchSettings, return_attention: bool = False,
    sampling: SamplingSettings | None = None, keys: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:  # fmt: skip
    """Greedy search when ``beam_size == 1`` and ``n_best == 1``, else beam search; with
    ``sampling``, samples instead (``settings`` then gives only the output limit; ``keys`` number
    the sentences' random streams, see :func:`sample_search`).

    :param src: (B, S) long. :param src_lens: (B,) long. :return: per sentence, its hypotheses.
    """
    if sampling is not None:
        return sample_search(model, src, src_lens, sampling, settings.max_len_a, settings.max_len_b, return_attention,
                             keys)  # fmt: skip
    if settings.beam_size == 1 and settings.n_best == 1:
        return greedy_search(model, src, src_lens, settings.max_len_a, settings.max_len_b, return_attention)
    return beam_search(
        model, src, src_lens, settings.beam_size, settings.n_best, settings.length_penalty, settings.alpha,
        settings.max_len_a, settings.max_len_b, return_attention,
    )  # fmt: skip


def length_batches(lengths: np.ndarray, batch_size: int, unit: str) -> list[np.ndarray]:
    """Indices of sources cut into batches after sorting by length, longest first.

    :param lengths: (N,) source lengths (EOS included).
    :param batch_size: sentences per batch (``unit="sentences"``) or padded source tokens per batch,
        rows x longest (``unit="tokens"``; a longer sentence gets a batch of its own).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be at least 1")
    order = np.argsort(-lengths, kind="stable")
    if unit == "sentences":
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if unit != "tokens":
        raise ValueError(f"batch_unit={unit!r}: choose one of {', '.join(BATCH_UNITS)}")
    batches, start = [], 0
    for pos in range(1, len(order) + 1):  # longest first, so a batch's width is its first length
        if pos == len(order) or (pos + 1 - start) * int(lengths[order[start]]) > batch_size:
            batches.append(order[start:pos])
            start = pos
    return batches


def translate_ids(
    model: Decodable,
    src_ids: list[list[int]],
    settings: SearchSettings,
    batch_size: int,
    device: torch.device,
    return_attention: bool = False,
    progress=None,
    batch_unit: str = "sentences",
    sampling: SamplingSettings | None = None,
    keys: Sequence[int] | None = None,
) -> list[list[Hypothesis]]:
    """Decode many sources (subword ids, without EOS), in batches of similar length, in input order.

    :param batch_size: sentences (or padded source tokens, see ``batch_unit``) per batch.
    :param progress: optional callable ``progress(sentences_done_in_this_batch)``.
    :param batch_unit: ``sentences`` or ``tokens`` (see :func:`length_batches`).
    :param sampling: draw samples instead of searching.
    :param keys: a number per source for its random stream (default: its position).
    :return: per source, its hypotheses, best first (samples: in the order drawn).
    """
    model.eval()
    keys = list(range(len(src_ids))) if keys is None else list(keys)
    lengths = np.array([len(ids) + 1 for ids in src_ids], dtype=np.int64)  # + EOS
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    for chunk in length_batches(lengths, batch_size, batch_unit) if len(src_ids) else []:
        src, src_lens = pad_sources([src_ids[i] for i in chunk])  # (B, S), (B,) on the CPU, as the encoder wants
        hyps = search(model, src.to(device), src_lens, settings, return_attention, sampling, [keys[i] for i in chunk])
        for i, sentence_hyps in zip(chunk, hyps):
            results[i] = sentence_hyps
        if progress is not None:
            progress(len(chunk))
    return results


def score_ids(
    model: Decodable, src_ids: list[list[int]], tgt_ids: list[list[int]], batch_size: int, device: torch.device,
    return_attention: bool = False,
) -> list[Scored]:  # fmt: skip
    """:func:`force_decode` many pairs (subword ids, without EOS), in batches of similar source
    length, in input order."""
    model.eval()
    lengths = np.array([len(ids) + 1 for ids in src_ids], dtype=np.int64)  # + EOS
    results: list[Scored | None] = [None] * len(src_ids)
    for chunk in length_batches(lengths, batch_size, "sentences") if len(src_ids) else []:
        src, src_lens = pad_sources([src_ids[i] for i in chunk])
        scored = force_decode(model, src.to(device), src_lens, [tgt_ids[i] for i in chunk], return_attention)
        for i, one in zip(chunk, scored):
            results[i] = one
    return results

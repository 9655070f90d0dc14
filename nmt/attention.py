"""Attention: at each decoder step, a softmax over alignment scores between a query (a decoder
state) and every encoder state gives weights, and the context is the weighted average of the
encoder states (Bahdanau et al. 2014, eq. 5-6; Luong et al. 2015, eq. 7-8).

Scores implemented here, for a query ``q`` (B, Q) and encoder states ``h_j`` (B, S, M):

    bahdanau       e_j = v^T tanh(W q + U h_j)             additive (Bahdanau et al., A.1.2)
    luong_dot      e_j = q^T h_j                           needs Q == M (Luong et al., eq. 8)
    luong_general  e_j = q^T W h_j                         (Luong et al., eq. 8)
    scaled_dot     e_j = (W_q q)^T (W_k h_j) / sqrt(d)     projections only when Q != M (Vaswani et al.)
    none           no scores: the context is a fixed summary of the source (Cho et al. 2014)

The same equation for many queries at once, ``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V``
(Vaswani et al. 2017, eq. 1), is :func:`scaled_dot_product_attention`: the Transformer's heads
(:mod:`nmt.transformer`) call it for self-attention and for cross-attention.

Mask convention, used everywhere in this package: ``src_mask`` is a bool tensor, True at real
tokens. Scores at padding are set to -inf before the softmax, so padding gets exactly zero weight
and the weights over real tokens sum to one.

Everything that depends only on the encoder states (``U h_j``, ``W h_j``, ``W_k h_j``) is computed
once per sentence in :meth:`Attention.prepare`, not once per decoder step.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool, dropout: float, need_weights: bool
) -> tuple[Tensor, Tensor | None]:
    """``softmax(Q K^T / sqrt(d_k)) V`` for a batch of queries: each query's scores over the keys,
    masked, normalised, and used to average the values (Vaswani et al. 2017, eq. 1).

    Without ``need_weights`` the work goes to ``torch.nn.functional.scaled_dot_product_attention``
    (fused kernels, the same numbers up to rounding); with it, the weights are computed here, step
    by step, and returned for plotting and alignment.

    :param query: (..., T, d_k). :param key: (..., S, d_k). :param value: (..., S, d_v).
    :param mask: bool, broadcastable to (..., T, S), True where a query may look; or None.
    :param causal: also hide every key after the query's own position (key j > query i).
    :param dropout: probability of dropping a weight (pass 0.0 outside training).
    :param need_weights: return the weights too.
    :return: the averaged values (..., T, d_v) and the weights (..., T, S) (or None).
    """
    if causal and mask is None and not need_weights:  # the fused kernel's own causal mask (key j <= query i)
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, is_causal=True), None
    if causal:
        past = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()  # (T, S)
        mask = past if mask is None else mask & past
    if not need_weights:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout), None
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., T, d_k) @ (..., d_k, S) -> (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., T, S), zero where masked
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    return dropped @ value, weights  # (..., T, S) @ (..., S, d_v) -> (..., T, d_v)


class Memory(NamedTuple):
    """What a decoder attends to, prepared once per batch.

    :ivar values: (B, S, M) encoder states, averaged into the context.
    :ivar keys: (B, S, K) the states as the score function needs them (e.g. ``U h_j``).
    :ivar mask: (B, S) bool, True at real tokens.
    :ivar summary: (B, M) a fixed summary of the source (used by ``NoAttention``).
    """

    values: Tensor
    keys: Tensor
    mask: Tensor
    summary: Tensor

    def repeat_interleave(self, k: int) -> Memory:
        """Each sentence's memory ``k`` times in a row, (B, ...) -> (B*K, ...), for beam search."""
        return Memory(*(t.repeat_interleave(k, dim=0) for t in self))

    def index_select(self, rows: Tensor) -> Memory:
        """The memory of ``rows`` (R,) long, (B, ...) -> (R, ...): search drops finished sentences."""
        return Memory(*(t.index_select(0, rows) for t in self))


class Attention(nn.Module):
    """Base class: ``prepare`` the encoder states once, then score one query per decoder step.

    :param query_dim: Q, size of the decoder state used as the query.
    :param memory_dim: M, size of an encoder state.
    """

    #: False for :class:`NoAttention`, whose weights are all zero and mean nothing.
    has_alignment = True

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__()
        self.query_dim, self.memory_dim = query_dim, memory_dim

    def project_keys(self, values: Tensor) -> Tensor:
        """(B, S, M) -> (B, S, K): the query-independent part of the score."""
        return values

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        """:param values: (B, S, M) encoder states. :param mask: (B, S) bool, True at real tokens.
        :param summary: (B, M) fixed source summary. :return: a :class:`Memory`."""
        return Memory(values, self.project_keys(values), mask, summary)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """:param query: (B, Q). :param keys: (B, S, K). :return: scores (B, S)."""
        raise NotImplementedError

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Tensor]:
        """Attend once.

        :param query: (B, Q) decoder state.
        :param memory: from :meth:`prepare`.
        :return: context (B, M) and weights (B, S), zero at padding, summing to one.
        """
        scores = self.score(query, memory.keys).masked_fill(~memory.mask, float("-inf"))  # (B, S)
        weights = torch.softmax(scores, dim=-1)  # (B, S)
        context = torch.bmm(weights.unsqueeze(1), memory.values).squeeze(1)  # (B, 1, S) @ (B, S, M) -> (B, M)
        return context, weights


class BahdanauAttention(Attention):
    """Additive attention: ``e_j = v^T tanh(W q + U h_j)``.

    :param attn_dim: size of the hidden layer of the score network.
    """

    def __init__(self, query_dim: int, memory_dim: int, attn_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W
        self.key_proj = nn.Linear(memory_dim, attn_dim, bias=True)  # U (its bias is the score's bias)
        self.energy = nn.Linear(attn_dim, 1, bias=False)  # v

    def project_keys(self, values: Tensor) -> Tensor:
        return self.key_proj(values)  # (B, S, M) -> (B, S, A)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(keys + self.query_proj(query).unsqueeze(1))  # (B, S, A) + (B, 1, A)
        # a matrix-vector product with v as a vector: its backward is an outer product, about twice
        # as fast as the (B*S, 1) x (1, A) matmul that an (A -> 1) nn.Linear would run
        return torch.matmul(hidden, self.energy.weight.squeeze(0))  # (B, S, A) @ (A,) -> (B, S)


class LuongDotAttention(Attention):
    """Dot-product score ``e_j = q^T h_j``; the query and the encoder states must have one size."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        if query_dim != memory_dim:
            raise ValueError(
                f"luong_dot attention needs the decoder hidden size ({query_dim}) to equal the encoder "
                f"output size ({memory_dim}); use model/attention=luong_general or scaled_dot instead"
            )
        super().__init__(query_dim, memory_dim)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, query.unsqueeze(2)).squeeze(2)  # (B, S, Q) @ (B, Q, 1) -> (B, S)


class LuongGeneralAttention(Attention):
    """Bilinear score ``e_j = q^T W h_j``; ``W h_j`` is computed once per sentence."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.key_proj = nn.Linear(memory_dim, query_dim, bias=False)  # W

    def project_keys(self, values: Tensor) -> Tensor:
        return self.key_proj(values)  # (B, S, M) -> (B, S, Q)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, query.unsqueeze(2)).squeeze(2)  # (B, S, Q) @ (B, Q, 1) -> (B, S)


class ScaledDotAttention(Attention):
    """``e_j = (W_q q)^T (W_k h_j) / sqrt(d)``, with learned projections to ``attn_dim`` only when the
    query and key sizes differ (or ``project=True``); otherwise ``d = Q``.

    :param attn_dim: d, the projected size, used when projecting.
    :param project: project even when the sizes agree.
    """

    def __init__(self, query_dim: int, memory_dim: int, attn_dim: int, project: bool) -> None:
        super().__init__(query_dim, memory_dim)
        self.project = project or query_dim != memory_dim
        dim = attn_dim if self.project else query_dim
        self.query_proj = nn.Linear(query_dim, dim, bias=False) if self.project else nn.Identity()
        self.key_proj = nn.Linear(memory_dim, dim, bias=False) if self.project else nn.Identity()
        self.scale = 1.0 / math.sqrt(dim)

    def project_keys(self, values: Tensor) -> Tensor:
        return self.key_proj(values) * self.scale  # (B, S, M) -> (B, S, d), scaled once

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(keys, self.query_proj(query).unsqueeze(2)).squeeze(2)  # (B, S, d) @ (B, d, 1)


class NoAttention(Attention):
    """The RNN encoder-decoder without attention (Cho et al. 2014): every step gets the same
    context, a fixed summary of the source (the encoder's final states). This is the bottleneck.

    Its weights are all zero (there is no alignment); ``has_alignment`` is False.
    """

    has_alignment = False

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Tensor]:
        weights = torch.zeros(memory.mask.shape, dtype=query.dtype, device=query.device)  # (B, S)
        return memory.summary, weights

"""Attention: shapes through the whole model for every attention x decoder, zero weight on padding,
weights summing to one over real tokens, the documented score equations, and the size checks."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ATTENTIONS, DECODERS, TGT_VOCAB_SIZE, build_tiny_model, compose_model_cfg, random_batch

from nmt.attention import (
    Attention,
    BahdanauAttention,
    LuongDotAttention,
    LuongGeneralAttention,
    Memory,
    NoAttention,
    ScaledDotAttention,
)
from nmt.errors import ConfigError
from nmt.model import build_model

LENGTHS = [5, 3, 7, 1]  # B = 4, S = 7; the last sentence is a single token
TGT_LEN = 6

combinations = pytest.mark.parametrize(("attention", "decoder"), [(a, d) for a in ATTENTIONS for d in DECODERS])


def _real(lengths: list[int], width: int) -> torch.Tensor:
    """(B, S) bool, True at real source positions."""
    return torch.arange(width) < torch.tensor(lengths).unsqueeze(1)


def _check_weights(weights: torch.Tensor, real: torch.Tensor, has_alignment: bool) -> None:
    """``weights`` (B, ..., S): exactly zero at padding and summing to one over real tokens."""
    real = real.view(real.size(0), *([1] * (weights.dim() - 2)), real.size(1)).expand_as(weights)
    assert torch.all(weights[~real] == 0), "padding must get exactly zero attention weight"
    if has_alignment:
        assert torch.all(weights >= 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    else:
        assert torch.all(weights == 0), "attention=none has no alignment: its weights are all zero"


@combinations
def test_forward_shapes_and_weights(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
    assert logits.shape == (4, TGT_LEN, TGT_VOCAB_SIZE)
    assert weights.shape == (4, TGT_LEN, max(LENGTHS))
    assert logits.dtype == weights.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert model.decoder.attention.has_alignment == (attention != "none")
    _check_weights(weights, _real(LENGTHS, max(LENGTHS)), model.decoder.attention.has_alignment)


@combinations
def test_decode_step_shapes_and_weights(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN)
    with torch.no_grad():
        memory, state = model.encode(src, src_lens)
        prev = torch.full((4,), 2, dtype=torch.long)  # BOS
        for _ in range(3):
            logits, state, weights = model.decode_step(prev, memory, state)
            assert logits.shape == (4, TGT_VOCAB_SIZE)
            assert weights.shape == (4, max(LENGTHS))
            _check_weights(weights, _real(LENGTHS, max(LENGTHS)), model.decoder.attention.has_alignment)
            prev = logits.argmax(-1)
    assert isinstance(state, tuple)
    expected = [(4, 32), (4, 24)] if decoder == "luong_feed" else [(4, 32)]  # s_t (and h~_t)
    assert [tuple(s.shape) for s in state] == expected


@combinations
def test_memory_shapes(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN)
    memory, _ = model.encode(src, src_lens)
    assert memory.values.shape == (4, 7, 32)
    assert memory.keys.shape[:2] == (4, 7)
    assert memory.mask.dtype == torch.bool
    assert torch.equal(memory.mask, _real(LENGTHS, 7))
    assert memory.summary.shape == (4, 32)


# --------------------------------------------------------------------------- modules on their own

Q, M = 6, 10  # query and memory sizes


def _attention(name: str, query_dim: int = Q, memory_dim: int = M) -> Attention:
    torch.manual_seed(0)
    if name == "bahdanau":
        return BahdanauAttention(query_dim, memory_dim, attn_dim=5)
    if name == "luong_dot":
        return LuongDotAttention(query_dim, query_dim)
    if name == "luong_general":
        return LuongGeneralAttention(query_dim, memory_dim)
    if name == "scaled_dot":
        return ScaledDotAttention(query_dim, memory_dim, attn_dim=4, project=False)
    return NoAttention(query_dim, memory_dim)


def _inputs(memory_dim: int, lengths=(4, 2, 1)) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(len(lengths), max(lengths), memory_dim, generator=gen)
    mask = _real(list(lengths), max(lengths))
    values = values * mask.unsqueeze(-1)  # encoder states are zero at padding
    summary = torch.randn(len(lengths), memory_dim, generator=gen)
    return values, mask, summary


@pytest.mark.parametrize("name", ATTENTIONS)
def test_context_is_weighted_average(name: str) -> None:
    attention = _attention(name)
    memory_dim = attention.memory_dim
    values, mask, summary = _inputs(memory_dim)
    query = torch.randn(3, Q)
    context, weights = attention(query, attention.prepare(values, mask, summary))
    assert context.shape == (3, memory_dim) and weights.shape == (3, 4)
    _check_weights(weights, mask, attention.has_alignment)
    if attention.has_alignment:
        torch.testing.assert_close(context, torch.einsum("bs,bsm->bm", weights, values))
    else:
        torch.testing.assert_close(context, summary)  # the fixed vector, whatever the query


@pytest.mark.parametrize("name", ["bahdanau", "luong_dot", "luong_general", "scaled_dot"])
def test_score_matches_documented_equation(name: str) -> None:
    attention = _attention(name)
    values, mask, summary = _inputs(attention.memory_dim, lengths=(4, 4, 4))
    query = torch.randn(3, Q)
    if name == "bahdanau":  # e_j = v^T tanh(W q + U h_j)
        hidden = torch.tanh(attention.query_proj(query).unsqueeze(1) + attention.key_proj(values))
        scores = hidden @ attention.energy.weight.squeeze(0)
    elif name == "luong_dot":  # e_j = q^T h_j
        scores = torch.einsum("bq,bsq->bs", query, values)
    elif name == "luong_general":  # e_j = q^T W h_j
        scores = torch.einsum("bq,qm,bsm->bs", query, attention.key_proj.weight, values)
    else:  # e_j = q^T h_j / sqrt(d) without projections
        values = values[..., :Q]
        attention = ScaledDotAttention(Q, Q, attn_dim=4, project=False)
        scores = torch.einsum("bq,bsq->bs", query, values) / math.sqrt(Q)
    _, weights = attention(query, attention.prepare(values, mask, summary))
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))


def test_luong_dot_needs_equal_sizes() -> None:
    with pytest.raises(ValueError, match=r"luong_dot.*\(6\).*\(10\)"):
        LuongDotAttention(6, 10)


def test_luong_dot_size_mismatch_in_config_is_clear() -> None:
    cfg = compose_model_cfg("luong_dot", "bahdanau", extra=("model.decoder.hidden_dim=48",))
    # build_model names the key and keeps the constructor's message
    with pytest.raises(ConfigError, match=r"model.attention \(nmt.attention.LuongDotAttention\): luong_dot.*\(48\).*\(32\)"):
        build_model(cfg, 23, 29)


def test_scaled_dot_projects_only_when_sizes_differ() -> None:
    same = ScaledDotAttention(8, 8, attn_dim=4, project=False)
    assert not same.project
    assert sum(p.numel() for p in same.parameters()) == 0
    assert same.scale == pytest.approx(1 / math.sqrt(8))

    different = ScaledDotAttention(8, 12, attn_dim=4, project=False)
    assert different.project
    assert different.query_proj.weight.shape == (4, 8)
    assert different.key_proj.weight.shape == (4, 12)
    assert different.scale == pytest.approx(1 / math.sqrt(4))

    forced = ScaledDotAttention(8, 8, attn_dim=4, project=True)
    assert forced.project and sum(p.numel() for p in forced.parameters()) == 2 * 4 * 8

    values, mask, summary = _inputs(12)
    _, weights = different(torch.randn(3, 8), different.prepare(values, mask, summary))
    _check_weights(weights, mask, True)


def test_memory_repeat_interleave_keeps_sentences_together() -> None:
    values, mask, summary = _inputs(M)
    memory = Memory(values, values * 2, mask, summary)
    repeated = memory.repeat_interleave(3)  # rows: s0 s0 s0 s1 s1 s1 s2 s2 s2
    for field, original in zip(repeated, memory):
        assert field.shape == (9, *original.shape[1:])
        for row in range(9):
            assert torch.equal(field[row], original[row // 3])

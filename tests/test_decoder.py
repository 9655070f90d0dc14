"""Decoders: the teacher-forced unroll (with its step-independent work hoisted out of the loop)
computes exactly what the one-step function computes, for every decoder and attention; the hand
written GRU equals ``torch.nn.GRUCell``; the initial state and tied embeddings behave as configured."""

from __future__ import annotations

import pytest
import torch
from conftest import ATTENTIONS, DECODERS, TGT_VOCAB_SIZE, build_tiny_model, random_batch

from nmt.attention import BahdanauAttention
from nmt.decoder import BahdanauDecoder, LuongDecoder, gru_update
from nmt.vocab import PAD_ID

LENGTHS = [3, 6, 1, 4]
TGT_LEN = 7


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_teacher_forced_forward_equals_step_by_step(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=3)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
        memory, state = model.encode(src, src_lens)
        step_logits, step_weights = [], []
        for t in range(TGT_LEN):
            out, state, w = model.decode_step(tgt_in[:, t], memory, state)
            step_logits.append(out)
            step_weights.append(w)
    torch.testing.assert_close(logits, torch.stack(step_logits, dim=1))
    torch.testing.assert_close(weights, torch.stack(step_weights, dim=1))


@pytest.mark.parametrize("decoder", list(DECODERS))
def test_later_target_tokens_do_not_change_earlier_outputs(decoder: str) -> None:
    model = build_tiny_model("bahdanau", decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=4)
    changed = tgt_in.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % TGT_VOCAB_SIZE
    with torch.no_grad():
        logits, _ = model(src, src_lens, tgt_in)
        logits_changed, _ = model(src, src_lens, changed)
    torch.testing.assert_close(logits[:, :4], logits_changed[:, :4])
    assert not torch.allclose(logits[:, 4:], logits_changed[:, 4:])


def test_gru_update_equals_grucell() -> None:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(5, 7)
    x, h = torch.randn(3, 5), torch.randn(3, 7)
    input_gates = x @ cell.weight_ih.T + cell.bias_ih  # (B, 3H)
    hidden_gates = h @ cell.weight_hh.T + cell.bias_hh  # (B, 3H)
    with torch.no_grad():
        torch.testing.assert_close(gru_update(input_gates, hidden_gates, h), cell(x, h))


def test_gru_update_matches_copied_grucell_over_a_sequence() -> None:
    """Copy a GRUCell's weights into Linear layers, as the decoders do, and unroll both."""
    torch.manual_seed(1)
    cell = torch.nn.GRUCell(4, 6)
    to_input, to_hidden = torch.nn.Linear(4, 18), torch.nn.Linear(6, 18)
    with torch.no_grad():
        to_input.weight.copy_(cell.weight_ih)
        to_input.bias.copy_(cell.bias_ih)
        to_hidden.weight.copy_(cell.weight_hh)
        to_hidden.bias.copy_(cell.bias_hh)
        xs = torch.randn(5, 2, 4)
        h_cell = h_ours = torch.zeros(2, 6)
        for x in xs:
            h_cell = cell(x, h_cell)
            h_ours = gru_update(to_input(x), to_hidden(h_ours), h_ours)
    torch.testing.assert_close(h_ours, h_cell)


# --------------------------------------------------------------------------- construction


def _decoder(cls, **overrides):
    torch.manual_seed(0)
    args = dict(vocab_size=TGT_VOCAB_SIZE, pad_id=PAD_ID, attention=BahdanauAttention(12, 10, 8), memory_dim=10,
                emb_dim=6, hidden_dim=12, output_dim=6, dropout=0.0, init_state="bridge", tie_embeddings=False)  # fmt: skip
    if cls is LuongDecoder:
        args["input_feeding"] = True
    args.update(overrides)
    return cls(**args)


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_zero_init_state_starts_from_zero(cls) -> None:
    from nmt.encoder import EncoderOutput

    enc = EncoderOutput(torch.randn(2, 3, 10), torch.ones(2, 3, dtype=torch.bool), torch.randn(2, 10))
    zero = _decoder(cls, init_state="zero")
    assert zero.bridge is None
    assert torch.all(zero.init_state(enc)[0] == 0)
    bridged = _decoder(cls, init_state="bridge")
    torch.testing.assert_close(bridged.init_state(enc)[0], torch.tanh(bridged.bridge(enc.final)))


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_bad_init_state_is_refused(cls) -> None:
    with pytest.raises(ValueError, match="init_state='learned'.*bridge or zero"):
        _decoder(cls, init_state="learned")


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_tied_embeddings_share_one_tensor(cls) -> None:
    tied = _decoder(cls, tie_embeddings=True)
    assert tied.output.weight is tied.embedding.weight
    with pytest.raises(ValueError, match=r"tie_embeddings.*\(7\).*\(6\)"):
        _decoder(cls, tie_embeddings=True, output_dim=7)


def test_luong_without_input_feeding_has_no_feed_weights() -> None:
    assert _decoder(LuongDecoder, input_feeding=False).feed_to_gates is None
    assert _decoder(LuongDecoder, input_feeding=True).feed_to_gates is not None

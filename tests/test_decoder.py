"""Decoders: the teacher-forced unroll (with its step-independent work hoisted out of the loop)
computes exactly what the one-step function computes, for every decoder and attention, with and
without layer normalisation and stacked layers; the hand written GRU equals ``torch.nn.GRUCell``;
layer normalisation normalises each gate; the initial state, the dropouts and tied embeddings
behave as configured."""

from __future__ import annotations

import pytest
import torch
from conftest import ATTENTIONS, DECODERS, TGT_VOCAB_SIZE, build_tiny_model, random_batch

from nmt.attention import BahdanauAttention
from nmt.decoder import BahdanauDecoder, GateNorm, LuongDecoder, gru_update
from nmt.vocab import PAD_ID

LENGTHS = [3, 6, 1, 4]
TGT_LEN = 7


STACKS = {  # layer norm and stacked layers change the recurrence: each must keep step == unroll
    "plain": (),
    "layer_norm": ("model.decoder.layer_norm=true",),
    "2_layers": ("model.decoder.num_layers=2",),
    "3_layers_layer_norm": ("model.decoder.num_layers=3", "model.decoder.layer_norm=true"),
}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("decoder", list(DECODERS))
def test_teacher_forced_forward_equals_step_by_step(attention: str, decoder: str, stack: str) -> None:
    model = build_tiny_model(attention, decoder, extra=STACKS[stack], seed=5)
    if STACKS[stack]:  # trained gains and biases: not the identity they start as
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.add_(0.3 * torch.randn_like(p))
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
                emb_dim=6, hidden_dim=12, output_dim=6, num_layers=1, layer_norm=False, emb_dropout=0.0,
                hidden_dropout=0.0, state_dropout=0.0, output_dropout=0.0, init_state="bridge",
                tie_embeddings=False)  # fmt: skip
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


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_stacked_layers_each_get_a_state_from_the_bridge(cls) -> None:
    from nmt.encoder import EncoderOutput

    enc = EncoderOutput(torch.randn(2, 3, 10), torch.ones(2, 3, dtype=torch.bool), torch.randn(2, 10))
    decoder = _decoder(cls, num_layers=3)
    state = decoder.init_state(enc)
    bridged = torch.tanh(decoder.bridge(enc.final))  # (B, 3H)
    for layer in range(3):  # layer l starts from its own slice of the bridge
        torch.testing.assert_close(state[layer], bridged[:, layer * 12 : (layer + 1) * 12])
    assert len(decoder.layer_to_gates) == 2 and len(decoder.hidden_to_gates) == 3
    with pytest.raises(ValueError, match="num_layers=0"):
        _decoder(cls, num_layers=0)


def test_gate_norm_normalises_each_gate_separately() -> None:
    norm = GateNorm(5)
    gates = torch.cat([torch.randn(4, 5) * 10 + 3, torch.randn(4, 5) * 0.5 - 7, torch.randn(4, 5)], dim=1)  # (B, 3H)
    out = norm(gates).view(4, 3, 5)
    torch.testing.assert_close(out.mean(-1), torch.zeros(4, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(4, 3), atol=1e-3, rtol=0)
    with torch.no_grad():  # the gain and bias are per unit of each gate
        norm.gain[1].fill_(2.0)
        norm.bias[2].fill_(0.5)
    out = norm(gates).view(4, 3, 5)
    torch.testing.assert_close(out[:, 1].var(-1, unbiased=False), torch.full((4,), 4.0), atol=1e-2, rtol=0)
    torch.testing.assert_close(out[:, 2].mean(-1), torch.full((4,), 0.5), atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_layer_norm_makes_the_recurrence_scale_free(cls) -> None:
    """Scaling every recurrent weight by 10 changes a plain GRU's step, not a layer-normalised one's."""
    from nmt.encoder import EncoderOutput

    enc = EncoderOutput(torch.randn(2, 3, 10), torch.ones(2, 3, dtype=torch.bool), torch.randn(2, 10))
    prev = torch.tensor([5, 6])
    for layer_norm, should_change in ((True, False), (False, True)):
        decoder = _decoder(cls, layer_norm=layer_norm).eval()
        memory = decoder.attention.prepare(enc.states, enc.mask, enc.final)
        with torch.no_grad():
            decoder.hidden_to_gates[0].bias.zero_()
            before = decoder.step(prev, memory, decoder.init_state(enc))[1][0]
            decoder.hidden_to_gates[0].weight.mul_(10.0)
            after = decoder.step(prev, memory, decoder.init_state(enc))[1][0]
        assert (not torch.allclose(before, after, atol=1e-4)) == should_change


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
@pytest.mark.parametrize("which", ["emb_dropout", "state_dropout", "output_dropout", "hidden_dropout"])
def test_each_dropout_rate_reaches_its_own_layer(cls, which: str) -> None:
    decoder = _decoder(cls, num_layers=2, **{which: 0.4})
    rates = {name: getattr(decoder, name).p for name in ("emb_dropout", "state_dropout", "hidden_dropout")}
    rates["output_dropout"] = decoder.dropout.p
    assert rates == {name: (0.4 if name == which else 0.0) for name in rates}


@pytest.mark.parametrize("cls", [BahdanauDecoder, LuongDecoder])
def test_state_dropout_changes_training_outputs_only(cls) -> None:
    from nmt.encoder import EncoderOutput

    enc = EncoderOutput(torch.randn(2, 3, 10), torch.ones(2, 3, dtype=torch.bool), torch.randn(2, 10))
    decoder = _decoder(cls, state_dropout=0.5)
    memory = decoder.attention.prepare(enc.states, enc.mask, enc.final)
    tgt_in = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 4]])
    with torch.no_grad():
        decoder.train()
        torch.manual_seed(1)
        train_a, _ = decoder(tgt_in, memory, decoder.init_state(enc))
        torch.manual_seed(2)
        train_b, _ = decoder(tgt_in, memory, decoder.init_state(enc))
        decoder.eval()
        eval_a, _ = decoder(tgt_in, memory, decoder.init_state(enc))
        eval_b, _ = decoder(tgt_in, memory, decoder.init_state(enc))
    assert not torch.allclose(train_a, train_b)
    torch.testing.assert_close(eval_a, eval_b)

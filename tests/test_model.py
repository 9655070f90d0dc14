"""Seq2Seq: outputs independent of extra padding and of the other sentences of a batch, for every
attention x decoder; the fused training loss equals scoring the logits; word dropout and three-way
tying as configured. Checkpoints: tests/test_checkpoint.py."""

from __future__ import annotations

import pytest
import torch
from conftest import ATTENTIONS, DECODERS, build_tiny_model, random_batch

from nmt.loss import sequence_loss
from nmt.model import build_model, word_dropout
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

LENGTHS = [4, 6, 2]
TGT_LEN = 5

combinations = pytest.mark.parametrize(("attention", "decoder"), [(a, d) for a in ATTENTIONS for d in DECODERS])


@combinations
def test_extra_source_padding_changes_nothing(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=5)
    padded, padded_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=5, extra_pad=4)
    assert torch.equal(padded[:, : src.size(1)], src) and torch.equal(padded_lens, src_lens)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
        logits_padded, weights_padded = model(padded, padded_lens, tgt_in)
    torch.testing.assert_close(logits_padded, logits)
    torch.testing.assert_close(weights_padded[..., : src.size(1)], weights)
    assert torch.all(weights_padded[..., src.size(1) :] == 0)


@combinations
def test_sentence_outputs_do_not_depend_on_the_batch(attention: str, decoder: str) -> None:
    model = build_tiny_model(attention, decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=6)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
        for row, length in enumerate(LENGTHS):
            alone, alone_weights = model(src[row : row + 1, :length], src_lens[row : row + 1], tgt_in[row : row + 1])
            torch.testing.assert_close(alone[0], logits[row])
            torch.testing.assert_close(alone_weights[0], weights[row, :, :length])


@pytest.mark.parametrize("decoder", list(DECODERS))
def test_eval_mode_is_deterministic_and_train_mode_uses_dropout(decoder: str) -> None:
    model = build_tiny_model("bahdanau", decoder)  # dropout 0.1
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN)
    with torch.no_grad():
        first, second = model(src, src_lens, tgt_in)[0], model(src, src_lens, tgt_in)[0]
        assert torch.equal(first, second)
        model.train()
        assert not torch.equal(model(src, src_lens, tgt_in)[0], first)


def test_num_parameters_counts_every_weight() -> None:
    model = build_tiny_model("bahdanau", "bahdanau")
    assert model.num_parameters() == sum(p.numel() for p in model.parameters()) > 0


@combinations
def test_training_loss_equals_scoring_the_logits(attention: str, decoder: str) -> None:
    """``Seq2Seq.loss`` (fused output layer, real tokens only) = loss of ``forward``'s logits."""
    model = build_tiny_model(attention, decoder)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=7)
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[0, 3:] = PAD_ID
    loss, nll = model.loss(src, src_lens, tgt_in, tgt_out, 0.1)
    logits, _ = model(src, src_lens, tgt_in)
    expected, expected_nll, _ = sequence_loss(logits, tgt_out, PAD_ID, 0.1)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    expected_grads = torch.autograd.grad(expected, list(model.parameters()), allow_unused=True)
    for got, want in zip(grads, expected_grads, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- word dropout and tying


def test_word_dropout_replaces_about_the_rate_of_real_tokens_and_never_specials() -> None:
    torch.manual_seed(0)
    ids = torch.randint(EOS_ID + 1, 500, (400, 50))
    ids[:, 0] = BOS_ID
    ids[:, 40] = EOS_ID
    ids[:, 41:] = PAD_ID
    real = ids > EOS_ID
    dropped = word_dropout(ids, 0.2)
    changed = dropped != ids
    assert torch.all(dropped[changed] == UNK_ID), "a dropped word becomes <unk>"
    assert not changed[~real].any(), "PAD, BOS and EOS are never replaced"
    fraction = changed[real].float().mean().item()
    assert abs(fraction - 0.2) < 0.01, fraction  # 15,600 real tokens: 4 standard deviations is 0.013
    assert word_dropout(ids, 0.0) is ids


def test_word_dropout_acts_in_training_only() -> None:
    model = build_tiny_model("bahdanau", "luong_feed", extra=("model.src_word_dropout=0.5", "model.tgt_word_dropout=0.5",
                                                             "model.dropout=0.0"))  # fmt: skip
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=8)
    with torch.no_grad():
        eval_a, _ = model(src, src_lens, tgt_in)
        eval_b, _ = model(src, src_lens, tgt_in)
        model.train()
        torch.manual_seed(3)
        train_a, _ = model(src, src_lens, tgt_in)
    torch.testing.assert_close(eval_a, eval_b)
    assert not torch.allclose(train_a, eval_a), "with dropout 0 elsewhere, only word dropout can change the output"


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_word_dropout_of_one_side_reads_that_side_as_unknown(side: str) -> None:
    """With rate 0.999 every real word of the side is <unk>: the model sees exactly that input."""
    model = build_tiny_model("bahdanau", "bahdanau", extra=(f"model.{side}_word_dropout=0.999", "model.dropout=0.0"))
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=9)
    unk_src = src.masked_fill(src > EOS_ID, UNK_ID) if side == "src" else src
    unk_tgt = tgt_in.masked_fill(tgt_in > EOS_ID, UNK_ID) if side == "tgt" else tgt_in
    with torch.no_grad():
        expected, _ = model(unk_src, src_lens, unk_tgt)  # eval mode: no dropout
        model.train()
        torch.manual_seed(0)
        actual, _ = model(src, src_lens, tgt_in)
    torch.testing.assert_close(actual, expected)


SMALL_LUONG = ["model.emb_dim=16", "model.encoder.hidden_dim=8", "model.decoder.hidden_dim=16", "model/decoder=luong",
               "model.decoder.output_dim=16"]  # fmt: skip


def test_three_way_tying_shares_one_tensor(compose_cfg) -> None:
    cfg = compose_cfg(*SMALL_LUONG, "model.tie_embeddings=true", "model.share_embeddings=true")
    model = build_model(cfg.model, 30, 30)
    weight = model.decoder.embedding.weight
    assert model.encoder.embedding.weight is weight and model.decoder.output.weight is weight
    untied = build_model(compose_cfg(*SMALL_LUONG).model, 30, 30)
    assert model.num_parameters() == untied.num_parameters() - 2 * weight.numel()
    with pytest.raises(ValueError, match="share_embeddings needs one joint vocabulary"):
        build_model(cfg.model, 30, 31)
    loss, _ = model.loss(*random_batch([3, 2], 4, seed=1), torch.tensor([[5, 6, 3, 0], [7, 3, 0, 0]]), 0.1)
    loss.backward()
    assert weight.grad is not None and weight.grad[5].abs().sum() > 0, "one tensor gets every side's gradient"


"""The Transformer (nmt.transformer) and its hybrids with the RNNs: the causal mask, padding with
zero weight in self- and cross-attention, incremental decoding equal to the teacher-forced pass,
beam of one equal to greedy, the alignment layer's choice, int8, ensembles, and that every
encoder trains with every decoder. End-to-end runs: tests/test_transformer_runs.py."""

from __future__ import annotations

import functools

import pytest
import torch
from conftest import CONFIG_DIR, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE, random_batch
from hydra import compose, initialize_config_dir

from nmt.attention import scaled_dot_product_attention
from nmt.ensemble import Ensemble
from nmt.errors import ConfigError
from nmt.model import Seq2Seq, build_model
from nmt.positions import sinusoids
from nmt.quantization import quantize
from nmt.search import beam_search, force_decode, greedy_search
from nmt.tokens import PAD_ID
from nmt.transformer import MultiHeadAttention, TransformerDecoder

LENGTHS = [5, 7, 2]
TGT_LEN = 6
LAYERS = ["model.encoder.num_layers=2", "model.encoder.num_heads=2", "model.encoder.ff_dim=24",
          "model.attention.num_heads=2", "model.decoder.num_layers=3", "model.decoder.num_heads=2",
          "model.decoder.ff_dim=24"]  # fmt: skip
# (encoder, decoder): the Transformer, the two hybrids of Chen et al. (2018), and a bi-GRU encoder
# feeding the Transformer decoder
PAIRS = {
    "transformer": ["model=transformer", *LAYERS],
    "transformer_encoder+luong": ["model=transformer", "model/decoder=luong", "model/attention=bahdanau",
                                  "model.decoder.hidden_dim=16", "model.decoder.output_dim=16",
                                  *LAYERS[:3]],  # fmt: skip
    "transformer_encoder+bahdanau": ["model=transformer", "model/decoder=bahdanau", "model/attention=luong_general",
                                     "model.decoder.hidden_dim=16", *LAYERS[:3]],  # fmt: skip
    "bigru+transformer_decoder": ["model=transformer", "model/encoder=bigru", "model.encoder.hidden_dim=8", *LAYERS[3:]],
}
NORMS = {"pre-norm": "true", "post-norm": "false"}


@functools.cache
def model_cfg(pair: str, extra: tuple[str, ...] = ()):
    overrides = [*PAIRS[pair], "model.emb_dim=16", "model.dropout=0.1", "model.tie_embeddings=false", *extra]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides).model


def tiny(pair: str = "transformer", *extra: str, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return build_model(model_cfg(pair, tuple(extra)), SRC_VOCAB_SIZE, TGT_VOCAB_SIZE).eval()


def norm_extra(norm: str, pair: str = "transformer") -> tuple[str, ...]:
    sides = ["encoder", "decoder"] if pair == "transformer" else ["decoder" if pair.startswith("bigru") else "encoder"]
    return tuple(f"model.{side}.norm_first={NORMS[norm]}" for side in sides)


# --------------------------------------------------------------------------- attention


def test_the_fused_kernel_and_the_explicit_weights_give_one_result() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen) for _ in range(3))
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :]  # (B, 1, 1, S)
    for m, causal in ((mask, False), (None, True), (mask, True)):
        fused, none = scaled_dot_product_attention(q, k, v, m, causal, 0.0, need_weights=False)
        explicit, weights = scaled_dot_product_attention(q, k, v, m, causal, 0.0, need_weights=True)
        assert none is None
        torch.testing.assert_close(fused, explicit)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert torch.all(weights[1, :, :, 2:] == 0)  # padding
    assert torch.all(weights.triu(diagonal=1) == 0)  # the future


def test_heads_split_and_join_without_mixing_positions() -> None:
    attention = MultiHeadAttention(8, 8, num_heads=4, dropout=0.0)
    x = torch.randn(2, 3, 8)
    heads = attention.split_heads(x)
    assert heads.shape == (2, 4, 3, 2)
    torch.testing.assert_close(heads.transpose(1, 2).flatten(2), x)


def test_a_model_size_that_the_heads_do_not_divide_is_refused() -> None:
    with pytest.raises(ConfigError, match="multiple of the number of heads"):
        tiny("transformer", "model.decoder.num_heads=3")


def test_sinusoids_follow_the_paper() -> None:
    table = sinusoids(torch.arange(4), 6)
    assert table.shape == (4, 6)
    torch.testing.assert_close(table[2, 2], torch.sin(torch.tensor(2 / 10000 ** (2 / 6))))
    torch.testing.assert_close(table[3, 5], torch.cos(torch.tensor(3 / 10000 ** (4 / 6))))
    torch.testing.assert_close(table[0], torch.tensor([0.0, 1.0] * 3))


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm", list(NORMS))
def test_a_position_does_not_see_later_target_tokens(norm: str, positions: str) -> None:
    model = tiny("transformer", *norm_extra(norm), f"model.decoder.positions={positions}")
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=1)
    changed = tgt_in.clone()
    changed[:, 3:] = (changed[:, 3:] + 5) % (TGT_VOCAB_SIZE - 4) + 4  # new tokens from position 3 on
    with torch.no_grad():
        logits, _ = model(src, src_lens, tgt_in)
        logits_changed, _ = model(src, src_lens, changed)
    torch.testing.assert_close(logits_changed[:, :3], logits[:, :3])
    assert not torch.allclose(logits_changed[:, 3:], logits[:, 3:])


@pytest.mark.parametrize("pair", list(PAIRS))
def test_extra_source_padding_changes_nothing_and_gets_no_weight(pair: str) -> None:
    model = tiny(pair)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=2)
    padded, padded_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=2, extra_pad=4)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
        logits_padded, weights_padded = model(padded, padded_lens, tgt_in)
        maps = model.attention_maps(padded, padded_lens, tgt_in)  # (B, L, h, T, S)
    torch.testing.assert_close(logits_padded, logits)
    torch.testing.assert_close(weights_padded[..., : src.size(1)], weights)
    for row, length in enumerate(LENGTHS):
        assert torch.all(maps[row, ..., length:] == 0)  # every layer and head
    torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))


def test_encoder_self_attention_gives_padding_no_weight() -> None:
    model = tiny("transformer")
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=3, extra_pad=2)
    layer = model.encoder.layers[0]
    x = model.encoder.embedder(src)
    keys, values = layer.self_attention.keys_values(x)
    mask = (src != PAD_ID)[:, None, None, :]
    _, weights = layer.self_attention(x, keys, values, mask, causal=False, need_weights=True)
    for row, length in enumerate(LENGTHS):
        assert torch.all(weights[row, ..., length:] == 0)


def test_extra_target_padding_changes_nothing() -> None:
    model = tiny("transformer")
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=4)
    longer = torch.cat([tgt_in, torch.full((len(LENGTHS), 3), PAD_ID)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_lens, longer)[0][:, :TGT_LEN], model(src, src_lens, tgt_in)[0])


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("norm", list(NORMS))
def test_step_by_step_decoding_equals_the_teacher_forced_pass(pair: str, norm: str) -> None:
    model = tiny(pair, *norm_extra(norm, pair))
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=5)
    with torch.no_grad():
        logits, weights = model(src, src_lens, tgt_in)
        memory, state = model.encode(src, src_lens)
        steps, step_weights = [], []
        for t in range(TGT_LEN):
            step_logits, state, w = model.decode_step(tgt_in[:, t], memory, state)
            steps.append(step_logits)
            step_weights.append(w)
    torch.testing.assert_close(torch.stack(steps, dim=1), logits)
    torch.testing.assert_close(torch.stack(step_weights, dim=1), weights)
    if isinstance(model.decoder, TransformerDecoder):  # one cached key and value per position and layer
        assert len(state) == 2 * model.decoder.num_layers and all(s.size(2) == TGT_LEN for s in state)


@pytest.mark.parametrize("pair", list(PAIRS))
def test_beam_of_one_is_greedy(pair: str) -> None:
    model = tiny(pair, seed=1)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=6)
    greedy = greedy_search(model, src, src_lens, 1.5, 10, return_attention=True)
    beam = beam_search(model, src, src_lens, 1, 1, "none", 0.0, 1.5, 10, return_attention=True)
    for (g,), (b,) in zip(greedy, beam):
        assert g.tokens == b.tokens
        assert g.score == pytest.approx(b.score, abs=1e-5)
        torch.testing.assert_close(g.attention, b.attention)


def test_a_wider_beam_never_scores_below_greedy() -> None:
    model = tiny("transformer", seed=2)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=7)
    greedy = greedy_search(model, src, src_lens, 1.5, 10, return_attention=False)
    beam = beam_search(model, src, src_lens, 4, 1, "none", 0.0, 1.5, 10, return_attention=False)
    assert all(b[0].score >= g[0].score - 1e-5 for g, b in zip(greedy, beam))


def test_the_alignment_layer_and_heads_are_chosen_and_checked() -> None:
    model = tiny("transformer")
    decoder = model.decoder
    assert decoder.align_layer == 1 and decoder.align_heads is None  # 3 layers: the penultimate
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=8)
    with torch.no_grad():
        maps = model.attention_maps(src, src_lens, tgt_in)  # (B, L, h, T, S)
        decoder.set_alignment(-1, [1])
        _, weights = model(src, src_lens, tgt_in)
    torch.testing.assert_close(weights, maps[:, 2, 1])
    for layer, heads in ((3, None), (-4, None), (0, [2]), (0, [])):
        with pytest.raises(ValueError, match="align"):
            decoder.set_alignment(layer, heads)


def test_full_context_attention_sees_the_later_words_and_not_the_padding() -> None:
    model = tiny("transformer")
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=9)
    later = tgt_in.clone()
    later[:, 4:] = (later[:, 4:] + 1 - 4) % (TGT_VOCAB_SIZE - 4) + 4  # other words after position 3
    with torch.no_grad():
        causal = [model(src, src_lens, t)[1] for t in (tgt_in, later)]  # 2 x (B, T, S)
        model.set_alignment(None, None, full_context=True)
        full = [model(src, src_lens, t)[1] for t in (tgt_in, later)]
        padded = torch.cat([tgt_in, torch.full((len(LENGTHS), 3), PAD_ID)], dim=1)  # (B, T + 3)
        full_padded = model(src, src_lens, padded)[1]
        logits_causal = model(src, src_lens, tgt_in)[0]
    torch.testing.assert_close(causal[0][:, :4], causal[1][:, :4])  # causal: rows 0-3 never see 4-5
    assert not torch.allclose(full[0][:, :4], full[1][:, :4], atol=1e-4)  # full context: they do
    torch.testing.assert_close(full_padded[:, :TGT_LEN], full[0])  # target padding gets zero weight
    torch.testing.assert_close(full[0].sum(-1), torch.ones(len(LENGTHS), TGT_LEN))
    model.set_alignment(None, None)
    with torch.no_grad():
        torch.testing.assert_close(logits_causal, model(src, src_lens, tgt_in)[0])  # the translation stays causal
        maps = model.attention_maps(src, src_lens, tgt_in)  # (B, L, h, T, S), causal again
    torch.testing.assert_close(maps[:, 1].mean(1), causal[0])


def test_force_decoding_with_full_context_reads_each_pair_as_if_alone() -> None:
    model = tiny("transformer")
    model.set_alignment(None, None, full_context=True)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=10)
    targets = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]  # other lengths: EOS and PAD follow the short ones
    together = force_decode(model, src, src_lens, targets, return_attention=True)
    for row, target in enumerate(targets):
        alone = force_decode(model, src[row : row + 1, : LENGTHS[row]], src_lens[row : row + 1], [target], True)[0]
        assert together[row].attention.shape == (len(target) + 1, LENGTHS[row])
        torch.testing.assert_close(together[row].attention, alone.attention)
        torch.testing.assert_close(together[row].log_probs, alone.log_probs)
    tgt_in = torch.tensor([[2, *targets[0]]])  # BOS + target: the teacher-forced full-context pass
    expected = model.teacher_forced_attention(src[:1, : LENGTHS[0]], src_lens[:1], tgt_in)[0]
    torch.testing.assert_close(together[0].attention, expected)


def test_full_context_is_refused_for_an_rnn_decoder() -> None:
    model = tiny("transformer_encoder+luong")
    with pytest.raises(ValueError, match="align.full_context"):
        model.set_alignment(None, None, full_context=True)
    with pytest.raises(ValueError, match="align.full_context"):
        Ensemble([model, tiny("transformer_encoder+luong", seed=1)]).set_alignment(None, None, full_context=True)


# --------------------------------------------------------------------------- int8, ensembles


@pytest.mark.parametrize("pair", ["transformer", "bigru+transformer_decoder"])
def test_int8_agrees_with_fp32(pair: str) -> None:
    model = tiny(pair, seed=3)
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=9)
    quantized = quantize(model, "int8")
    assert any("quantized" in type(m).__module__ for m in quantized.modules())
    with torch.no_grad():
        probs = torch.softmax(model(src, src_lens, tgt_in)[0], -1)
        probs_int8 = torch.softmax(quantized(src, src_lens, tgt_in)[0], -1)
    assert (probs - probs_int8).abs().max() < 0.02


def test_an_ensemble_of_one_is_the_model() -> None:
    model = tiny("transformer", seed=4)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=10)
    alone = beam_search(model, src, src_lens, 3, 2, "gnmt", 1.0, 1.5, 10, return_attention=True)
    ensembled = beam_search(Ensemble([model]), src, src_lens, 3, 2, "gnmt", 1.0, 1.5, 10, return_attention=True)
    for a, e in zip(alone, ensembled):
        assert [h.tokens for h in a] == [h.tokens for h in e]
        assert [h.score for h in a] == pytest.approx([h.score for h in e], abs=1e-5)


def test_an_rnn_and_a_transformer_decode_as_one_ensemble() -> None:
    rnn, transformer = tiny("transformer_encoder+luong", seed=5), tiny("transformer", seed=6)
    src, src_lens, _ = random_batch(LENGTHS, TGT_LEN, seed=11)
    ensemble = Ensemble([rnn, transformer])
    memory, state = ensemble.encode(src, src_lens)
    prev = torch.full((len(LENGTHS),), 2)
    log_probs, _, weights = ensemble.decode_step(prev, memory, state)
    expected = torch.log_softmax(
        sum(torch.log_softmax(m.decode_step(prev, *m.encode(src, src_lens))[0], -1) for m in (rnn, transformer)) / 2, -1
    )
    torch.testing.assert_close(log_probs, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(LENGTHS)))
    hyps = beam_search(ensemble, src, src_lens, 3, 1, "gnmt", 1.0, 1.5, 10, return_attention=True)
    assert len(hyps) == len(LENGTHS) and all(h[0].attention.shape[1] == n for h, n in zip(hyps, LENGTHS))


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("pair", list(PAIRS))
def test_every_encoder_with_every_decoder_learns_a_batch(pair: str) -> None:
    model = tiny(pair, seed=7).train()
    src, src_lens, tgt_in = random_batch(LENGTHS, TGT_LEN, seed=12)
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full((len(LENGTHS), 1), 3)], dim=1)  # shifted, EOS last
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    tokens = tgt_out.numel()
    first = None
    for _ in range(30):
        loss, nll = model.loss(src, src_lens, tgt_in, tgt_out, 0.0)
        optimizer.zero_grad()
        (loss / tokens).backward()
        optimizer.step()
        first = float(nll) / tokens if first is None else first
    assert float(nll) / tokens < 0.3 * first


def test_the_model_config_refuses_an_rnn_attention_with_the_transformer_decoder() -> None:
    overrides = ["model=transformer", "model/attention=bahdanau", "model.emb_dim=16", "model.encoder.num_heads=2",
                 "model.decoder.num_heads=2"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides).model
    with pytest.raises(ConfigError, match=r"model\.attention=.*BahdanauAttention.*model\.decoder=.*TransformerDecoder"):
        build_model(cfg, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE)

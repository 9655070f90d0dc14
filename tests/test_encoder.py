"""The packed (bi)GRU encoder: zero states at padding, the final state, the mask, and independence of
a sentence's states from the padding and the other sentences of its batch."""

from __future__ import annotations

import pytest
import torch
from conftest import SRC_VOCAB_SIZE, random_batch

from nmt.encoder import RNNEncoder
from nmt.vocab import PAD_ID

LENGTHS = [4, 7, 1, 5]
H = 8


def _encoder(bidirectional: bool, num_layers: int) -> RNNEncoder:
    torch.manual_seed(0)
    encoder = RNNEncoder(SRC_VOCAB_SIZE, PAD_ID, emb_dim=6, hidden_dim=H, num_layers=num_layers, emb_dropout=0.2,
                         hidden_dropout=0.2, bidirectional=bidirectional)  # fmt: skip
    return encoder.eval()


switches = pytest.mark.parametrize(
    ("bidirectional", "num_layers"), [(True, 1), (False, 1), (True, 2), (False, 2)], ids=["bigru", "gru", "bigru2", "gru2"]
)


@switches
def test_shapes_and_mask(bidirectional: bool, num_layers: int) -> None:
    encoder = _encoder(bidirectional, num_layers)
    src, src_lens, _ = random_batch(LENGTHS, 1)
    out = encoder(src, src_lens)
    directions = 2 if bidirectional else 1
    assert encoder.output_dim == directions * H
    assert out.states.shape == (4, 7, directions * H)
    assert out.final.shape == (4, directions * H)
    assert out.mask.dtype == torch.bool
    assert torch.equal(out.mask, src != PAD_ID)


@switches
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_states_at_padding_are_zero(bidirectional: bool, num_layers: int, training: bool) -> None:
    encoder = _encoder(bidirectional, num_layers).train(training)
    src, src_lens, _ = random_batch(LENGTHS, 1, extra_pad=3)
    out = encoder(src, src_lens)
    assert out.states.shape[1] == 10  # total_length keeps the padded width
    assert torch.all(out.states[~out.mask] == 0)
    assert torch.all(out.states[out.mask].abs().sum(-1) > 0)


@switches
def test_final_is_last_forward_and_first_backward_state(bidirectional: bool, num_layers: int) -> None:
    encoder = _encoder(bidirectional, num_layers)
    src, src_lens, _ = random_batch(LENGTHS, 1)
    out = encoder(src, src_lens)
    for row, length in enumerate(LENGTHS):
        forward = out.states[row, length - 1, :H]  # the forward GRU after the last real token
        expected = torch.cat([forward, out.states[row, 0, H:]]) if bidirectional else forward
        torch.testing.assert_close(out.final[row], expected)


@switches
def test_sentence_alone_equals_sentence_in_padded_batch(bidirectional: bool, num_layers: int) -> None:
    encoder = _encoder(bidirectional, num_layers)
    src, src_lens, _ = random_batch(LENGTHS, 1, extra_pad=2)
    batch = encoder(src, src_lens)
    for row, length in enumerate(LENGTHS):
        alone = encoder(src[row : row + 1, :length], src_lens[row : row + 1])
        torch.testing.assert_close(alone.states[0], batch.states[row, :length])
        torch.testing.assert_close(alone.final[0], batch.final[row])


def test_padding_embedding_is_zero() -> None:
    encoder = _encoder(True, 1)
    assert torch.all(encoder.embedding.weight[PAD_ID] == 0)

"""The source side: embeddings and a (bidirectional) GRU over packed sequences (Bahdanau et al. 2014,
section 3.2: the annotation ``h_j`` of word j is the forward and backward states concatenated).

Sequences are packed, so padding never enters the recurrence: the backward GRU starts at each
sentence's last real token, and a sentence's states do not depend on how much padding its batch has.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class EncoderOutput(NamedTuple):
    """:ivar states: (B, S, D*H) annotations, zero at padding (D = 2 when bidirectional).
    :ivar mask: (B, S) bool, True at real tokens.
    :ivar final: (B, D*H) the top layer's last forward state and (bidirectional) first backward state.
    """

    states: Tensor
    mask: Tensor
    final: Tensor


class RNNEncoder(nn.Module):
    """Embedding, dropout, and a multi-layer GRU, bidirectional or not.

    :param vocab_size: source vocabulary size (given at build time).
    :param pad_id: padding id, whose embedding stays zero.
    :param emb_dim: E, embedding size.
    :param hidden_dim: H, GRU state size per direction.
    :param num_layers: stacked GRU layers.
    :param emb_dropout: on the embeddings.
    :param hidden_dropout: between stacked layers and on the output states (the annotations).
    :param bidirectional: run a backward GRU too and concatenate.
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        emb_dim: int,
        hidden_dim: int,
        num_layers: int,
        emb_dropout: float,
        hidden_dropout: float,
        bidirectional: bool,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.emb_dropout = nn.Dropout(emb_dropout)
        self.hidden_dropout = nn.Dropout(hidden_dropout)
        self.rnn = nn.GRU(
            emb_dim,
            hidden_dim,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=hidden_dropout if num_layers > 1 else 0.0,
        )
        self.num_directions = 2 if bidirectional else 1
        self.output_dim = hidden_dim * self.num_directions

    def forward(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """:param src: (B, S) long ids. :param src_lens: (B,) long real lengths (CPU).
        :return: an :class:`EncoderOutput`."""
        max_len = src.size(1)
        mask = torch.arange(max_len, device=src.device) < src_lens.to(src.device).unsqueeze(1)  # (B, S)
        embedded = self.emb_dropout(self.embedding(src))  # (B, S) -> (B, S, E)
        packed = pack_padded_sequence(embedded, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        packed_states, last = self.rnn(packed)  # last: (L*D, B, H), in the batch's original order
        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=max_len)  # (B, S, D*H)
        # the top layer's directions: forward ends at the last real token, backward at position 0
        final = torch.cat(list(last[-self.num_directions :]), dim=-1)  # D x (B, H) -> (B, D*H)
        return EncoderOutput(self.hidden_dropout(states), mask, final)

"""Conditional GRU decoders: one step for search, and a teacher-forced unroll for training that
computes the same thing with everything step-independent hoisted out of the time loop.

Bahdanau et al. (2014), appendix A.2 (``BahdanauDecoder``): attend with the previous state::

    c_t  = attend(s_{t-1}, h)                     context from the state *before* the step
    s_t  = GRU([E y_{t-1}; c_t], s_{t-1})
    o_t  = tanh(W_o [s_t; c_t; E y_{t-1}])        "deep output" (a tanh layer in place of maxout)
    p(y_t) = softmax(W_out o_t)

Luong et al. (2015), section 3 (``LuongDecoder``): attend with the new state::

    s_t  = GRU([E y_{t-1}; h~_{t-1}], s_{t-1})     h~_{t-1} only with input feeding (section 3.3)
    c_t  = attend(s_t, h)
    h~_t = tanh(W_c [c_t; s_t])                    the attentional hidden state
    p(y_t) = softmax(W_out h~_t)

The GRU is written out (:func:`gru_update`, PyTorch's ``nn.GRUCell`` equations) so that the input
projection of all target embeddings can be one matmul before the loop.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.attention import Attention, Memory
from nmt.encoder import EncoderOutput

DecoderState = tuple[Tensor, ...]  # each (B, ...); search reorders them along dim 0


def gru_update(input_gates: Tensor, hidden_gates: Tensor, hidden: Tensor) -> Tensor:
    """One GRU step from precomputed projections (the equations of ``torch.nn.GRUCell``).

    :param input_gates: (B, 3H) ``W_i x + b_i`` in the order reset, update, new.
    :param hidden_gates: (B, 3H) ``W_h s + b_h``.
    :param hidden: (B, H) previous state.
    :return: (B, H) new state.
    """
    size = hidden.size(-1)
    # split, not slicing: the backward of split is one concatenation, while each slice's backward
    # would allocate and fill a zero tensor of the full (B, 3H) size
    input_rz, input_new = input_gates.split([2 * size, size], dim=1)  # (B, 2H), (B, H)
    hidden_rz, hidden_new = hidden_gates.split([2 * size, size], dim=1)
    reset, update = torch.sigmoid(input_rz + hidden_rz).chunk(2, dim=1)  # 2 x (B, H)
    new = torch.tanh(input_new + reset * hidden_new)  # (B, H)
    return new + update * (hidden - new)  # = (1 - z) * n + z * h


class RNNDecoder(nn.Module):
    """What both decoders share: embeddings, the initial state, the output projection.

    :param vocab_size: target vocabulary size V (given at build time).
    :param pad_id: padding id.
    :param attention: the attention module (built from ``model/attention`` and injected).
    :param memory_dim: M, size of an encoder state (given at build time).
    :param emb_dim: E, target embedding size.
    :param hidden_dim: H, GRU state size.
    :param output_dim: O, size of the layer under the softmax (``o_t`` or ``h~_t``).
    :param dropout: on embeddings and on the layer under the softmax.
    :param init_state: ``bridge`` (s_0 = tanh(W_b [final encoder states])) or ``zero``.
    :param tie_embeddings: share the output projection with the embeddings (needs O == E).
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        attention: Attention,
        memory_dim: int,
        emb_dim: int,
        hidden_dim: int,
        output_dim: int,
        dropout: float,
        init_state: str,
        tie_embeddings: bool,
    ) -> None:
        super().__init__()
        if init_state not in ("bridge", "zero"):
            raise ValueError(f"model.decoder.init_state={init_state!r}: choose bridge or zero")
        self.attention = attention
        self.hidden_dim, self.output_dim = hidden_dim, output_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.bridge = nn.Linear(memory_dim, hidden_dim) if init_state == "bridge" else None
        self.hidden_to_gates = nn.Linear(hidden_dim, 3 * hidden_dim)  # W_h, b_h
        self.output = nn.Linear(output_dim, vocab_size)
        if tie_embeddings:
            if output_dim != emb_dim:
                raise ValueError(
                    f"model.tie_embeddings needs the output layer size ({output_dim}) to equal the "
                    f"embedding size ({emb_dim}); set model.decoder.output_dim=${{model.emb_dim}}"
                )
            self.output.weight = self.embedding.weight

    def initial_hidden(self, enc: EncoderOutput) -> Tensor:
        """(B, D*H_enc) -> (B, H)."""
        if self.bridge is None:
            return enc.final.new_zeros(enc.final.size(0), self.hidden_dim)
        return torch.tanh(self.bridge(enc.final))

    def logits(self, features: Tensor) -> Tensor:
        """(..., O) -> (..., V) unnormalised scores."""
        return self.output(self.dropout(features))


class BahdanauDecoder(RNNDecoder):
    """Attend with s_{t-1}; the context feeds the GRU and the deep output (see module docstring)."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        attention: Attention,
        memory_dim: int,
        emb_dim: int,
        hidden_dim: int,
        output_dim: int,
        dropout: float,
        init_state: str,
        tie_embeddings: bool,
    ) -> None:
        super().__init__(
            vocab_size, pad_id, attention, memory_dim, emb_dim, hidden_dim, output_dim, dropout,
            init_state, tie_embeddings,
        )  # fmt: skip
        self.emb_to_gates = nn.Linear(emb_dim, 3 * hidden_dim)  # W_i for E y_{t-1}, with b_i
        self.context_to_gates = nn.Linear(memory_dim, 3 * hidden_dim, bias=False)  # W_i for c_t
        self.deep_output = nn.Linear(hidden_dim + memory_dim + emb_dim, output_dim)  # W_o

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return (self.initial_hidden(enc),)

    def _recur(self, emb_gates: Tensor, memory: Memory, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One recurrence step: (B, 3H) gates of E y_{t-1}, state (B, H) -> s_t, c_t, weights."""
        context, weights = self.attention(hidden, memory)  # (B, M), (B, S)
        input_gates = emb_gates + self.context_to_gates(context)  # (B, 3H)
        hidden = gru_update(input_gates, self.hidden_to_gates(hidden), hidden)  # (B, H)
        return hidden, context, weights

    def step(self, prev: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """:param prev: (B,) long, y_{t-1}. :return: features o_t (B, O), new state, weights (B, S)."""
        emb = self.dropout(self.embedding(prev))  # (B,) -> (B, E)
        hidden, context, weights = self._recur(self.emb_to_gates(emb), memory, state[0])
        features = torch.tanh(self.deep_output(torch.cat([hidden, context, emb], dim=-1)))  # (B, O)
        return features, (hidden,), weights

    def forward(self, tgt_in: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, Tensor]:
        """Teacher-forced unroll.

        :param tgt_in: (B, T) long, BOS + target. :return: features (B, T, O), weights (B, T, S).
        """
        emb = self.dropout(self.embedding(tgt_in))  # (B, T) -> (B, T, E)
        emb_gates = self.emb_to_gates(emb)  # (B, T, 3H): all steps in one matmul
        (hidden,) = state
        hiddens, contexts, weights = [], [], []
        for step_gates in emb_gates.unbind(1):  # unbind, not [:, t]: its backward is one stack, not T copies
            hidden, context, step_weights = self._recur(step_gates, memory, hidden)
            hiddens.append(hidden)
            contexts.append(context)
            weights.append(step_weights)
        states = torch.stack(hiddens, dim=1)  # T x (B, H) -> (B, T, H)
        contexts = torch.stack(contexts, dim=1)  # (B, T, M)
        features = torch.tanh(self.deep_output(torch.cat([states, contexts, emb], dim=-1)))  # (B, T, O)
        return features, torch.stack(weights, dim=1)  # (B, T, O), (B, T, S)


class LuongDecoder(RNNDecoder):
    """Attend with s_t; attentional state ``h~_t = tanh(W_c [c_t; s_t])``, optionally fed back.

    :param input_feeding: concatenate ``h~_{t-1}`` to the GRU input (Luong et al. section 3.3).
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        attention: Attention,
        memory_dim: int,
        emb_dim: int,
        hidden_dim: int,
        output_dim: int,
        dropout: float,
        init_state: str,
        tie_embeddings: bool,
        input_feeding: bool,
    ) -> None:
        super().__init__(
            vocab_size, pad_id, attention, memory_dim, emb_dim, hidden_dim, output_dim, dropout,
            init_state, tie_embeddings,
        )  # fmt: skip
        self.input_feeding = input_feeding
        self.emb_to_gates = nn.Linear(emb_dim, 3 * hidden_dim)  # W_i for E y_{t-1}, with b_i
        self.feed_to_gates = nn.Linear(output_dim, 3 * hidden_dim, bias=False) if input_feeding else None
        self.combine = nn.Linear(memory_dim + hidden_dim, output_dim, bias=False)  # W_c

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        hidden = self.initial_hidden(enc)  # (B, H)
        if not self.input_feeding:
            return (hidden,)
        return hidden, hidden.new_zeros(hidden.size(0), self.output_dim)  # s_0, h~_0 = 0

    def _recur(self, emb_gates: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, ...]:
        """(B, 3H) gates of E y_{t-1} and the state -> s_t, h~_t (B, O), weights (B, S)."""
        hidden = state[0]
        if self.feed_to_gates is not None:
            emb_gates = emb_gates + self.feed_to_gates(state[1])  # input feeding
        hidden = gru_update(emb_gates, self.hidden_to_gates(hidden), hidden)  # (B, H)
        context, weights = self.attention(hidden, memory)  # (B, M), (B, S)
        attentional = torch.tanh(self.combine(torch.cat([context, hidden], dim=-1)))  # (B, M+H) -> (B, O)
        return hidden, attentional, weights

    def _state(self, hidden: Tensor, attentional: Tensor) -> DecoderState:
        return (hidden, attentional) if self.input_feeding else (hidden,)

    def step(self, prev: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """:param prev: (B,) long, y_{t-1}. :return: features h~_t (B, O), new state, weights (B, S)."""
        emb = self.dropout(self.embedding(prev))  # (B,) -> (B, E)
        hidden, attentional, weights = self._recur(self.emb_to_gates(emb), memory, state)
        return attentional, self._state(hidden, attentional), weights

    def forward(self, tgt_in: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, Tensor]:
        """Teacher-forced unroll. :param tgt_in: (B, T) long.
        :return: features (B, T, O), weights (B, T, S)."""
        emb_gates = self.emb_to_gates(self.dropout(self.embedding(tgt_in)))  # (B, T) -> (B, T, 3H)
        outputs, weights = [], []
        for step_gates in emb_gates.unbind(1):
            hidden, attentional, step_weights = self._recur(step_gates, memory, state)
            state = self._state(hidden, attentional)
            outputs.append(attentional)
            weights.append(step_weights)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)  # (B, T, O), (B, T, S)

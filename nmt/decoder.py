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

With ``num_layers`` L > 1 the GRU is a stack: layer 1 reads the input above, layer l > 1 reads
layer l-1's new state, and ``s_t`` (the query and the output layer's input) is the top layer's.

The GRU is written out (:func:`gru_update`, PyTorch's ``nn.GRUCell`` equations) so that the input
projection of all target embeddings can be one matmul before the loop, and so that it can be
layer-normalised (Ba et al. 2016, section 3.1 for RNNs; used by Nematus and the LIUM-CVC
Multi30k systems): with ``layer_norm`` the input and the recurrent projections ``W_i x`` and
``W_h s`` are each normalised per gate (reset, update, new) before they are combined, which keeps
the pre-activations at a steady scale however the inputs grow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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


class GateNorm(nn.Module):
    """Layer normalisation of GRU gate pre-activations, each gate (reset, update, new) over its own
    H units, with a learned gain and bias per unit (Ba et al. 2016).

    :param hidden_dim: H.
    """

    def __init__(self, hidden_dim: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(3, hidden_dim))
        self.bias = nn.Parameter(torch.zeros(3, hidden_dim))

    def forward(self, gates: Tensor) -> Tensor:
        """(..., 3H) -> (..., 3H)."""
        per_gate = gates.unflatten(-1, (3, -1))  # (..., 3H) -> (..., 3, H)
        normed = F.layer_norm(per_gate, per_gate.shape[-1:]) * self.gain + self.bias
        return normed.flatten(-2)  # (..., 3, H) -> (..., 3H)


class RNNDecoder(nn.Module):
    """What both decoders share: embeddings, the stacked GRU, the initial state, the output projection.

    :param vocab_size: target vocabulary size V (given at build time).
    :param pad_id: padding id.
    :param attention: the attention module (built from ``model/attention`` and injected).
    :param memory_dim: M, size of an encoder state (given at build time).
    :param emb_dim: E, target embedding size.
    :param hidden_dim: H, GRU state size.
    :param output_dim: O, size of the layer under the softmax (``o_t`` or ``h~_t``).
    :param num_layers: L, stacked GRU layers.
    :param layer_norm: normalise each layer's gate pre-activations (:class:`GateNorm`).
    :param emb_dropout: on the target embeddings.
    :param hidden_dropout: on a layer's new state where it enters the layer above (L > 1).
    :param state_dropout: on the top state ``s_t`` where it enters the output layer (never on the
        state carried to the next step).
    :param output_dropout: on the layer under the softmax.
    :param init_state: ``bridge`` (s_0 = tanh(W_b [final encoder states]), every layer its own
        slice of W_b) or ``zero``.
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
        num_layers: int,
        layer_norm: bool,
        emb_dropout: float,
        hidden_dropout: float,
        state_dropout: float,
        output_dropout: float,
        init_state: str,
        tie_embeddings: bool,
    ) -> None:
        super().__init__()
        if init_state not in ("bridge", "zero"):
            raise ValueError(f"model.decoder.init_state={init_state!r}: choose bridge or zero")
        if num_layers < 1:
            raise ValueError(f"model.decoder.num_layers={num_layers}: must be at least 1")
        self.attention = attention
        self.hidden_dim, self.output_dim, self.num_layers = hidden_dim, output_dim, num_layers
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.emb_dropout = nn.Dropout(emb_dropout)
        self.hidden_dropout = nn.Dropout(hidden_dropout)
        self.state_dropout = nn.Dropout(state_dropout)
        self.dropout = nn.Dropout(output_dropout)  # under the softmax (Seq2Seq.loss applies it too)
        self.bridge = nn.Linear(memory_dim, num_layers * hidden_dim) if init_state == "bridge" else None
        # W_h, b_h of every layer; W_i of layers 2..L (layer 1's input projection is the subclass's)
        self.hidden_to_gates = nn.ModuleList(nn.Linear(hidden_dim, 3 * hidden_dim) for _ in range(num_layers))
        self.layer_to_gates = nn.ModuleList(nn.Linear(hidden_dim, 3 * hidden_dim) for _ in range(num_layers - 1))
        norm = (lambda: GateNorm(hidden_dim)) if layer_norm else nn.Identity
        self.input_norm = nn.ModuleList(norm() for _ in range(num_layers))
        self.hidden_norm = nn.ModuleList(norm() for _ in range(num_layers))
        self.output = nn.Linear(output_dim, vocab_size)
        if tie_embeddings:
            if output_dim != emb_dim:
                raise ValueError(
                    f"model.tie_embeddings needs the output layer size ({output_dim}) to equal the "
                    f"embedding size ({emb_dim}); set model.decoder.output_dim=${{model.emb_dim}}"
                )
            self.output.weight = self.embedding.weight

    @property
    def has_alignment(self) -> bool:
        """Whether its attention weights align words (False for the fixed-vector ``none``)."""
        return self.attention.has_alignment

    def prepare(self, enc: EncoderOutput) -> Memory:
        """The attention's memory of the encoder output, once per batch."""
        return self.attention.prepare(enc.states, enc.mask, enc.final)

    def initial_hidden(self, enc: EncoderOutput) -> tuple[Tensor, ...]:
        """(B, D*H_enc) -> L x (B, H), bottom layer first."""
        if self.bridge is None:
            zero = enc.final.new_zeros(enc.final.size(0), self.hidden_dim)
            return (zero,) * self.num_layers
        return torch.tanh(self.bridge(enc.final)).chunk(self.num_layers, dim=-1)  # (B, L*H) -> L x (B, H)

    def advance(self, input_gates: Tensor, hiddens: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """One step of the GRU stack.

        :param input_gates: (B, 3H) layer 1's input projection ``W_i x + b_i``.
        :param hiddens: L x (B, H) states at t-1, bottom first.
        :return: L x (B, H) states at t.
        """
        new: list[Tensor] = []
        for layer, hidden in enumerate(hiddens):
            if layer > 0:
                input_gates = self.layer_to_gates[layer - 1](self.hidden_dropout(new[-1]))  # (B, H) -> (B, 3H)
            hidden_gates = self.hidden_norm[layer](self.hidden_to_gates[layer](hidden))  # (B, 3H)
            new.append(gru_update(self.input_norm[layer](input_gates), hidden_gates, hidden))
        return tuple(new)

    def logits(self, features: Tensor) -> Tensor:
        """(..., O) -> (..., V) unnormalised scores."""
        return self.output(self.dropout(features))


class BahdanauDecoder(RNNDecoder):
    """Attend with s_{t-1}; the context feeds the GRU and the deep output (see module docstring).

    The state is the L layers' states, bottom first; the top one is the attention query.
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
        num_layers: int,
        layer_norm: bool,
        emb_dropout: float,
        hidden_dropout: float,
        state_dropout: float,
        output_dropout: float,
        init_state: str,
        tie_embeddings: bool,
    ) -> None:
        super().__init__(
            vocab_size, pad_id, attention, memory_dim, emb_dim, hidden_dim, output_dim, num_layers, layer_norm,
            emb_dropout, hidden_dropout, state_dropout, output_dropout, init_state, tie_embeddings,
        )  # fmt: skip
        self.emb_to_gates = nn.Linear(emb_dim, 3 * hidden_dim)  # W_i for E y_{t-1}, with b_i
        self.context_to_gates = nn.Linear(memory_dim, 3 * hidden_dim, bias=False)  # W_i for c_t
        self.deep_output = nn.Linear(hidden_dim + memory_dim + emb_dim, output_dim)  # W_o

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return self.initial_hidden(enc)

    def _recur(self, emb_gates: Tensor, memory: Memory, state: DecoderState) -> tuple[DecoderState, Tensor, Tensor]:
        """One recurrence step: (B, 3H) gates of E y_{t-1}, L x (B, H) states -> new states, c_t, weights."""
        context, weights = self.attention(state[-1], memory)  # (B, M), (B, S)
        input_gates = emb_gates + self.context_to_gates(context)  # (B, 3H)
        return self.advance(input_gates, state), context, weights

    def _deep_output(self, top: Tensor, context: Tensor, emb: Tensor) -> Tensor:
        """(..., H), (..., M), (..., E) -> o (..., O)."""
        return torch.tanh(self.deep_output(torch.cat([self.state_dropout(top), context, emb], dim=-1)))

    def step(self, prev: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """:param prev: (B,) long, y_{t-1}. :return: features o_t (B, O), new state, weights (B, S)."""
        emb = self.emb_dropout(self.embedding(prev))  # (B,) -> (B, E)
        state, context, weights = self._recur(self.emb_to_gates(emb), memory, state)
        return self._deep_output(state[-1], context, emb), state, weights  # (B, O)

    def forward(
        self, tgt_in: Tensor, memory: Memory, state: DecoderState, need_weights: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Teacher-forced unroll.

        :param tgt_in: (B, T) long, BOS + target. :param need_weights: unused (the weights come
            with every step). :return: features (B, T, O), weights (B, T, S).
        """
        emb = self.emb_dropout(self.embedding(tgt_in))  # (B, T) -> (B, T, E)
        emb_gates = self.emb_to_gates(emb)  # (B, T, 3H): all steps in one matmul
        tops, contexts, weights = [], [], []
        for step_gates in emb_gates.unbind(1):  # unbind, not [:, t]: its backward is one stack, not T copies
            state, context, step_weights = self._recur(step_gates, memory, state)
            tops.append(state[-1])
            contexts.append(context)
            weights.append(step_weights)
        tops = torch.stack(tops, dim=1)  # T x (B, H) -> (B, T, H)
        contexts = torch.stack(contexts, dim=1)  # (B, T, M)
        features = self._deep_output(tops, contexts, emb)  # (B, T, O): all steps in one matmul
        return features, torch.stack(weights, dim=1)  # (B, T, O), (B, T, S)


class LuongDecoder(RNNDecoder):
    """Attend with s_t; attentional state ``h~_t = tanh(W_c [c_t; s_t])``, optionally fed back.

    The state is the L layers' states, bottom first, then ``h~_t`` (B, O) with input feeding.

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
        num_layers: int,
        layer_norm: bool,
        emb_dropout: float,
        hidden_dropout: float,
        state_dropout: float,
        output_dropout: float,
        init_state: str,
        tie_embeddings: bool,
        input_feeding: bool,
    ) -> None:
        super().__init__(
            vocab_size, pad_id, attention, memory_dim, emb_dim, hidden_dim, output_dim, num_layers, layer_norm,
            emb_dropout, hidden_dropout, state_dropout, output_dropout, init_state, tie_embeddings,
        )  # fmt: skip
        self.input_feeding = input_feeding
        self.emb_to_gates = nn.Linear(emb_dim, 3 * hidden_dim)  # W_i for E y_{t-1}, with b_i
        self.feed_to_gates = nn.Linear(output_dim, 3 * hidden_dim, bias=False) if input_feeding else None
        self.combine = nn.Linear(memory_dim + hidden_dim, output_dim, bias=False)  # W_c

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        hiddens = self.initial_hidden(enc)  # L x (B, H)
        if not self.input_feeding:
            return hiddens
        return (*hiddens, hiddens[0].new_zeros(hiddens[0].size(0), self.output_dim))  # s_0, h~_0 = 0

    def _recur(self, emb_gates: Tensor, memory: Memory, state: DecoderState) -> tuple[DecoderState, Tensor]:
        """(B, 3H) gates of E y_{t-1} and the state -> the new state, weights (B, S).
        The new state's last entry is h~_t (B, O) whether or not it is fed back."""
        if self.feed_to_gates is not None:
            emb_gates = emb_gates + self.feed_to_gates(state[-1])  # input feeding of h~_{t-1}
        hiddens = self.advance(emb_gates, state[: self.num_layers])  # L x (B, H)
        context, weights = self.attention(hiddens[-1], memory)  # (B, M), (B, S)
        top = self.state_dropout(hiddens[-1])
        attentional = torch.tanh(self.combine(torch.cat([context, top], dim=-1)))  # (B, M+H) -> (B, O)
        return (*hiddens, attentional), weights

    def _state(self, state: DecoderState) -> DecoderState:
        return state if self.input_feeding else state[: self.num_layers]

    def step(self, prev: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """:param prev: (B,) long, y_{t-1}. :return: features h~_t (B, O), new state, weights (B, S)."""
        emb = self.emb_dropout(self.embedding(prev))  # (B,) -> (B, E)
        state, weights = self._recur(self.emb_to_gates(emb), memory, state)
        return state[-1], self._state(state), weights

    def forward(
        self, tgt_in: Tensor, memory: Memory, state: DecoderState, need_weights: bool = True
    ) -> tuple[Tensor, Tensor]:
        """Teacher-forced unroll. :param tgt_in: (B, T) long. :param need_weights: unused.
        :return: features (B, T, O), weights (B, T, S)."""
        emb_gates = self.emb_to_gates(self.emb_dropout(self.embedding(tgt_in)))  # (B, T) -> (B, T, 3H)
        outputs, weights = [], []
        for step_gates in emb_gates.unbind(1):
            full, step_weights = self._recur(step_gates, memory, state)
            state = self._state(full)
            outputs.append(full[-1])
            weights.append(step_weights)
        return torch.stack(outputs, dim=1), torch.stack(weights, dim=1)  # (B, T, O), (B, T, S)

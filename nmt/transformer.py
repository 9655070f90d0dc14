"""The Transformer (Vaswani et al. 2017, "Attention Is All You Need"): an encoder and a decoder made
of attention and feed-forward layers, with no recurrence.

Attention here is the seed's soft dictionary lookup, done many times in parallel. A query asks,
every key answers with a score, the softmax turns the scores into weights, and the answer is the
weighted average of the values (:func:`nmt.attention.scaled_dot_product_attention`)::

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                              (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i)                              (section 3.2.2)
    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                                         (eq. 2)

Self-attention takes Q, K and V from the same sequence (every source word looks at every source
word; every target word at itself and the words before it, the *causal* mask). Cross-attention
takes Q from the decoder and K, V from the encoder's output: it is the seed's attention, with
``h`` heads that each score in their own d_k = d_model / h dimensional subspace.

Each sublayer is wrapped in a residual connection and a layer normalisation, either after the
residual sum (``norm_first=False``, the paper's "post-norm": LayerNorm(x + Sublayer(x))) or before
the sublayer (``norm_first=True``, "pre-norm": x + Sublayer(LayerNorm(x)), with a last LayerNorm
over the stack's output; it trains stably without a long warmup, Xiong et al. 2020).

Decoding is incremental: the decoder state is every layer's self-attention keys and values of the
positions decoded so far, so one step computes one new position (its query, key and value) and
attends over the cache, instead of recomputing the whole prefix. The encoder's keys and values
for cross-attention are computed once per sentence (:class:`TransformerMemory`).

Shapes: B batch, S source length, T target length, D = d_model, h heads, d_k = D / h, L layers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from nmt.attention import scaled_dot_product_attention
from nmt.encoder import EncoderOutput
from nmt.positions import PositionalEncoding

DecoderState = tuple[Tensor, ...]  # (K_1, V_1, ..., K_L, V_L), each (B, h, t, d_k): the self-attention cache


class MultiHeadAttention(nn.Module):
    """``h`` scaled dot-product attentions side by side, each in its own projected subspace.

    The queries come from a sequence of size ``query_dim`` (= d_model), the keys and values from
    one of size ``memory_dim`` (d_model for self-attention; the encoder's output size for the
    decoder's cross-attention, so that a bi-GRU encoder can feed a Transformer decoder).

    :param query_dim: D, the size of the queries and of the output.
    :param memory_dim: M, the size of what keys and values are projected from.
    :param num_heads: h; D must be a multiple of it.
    :param dropout: on the attention weights, in training.
    """

    def __init__(self, query_dim: int, memory_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        if num_heads < 1 or query_dim % num_heads:
            raise ValueError(f"num_heads={num_heads}: d_model={query_dim} must be a multiple of the number of heads")
        self.num_heads, self.d_k, self.dropout = num_heads, query_dim // num_heads, dropout
        self.w_q = nn.Linear(query_dim, query_dim)  # W^Q of every head, side by side
        self.w_kv = nn.Linear(memory_dim, 2 * query_dim)  # W^K and W^V of every head: one matmul
        self.w_o = nn.Linear(query_dim, query_dim)  # W^O

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, h, L, d_k)."""
        return x.unflatten(-1, (self.num_heads, self.d_k)).transpose(1, 2)  # (B, L, h, d_k) -> (B, h, L, d_k)

    def keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Project what is attended to: (B, S, M) -> K, V, each (B, h, S, d_k)."""
        keys, values = self.w_kv(memory).chunk(2, dim=-1)  # (B, S, 2D) -> 2 x (B, S, D)
        return self.split_heads(keys), self.split_heads(values)

    def forward(
        self, x: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from every position of ``x``.

        :param x: (B, T, D), the sequence the queries come from.
        :param keys: (B, h, S, d_k) and :param values: (B, h, S, d_k), from :meth:`keys_values`.
        :param mask: (B, 1, 1, S) bool, True at real keys; or None (no padding among the keys).
        :param causal: query i sees keys 0..i only (decoder self-attention in training).
        :param need_weights: also return the weights.
        :return: (B, T, D), and the weights (B, h, T, S) or None.
        """
        query = self.split_heads(self.w_q(x))  # (B, T, D) -> (B, h, T, d_k)
        dropout = self.dropout if self.training else 0.0
        heads, weights = scaled_dot_product_attention(query, keys, values, mask, causal, dropout, need_weights)
        concat = heads.transpose(1, 2).flatten(2)  # (B, h, T, d_k) -> (B, T, h, d_k) -> (B, T, D)
        return self.w_o(concat), weights


class FeedForward(nn.Module):
    """``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2`` at every position (eq. 2).

    :param d_model: D. :param ff_dim: the inner size (the paper's d_ff).
    :param activation_dropout: on the inner activations, in training.
    """

    def __init__(self, d_model: int, ff_dim: int, activation_dropout: float) -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, ff_dim), nn.Linear(ff_dim, d_model)
        self.dropout = nn.Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, d_ff) -> (B, T, D)."""
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class Residual(nn.Module):
    """A sublayer's residual connection with its layer normalisation, pre- or post-norm.

    :param d_model: D. :param dropout: on the sublayer's output before the sum.
    :param norm_first: pre-norm ``x + f(LN(x))``; otherwise post-norm ``LN(x + f(x))``.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm, self.dropout, self.norm_first = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def input(self, x: Tensor) -> Tensor:
        """What the sublayer reads: LN(x) with pre-norm, x itself with post-norm."""
        return self.norm(x) if self.norm_first else x

    def output(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        """Add the sublayer's output (B, T, D) to the residual stream x (B, T, D)."""
        summed = x + self.dropout(sublayer_out)
        return summed if self.norm_first else self.norm(summed)


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network, each with its residual."""

    def __init__(self, d_model: int, num_heads: int, ff_dim: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, norm_first: bool) -> None:  # fmt: skip
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, d_model, num_heads, attention_dropout)
        self.feed_forward = FeedForward(d_model, ff_dim, activation_dropout)
        self.attention_residual = Residual(d_model, dropout, norm_first)
        self.ff_residual = Residual(d_model, dropout, norm_first)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """:param x: (B, S, D). :param mask: (B, 1, 1, S) bool, True at real tokens. :return: (B, S, D)."""
        h = self.attention_residual.input(x)
        keys, values = self.self_attention.keys_values(h)  # 2 x (B, h, S, d_k)
        attended, _ = self.self_attention(h, keys, values, mask, causal=False, need_weights=False)
        x = self.attention_residual.output(x, attended)
        return self.ff_residual.output(x, self.feed_forward(self.ff_residual.input(x)))


class Embedder(nn.Module):
    """Token embeddings scaled by sqrt(d_model), plus positions, then dropout (section 3.4-3.5).

    :param vocab_size: V. :param pad_id: the padding id (its embedding stays zero).
    :param d_model: D. :param positions: ``sinusoidal`` or ``learned``.
    :param max_positions: length limit of a learned table. :param dropout: on the sum.
    """

    def __init__(self, vocab_size: int, pad_id: int, d_model: int, positions: str, max_positions: int,
                 dropout: float) -> None:  # fmt: skip
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)  # times sqrt(D) below: unit scale
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.positions = PositionalEncoding(positions, d_model, max_positions)
        self.scale, self.dropout = math.sqrt(d_model), nn.Dropout(dropout)

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:
        """:param ids: (B, T) long, at positions ``start`` .. ``start + T - 1``. :return: (B, T, D)."""
        positions = self.positions(ids.size(1), start, ids.device)  # (T, D)
        return self.dropout(self.embedding(ids) * self.scale + positions)  # (B, T, D) + (T, D)


def _init_linear(module: nn.Module) -> None:
    """Glorot-uniform weights and zero biases for every linear layer inside ``module``."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


class TransformerEncoder(nn.Module):
    """A stack of L encoder layers over the embedded, position-encoded source.

    Its output plugs into every decoder: the states (B, S, D) are what attention reads, and
    ``final`` (the mean of the real positions' states) is the fixed summary an RNN decoder's
    bridge (and ``model/attention=none``) starts from.

    :param vocab_size: source vocabulary size (given at build time). :param pad_id: padding id.
    :param d_model: D, the size of every layer's input and output (also the embedding size).
    :param num_layers: L. :param num_heads: h. :param ff_dim: d_ff.
    :param dropout: on the embeddings and on every sublayer's output (the paper's P_drop).
    :param attention_dropout: on the attention weights. :param activation_dropout: inside the FFN.
    :param norm_first: pre-norm (true) or post-norm. :param positions: ``sinusoidal`` or ``learned``.
    :param max_positions: the longest source a learned table covers.
    """

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        ff_dim: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        norm_first: bool,
        positions: str,
        max_positions: int,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"model.encoder.num_layers={num_layers}: must be at least 1")
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, ff_dim, dropout, attention_dropout, activation_dropout, norm_first)
            for _ in range(num_layers)
        )
        _init_linear(self.layers)
        self.embedder = Embedder(vocab_size, pad_id, d_model, positions, max_positions, dropout)
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output_dim = d_model

    @property
    def embedding(self) -> nn.Embedding:
        """The token embeddings (the name ``model.share_embeddings`` ties, as for the RNN encoder)."""
        return self.embedder.embedding

    def forward(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """:param src: (B, S) long ids. :param src_lens: (B,) long real lengths.
        :return: states (B, S, D) (zero at padding), mask (B, S), final (B, D)."""
        mask = torch.arange(src.size(1), device=src.device) < src_lens.to(src.device).unsqueeze(1)  # (B, S)
        key_mask = mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S): every head, every query
        x = self.embedder(src)  # (B, S) -> (B, S, D)
        for layer in self.layers:
            x = layer(x, key_mask)
        states = self.final_norm(x).masked_fill(~mask.unsqueeze(-1), 0.0)  # (B, S, D)
        final = states.sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)  # (B, S, D) -> (B, D) mean
        return EncoderOutput(states, mask, final)


class TransformerMemory(NamedTuple):
    """What the Transformer decoder attends to, computed once per batch by ``prepare``.

    :ivar keys: (B, L, h, S, d_k) every decoder layer's cross-attention keys of the encoder states.
    :ivar values: (B, L, h, S, d_k) the values likewise.
    :ivar mask: (B, S) bool, True at real source tokens.
    """

    keys: Tensor
    values: Tensor
    mask: Tensor

    def repeat_interleave(self, k: int) -> TransformerMemory:
        """Each sentence's memory ``k`` times in a row, (B, ...) -> (B*K, ...), for beam search."""
        return TransformerMemory(*(t.repeat_interleave(k, dim=0) for t in self))

    def index_select(self, rows: Tensor) -> TransformerMemory:
        """The memory of ``rows`` (R,) long: (B, ...) -> (R, ...)."""
        return TransformerMemory(*(t.index_select(0, rows) for t in self))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the source, feed-forward; each with its residual.

    :param cross_attention: the layer's :class:`MultiHeadAttention` over the encoder states
        (built from ``model.attention`` and injected).
    """

    def __init__(self, cross_attention: MultiHeadAttention, d_model: int, num_heads: int, ff_dim: int, dropout: float,
                 attention_dropout: float, activation_dropout: float, norm_first: bool) -> None:  # fmt: skip
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, d_model, num_heads, attention_dropout)
        self.cross_attention = cross_attention
        self.feed_forward = FeedForward(d_model, ff_dim, activation_dropout)
        self.self_residual = Residual(d_model, dropout, norm_first)
        self.cross_residual = Residual(d_model, dropout, norm_first)
        self.ff_residual = Residual(d_model, dropout, norm_first)

    def forward(
        self, x: Tensor, memory_keys: Tensor, memory_values: Tensor, src_mask: Tensor,
        cache: tuple[Tensor, Tensor] | None, need_weights: bool, tgt_mask: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None]:  # fmt: skip
        """One layer over the whole target (``cache`` None) or over the newest position only.

        :param x: (B, T, D); with a cache, T = 1 (the position after the cached ones).
        :param memory_keys: (B, h, S, d_k) and :param memory_values: this layer's cross-attention inputs.
        :param src_mask: (B, 1, 1, S) bool, True at real source tokens.
        :param cache: the self-attention keys and values of the earlier positions, each (B, h, t, d_k).
        :param need_weights: return the cross-attention weights.
        :param tgt_mask: (B, 1, 1, T) bool, True at real target tokens: the whole target is visible
            to every position (no causal mask; full context, for alignment only). None: causal.
        :return: (B, T, D), the keys and values of all positions so far, cross weights (B, h, T, S) or None.
        """
        h = self.self_residual.input(x)
        keys, values = self.self_attention.keys_values(h)  # 2 x (B, h, T, d_k)
        if cache is not None:  # the new position's key and value join those of the earlier ones
            keys = torch.cat([cache[0], keys], dim=2)  # (B, h, t, d_k) + (B, h, 1, d_k) -> (B, h, t+1, d_k)
            values = torch.cat([cache[1], values], dim=2)
        # in training every position attends to itself and the earlier ones (causal); one new
        # position with a cache may see every cached key, which are all earlier; with a target
        # mask, every position sees every real target token (full context)
        causal = cache is None and tgt_mask is None
        attended, _ = self.self_attention(h, keys, values, tgt_mask, causal=causal, need_weights=False)
        x = self.self_residual.output(x, attended)
        h = self.cross_residual.input(x)
        attended, weights = self.cross_attention(h, memory_keys, memory_values, src_mask, False, need_weights)
        x = self.cross_residual.output(x, attended)
        x = self.ff_residual.output(x, self.feed_forward(self.ff_residual.input(x)))
        return x, (keys, values), weights


class TransformerDecoder(nn.Module):
    """A stack of L decoder layers, the output projection, and the choice of which cross-attention
    shows as "the" attention (for maps and word alignments).

    Which layer aligns best is an empirical question; Garg et al. (2019) found the penultimate
    layer's heads, averaged, the most alignment-like, so that is the default (the only layer when
    L = 1). :meth:`set_alignment` chooses another layer or a subset of heads, and whether a
    teacher-forced pass reads that attention with the full target context: a second pass without
    the causal mask, in which the query of the position that emits y_t has already seen y_t and
    the words after it (Garg et al. 2019, section 4.3). The translation's own features always come
    from the causal pass; a decoding step, which cannot see later words, keeps the causal attention.

    :param vocab_size: target vocabulary size. :param pad_id: padding id.
    :param attention: L cross-attention modules, one per layer (built from ``model.attention``).
    :param memory_dim: M, the encoder's output size (the cross-attention projects from it).
    :param d_model: D. :param num_layers: L. :param num_heads: h (self-attention).
    :param ff_dim: d_ff. :param dropout: on embeddings and sublayer outputs.
    :param attention_dropout: on the self-attention weights (cross-attention has its own).
    :param activation_dropout: inside the FFN. :param norm_first: pre-norm or post-norm.
    :param positions: ``sinusoidal`` or ``learned``. :param max_positions: a learned table's length.
    :param tie_embeddings: the output projection is the target embedding matrix (Press & Wolf 2017).
    """

    has_alignment = True

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        attention: nn.ModuleList,
        memory_dim: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        ff_dim: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        norm_first: bool,
        positions: str,
        max_positions: int,
        tie_embeddings: bool,
    ) -> None:
        super().__init__()
        if num_layers < 1 or len(attention) != num_layers:
            raise ValueError(f"model.decoder.num_layers={num_layers}: must be at least 1, with one cross-attention each")
        self.num_layers, self.num_heads, self.d_model, self.memory_dim = num_layers, num_heads, d_model, memory_dim
        self.layers = nn.ModuleList(
            DecoderLayer(cross, d_model, num_heads, ff_dim, dropout, attention_dropout, activation_dropout, norm_first)
            for cross in attention
        )
        _init_linear(self.layers)
        self.embedder = Embedder(vocab_size, pad_id, d_model, positions, max_positions, dropout)
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dropout = nn.Identity()  # what Seq2Seq.loss applies under the softmax: nothing more here
        self.output = nn.Linear(d_model, vocab_size)
        _init_linear(self.output)
        if tie_embeddings:
            self.output.weight = self.embedding.weight
        self.align_layer, self.align_heads, self.align_full_context = max(num_layers - 2, 0), None, False
        self.cross_heads, self.pad_id = attention[0].num_heads, pad_id

    @property
    def embedding(self) -> nn.Embedding:
        """The target token embeddings."""
        return self.embedder.embedding

    def set_alignment(self, layer: int | None, heads: list[int] | None, full_context: bool = False) -> None:
        """Choose the cross-attention that steps and teacher-forced passes return as the attention.

        :param layer: 0-based layer index, negative from the top (-1 = the last); None = the
            default (the penultimate layer).
        :param heads: 0-based head indices to average; None = all heads.
        :param full_context: teacher-forced passes read it from a pass that sees the whole target.
        :raise ValueError: a layer or head that does not exist.
        """
        layers = self.num_layers
        if layer is None:
            layer = max(layers - 2, 0)
        if not -layers <= layer < layers:
            raise ValueError(f"align.layer={layer}: the decoder has {layers} layers (0 to {layers - 1}, or -1 to -{layers})")
        if heads is not None:
            count = self.cross_heads
            if not heads or any(not 0 <= h < count for h in heads):
                raise ValueError(f"align.heads={list(heads)}: choose among the {count} heads, 0 to {count - 1}")
        self.align_layer, self.align_heads = layer % layers, None if heads is None else tuple(heads)
        self.align_full_context = full_context

    def _alignment(self, weights: Tensor) -> Tensor:
        """The chosen heads' average: (B, h, T, S) -> (B, T, S)."""
        if self.align_heads is not None:
            weights = weights[:, list(self.align_heads)]  # (B, h', T, S)
        return weights.mean(dim=1)

    def prepare(self, enc: EncoderOutput) -> TransformerMemory:
        """Every layer's cross-attention keys and values of the encoder states, once per batch."""
        projected = [layer.cross_attention.keys_values(enc.states) for layer in self.layers]  # L x 2 x (B, h, S, d_k)
        keys = torch.stack([k for k, _ in projected], dim=1)  # (B, L, h, S, d_k)
        values = torch.stack([v for _, v in projected], dim=1)
        return TransformerMemory(keys, values, enc.mask)

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """Empty caches: 2L tensors (B, h, 0, d_k)."""
        empty = enc.states.new_zeros(enc.states.size(0), self.num_heads, 0, self.d_model // self.num_heads)
        return (empty,) * (2 * self.num_layers)

    def _run(
        self, tgt_in: Tensor, memory: TransformerMemory, state: DecoderState | None, weights_of: set[int],
        full_context: bool = False,
    ) -> tuple[Tensor, DecoderState, list[Tensor | None]]:  # fmt: skip
        """The stack over ``tgt_in`` (B, T) at positions t.. (t = the cached length, 0 without a cache).

        :param full_context: no causal mask, every position sees the whole target (without a
            cache); the stack stops after the last layer in ``weights_of``, its features unused.
        :return: features (B, T, D), the new caches, per layer its cross weights (B, h, T, S) if asked.
        """
        start = 0 if state is None else state[0].size(2)
        x = self.embedder(tgt_in, start)  # (B, T) -> (B, T, D)
        src_mask = memory.mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
        tgt_mask = (tgt_in != self.pad_id)[:, None, None, :] if full_context else None  # (B, 1, 1, T)
        layers = self.layers[: max(weights_of) + 1] if full_context else self.layers
        new_state: list[Tensor] = []
        all_weights: list[Tensor | None] = []
        for i, layer in enumerate(layers):
            cache = None if state is None else (state[2 * i], state[2 * i + 1])
            x, (keys, values), weights = layer(
                x, memory.keys[:, i], memory.values[:, i], src_mask, cache, i in weights_of, tgt_mask
            )
            new_state += [keys, values]
            all_weights.append(weights)
        return self.final_norm(x), tuple(new_state), all_weights

    def step(self, prev: Tensor, memory: TransformerMemory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """One position: :param prev: (B,) long, y_{t-1}; :param state: caches of t positions.
        :return: features (B, D), caches of t + 1 positions, the chosen attention (B, S)."""
        features, state, weights = self._run(prev.unsqueeze(1), memory, state, {self.align_layer})  # (B, 1, D)
        return features.squeeze(1), state, self._alignment(weights[self.align_layer]).squeeze(1)  # (B, D), (B, S)

    def forward(
        self, tgt_in: Tensor, memory: TransformerMemory, state: DecoderState, need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher-forced: every position at once, under the causal mask.

        :param tgt_in: (B, T) long, BOS + target. :param state: unused (every position is computed).
        :return: features (B, T, D) and the chosen attention (B, T, S), or None without ``need_weights``;
            with full context chosen (:meth:`set_alignment`), the attention of a second pass.
        """
        if need_weights and self.align_full_context:
            features, _, _ = self._run(tgt_in, memory, None, set())
            return features, self.full_context_attention(tgt_in, memory)
        features, _, weights = self._run(tgt_in, memory, None, {self.align_layer} if need_weights else set())
        return features, self._alignment(weights[self.align_layer]) if need_weights else None

    def full_context_attention(self, tgt_in: Tensor, memory: TransformerMemory) -> Tensor:
        """The chosen attention with the whole target visible: (B, T) -> (B, T, S), row t that of
        the position whose output is target token t (input: token t - 1), having seen every token."""
        _, _, weights = self._run(tgt_in, memory, None, {self.align_layer}, full_context=True)
        return self._alignment(weights[self.align_layer])

    def attention_maps(self, tgt_in: Tensor, memory: TransformerMemory) -> Tensor:
        """Every layer's and head's cross-attention, teacher-forced (with full context if chosen):
        (B, T) -> (B, L, h, T, S)."""
        _, _, weights = self._run(tgt_in, memory, None, set(range(self.num_layers)), self.align_full_context)
        return torch.stack(weights, dim=1)  # L x (B, h, T, S) -> (B, L, h, T, S)

    def logits(self, features: Tensor) -> Tensor:
        """(..., D) -> (..., V) unnormalised scores."""
        return self.output(features)

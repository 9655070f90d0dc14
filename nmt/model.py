"""The encoder-decoder (``Seq2Seq``: encode, one decoder step, the teacher-forced loss, word
dropout) and its assembly from the ``model`` config. Checkpoints are :mod:`nmt.checkpoint`'s.

A model config is data, wherever it comes from (a YAML file, the command line, a stranger's
checkpoint): :func:`build_model` looks each ``_target_`` up in :data:`MODEL_CLASSES` and calls that
class with the node's plain values. Nothing else is imported or called, and a node that is not a
number, string, boolean or null (a nested ``_target_``, a list, Hydra's ``_args_``) is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from nmt import attention as attn
from nmt import decoder as dec
from nmt import transformer as tf
from nmt.attention import Memory
from nmt.decoder import DecoderState, RNNDecoder
from nmt.encoder import RNNEncoder
from nmt.errors import ConfigError
from nmt.loss import alignment_loss, output_cross_entropy
from nmt.tokens import EOS_ID, PAD_ID, UNK_ID

Encoder = RNNEncoder | tf.TransformerEncoder
Decoder = RNNDecoder | tf.TransformerDecoder


def word_dropout(ids: Tensor, rate: float) -> Tensor:
    """Replace each real subword by ``<unk>`` with probability ``rate`` (Sennrich & Zhang 2019,
    "word dropout": the whole token is lost, not some of its embedding's units).

    Padding, BOS and EOS are never replaced: their ids are at most ``EOS_ID``, every subword's above.

    :param ids: (B, L) long token ids. :return: (B, L) long, a new tensor (``ids`` is left as it is).
    """
    if rate == 0.0:
        return ids
    drop = (ids > EOS_ID) & (torch.rand(ids.shape, device=ids.device) < rate)  # (B, L) bool
    return ids.masked_fill(drop, UNK_ID)


class Seq2Seq(nn.Module):
    """Encoder, attention and decoder: any encoder with any decoder (a bi-GRU or a Transformer
    encoder; Bahdanau's, Luong's or the Transformer's decoder).

    :param encoder: source encoder.
    :param decoder: decoder holding the attention module.
    :param src_word_dropout: in training, the probability that a source subword is read as ``<unk>``.
    :param tgt_word_dropout: in training, the same for the decoder's inputs (the previous target
        words of teacher forcing; the predicted targets are never changed).
    """

    def __init__(self, encoder: Encoder, decoder: Decoder, src_word_dropout: float, tgt_word_dropout: float) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_word_dropout, self.tgt_word_dropout = src_word_dropout, tgt_word_dropout

    @property
    def has_alignment(self) -> bool:
        """Whether its attention weights align words (False for the fixed-vector ``none``)."""
        return self.decoder.has_alignment

    def encode(self, src: Tensor, src_lens: Tensor) -> tuple[Memory | tf.TransformerMemory, DecoderState]:
        """:param src: (B, S) long. :param src_lens: (B,) long (CPU).
        :return: the attention memory and the decoder's initial state (a Transformer decoder's:
            empty key and value caches)."""
        enc = self.encoder(src, src_lens)
        return self.decoder.prepare(enc), self.decoder.init_state(enc)

    def decode_step(self, prev: Tensor, memory: Memory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """One output step, for search.

        :param prev: (B,) long, previous target token (BOS at the first step).
        :return: logits (B, V), the new state, attention weights (B, S).
        """
        features, state, weights = self.decoder.step(prev, memory, state)
        return self.decoder.logits(features), state, weights

    def forward(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced scores of every target position.

        :param src: (B, S) long. :param src_lens: (B,) long (CPU). :param tgt_in: (B, T) long, BOS + target.
        :return: logits (B, T, V) and attention weights (B, T, S).
        """
        src, tgt_in = self._drop_words(src, tgt_in)
        memory, state = self.encode(src, src_lens)
        features, weights = self.decoder(tgt_in, memory, state)  # (B, T, O), (B, T, S)
        return self.decoder.logits(features), weights

    def loss(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor, label_smoothing: float
    ) -> tuple[Tensor, Tensor]:
        """Teacher-forced, label-smoothed cross-entropy summed over the real target tokens.

        The same value as scoring :meth:`forward`'s logits, but the output projection and the
        softmax are fused and run only at real tokens (:func:`nmt.loss.output_cross_entropy`).

        :param tgt_out: (B, T) long, target + EOS, PAD after.
        :return: the smoothed loss sum (differentiable) and the NLL sum (detached).
        """
        loss, nll, _ = self._teacher_forced(src, src_lens, tgt_in, tgt_out, label_smoothing, need_weights=False)
        return loss, nll

    def guided_loss(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor, label_smoothing: float, guide: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`loss` and guided alignment's cross-entropy between the attention and ``guide``:
        the same pass's attention (a Transformer's: the layer and heads of :meth:`set_alignment`),
        or, with full context chosen there, that of a second pass that sees the whole target.

        :param guide: (B, T, S) float, each target position's distribution over the source
            positions, or a zero row (:mod:`nmt.data.guidance`).
        :return: the smoothed loss sum and the alignment loss sum (both differentiable), the NLL sum.
        """
        loss, nll, weights = self._teacher_forced(src, src_lens, tgt_in, tgt_out, label_smoothing, need_weights=True)
        return loss, alignment_loss(weights, guide), nll  # weights: (B, T, S)

    def _teacher_forced(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, tgt_out: Tensor, label_smoothing: float, need_weights: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """:return: the smoothed loss sum, the NLL sum and the attention (B, T, S) if asked."""
        src, tgt_in = self._drop_words(src, tgt_in)
        memory, state = self.encode(src, src_lens)
        features, weights = self.decoder(tgt_in, memory, state, need_weights=need_weights)  # (B, T, O), (B, T, S)
        keep = tgt_out != PAD_ID  # (B, T)
        rows = self.decoder.dropout(features[keep])  # (N, O) real tokens only
        output = self.decoder.output
        loss, nll = output_cross_entropy(rows, output.weight, output.bias, tgt_out[keep], label_smoothing)
        return loss, nll, weights

    @property
    def full_context(self) -> bool:
        """Whether force-decoding reads the attention from a pass that sees the whole target
        (:meth:`set_alignment`)."""
        return isinstance(self.decoder, tf.TransformerDecoder) and self.decoder.align_full_context

    @torch.no_grad()
    def teacher_forced_attention(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """The attention that aligns, of a teacher-forced pass (with the full target context if
        chosen): (B, T) -> (B, T, S). :param tgt_in: (B, T) long, BOS + target, PAD after."""
        memory, state = self.encode(src, src_lens)
        _, weights = self.decoder(tgt_in, memory, state)  # (B, T, O), (B, T, S)
        return weights

    @property
    def cross_attention_layers(self) -> int:
        """How many attentions over the source the decoder has: L for a Transformer, 1 for an RNN."""
        return self.decoder.num_layers if isinstance(self.decoder, tf.TransformerDecoder) else 1

    def set_alignment(self, layer: int | None, heads: list[int] | None, full_context: bool = False) -> None:
        """Choose the cross-attention layer and heads that a Transformer decoder shows as its
        attention, and whether teacher-forced passes read it with the full target context
        (:meth:`nmt.transformer.TransformerDecoder.set_alignment`); None, None, False keeps the
        default. An RNN decoder has one attention, which sees only the words before: it takes only
        None, None, False.

        :raise ValueError: a layer or head that does not exist, or a choice for an RNN decoder.
        """
        if isinstance(self.decoder, tf.TransformerDecoder):
            self.decoder.set_alignment(layer, heads, full_context)
        elif layer is not None or heads is not None:
            raise ValueError(f"align.layer and align.heads choose among a Transformer decoder's cross-attention "
                             f"layers and heads; this model's decoder is {type(self.decoder).__name__}, with one "
                             "attention")  # fmt: skip
        elif full_context:
            raise ValueError(f"align.full_context reads a Transformer decoder's cross-attention with the whole target "
                             f"visible; this model's decoder is {type(self.decoder).__name__}, whose state at a word "
                             "has seen only the words before it")  # fmt: skip

    @torch.no_grad()
    def attention_maps(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """Every cross-attention layer's and head's weights of a teacher-forced pass, for plotting.

        :param tgt_in: (B, T) long, BOS + target.
        :return: (B, L, h, T, S); an RNN decoder's attention is one layer with one head.
        """
        memory, state = self.encode(src, src_lens)
        if isinstance(self.decoder, tf.TransformerDecoder):
            return self.decoder.attention_maps(tgt_in, memory)
        _, weights = self.decoder(tgt_in, memory, state)  # (B, T, S)
        return weights[:, None, None]  # (B, 1, 1, T, S)

    def _drop_words(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Word dropout on both inputs, in training mode only."""
        if not self.training:
            return src, tgt_in
        return word_dropout(src, self.src_word_dropout), word_dropout(tgt_in, self.tgt_word_dropout)

    def num_parameters(self) -> int:
        """Distinct parameters: a tied tensor counts once."""
        return sum(p.numel() for p in self.parameters())


# The only classes a model config may name, by role: ``_target_`` -> class.
MODEL_CLASSES: dict[str, dict[str, type[nn.Module]]] = {
    "encoder": {"nmt.encoder.RNNEncoder": RNNEncoder, "nmt.transformer.TransformerEncoder": tf.TransformerEncoder},
    "attention": {
        f"{cls.__module__}.{cls.__name__}": cls
        for cls in (attn.BahdanauAttention, attn.LuongDotAttention, attn.LuongGeneralAttention,
                    attn.ScaledDotAttention, attn.NoAttention, tf.MultiHeadAttention)
    },  # fmt: skip
    "decoder": {
        f"{cls.__module__}.{cls.__name__}": cls for cls in (dec.BahdanauDecoder, dec.LuongDecoder, tf.TransformerDecoder)
    },
}
# The Transformer decoder attends with multi-head attention, one module per layer; the RNN
# decoders with one attention of the seed's kind.
MULTIHEAD = "nmt.transformer.MultiHeadAttention"
TRANSFORMER_DECODER = "nmt.transformer.TransformerDecoder"
PLAIN = (bool, int, float, str, type(None))


def build_component(role: str, node: Mapping[str, Any], **runtime: Any) -> nn.Module:
    """Call the class that ``node["_target_"]`` names in :data:`MODEL_CLASSES` ``[role]`` with the
    node's other keys and the ``runtime`` arguments (sizes known only once the data is read).

    :param role: ``encoder``, ``attention`` or ``decoder``; the key ``model.<role>`` in messages.
    :raise ConfigError: one line naming the key, for an unknown class, a key the class does not take
        (or one it needs and lacks), a value that is not plain, or a value the constructor refuses.
    """
    where = f"model.{role}"
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where}: must be a mapping with a _target_, got {type(node).__name__}")
    target = node.get("_target_")
    classes = MODEL_CLASSES[role]
    if not isinstance(target, str) or target not in classes:
        raise ConfigError(f"{where}._target_={target!r}: not one of nmt's {role} classes ({', '.join(classes)})")
    cls = classes[target]
    kwargs = {}
    for key, value in node.items():
        if key == "_target_":
            continue
        if not isinstance(key, str) or key.startswith("_"):
            raise ConfigError(f"{where}.{key}: a model config takes no Hydra special keys (only _target_)")
        if not isinstance(value, PLAIN):
            raise ConfigError(f"{where}.{key}: must be a number, string, boolean or null, got {type(value).__name__}")
        kwargs[key] = value
    accepted = set(inspect.signature(cls).parameters) - set(runtime)
    unknown, missing = sorted(kwargs.keys() - accepted), sorted(accepted - kwargs.keys())
    if unknown or missing:
        problems = ([f"{where}.{k} is not a setting of {target}" for k in unknown]
                    + [f"{where}.{k} is missing ({target} needs it)" for k in missing])  # fmt: skip
        raise ConfigError("; ".join(problems))
    try:
        return cls(**kwargs, **runtime)
    except (TypeError, ValueError, RuntimeError) as e:  # e.g. luong_dot with sizes that differ
        raise ConfigError(f"{where} ({target}): {' '.join(str(e).split())}") from None


def build_model(model_cfg: DictConfig | Mapping[str, Any], src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Build ``model.encoder``, ``model.attention`` and ``model.decoder`` (:func:`build_component`)
    with the sizes known only at run time (vocabularies, encoder output size) and inject the
    attention into the decoder.

    ``model.share_embeddings`` makes the source embeddings the target embeddings (one tensor; a
    joint vocabulary gives both sides the same ids); with ``model.tie_embeddings`` as well, the output
    layer is that tensor too: three-way tying (Press & Wolf 2017).

    :param model_cfg: the ``model`` node (a DictConfig is resolved first; a dict is used as it is).
    :raise ConfigError: one line naming the key, for any setting that cannot build a model.
    """
    if isinstance(model_cfg, DictConfig):  # before resolving: the other kind's keys may not resolve
        targets = (OmegaConf.select(model_cfg, f"{role}._target_") for role in ("attention", "decoder"))
        check_attention_fits(*targets)
    cfg = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else model_cfg
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"model: must be a mapping, got {type(cfg).__name__}")
    for key in ("encoder", "attention", "decoder"):
        if key not in cfg:
            raise ConfigError(f"model.{key} is missing")
    flags = {}
    for key, kind in (("src_word_dropout", float), ("tgt_word_dropout", float), ("share_embeddings", bool)):
        value = cfg.get(key)
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, int | float):
            raise ConfigError(f"model.{key}={value!r}: must be {'true or false' if kind is bool else 'a number'}")
        flags[key] = value
    encoder = build_component("encoder", cfg["encoder"], vocab_size=src_vocab_size, pad_id=PAD_ID)
    attention = _build_attention(cfg["attention"], cfg["decoder"], encoder.output_dim)
    decoder = build_component(
        "decoder", cfg["decoder"], vocab_size=tgt_vocab_size, pad_id=PAD_ID, attention=attention,
        memory_dim=encoder.output_dim,
    )  # fmt: skip
    if flags["share_embeddings"]:
        if src_vocab_size != tgt_vocab_size or encoder.embedding.weight.shape != decoder.embedding.weight.shape:
            raise ConfigError(
                f"model.share_embeddings needs one joint vocabulary (data.vocab.joint=true) and equal embedding sizes; "
                f"got source {tuple(encoder.embedding.weight.shape)} and target {tuple(decoder.embedding.weight.shape)}"
            )
        encoder.embedding.weight = decoder.embedding.weight
    return Seq2Seq(encoder, decoder, float(flags["src_word_dropout"]), float(flags["tgt_word_dropout"]))


def _target(node: Any) -> Any:
    return node.get("_target_") if isinstance(node, Mapping) else None


def check_attention_fits(attention_target: Any, decoder_target: Any) -> None:
    """Refuse multi-head attention with an RNN decoder and an RNN attention with the Transformer
    decoder, in one line naming both keys.

    :raise ConfigError: for a pair that cannot be built.
    """
    if (attention_target == MULTIHEAD) != (decoder_target == TRANSFORMER_DECODER):
        raise ConfigError(
            f"model.attention={attention_target} cannot be used with model.decoder={decoder_target}: the Transformer "
            "decoder attends with model/attention=multihead, and the RNN decoders with one of bahdanau, luong_dot, "
            "luong_general, scaled_dot or none"
        )


def _build_attention(node: Any, decoder_node: Any, memory_dim: int) -> nn.Module:
    """``model.attention`` for the decoder: one module for an RNN decoder (its query is the
    decoder state), one multi-head module per layer for the Transformer decoder."""
    check_attention_fits(_target(node), _target(decoder_node))
    if _target(decoder_node) != TRANSFORMER_DECODER:
        return build_component("attention", node, query_dim=_size(decoder_node, "hidden_dim"), memory_dim=memory_dim)
    layers, d_model = _size(decoder_node, "num_layers"), _size(decoder_node, "d_model")
    return nn.ModuleList(build_component("attention", node, query_dim=d_model, memory_dim=memory_dim)
                         for _ in range(layers))  # fmt: skip


def _size(node: Any, key: str) -> int:
    """A positive integer setting of a model node, read before its class is built."""
    value = node.get(key) if isinstance(node, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model.decoder.{key}={value!r}: must be an integer >= 1")
    return value

"""The encoder-decoder (``Seq2Seq``: encode, one decoder step, the teacher-forced loss, word
dropout) and its assembly from the ``model`` config. Checkpoints are :mod:`nmt.checkpoint`'s.
"""

from __future__ import annotations

import hydra
import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from nmt.attention import Memory
from nmt.decoder import DecoderState, RNNDecoder
from nmt.encoder import RNNEncoder
from nmt.loss import output_cross_entropy
from nmt.tokens import EOS_ID, PAD_ID, UNK_ID


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
    """Encoder, attention and decoder.

    :param encoder: source encoder.
    :param decoder: decoder holding the attention module.
    :param src_word_dropout: in training, the probability that a source subword is read as ``<unk>``.
    :param tgt_word_dropout: in training, the same for the decoder's inputs (the previous target
        words of teacher forcing; the predicted targets are never changed).
    """

    def __init__(self, encoder: RNNEncoder, decoder: RNNDecoder, src_word_dropout: float, tgt_word_dropout: float) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.src_word_dropout, self.tgt_word_dropout = src_word_dropout, tgt_word_dropout

    def encode(self, src: Tensor, src_lens: Tensor) -> tuple[Memory, DecoderState]:
        """:param src: (B, S) long. :param src_lens: (B,) long (CPU).
        :return: the attention memory and the decoder's initial state."""
        enc = self.encoder(src, src_lens)
        memory = self.decoder.attention.prepare(enc.states, enc.mask, enc.final)
        return memory, self.decoder.init_state(enc)

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
        src, tgt_in = self._drop_words(src, tgt_in)
        memory, state = self.encode(src, src_lens)
        features, _ = self.decoder(tgt_in, memory, state)  # (B, T, O)
        keep = tgt_out != PAD_ID  # (B, T)
        rows = self.decoder.dropout(features[keep])  # (N, O) real tokens only
        output = self.decoder.output
        return output_cross_entropy(rows, output.weight, output.bias, tgt_out[keep], label_smoothing)

    def _drop_words(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Word dropout on both inputs, in training mode only."""
        if not self.training:
            return src, tgt_in
        return word_dropout(src, self.src_word_dropout), word_dropout(tgt_in, self.tgt_word_dropout)

    def num_parameters(self) -> int:
        """Distinct parameters: a tied tensor counts once."""
        return sum(p.numel() for p in self.parameters())


def build_model(model_cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Instantiate ``model.encoder``, ``model.attention`` and ``model.decoder`` with the sizes known
    only at run time (vocabularies, encoder output size) and inject the attention into the decoder.

    ``model.share_embeddings`` makes the source embeddings the target embeddings (one tensor; a
    joint vocabulary gives both sides the same ids); with ``model.tie_embeddings`` as well, the output
    layer is that tensor too: three-way tying (Press & Wolf 2017).
    """
    encoder = hydra.utils.instantiate(model_cfg.encoder, vocab_size=src_vocab_size, pad_id=PAD_ID)
    attention = hydra.utils.instantiate(
        model_cfg.attention, query_dim=model_cfg.decoder.hidden_dim, memory_dim=encoder.output_dim
    )
    decoder = hydra.utils.instantiate(
        model_cfg.decoder,
        vocab_size=tgt_vocab_size,
        pad_id=PAD_ID,
        attention=attention,
        memory_dim=encoder.output_dim,
    )
    if model_cfg.share_embeddings:
        if src_vocab_size != tgt_vocab_size or encoder.embedding.weight.shape != decoder.embedding.weight.shape:
            raise ValueError(
                f"model.share_embeddings needs one joint vocabulary (data.vocab.joint=true) and equal embedding sizes; "
                f"got source {tuple(encoder.embedding.weight.shape)} and target {tuple(decoder.embedding.weight.shape)}"
            )
        encoder.embedding.weight = decoder.embedding.weight
    return Seq2Seq(encoder, decoder, model_cfg.src_word_dropout, model_cfg.tgt_word_dropout)

"""Several trained models decoding as one system (an ensemble).

Each member keeps its own encoder, attention and decoder state; at every output step their
next-token distributions are combined into one, and greedy search, beam search, n-best lists and
the length penalty run on that distribution unchanged (:mod:`nmt.search` sees one model). Two
rules combine N distributions p_1 ... p_N over the target vocabulary:

    log_mean   log p(y) = 1/N sum_i log p_i(y) - log Z       (a renormalised geometric mean)
    mean       log p(y) = log (1/N sum_i p_i(y))             (the arithmetic mean)

``log_mean`` is the default: a token is likely only when every member finds it likely (a product
of experts), so one member's confident mistake is vetoed by the others; it is what Marian and
OpenNMT-py ensembles do. ``mean`` (fairseq's rule) keeps every member's candidates alive and is
gentler when the members disagree. Which is better for a set of checkpoints is an empirical
question: compare both on a validation set (``nmt.evaluate ... ensemble_rule=mean``).

The attention an ensemble shows or saves is the members' average, row by row a distribution
over the source again.

On the command line an ensemble is one system whose checkpoints are joined by ``+``:
``ckpt=runs/a/checkpoints/best.pt+runs/b/checkpoints/best.pt`` (or ``ckpt=runs/a+runs/b``: a run
folder stands for its ``checkpoints/best.pt``). Its members must translate the
same direction with the same subword models (the same data settings), or the step distributions
would be over different vocabularies; other checkpoints are refused in one line.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from nmt.checkpoint import checkpoint_file, direction, load_checkpoint, model_from_checkpoint
from nmt.decoder import DecoderState
from nmt.errors import CheckpointError
from nmt.model import Seq2Seq
from nmt.quantization import check_precision, quantize
from nmt.transformer import TransformerDecoder
from nmt.vocab import Vocab

RULES = ("log_mean", "mean")
SEPARATOR = "+"


class EnsembleMemory(tuple):
    """One :class:`~nmt.attention.Memory` per member, moved along the batch together."""

    def repeat_interleave(self, k: int) -> EnsembleMemory:
        return EnsembleMemory(m.repeat_interleave(k) for m in self)

    def index_select(self, rows: Tensor) -> EnsembleMemory:
        return EnsembleMemory(m.index_select(rows) for m in self)


class Ensemble(nn.Module):
    """Members that decode as one model: the interface of :class:`~nmt.model.Seq2Seq` that search
    uses (``encode``, ``decode_step``, ``has_alignment``).

    The decoder state is the members' states one after the other (a flat tuple of (B, ...)
    tensors, which search reorders along dim 0 as it does a single model's).

    :param members: two or more models with the same source and target vocabularies.
    :param rule: ``log_mean`` or ``mean`` (see the module docstring).
    """

    def __init__(self, members: list[Seq2Seq], rule: str = "log_mean") -> None:
        super().__init__()
        if rule not in RULES:
            raise ValueError(f"ensemble_rule={rule!r}: choose one of {', '.join(RULES)}")
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)
        self.rule = rule
        self.state_sizes: tuple[int, ...] = ()  # tensors in each member's decoder state, set by encode

    @property
    def has_alignment(self) -> bool:
        """Whether the averaged attention aligns words: every member attends."""
        return all(m.has_alignment for m in self.members)

    def num_parameters(self) -> int:
        return sum(m.num_parameters() for m in self.members)

    def set_alignment(self, layer: int | None, heads: list[int] | None, full_context: bool = False) -> None:
        """The same choice of cross-attention layer, heads and context for every Transformer member
        (an RNN member keeps its one attention, which sees only the earlier words).

        :raise ValueError: any choice, when no member has a Transformer decoder.
        """
        if (layer is not None or heads is not None or full_context) and not any(
            isinstance(m.decoder, TransformerDecoder) for m in self.members
        ):
            self.members[0].set_alignment(layer, heads, full_context)  # raises, naming the keys
        for member in self.members:
            if isinstance(member.decoder, TransformerDecoder) or (layer is None and heads is None and not full_context):
                member.set_alignment(layer, heads, full_context)

    @property
    def full_context(self) -> bool:
        """Whether a Transformer member reads its attention with the whole target visible."""
        return any(m.full_context for m in self.members)

    def teacher_forced_attention(self, src: Tensor, src_lens: Tensor, tgt_in: Tensor) -> Tensor:
        """The members' teacher-forced attention (each as :meth:`nmt.model.Seq2Seq.teacher_forced_attention`),
        averaged: (B, T) -> (B, T, S)."""
        return torch.stack([m.teacher_forced_attention(src, src_lens, tgt_in).float() for m in self.members]).mean(0)

    def encode(self, src: Tensor, src_lens: Tensor) -> tuple[EnsembleMemory, DecoderState]:
        """:param src: (B, S) long. :param src_lens: (B,) long (CPU).
        :return: every member's memory, and their initial states as one flat tuple."""
        encoded = [m.encode(src, src_lens) for m in self.members]
        self.state_sizes = tuple(len(state) for _, state in encoded)
        return EnsembleMemory(memory for memory, _ in encoded), tuple(t for _, state in encoded for t in state)

    def decode_step(self, prev: Tensor, memory: EnsembleMemory, state: DecoderState) -> tuple[Tensor, DecoderState, Tensor]:
        """One output step of every member, combined.

        :param prev: (B,) long. :return: the combined log-probabilities (B, V) (normalised: search's
            log-softmax leaves them as they are), the new states, the averaged attention (B, S).
        """
        log_probs, states, weights = [], [], []
        start = 0
        for member, member_memory, size in zip(self.members, memory, self.state_sizes):
            logits, member_state, member_weights = member.decode_step(prev, member_memory, state[start : start + size])
            start += size
            log_probs.append(torch.log_softmax(logits.float(), dim=-1))  # (B, V)
            states.extend(member_state)
            weights.append(member_weights.float())
        stacked = torch.stack(log_probs)  # (N, B, V)
        if self.rule == "mean":
            combined = torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))
        else:
            combined = torch.log_softmax(stacked.mean(dim=0), dim=-1)
        return combined, tuple(states), torch.stack(weights).mean(dim=0)


def split_members(spec: str | Path) -> list[Path]:
    """The checkpoint files of a system: ``a.pt+b.pt`` -> [a.pt, b.pt]; a name that is itself an
    existing file or folder (even with a ``+`` in it) is one checkpoint; a run folder stands for its
    ``checkpoints/best.pt`` (:func:`nmt.checkpoint.checkpoint_file`)."""
    text = str(spec)
    if Path(text).exists() or SEPARATOR not in text:
        return [checkpoint_file(text)]
    parts = text.split(SEPARATOR)
    if any(not part for part in parts):
        raise CheckpointError(f"{text}: an empty checkpoint name; join the checkpoints of an ensemble with '+' (a.pt+b.pt)")
    return [checkpoint_file(part) for part in parts]


def load_system(
    spec: str | Path | list, device: torch.device, rule: str = "log_mean", precision: str = "fp32"
) -> tuple[Seq2Seq | Ensemble, Vocab, Vocab, DictConfig]:
    """Load one checkpoint, or several joined by ``+`` (or given as a list) as an :class:`Ensemble`;
    a run folder stands for its ``checkpoints/best.pt``.

    :param precision: ``fp32``, or ``int8`` for dynamically quantized members on the CPU
        (:mod:`nmt.quantization`).

    :return: the model (a plain :class:`~nmt.model.Seq2Seq` for one file), the vocabularies and
        the first member's config (its ``train.search`` is the ensemble's default decoding).
    :raise CheckpointError: a file that cannot be used, or members that differ in direction or
        subword models; one line.
    """
    paths = [checkpoint_file(p) for p in spec] if isinstance(spec, list | tuple) else split_members(spec)
    return system_from_payloads(paths, [load_checkpoint(path) for path in paths], device, rule, precision)


def system_from_payloads(
    paths: list[Path], payloads: list[dict], device: torch.device, rule: str = "log_mean", precision: str = "fp32"
) -> tuple[Seq2Seq | Ensemble, Vocab, Vocab, DictConfig]:
    """:func:`load_system` of checkpoints already read (``paths`` name them in errors)."""
    if rule not in RULES:
        raise CheckpointError(f"ensemble_rule={rule!r}: choose one of {', '.join(RULES)}")
    check_precision(precision, device)
    loaded = []
    for path, payload in zip(paths, payloads):
        try:
            model, *rest = model_from_checkpoint(payload)
        except CheckpointError as e:
            raise CheckpointError(f"{path}: {e}") from None
        loaded.append((quantize(model, precision), *rest))
    model, src_vocab, tgt_vocab, config = loaded[0]
    if len(loaded) == 1:
        return model.to(device), src_vocab, tgt_vocab, config
    for path, (_, other_src, other_tgt, other_config) in zip(paths[1:], loaded[1:]):
        if direction(other_config) != direction(config):
            raise CheckpointError(f"{path} translates {direction(other_config)} and {paths[0]} {direction(config)}: "
                                  "an ensemble's checkpoints must translate the same direction")  # fmt: skip
        for side, mine, theirs in (("source", src_vocab, other_src), ("target", tgt_vocab, other_tgt)):
            if mine.model_proto != theirs.model_proto:
                raise CheckpointError(f"{path} has another {side} subword model than {paths[0]}: the checkpoints of "
                                      "an ensemble must share their vocabularies (the same data settings)")  # fmt: skip
    return Ensemble([m for m, *_ in loaded], rule).to(device).eval(), src_vocab, tgt_vocab, config

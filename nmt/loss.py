"""Token-level cross-entropy with label smoothing (Szegedy et al. 2016), summed over real tokens.

With smoothing eps the target distribution puts 1 - eps on the reference token and eps spread
evenly over the vocabulary, so the loss per token is

    (1 - eps) * (-log p(y)) + eps * mean_v(-log p(v))

(the same definition as ``torch.nn.functional.cross_entropy(label_smoothing=eps)``). The plain
negative log-likelihood is returned too, for perplexity.
"""

from __future__ import annotations

import torch
from torch import Tensor


def sequence_loss(logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float) -> tuple[Tensor, Tensor, int]:
    """:param logits: (N, V) or (B, T, V) scores. :param targets: (N,) or (B, T) long, ``pad_id`` ignored.
    :return: smoothed loss summed over real tokens, NLL summed over real tokens (both 0-dim tensors),
        and the number of real tokens."""
    logits, targets = logits.reshape(-1, logits.size(-1)), targets.reshape(-1)  # (N, V), (N,)
    keep = targets != pad_id  # (N,)
    # Masking by multiplication, not by indexing: with length-bucketed batches only a few rows are
    # padding, and boolean indexing of an (N, V) tensor costs a full copy forward and backward.
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    token_nll = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
    weight = keep.to(log_probs.dtype)
    nll = (token_nll * weight).sum()
    num_tokens = int(keep.sum())
    if label_smoothing == 0.0:
        return nll, nll.detach(), num_tokens
    uniform = (-log_probs.mean(dim=-1) * weight).sum()
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    return loss, nll.detach(), num_tokens

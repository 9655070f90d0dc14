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


class _OutputCrossEntropy(torch.autograd.Function):
    """Output projection + label-smoothed cross-entropy, by chunks of rows, never holding the
    (N, V) logits of the whole batch at once; the same values and gradients as
    ``sequence_loss(features @ W^T + b, ...)``.

    With q the smoothed target distribution and p = softmax(z), dLoss/dz = p - q, and since
    q = (1 - eps) onehot(y) + eps / V, the q part of every gradient is a cheap gather or column
    sum, so the backward pass touches each (chunk, V) block only through two matmuls.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)  # softmax statistics in fp32
    def forward(ctx, features: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, eps: float, chunk: int):
        probs, loss, nll = [], features.new_zeros(()), features.new_zeros(())
        vocab = weight.size(0)
        for rows, ys in zip(features.split(chunk), targets.split(chunk)):
            z = torch.addmm(bias, rows, weight.t())  # (c, O) @ (O, V) -> (c, V)
            lse = torch.logsumexp(z, dim=1)  # (c,)
            token_nll = lse - z.gather(1, ys.unsqueeze(1)).squeeze(1)  # (c,)
            nll = nll + token_nll.sum()
            loss = loss + (1 - eps) * token_nll.sum() + eps * (lse - z.mean(dim=1)).sum()
            probs.append(z.sub_(lse.unsqueeze(1)).exp_())  # softmax in place, kept for backward
        ctx.save_for_backward(features, weight, targets)
        ctx.probs, ctx.eps, ctx.vocab = probs, eps, vocab
        return loss, nll

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        features, weight, targets = ctx.saved_tensors
        eps, vocab, chunk = ctx.eps, ctx.vocab, ctx.probs[0].size(0)
        # dL/dz = g * (p - q); the nll output is for logging only (its gradient is ignored)
        grad_features = torch.empty_like(features)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros(vocab, dtype=weight.dtype, device=weight.device)
        for i, p in enumerate(ctx.probs):
            rows = features[i * chunk : i * chunk + p.size(0)]  # (c, O)
            torch.mm(p, weight, out=grad_features[i * chunk : i * chunk + p.size(0)])  # (c, V) @ (V, O)
            grad_weight.addmm_(p.t(), rows)  # (V, c) @ (c, O)
            grad_bias += p.sum(dim=0)
        ctx.probs = None
        num = features.size(0)
        # subtract q: (1 - eps) at the targets, eps / V everywhere
        grad_features -= (1 - eps) * weight[targets] + (eps / vocab) * weight.sum(dim=0)
        grad_weight.index_add_(0, targets, features, alpha=-(1 - eps))
        grad_weight -= (eps / vocab) * features.sum(dim=0)
        grad_bias.index_add_(0, targets, torch.full_like(targets, -(1 - eps), dtype=grad_bias.dtype))
        grad_bias -= eps * num / vocab
        return grad_features * grad_loss, grad_weight * grad_loss, grad_bias * grad_loss, None, None, None


def output_cross_entropy(
    features: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, label_smoothing: float, chunk: int = 256
) -> tuple[Tensor, Tensor]:
    """Label-smoothed cross-entropy of ``features @ weight^T + bias`` against ``targets``, fused.

    :param features: (N, O) the layer under the softmax, real tokens only.
    :param weight: (V, O) output projection. :param bias: (V,).
    :param targets: (N,) long.
    :param chunk: rows per block; memory is O(chunk x V) beyond the saved probabilities.
    :return: smoothed loss summed over the N tokens (differentiable) and the NLL sum (for logging).
    """
    loss, nll = _OutputCrossEntropy.apply(features, weight, bias, targets, label_smoothing, chunk)
    return loss, nll.detach()


def alignment_loss(attention: Tensor, guide: Tensor) -> Tensor:
    """Guided alignment (Chen et al. 2016; Garg et al. 2019): the cross-entropy between each target
    position's attention and the distribution its word's links give, summed over the positions
    that have links.

        L_align = - sum_t sum_s q_ts log a_ts

    For a row q that sums to one, ``- sum_s q_s log a_s`` over distributions a is smallest exactly
    at a = q (Gibbs' inequality); a row of zeros (no links, ``</s>``, padding) adds nothing.

    :param attention: (B, T, S) weights, each row summing to one over the real source positions.
    :param guide: (B, T, S) targets (:mod:`nmt.data.guidance`): rows that sum to one, or zero rows.
    :return: 0-dim, the sum over the batch (differentiable in ``attention``).
    """
    log_attention = torch.log(attention.float().clamp_min(1e-9))  # (B, T, S); masked weights are 0, their targets too
    return -(guide * log_attention).sum()

"""The four special token ids every vocabulary of this package has (:mod:`nmt.vocab` makes the
sentencepiece models so), and which the model, batching and search rely on::

    PAD_ID = 0   padding, never produced by the model (its logit is masked in search)
    UNK_ID = 1   unknown piece (also what word dropout reads a dropped word as)
    BOS_ID = 2   start of a target sentence (decoder input at step 1)
    EOS_ID = 3   end of a sentence (appended to sources and targets)

Every real subword id is above ``EOS_ID``. :func:`pad_sources` lays sources out as the encoder
reads them, for training batches and search alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def pad_sources(src_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources as the encoder reads them: each followed by EOS, padded with PAD to the longest.

    :param src_ids: subword ids of each source, without EOS.
    :return: src (B, S) long and src_lens (B,) long (EOS included), both on the CPU.
    Example: [[5, 6], [7]] -> src [[5, 6, EOS], [7, EOS, PAD]], src_lens [3, 2].
    """
    lengths = np.array([len(ids) + 1 for ids in src_ids], dtype=np.int64)  # + EOS
    src = np.full((len(src_ids), int(lengths.max(initial=1))), PAD_ID, dtype=np.int64)  # (B, S)
    for row, ids in enumerate(src_ids):
        src[row, : lengths[row] - 1] = ids
        src[row, lengths[row] - 1] = EOS_ID
    return torch.from_numpy(src), torch.from_numpy(lengths)

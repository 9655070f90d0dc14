"""Sources laid out for the encoder, the same way for training batches and for search."""

from __future__ import annotations

import datasets
import numpy as np
import torch

from nmt.data.batches import PairData
from nmt.tokens import EOS_ID, PAD_ID, pad_sources


def test_pad_sources_appends_eos_and_pads_to_the_longest() -> None:
    src, src_lens = pad_sources([[5, 6], [7], []])
    assert src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID], [EOS_ID, PAD_ID, PAD_ID]]
    assert src_lens.tolist() == [3, 2, 1] and src.dtype == src_lens.dtype == torch.int64


def test_training_batches_lay_out_sources_as_search_does() -> None:
    ids = [[5, 6, 7], [8], [9, 10]]
    data = PairData(datasets.Dataset.from_dict({"src_ids": ids, "tgt_ids": ids}))
    batch = data.collate(np.array([2, 0, 1]))
    src, src_lens = pad_sources([ids[2], ids[0], ids[1]])
    assert torch.equal(batch.src, src) and torch.equal(batch.src_lens, src_lens)

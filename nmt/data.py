"""From sentence pairs to padded batches: subword ids with Hugging Face ``datasets`` (cached on disk),
length filtering, and token-bucketed batching.

Batching by tokens keeps the work per update constant; sorting by length before cutting batches keeps
padding low (a batch of 4096 target tokens holds ~4096 real ones, not ~1700 as with random batches).

    lengths (sorted)    3 3 4 4 4 5 | 5 6 6 7 | 9 11     max_tokens = 24
    batch               [6 x 5=20]  | [4 x 7=28 > 24] ... cut so that rows x longest <= max_tokens
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
from omegaconf import DictConfig

from nmt.corpora import load_corpus
from nmt.text import ParallelText
from nmt.tokens import pad_sources
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab, VocabSettings, build_vocabs

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """A padded batch, batch-first.

    :ivar src: (B, S) long, source ids followed by EOS, then PAD.
    :ivar src_lens: (B,) long, real source lengths (EOS included), on the CPU.
    :ivar tgt_in: (B, T) long, BOS followed by the target ids, then PAD (decoder input).
    :ivar tgt_out: (B, T) long, the target ids followed by EOS, then PAD (what is predicted).
    :ivar indices: (B,) long, positions of the pairs in their split.
    """

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    indices: torch.Tensor

    @property
    def num_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        non_blocking = device.type == "cuda"
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.src_lens,  # pack_padded_sequence wants lengths on the CPU
            self.tgt_in.to(device, non_blocking=non_blocking),
            self.tgt_out.to(device, non_blocking=non_blocking),
            self.indices,
        )


# --------------------------------------------------------------------------- subword ids


def _dataset_key(text: ParallelText, src_vocab: Vocab, tgt_vocab: Vocab) -> str:
    digest = hashlib.sha256()
    for side in (text.src, text.tgt):
        digest.update("\n".join(side).encode("utf-8"))
        digest.update(b"\0")
    digest.update(src_vocab.sha256.encode())
    digest.update(tgt_vocab.sha256.encode())
    return digest.hexdigest()[:20]


def tokenize(text: ParallelText, src_vocab: Vocab, tgt_vocab: Vocab, cache_dir: Path) -> datasets.Dataset:
    """A ``datasets.Dataset`` with columns ``src``, ``tgt`` (text) and ``src_ids``, ``tgt_ids``.

    The ids are added with ``Dataset.map`` and saved under ``cache_dir/<key>``, where the key is made
    from the text and the subword models, so a later run on the same data loads them instead.
    """
    folder = Path(cache_dir) / _dataset_key(text, src_vocab, tgt_vocab)
    if (folder / "dataset_info.json").exists():
        return datasets.load_from_disk(str(folder))
    pairs = datasets.Dataset.from_dict({"src": text.src, "tgt": text.tgt})
    encoded = pairs.map(
        lambda rows: {"src_ids": src_vocab.encode(rows["src"]), "tgt_ids": tgt_vocab.encode(rows["tgt"])},
        batched=True,
        batch_size=2000,
        desc="subword ids",
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    encoded.save_to_disk(str(tmp))
    try:
        tmp.rename(folder)  # atomic: another run may have finished first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(folder))


def filter_training_pairs(dataset: datasets.Dataset, max_len: int) -> datasets.Dataset:
    """Drop pairs with an empty side and pairs longer than ``max_len`` subwords (training only)."""
    src_lens = np.array([len(ids) for ids in dataset["src_ids"]])
    tgt_lens = np.array([len(ids) for ids in dataset["tgt_ids"]])
    empty = np.array([not s.strip() or not t.strip() for s, t in zip(dataset["src"], dataset["tgt"])])
    too_long = ~empty & ((src_lens > max_len) | (tgt_lens > max_len))
    if empty.any():
        log.info("dropped %d training pairs with an empty or whitespace-only side", int(empty.sum()))
    if too_long.any():
        log.info("dropped %d training pairs longer than data.max_len=%d subwords", int(too_long.sum()), max_len)
    keep = np.flatnonzero(~(empty | too_long))
    if len(keep) == 0:
        raise ValueError(
            f"no training pairs left: {int(empty.sum())} have an empty side and {int(too_long.sum())} are longer "
            f"than data.max_len={max_len} subwords; raise data.max_len"
        )
    return dataset.select(keep) if len(keep) < len(dataset) else dataset


# --------------------------------------------------------------------------- batching


class PairData:
    """The subword ids of one split, held as numpy arrays for fast batching.

    :param dataset: a dataset made by :func:`tokenize` (possibly filtered).
    """

    def __init__(self, dataset: datasets.Dataset) -> None:
        self.src_ids = [np.asarray(ids, dtype=np.int64) for ids in dataset["src_ids"]]
        self.tgt_ids = [np.asarray(ids, dtype=np.int64) for ids in dataset["tgt_ids"]]
        # +1 for the EOS of the source and for the BOS/EOS of the target
        self.src_lens = np.array([len(ids) + 1 for ids in self.src_ids], dtype=np.int64)
        self.tgt_lens = np.array([len(ids) + 1 for ids in self.tgt_ids], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.src_ids)

    def collate(self, indices: np.ndarray) -> Batch:
        """Pad the pairs at ``indices`` into one :class:`Batch`."""
        n = len(indices)
        src, src_lens = pad_sources([self.src_ids[i] for i in indices])
        tgt_in = np.full((n, int(self.tgt_lens[indices].max())), PAD_ID, dtype=np.int64)
        tgt_out = tgt_in.copy()
        for row, i in enumerate(indices):
            t = self.tgt_ids[i]
            tgt_in[row, 0] = BOS_ID
            tgt_in[row, 1 : len(t) + 1] = t
            tgt_out[row, : len(t)] = t
            tgt_out[row, len(t)] = EOS_ID
        return Batch(
            src,
            src_lens,
            torch.from_numpy(tgt_in),
            torch.from_numpy(tgt_out),
            torch.from_numpy(np.asarray(indices, dtype=np.int64)),
        )

    def token_batches(self, max_tokens: int, shuffle: bool, seed: int = 0, epoch: int = 0) -> list[np.ndarray]:
        """Cut the split into batches of at most ``max_tokens`` padded tokens, every pair exactly once.

        Pairs are sorted by (target, source) length, ties broken at random when ``shuffle``, then cut
        greedily; a batch's size is rows x its longest side. With ``shuffle`` the batch order is a
        permutation drawn from ``(seed, epoch)``, so an epoch's batches can be replayed on resume.
        A pair longer than ``max_tokens`` forms a batch on its own.
        """
        rng = np.random.default_rng([seed, epoch])
        tie_break = rng.permutation(len(self)) if shuffle else np.arange(len(self))
        order = tie_break[np.lexsort((self.src_lens[tie_break], self.tgt_lens[tie_break]))]
        longest = np.maximum(self.src_lens, self.tgt_lens)[order]
        batches, start, width = [], 0, 0
        for pos in range(len(order)):
            width = max(width, int(longest[pos]))
            if (pos + 1 - start) * width > max_tokens and pos > start:
                batches.append(order[start:pos])
                start, width = pos, int(longest[pos])
        batches.append(order[start:])
        if shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def sentence_batches(self, batch_size: int) -> list[np.ndarray]:
        """Batches of ``batch_size`` sentences sorted by source length (for decoding)."""
        order = np.argsort(-self.src_lens, kind="stable")
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def padding_fraction(self, batches: list[np.ndarray]) -> float:
        """Share of padded target positions that hold PAD, over ``batches``."""
        real = sum(int(self.tgt_lens[b].sum()) for b in batches)
        padded = sum(int(self.tgt_lens[b].max()) * len(b) for b in batches)
        return 1.0 - real / padded


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's share of an epoch's batches: the same number for every rank, every pair exactly once.

    Batches are dealt round-robin. When their number is not a multiple of ``world_size``, the batch
    with the most rows among the last ones is halved (in place, so no batch grows beyond
    ``max_tokens``) until it is; if the last batches hold too few rows, the batch before them joins
    them first. With 7 batches and 2 ranks: rank 0 gets b0 b2 b4 + half of b6, rank 1 gets b1 b3 b5
    + the other half of b6. Only if every batch is a single pair are two of them merged.

    :raises ValueError: fewer pairs than ranks (some rank would have nothing to train on).
    """
    if world_size == 1:
        return batches
    whole = len(batches) - len(batches) % world_size
    head, tail = list(batches[:whole]), list(batches[whole:])
    while (len(head) + len(tail)) % world_size:
        sizes = [len(b) for b in tail]
        if sizes and max(sizes) > 1:
            i = sizes.index(max(sizes))
            half = (len(tail[i]) + 1) // 2
            tail[i : i + 1] = [tail[i][:half], tail[i][half:]]
        elif head:
            tail.insert(0, head.pop())
        else:  # only single pairs left: merge the extra ones into the pairs before them
            extra = len(tail) % world_size
            keep = len(tail) - extra
            if keep == 0:
                raise ValueError(f"{len(tail)} training pairs cannot be shared among {world_size} processes")
            for j in range(extra):
                tail[keep - world_size + j] = np.concatenate([tail[keep - world_size + j], tail[keep + j]])
            del tail[keep:]
    return (head + tail)[rank::world_size]


# --------------------------------------------------------------------------- a run's data


@dataclass
class Splits:
    """Everything a run reads: vocabularies, the filtered training data and the evaluation sets."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train: PairData
    evaluation: dict[str, tuple[PairData, list[str], list[str]]]  # role -> (ids, sources, references)


def prepare_data(data_cfg: DictConfig) -> Splits:
    """Read the corpus, build (or reuse) the subword models and the tokenized datasets."""
    corpus = load_corpus(data_cfg)
    cache = Path(data_cfg.cache_dir)
    src_vocab, tgt_vocab = build_vocabs(
        corpus["train"].src, corpus["train"].tgt, VocabSettings(**data_cfg.vocab), cache / "spm"
    )
    datasets_ = {role: tokenize(text, src_vocab, tgt_vocab, cache / "tokenized") for role, text in corpus.items()}
    train_data = PairData(filter_training_pairs(datasets_["train"], data_cfg.max_len))
    evaluation = {
        role: (PairData(ds), corpus[role].src, corpus[role].tgt) for role, ds in datasets_.items() if role != "train"
    }
    log.info(
        "data: %d training pairs, %s; vocabularies %d/%d pieces",
        len(train_data), ", ".join(f"{r} {len(d[0])}" for r, d in evaluation.items()), len(src_vocab), len(tgt_vocab),
    )  # fmt: skip
    return Splits(src_vocab, tgt_vocab, train_data, evaluation)

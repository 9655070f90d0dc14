"""From sentence pairs to padded batches: subword ids with Hugging Face ``datasets`` (cached on disk),
length filtering, and token-bucketed batching.

Batching by tokens keeps the work per update constant; sorting by length before cutting batches keeps
padding low (a batch of 4096 target tokens holds ~4096 real ones, not ~1700 as with random batches).

    lengths (sorted)    3 3 4 4 4 5 | 5 6 6 7 | 9 11     max_tokens = 24
    batch               [6 x 5=20]  | [4 x 7=28 > 24] ... cut so that rows x longest <= max_tokens
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import sentencepiece as spm
import torch
from omegaconf import DictConfig

from nmt.data.corpora import content_key, corpus_kind, extra_train_size, load_corpus
from nmt.data.guidance import GOLD, AlignmentGuide, check_gold, gold_links_of, read_links
from nmt.data.subword_sampling import PairSampler, SubwordSampling, pair_sampler
from nmt.data.subwords import VocabSettings, build_vocabs
from nmt.data.text import worker_processes
from nmt.tokens import pad_sources
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """A padded batch, batch-first.

    :ivar src: (B, S) long, source ids followed by EOS, then PAD.
    :ivar src_lens: (B,) long, real source lengths (EOS included), on the CPU.
    :ivar tgt_in: (B, T) long, BOS followed by the target ids, then PAD (decoder input).
    :ivar tgt_out: (B, T) long, the target ids followed by EOS, then PAD (what is predicted).
    :ivar indices: (B,) long, positions of the pairs in their split.
    :ivar guide: (B, T, S) float, the attention targets of guided alignment (row t a distribution
        over the source positions, or all zero where target position t has no links), or None.
    """

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    indices: torch.Tensor
    guide: torch.Tensor | None = None

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
            None if self.guide is None else self.guide.to(device, non_blocking=non_blocking),
        )


# --------------------------------------------------------------------------- subword ids

TOKENIZED_FORMAT = 2  # bump when the layout of the cached tokenized datasets changes
_ID_LIST = datasets.List(datasets.Value("int32"))


def tokenize(
    pairs: datasets.Dataset, src_vocab: Vocab, tgt_vocab: Vocab, cache_dir: Path, keep_text: bool = True, num_proc: int = 1
) -> datasets.Dataset:
    """A ``datasets.Dataset`` with the columns ``src_ids``, ``tgt_ids`` (int32 lists; and the text
    columns ``src``, ``tgt`` when ``keep_text``), memory-mapped from ``cache_dir/<key>``.

    The ids are added with ``Dataset.map`` on Arrow batches (``num_proc`` worker processes on a large
    split) and saved under a key made from the text and the subword models, so a later run on the
    same data loads them instead.
    """
    key = hashlib.sha256(
        f"{TOKENIZED_FORMAT}:{content_key(pairs)}:{src_vocab.sha256}:{tgt_vocab.sha256}:{keep_text}".encode()
    ).hexdigest()[:20]
    folder = Path(cache_dir) / key
    if (folder / "dataset_info.json").exists():
        return datasets.load_from_disk(str(folder))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        features = {"src_ids": _ID_LIST, "tgt_ids": _ID_LIST}
        if keep_text:
            features = {"src": datasets.Value("string"), "tgt": datasets.Value("string"), **features}
        encoded = pairs.select_columns(["src", "tgt"]).with_format("arrow").map(
            _encode_batch,
            batched=True,
            batch_size=5000,
            fn_kwargs={"src_model": src_vocab.model_proto, "tgt_model": tgt_vocab.model_proto, "keep_text": keep_text},
            remove_columns=[] if keep_text else ["src", "tgt"],
            features=datasets.Features(features),
            num_proc=worker_processes(num_proc, len(pairs)),
            cache_file_name=str(tmp / "map" / "ids.arrow"),
            desc="subword ids",
        )
        encoded.with_format(None).save_to_disk(str(tmp / "dataset"))
        del encoded
        try:
            (tmp / "dataset").rename(folder)  # atomic: another run may have finished first
        except OSError:
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(folder))


_PROCESSORS: dict[bytes, spm.SentencePieceProcessor] = {}  # one per model in each worker process


def _encode_batch(table: pa.Table, src_model: bytes, tgt_model: bytes, keep_text: bool) -> pa.Table:
    """Arrow in, Arrow out: subword ids of a batch as int32 list arrays built from flat numpy arrays."""
    out = {"src": table.column("src"), "tgt": table.column("tgt")} if keep_text else {}
    for side, model in (("src", src_model), ("tgt", tgt_model)):
        sp = _PROCESSORS.get(model)
        if sp is None:
            sp = _PROCESSORS[model] = spm.SentencePieceProcessor(model_proto=model)
        ids = sp.encode(table.column(side).to_pylist(), out_type=int)
        lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(offsets[-1]))
        out[f"{side}_ids"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    return pa.table(out)


# --------------------------------------------------------------------------- batching


class IdColumn:
    """One column of subword-id lists read in place from Arrow: the ids stay in the (memory-mapped)
    file and only the rows asked for are touched. The list offsets are the lengths column.

    :param column: a chunked Arrow array of integer lists, e.g. ``dataset.data.column("src_ids")``.
    """

    def __init__(self, column: pa.ChunkedArray) -> None:
        chunks = [chunk for chunk in column.chunks if len(chunk)]
        # ListArray.values is the whole child array; .offsets already account for a sliced chunk
        self._values = [chunk.values.to_numpy(zero_copy_only=True) for chunk in chunks]
        self._offsets = [chunk.offsets.to_numpy(zero_copy_only=True) for chunk in chunks]
        self._starts = np.cumsum([0] + [len(chunk) for chunk in chunks])
        self.lengths = np.concatenate([np.diff(o) for o in self._offsets] or [np.zeros(0, np.int32)]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, row: int) -> np.ndarray:
        chunk = int(np.searchsorted(self._starts, row, side="right")) - 1
        i = row - self._starts[chunk]
        offsets = self._offsets[chunk]
        return self._values[chunk][offsets[i] : offsets[i + 1]]


class PairData:
    """The subword ids of one split, for batching: lengths in memory (numpy), ids read from Arrow.

    :param dataset: a dataset made by :func:`tokenize`.
    :param rows: the rows of ``dataset`` this split consists of, in order (default all); position
        ``i`` of this object is row ``rows[i]`` of the dataset (see :meth:`filtered`).
    :param guide: the word links of the dataset's rows, for guided alignment (batches then carry
        their attention targets), or None.
    :param sampler: draws new segmentations of the pairs' text (the ``src`` and ``tgt`` columns)
        for :meth:`collate` with a ``sample_seed`` (subword regularisation of training pairs), or None.
    """

    def __init__(self, dataset: datasets.Dataset, rows: np.ndarray | None = None,
                 guide: AlignmentGuide | None = None, sampler: PairSampler | None = None) -> None:  # fmt: skip
        if dataset._indices is not None:  # a select()ed view: write the rows it maps to
            dataset = dataset.flatten_indices()
        table = dataset.data.table
        if sampler is not None and not {"src", "tgt"} <= set(table.column_names):
            raise ValueError("subword sampling needs the pairs' text: tokenize(..., keep_text=True)")
        self._src, self._tgt = IdColumn(table.column("src_ids")), IdColumn(table.column("tgt_ids"))
        self._dataset, self.guide, self.sampler = dataset, guide, sampler
        self.rows = np.arange(len(self._src)) if rows is None else np.asarray(rows, dtype=np.int64)
        # +1 for the EOS of the source and for the BOS/EOS of the target
        self.src_lens = self._src.lengths[self.rows] + 1
        self.tgt_lens = self._tgt.lengths[self.rows] + 1

    def __len__(self) -> int:
        return len(self.rows)

    def source(self, i: int) -> np.ndarray:
        """The source subword ids of pair ``i`` (without EOS)."""
        return self._src[int(self.rows[i])]

    def target(self, i: int) -> np.ndarray:
        """The target subword ids of pair ``i`` (without BOS/EOS)."""
        return self._tgt[int(self.rows[i])]

    def sources(self) -> list[list[int]]:
        """Every source as a list of ids (for decoding a whole evaluation split)."""
        return [self.source(i).tolist() for i in range(len(self))]

    def filtered(self, max_len: int) -> PairData:
        """Training pairs only: drop pairs with an empty side and pairs longer than ``max_len`` subwords."""
        src, tgt = self.src_lens - 1, self.tgt_lens - 1
        empty = (src == 0) | (tgt == 0)
        too_long = ~empty & ((src > max_len) | (tgt > max_len))
        if empty.any():
            log.info("dropped %d training pairs with an empty or whitespace-only side", int(empty.sum()))
        if too_long.any():
            log.info("dropped %d training pairs longer than data.max_len=%d subwords", int(too_long.sum()), max_len)
        keep = ~(empty | too_long)
        if not keep.any():
            raise ValueError(
                f"no training pairs left: {int(empty.sum())} have an empty side and {int(too_long.sum())} are longer "
                f"than data.max_len={max_len} subwords; raise data.max_len"
            )
        return self if keep.all() else PairData(self._dataset, self.rows[keep], self.guide, self.sampler)

    def collate(self, indices: np.ndarray, sample_seed: Sequence[int] | None = None) -> Batch:
        """Pad the pairs at ``indices`` into one :class:`Batch`.

        :param sample_seed: with a :attr:`sampler`, segment the pairs' text afresh, drawing from a
            generator seeded with these integers (the same seed, the same batch); None = the
            usual segmentations.
        """
        n = len(indices)
        sources, targets = [self.source(i) for i in indices], [self.target(i) for i in indices]
        if self.sampler is not None and sample_seed is not None:
            sources, targets = self.sampler.sample(*self.texts(indices), sources, targets, sample_seed)
        src, src_lens = pad_sources(sources)
        tgt_in = np.full((n, max(map(len, targets)) + 1), PAD_ID, dtype=np.int64)  # (B, T): the longest + BOS
        tgt_out = tgt_in.copy()
        for row, t in enumerate(targets):
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
            None if self.guide is None else self._guide(indices, sources, targets, src.size(1), tgt_in.shape[1]),
        )

    def texts(self, indices: np.ndarray) -> tuple[list[str], list[str]]:
        """The source and target text of the pairs at ``indices`` (a dataset tokenized with its text)."""
        table, rows = self._dataset.data.table, pa.array(self.rows[np.asarray(indices, dtype=np.int64)])
        return table.column("src").take(rows).to_pylist(), table.column("tgt").take(rows).to_pylist()

    def _guide(self, indices: np.ndarray, sources: list[np.ndarray], targets: list[np.ndarray], width: int,
               height: int) -> torch.Tensor:  # fmt: skip
        """:return: (B, T, S) the guided-alignment targets of the pairs at ``indices``, segmented as
        ``sources`` and ``targets``."""
        guide = self.guide
        return torch.from_numpy(np.stack([
            guide.targets(guide.links[int(self.rows[i])], s, t, width, height)
            for i, s, t in zip(indices, sources, targets, strict=True)
        ]))  # fmt: skip

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


def prepare_data(data_cfg: DictConfig, vocabs: tuple[Vocab, Vocab] | None = None, links: str | None = None) -> Splits:
    """Read the corpus, build (or reuse) the subword models and the tokenized datasets.

    :param vocabs: the subword models to use (a resumed run's, from its checkpoint); None = build or
        reuse the cached ones for this corpus.
    :param links: a Pharaoh file with the word links of every training pair, one line a pair in the
        corpus's order, or ``gold`` for a synthetic corpus's own: the training batches then carry
        guided alignment's targets (:mod:`nmt.data.guidance`).
    """
    corpus = load_corpus(data_cfg)
    cache = Path(data_cfg.cache_dir)
    train = corpus["train"].pairs
    train_links = _read_links(links, corpus["train"], data_cfg) if links else None
    kept = np.arange(len(train))  # the corpus rows trained on
    if data_cfg.get("max_train_pairs"):
        kept = subset_rows(len(train), int(data_cfg.max_train_pairs))
        train = train.select(kept)
        train_links = None if train_links is None else [train_links[r] for r in kept]
    settings = VocabSettings(**data_cfg.vocab)
    src_vocab, tgt_vocab = vocabs or build_vocabs(train, settings, cache / "spm")
    num_proc = int(data_cfg.get("num_proc") or 1)
    sampling = SubwordSampling(**data_cfg.subword_sampling)
    # subword regularisation segments the training text afresh at batch time: keep it beside the ids
    ids = tokenize(train, src_vocab, tgt_vocab, cache / "tokenized", keep_text=sampling.enabled, num_proc=num_proc)
    guide = None
    if train_links is not None:
        guide = AlignmentGuide(train_links, src_vocab, tgt_vocab)
        everything, text = PairData(ids), train.select_columns(["src", "tgt"]).to_dict()
        guide.check_words([everything.source(i) for i in range(len(everything))],
                          [everything.target(i) for i in range(len(everything))], text["src"], text["tgt"])  # fmt: skip
    sampler = pair_sampler(sampling, settings.type, src_vocab, tgt_vocab, data_cfg.max_tokens, data_cfg.max_len)
    if sampler is not None:
        log.info("subword regularisation of the training pairs: %s, alpha %g%s", _sampling_name(settings.type),
                 sampling.alpha, f", among the {sampling.nbest_size} best" if settings.type == "unigram" and
                 sampling.nbest_size > 0 else "")  # fmt: skip
    repeat = int(data_cfg.extra_train.get("repeat", 1))
    rows = epoch_rows(kept, len(corpus["train"]) - extra_train_size(data_cfg), repeat) if repeat > 1 else None
    train_data = PairData(ids, rows=rows, guide=guide, sampler=sampler).filtered(data_cfg.max_len)
    evaluation = {}
    for role, split in corpus.items():
        if role != "train":
            data = PairData(tokenize(split.pairs, src_vocab, tgt_vocab, cache / "tokenized", num_proc=num_proc))
            text = split.to_text()
            evaluation[role] = (data, text.src, text.tgt)
    log.info(
        "data: %d training pairs, %s; vocabularies %d/%d pieces",
        len(train_data), ", ".join(f"{r} {len(d[0])}" for r, d in evaluation.items()), len(src_vocab), len(tgt_vocab),
    )  # fmt: skip
    return Splits(src_vocab, tgt_vocab, train_data, evaluation)


def epoch_rows(kept: np.ndarray, first_extra: int, repeat: int) -> np.ndarray:
    """The dataset rows one training epoch reads: each row once, then the rows of the extra pairs
    (``data.extra_train``) ``repeat - 1`` more times, so that a small corpus beside a large one
    weighs ``repeat`` times as much. The copies are positions, not new rows: they share their
    row's subword ids and word links.

    :param kept: (N,) the corpus row of each dataset row (all rows, or ``data.max_train_pairs``'s subset).
    :param first_extra: the corpus row of the first extra pair (the corpus's own pairs come before it).
    :return: (N + (repeat - 1) x E,) dataset rows, E the extra pairs among ``kept``.
    """
    rows = np.arange(len(kept))
    extra = rows[kept >= first_extra]
    if repeat > 1 and len(extra):
        log.info("data.extra_train.repeat=%d: the %d extra pairs are read %d times an epoch", repeat, len(extra), repeat)
    return np.concatenate([rows, *[extra] * (repeat - 1)])


def _sampling_name(model_type: str) -> str:
    return "BPE-dropout" if model_type == "bpe" else "unigram sampling"


SUBSET_SEED = 0


def subset_rows(num_pairs: int, count: int) -> np.ndarray:
    """The rows of ``count`` pairs of ``num_pairs`` drawn at random (always the same ones for the
    same corpus size), in corpus order; all rows if ``count`` is not smaller."""
    if count >= num_pairs:
        return np.arange(num_pairs)
    log.info("data.max_train_pairs=%d: training on a fixed random subset of the %d pairs", count, num_pairs)
    return np.sort(np.random.default_rng(SUBSET_SEED).choice(num_pairs, size=count, replace=False))


def subset(pairs: datasets.Dataset, count: int) -> datasets.Dataset:
    """``count`` pairs drawn at random (:func:`subset_rows`), in corpus order."""
    return pairs if count >= len(pairs) else pairs.select(subset_rows(len(pairs), count))


def _read_links(links: str, split, data_cfg: DictConfig) -> list[np.ndarray]:
    """The word links of every training pair of ``split`` (a TextSplit), from a file or, for
    ``gold``, the synthetic corpus's own."""
    text = split.pairs.select_columns(["src", "tgt"]).to_dict()
    if links == GOLD:
        check_gold(corpus_kind(data_cfg))
        return gold_links_of(text["src"])
    return read_links(links, text["src"], text["tgt"])

"""Batches: collate layout (EOS/BOS/PAD), token-bucketed batching (every pair once, within the token
budget, reproducible shuffling, little padding), sharding across ranks, training-pair filtering and
the on-disk cache of tokenized datasets."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import ToyCorpus

from nmt.data.batches import IdColumn, PairData, epoch_rows, shard, tokenize
from nmt.data.corpora import pairs_from_files
from nmt.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab


def _dataset(src_ids: list[list[int]], tgt_ids: list[list[int]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"src_ids": src_ids, "tgt_ids": tgt_ids})


def _random_data(n: int = 1500, max_len: int = 40, seed: int = 0) -> PairData:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 50, int(k)).tolist() for k in rng.integers(1, max_len, n)]
    tgt = [rng.integers(4, 50, int(k)).tolist() for k in rng.integers(1, max_len, n)]
    return PairData(_dataset(src, tgt))


def test_collate_layout() -> None:
    data = PairData(_dataset([[5, 6, 7], [8], [9, 10]], [[11], [12, 13, 14, 15], [16, 17]]))
    batch = data.collate(np.array([2, 0, 1]))
    assert batch.src.tolist() == [[9, 10, EOS_ID, PAD_ID], [5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_lens.tolist() == [3, 4, 2]
    assert batch.tgt_in.tolist() == [
        [BOS_ID, 16, 17, PAD_ID, PAD_ID],
        [BOS_ID, 11, PAD_ID, PAD_ID, PAD_ID],
        [BOS_ID, 12, 13, 14, 15],
    ]
    assert batch.tgt_out.tolist() == [
        [16, 17, EOS_ID, PAD_ID, PAD_ID],
        [11, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
        [12, 13, 14, 15, EOS_ID],
    ]
    assert batch.indices.tolist() == [2, 0, 1]
    assert batch.num_tgt_tokens == 3 + 2 + 5
    for tensor in (batch.src, batch.src_lens, batch.tgt_in, batch.tgt_out, batch.indices):
        assert tensor.dtype == torch.long
    moved = batch.to(torch.device("cpu"))
    assert torch.equal(moved.src, batch.src) and moved.src_lens.device.type == "cpu"


def test_collate_shapes_on_random_data() -> None:
    data = _random_data(200)
    indices = np.arange(0, 200, 7)
    batch = data.collate(indices)
    assert batch.src.shape == (len(indices), int(data.src_lens[indices].max()))
    assert batch.tgt_in.shape == batch.tgt_out.shape == (len(indices), int(data.tgt_lens[indices].max()))
    # tgt_in is tgt_out shifted right by one behind BOS (where tgt_out has EOS, tgt_in has PAD)
    body = batch.tgt_out[:, :-1] != EOS_ID
    assert torch.equal(batch.tgt_in[:, 1:][body], batch.tgt_out[:, :-1][body])
    assert torch.all(batch.tgt_in[:, 0] == BOS_ID)
    assert torch.equal((batch.src != PAD_ID).sum(1), batch.src_lens)
    assert torch.all((batch.tgt_out == EOS_ID).sum(1) == 1)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("max_tokens", [60, 500])
def test_token_batches_cover_every_pair_once_within_budget(shuffle: bool, max_tokens: int) -> None:
    data = _random_data()
    batches = data.token_batches(max_tokens, shuffle=shuffle, seed=3, epoch=1)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(data)))
    longest = np.maximum(data.src_lens, data.tgt_lens)
    for b in batches:
        assert len(b) > 0
        assert len(b) * int(longest[b].max()) <= max_tokens or len(b) == 1
        collated = data.collate(b)
        assert collated.src.numel() <= max_tokens or len(b) == 1
        assert collated.tgt_in.numel() <= max_tokens or len(b) == 1


def test_pairs_over_the_budget_form_their_own_batch() -> None:
    data = _random_data(300, max_len=40)
    batches = data.token_batches(30, shuffle=True, seed=0, epoch=0)
    longest = np.maximum(data.src_lens, data.tgt_lens)
    over = set(np.flatnonzero(longest > 30).tolist())
    assert over, "the test needs pairs longer than the budget"
    singles = {int(b[0]) for b in batches if len(b) == 1}
    assert over <= singles
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(data)))


def test_token_batches_are_greedy() -> None:
    """Unshuffled, batches are cut greedily: the next pair would not have fitted."""
    data = _random_data()
    batches = data.token_batches(500, shuffle=False)
    longest = np.maximum(data.src_lens, data.tgt_lens)
    for current, following in zip(batches, batches[1:]):
        grown = np.append(current, following[0])
        assert len(grown) * int(longest[grown].max()) > 500


def test_shuffling_is_reproducible_per_seed_and_epoch() -> None:
    data = _random_data()
    as_lists = lambda batches: [b.tolist() for b in batches]
    epoch0 = as_lists(data.token_batches(500, shuffle=True, seed=1, epoch=0))
    assert epoch0 == as_lists(data.token_batches(500, shuffle=True, seed=1, epoch=0))
    assert epoch0 != as_lists(data.token_batches(500, shuffle=True, seed=1, epoch=1))
    assert epoch0 != as_lists(data.token_batches(500, shuffle=True, seed=2, epoch=0))
    unshuffled = as_lists(data.token_batches(500, shuffle=False, seed=1, epoch=0))
    assert unshuffled == as_lists(data.token_batches(500, shuffle=False, seed=9, epoch=5))


def test_padding_is_low() -> None:
    data = _random_data()
    batches = data.token_batches(500, shuffle=True, seed=0, epoch=0)
    bucketed = data.padding_fraction(batches)
    # the same batch sizes filled with random pairs
    order, sizes = np.random.default_rng(0).permutation(len(data)), np.cumsum([len(b) for b in batches])[:-1]
    random_batches = np.split(order, sizes)
    assert bucketed < 0.05
    assert bucketed < data.padding_fraction(random_batches) / 5


def test_sentence_batches_cover_every_pair_sorted_by_source_length() -> None:
    data = _random_data(205)
    batches = data.sentence_batches(50)
    assert [len(b) for b in batches] == [50, 50, 50, 50, 5]
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(205))
    assert np.all(np.diff(data.src_lens[flat]) <= 0)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("num_batches", [1, 5, 7, 8, 12])
def test_shard_gives_every_rank_the_same_number_of_batches(world_size: int, num_batches: int) -> None:
    rng = np.random.default_rng(num_batches)
    sizes = rng.integers(1, 6, num_batches)
    order = rng.permutation(int(sizes.sum()))
    batches = np.split(order, np.cumsum(sizes)[:-1])
    if len(order) < world_size:  # some rank would get nothing
        with pytest.raises(ValueError, match="cannot be shared"):
            shard(batches, 0, world_size)
        return
    shards = [shard(batches, rank, world_size) for rank in range(world_size)]
    assert len({len(s) for s in shards}) == 1, [len(s) for s in shards]
    seen = [int(i) for s in shards for b in s for i in b]
    assert len(seen) == len(set(seen)), "a pair was given to two ranks (or twice to one)"
    assert all(len(b) > 0 for s in shards for b in s)
    assert sorted(seen) == sorted(order.tolist()), "every pair is used once per epoch"
    if world_size == 1:
        assert shards[0] == batches


def test_shard_deals_whole_batches_round_robin() -> None:
    batches = [np.array([i]) * 10 + np.arange(4) for i in range(7)]  # 7 batches of 4 pairs
    rank0, rank1 = shard(batches, 0, 2), shard(batches, 1, 2)
    assert [b.tolist() for b in rank0[:3]] == [batches[i].tolist() for i in (0, 2, 4)]
    assert [b.tolist() for b in rank1[:3]] == [batches[i].tolist() for i in (1, 3, 5)]
    assert sorted(rank0[3].tolist() + rank1[3].tolist()) == batches[6].tolist()


# --------------------------------------------------------------------------- filtering


def test_epoch_rows_repeat_only_the_extra_pairs() -> None:
    """The corpus's pairs are read once an epoch, the extra pairs (corpus rows >= first_extra)
    ``repeat`` times; with a subset, the rows are the subset's positions."""
    assert epoch_rows(np.arange(5), 3, 1).tolist() == [0, 1, 2, 3, 4]
    assert epoch_rows(np.arange(5), 3, 3).tolist() == [0, 1, 2, 3, 4, 3, 4, 3, 4]
    assert epoch_rows(np.array([0, 2, 4]), 3, 3).tolist() == [0, 1, 2, 2, 2]  # one extra pair kept, at position 2
    assert epoch_rows(np.arange(3), 3, 4).tolist() == [0, 1, 2], "no extra pairs: nothing to repeat"


def test_filtered_drops_empty_and_long_pairs() -> None:
    src_ids = [[5, 6], [], [7], [], [8, 9, 10, 11], [12], [13, 14]]
    tgt_ids = [[5, 6], [15], [], [16], [17], [18, 19, 20, 21, 22], [23, 24]]
    kept = PairData(_dataset(src_ids, tgt_ids)).filtered(max_len=3)
    assert kept.rows.tolist() == [0, 6]
    assert [kept.source(i).tolist() for i in range(len(kept))] == [[5, 6], [13, 14]]
    assert [kept.target(i).tolist() for i in range(len(kept))] == [[5, 6], [23, 24]]
    assert kept.tgt_lens.tolist() == [3, 3]
    assert kept.collate(np.array([1])).src.tolist() == [[13, 14, EOS_ID]]
    # max_len is inclusive
    assert len(PairData(_dataset(src_ids, tgt_ids)).filtered(max_len=5)) == 4


def test_filtered_keeps_everything_when_nothing_is_wrong() -> None:
    data = PairData(_dataset([[5], [6, 7]], [[8], [9]]))
    assert data.filtered(max_len=10) is data


def test_filtered_refuses_to_leave_nothing() -> None:
    with pytest.raises(ValueError, match="no training pairs left"):
        PairData(_dataset([[5] * 9], [[6]])).filtered(max_len=3)


# --------------------------------------------------------------------------- ids read from Arrow


def test_id_column_reads_rows_across_chunks_and_slices() -> None:
    lists = [[1, 2], [3], [], [4, 5, 6], [7], [8, 9]]
    whole = pa.array(lists, type=pa.list_(pa.int32()))
    # chunks that are slices of bigger arrays, as Arrow files and select() produce them
    column = pa.chunked_array([whole.slice(0, 2), whole.slice(2, 3), pa.array([], pa.list_(pa.int32())), whole.slice(5)])
    ids = IdColumn(column)
    assert len(ids) == 6 and ids.lengths.tolist() == [2, 1, 0, 3, 1, 2]
    assert [ids[i].tolist() for i in range(6)] == lists


def test_pair_data_of_a_selected_view_reads_the_selected_rows() -> None:
    dataset = _dataset([[5], [6, 7], [8]], [[9], [10], [11, 12]]).select([2, 0])
    data = PairData(dataset)
    assert [data.source(i).tolist() for i in range(2)] == [[8], [5]]
    assert [data.target(i).tolist() for i in range(2)] == [[11, 12], [9]]


# --------------------------------------------------------------------------- tokenize


def _pairs(src: list[str], tgt: list[str]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def test_tokenize_caches_to_disk(toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path, monkeypatch) -> None:
    pairs = _pairs(toy_corpus.src_lines[:50], toy_corpus.tgt_lines[:50])
    cache = tmp_path / "tokenized"
    first = tokenize(pairs, tiny_vocab, tiny_vocab, cache)
    assert set(first.column_names) == {"src", "tgt", "src_ids", "tgt_ids"}
    assert first["src"] == pairs["src"] and first["tgt"] == pairs["tgt"]
    assert first["src_ids"] == tiny_vocab.encode(pairs["src"])
    assert first["tgt_ids"] == tiny_vocab.encode(pairs["tgt"])
    assert first.features["src_ids"].feature.dtype == "int32"
    folders = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1 and (folders[0] / "dataset_info.json").is_file()
    assert len(list(cache.iterdir())) == 1, "no temporary folders left behind"

    def no_encoding(*args, **kwargs):
        raise AssertionError("the cached dataset should have been loaded, not rebuilt")

    monkeypatch.setattr(datasets.Dataset, "map", no_encoding)
    again = tokenize(_pairs(list(pairs["src"]), list(pairs["tgt"])), tiny_vocab, tiny_vocab, cache)
    assert again["src_ids"] == first["src_ids"] and again["tgt_ids"] == first["tgt_ids"]


def test_tokenize_without_text_keeps_only_ids(toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path) -> None:
    pairs = _pairs(toy_corpus.src_lines[:30], toy_corpus.tgt_lines[:30])
    ids = tokenize(pairs, tiny_vocab, tiny_vocab, tmp_path, keep_text=False)
    assert ids.column_names == ["src_ids", "tgt_ids"]
    assert ids["tgt_ids"] == tiny_vocab.encode(pairs["tgt"])


def test_tokenize_cache_key_depends_on_text(toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path) -> None:
    a = _pairs(toy_corpus.src_lines[:10], toy_corpus.tgt_lines[:10])
    b = _pairs(toy_corpus.src_lines[:10], toy_corpus.tgt_lines[1:11])
    tokenize(a, tiny_vocab, tiny_vocab, tmp_path)
    second = tokenize(b, tiny_vocab, tiny_vocab, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2
    assert second["tgt"] == b["tgt"]


def test_tokenize_with_worker_processes_gives_the_same_ids(
    toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr("nmt.data.text.MIN_ROWS_PER_PROCESS", 10)  # use the workers on a small split
    pairs = _pairs(toy_corpus.src_lines[:200], toy_corpus.tgt_lines[:200])
    one = tokenize(pairs, tiny_vocab, tiny_vocab, tmp_path / "one", num_proc=1)
    two = tokenize(pairs, tiny_vocab, tiny_vocab, tmp_path / "two", num_proc=2)
    assert two["src_ids"] == one["src_ids"] and two["tgt_ids"] == one["tgt_ids"] and two["src"] == one["src"]


def test_pair_data_lengths_count_eos(toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path) -> None:
    pairs = _pairs(toy_corpus.src_lines[:20], toy_corpus.tgt_lines[:20])
    data = PairData(tokenize(pairs, tiny_vocab, tiny_vocab, tmp_path))
    assert len(data) == 20
    assert data.src_lens.tolist() == [len(ids) + 1 for ids in tiny_vocab.encode(pairs["src"])]
    assert data.tgt_lens.tolist() == [len(ids) + 1 for ids in tiny_vocab.encode(pairs["tgt"])]


def test_memory_mapped_batches_equal_in_memory_batches(toy_corpus: ToyCorpus, tiny_vocab: Vocab, tmp_path: Path) -> None:
    """Files -> Arrow on disk -> ids memory-mapped gives exactly the batches of ids held in memory."""
    split = pairs_from_files(toy_corpus.train_src, toy_corpus.train_tgt, tmp_path / "cache")
    mapped = PairData(tokenize(split.pairs, tiny_vocab, tiny_vocab, tmp_path / "tok", keep_text=False)).filtered(100)
    assert mapped._dataset.cache_files, "the ids should come from a file on disk"
    src_ids, tgt_ids = tiny_vocab.encode(toy_corpus.src_lines), tiny_vocab.encode(toy_corpus.tgt_lines)
    in_memory = PairData(datasets.Dataset.from_dict({"src_ids": src_ids, "tgt_ids": tgt_ids})).filtered(100)
    assert not in_memory._dataset.cache_files
    assert mapped.src_lens.tolist() == in_memory.src_lens.tolist()
    for epoch in range(2):
        a = mapped.token_batches(200, shuffle=True, seed=5, epoch=epoch)
        b = in_memory.token_batches(200, shuffle=True, seed=5, epoch=epoch)
        assert [x.tolist() for x in a] == [y.tolist() for y in b]
        for x in a:
            one, other = mapped.collate(x), in_memory.collate(x)
            for name in ("src", "src_lens", "tgt_in", "tgt_out", "indices"):
                assert torch.equal(getattr(one, name), getattr(other, name))

"""Where parallel text comes from: Multi30k task 1 (Elliott et al. 2016), the user's own files, or
the synthetic reordering task of :mod:`nmt.data.synthetic`, or any Hugging Face dataset (:mod:`nmt.data.hub`).
A run reads every split as a :class:`TextSplit`: Arrow columns ``src`` and ``tgt``, memory-mapped from
a file on disk, so that a corpus larger than memory is never held as Python strings. Subwords and
batching live in :mod:`nmt.data.batches`.

Plain and gzipped text files are converted once, streaming, into ``<data.cache_dir>/text/<key>.arrow``,
where the key is made from the files' paths, sizes and modification times (so an edited file is
read again). A run may add pairs to the training split (``data.extra_train``, after the corpus's
own) and read every split in another text form (``data.text_form``, :mod:`nmt.text_form`),
cached the same way under a key made from the text itself and the form's rules.

Multi30k's files are found or downloaded by :mod:`nmt.data.multi30k`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import IO

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nmt.data.hub import load_hub_splits
from nmt.data.multi30k import check_multi30k_pair, multi30k_file
from nmt.data.synthetic import synthetic_corpus
from nmt.data.text import DataError, TextSplit, iter_lines, length_mismatch, parallel_in_text_form
from nmt.files import atomic_write
from nmt.text_form import AS_IS, TEXT_FORM_VERSION, check_text_form, in_text_form

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------- a split as Arrow columns


TEXT_FORMAT = 1  # bump when the layout of the cached Arrow text files changes
ROWS_PER_RECORD_BATCH = 10_000


def pairs_from_files(src_path: str | Path, tgt_path: str | Path, cache_dir: str | Path) -> TextSplit:
    """Both sides of a split, converted once (streaming) into a cached Arrow file and memory-mapped.

    The files are read with the rules of :func:`nmt.data.text.read_lines` (UTF-8, ``\\n`` only, control
    characters to spaces); files with different line counts are refused.
    """
    paths = [Path(src_path), Path(tgt_path)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path}: no such file")
    stamp = [TEXT_FORMAT] + [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in paths]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:20]
    target = Path(cache_dir) / "text" / f"{key}.arrow"
    if not target.is_file():
        log.info("reading %s and %s into %s", *paths, target)
        atomic_write(target, lambda f: _write_pairs(f, paths[0], paths[1]))
    return TextSplit(datasets.Dataset.from_file(str(target)), str(paths[0]), str(paths[1]))


def _write_pairs(out: IO[bytes], src_path: Path, tgt_path: Path) -> None:
    """Stream two parallel text files into an Arrow IPC stream of record batches (bounded memory)."""
    schema = pa.schema([("src", pa.string()), ("tgt", pa.string())])
    src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
    done = 0
    with pa.ipc.new_stream(out, schema) as writer:
        while True:
            src = list(islice(src_lines, ROWS_PER_RECORD_BATCH))
            tgt = list(islice(tgt_lines, ROWS_PER_RECORD_BATCH))
            if len(src) != len(tgt):
                n_src = done + len(src) + sum(1 for _ in src_lines)
                n_tgt = done + len(tgt) + sum(1 for _ in tgt_lines)
                raise DataError(length_mismatch(src_path, n_src, tgt_path, n_tgt))
            if not src:
                return
            writer.write_batch(pa.record_batch([pa.array(src, pa.string()), pa.array(tgt, pa.string())], schema=schema))
            done += len(src)


def pairs_from_pairs_file(path: str | Path, cache_dir: str | Path, swap: bool = False) -> TextSplit:
    """A split from one file of ``source ||| target`` lines (fast_align's format; plain or ``.gz``),
    converted once (streaming) into a cached Arrow file like :func:`pairs_from_files`.

    :param swap: the lines are ``target ||| source``.
    :raise DataError: a line without exactly one `` ||| ``, naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    stamp = [TEXT_FORMAT, "pairs", str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns, swap]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:20]
    target = Path(cache_dir) / "text" / f"{key}.arrow"
    if not target.is_file():
        log.info("reading %s into %s", path, target)
        atomic_write(target, lambda f: _write_columns(f, _split_pairs(path, swap)))
    return TextSplit(datasets.Dataset.from_file(str(target)), f"{path} ({'right' if swap else 'left'} side)",
                     f"{path} ({'left' if swap else 'right'} side)")  # fmt: skip


def _split_pairs(path: Path, swap: bool) -> Iterator[tuple[list[str], list[str]]]:
    """The sources and targets of a pairs file, :data:`ROWS_PER_RECORD_BATCH` lines at a time."""
    lines = enumerate(iter_lines(path), start=1)
    while batch := list(islice(lines, ROWS_PER_RECORD_BATCH)):
        left, right = [], []
        for number, line in batch:
            if line.count(" ||| ") != 1:
                raise DataError(f"{path}, line {number}: expected 'source ||| target' (one ' ||| '), got {line[:60]!r}")
            first, second = line.split(" ||| ")
            left.append(first.strip())
            right.append(second.strip())
        yield (right, left) if swap else (left, right)


def _write_columns(out: IO[bytes], batches: Iterator[tuple[list[str], list[str]]]) -> None:
    """Write (sources, targets) batches as an Arrow IPC stream of ``src`` and ``tgt`` record batches."""
    schema = pa.schema([("src", pa.string()), ("tgt", pa.string())])
    with pa.ipc.new_stream(out, schema) as writer:
        for src, tgt in batches:
            writer.write_batch(pa.record_batch([pa.array(src, pa.string()), pa.array(tgt, pa.string())], schema=schema))


def split_in_text_form(split: TextSplit, form: str, src_lang: str, tgt_lang: str, cache_dir: str | Path) -> TextSplit:
    """``split`` with both sides in ``form`` (:mod:`nmt.text_form`; ``src_lang`` and ``tgt_lang``
    choose each side's rules), the split itself for ``as_is``.

    A split read from disk is converted once, streaming, into ``<cache_dir>/text/<key>.arrow``; the
    key is made from the split's text (:func:`content_key`), the form, its rules' version and the
    languages, so other text or other rules make another file. A split held in memory stays there.
    """
    if check_text_form(form) == AS_IS:
        return split
    src_name, tgt_name = f"{split.src_name} ({form})", f"{split.tgt_name} ({form})"
    if not split.pairs.cache_files:  # the synthetic task, regenerated in memory: no file to keep
        formed = parallel_in_text_form(split.to_text(), form, src_lang, tgt_lang)
        return TextSplit.from_text(dataclasses.replace(formed, src_path=src_name, tgt_path=tgt_name))
    stamp = [TEXT_FORMAT, TEXT_FORM_VERSION, form, src_lang, tgt_lang, content_key(split.pairs)]
    target = Path(cache_dir) / "text" / f"{hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:20]}.arrow"
    if not target.is_file():
        log.info("writing %s / %s in the text form %s into %s", split.src_name, split.tgt_name, form, target)
        batches = ((in_text_form(t.column("src").to_pylist(), form, src_lang),
                    in_text_form(t.column("tgt").to_pylist(), form, tgt_lang))
                   for t in arrow_batches(split.pairs, ("src", "tgt"), ROWS_PER_RECORD_BATCH))  # fmt: skip
        atomic_write(target, lambda f: _write_columns(f, batches))
    return TextSplit(datasets.Dataset.from_file(str(target)), src_name, tgt_name)


def content_key(pairs: datasets.Dataset, columns: Sequence[str] = ("src", "tgt")) -> str:
    """A key of the text in ``columns``: the same text gives the same key, whatever file it came from.

    Hashes the Arrow buffers (UTF-8 bytes and string lengths) batch by batch, without building Python
    strings: a few seconds for millions of pairs.
    """
    digest = hashlib.sha256(json.dumps(list(columns)).encode())
    for table in arrow_batches(pairs, columns):
        for name in columns:
            array = table.column(name).combine_chunks()
            if array.null_count:
                raise DataError(f"column {name!r} has {array.null_count} missing values; they must be dropped first")
            array = array.cast(pa.large_string())
            offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + len(array) + 1]
            digest.update(np.diff(offsets).tobytes())
            digest.update(memoryview(array.buffers()[2])[offsets[0] : offsets[-1]] if len(array) else b"")
    return digest.hexdigest()[:20]


def arrow_batches(pairs: datasets.Dataset, columns: Sequence[str], batch_size: int = 100_000) -> Iterator[pa.Table]:
    """The rows of ``pairs`` in order, ``columns`` only, as Arrow tables of at most ``batch_size`` rows.

    When the dataset is exactly its Arrow files (no selection or slice), they are read with plain file
    reads rather than through the dataset's memory map, so the pages read once (to hash the corpus,
    to sample it for sentencepiece) do not stay in this process's resident memory.
    """
    files = [f["filename"] for f in pairs.cache_files]
    if files and pairs._indices is None and _rows_and_columns(files, columns) == len(pairs):
        for path in files:
            with pa.OSFile(path) as f:
                for batch in pa.ipc.open_stream(f):
                    table = pa.Table.from_batches([batch]).select(list(columns))
                    for start in range(0, table.num_rows, batch_size):
                        yield table.slice(start, batch_size)
        return
    yield from pairs.select_columns(list(columns)).with_format("arrow").iter(batch_size=batch_size)


def _rows_and_columns(files: list[str], columns: Sequence[str]) -> int:
    """Rows in the Arrow stream files (-1 if one lacks a column or is not a stream file)."""
    rows = 0
    try:
        for path in files:
            with pa.OSFile(path) as f:
                reader = pa.ipc.open_stream(f)
                if not set(columns) <= set(reader.schema.names):
                    return -1
                rows += sum(batch.num_rows for batch in reader)
    except (OSError, pa.ArrowInvalid):
        return -1
    return rows


def load_corpus(data_cfg, extra_train: bool = True) -> dict[str, TextSplit]:
    """All splits a run uses, by role: ``train``, ``valid`` and one entry per test split, each in
    the run's text form (``data.text_form``).

    :param data_cfg: the ``data`` config node (``kind`` is ``multi30k``, ``files``, ``synthetic`` or ``hf``).
    :param extra_train: append ``data.extra_train``'s pairs to the training split (False: do not
        read them, e.g. when only an evaluation split is wanted).
    """
    corpus = _read_corpus(data_cfg)
    extra = extra_train_pairs(data_cfg) if extra_train else None
    if extra is not None:
        corpus["train"] = append_pairs(corpus["train"], extra)
    cache = Path(data_cfg.cache_dir)
    langs = data_cfg.src_lang, data_cfg.tgt_lang
    corpus = {role: split_in_text_form(text, data_cfg.text_form, *langs, cache) for role, text in corpus.items()}
    for role, text in corpus.items():
        check_has_text(text, role)
    return corpus


def check_extra_train(src: str | None, tgt: str | None, pairs: str | None, pairs_langs, src_lang: str,
                      tgt_lang: str) -> bool:  # fmt: skip
    """Check the ``data.extra_train`` settings; :return: whether the pairs file's lines are
    ``target ||| source`` (its ``pairs_langs`` are the run's languages swapped).

    :raise DataError: a pairs file with src or tgt files, one of src and tgt without the other, or
        ``pairs_langs`` that are not the run's two languages.
    """
    if pairs is not None and (src is not None or tgt is not None):
        raise DataError("data.extra_train: give a pairs file (pairs=FILE) or two parallel files (src=FILE tgt=FILE), "
                        "not both")  # fmt: skip
    if (src is None) != (tgt is None):
        raise DataError("data.extra_train.src and data.extra_train.tgt: give both files or neither")
    if pairs_langs is None:
        return False
    langs = [str(lang) for lang in pairs_langs]
    if langs not in ([src_lang, tgt_lang], [tgt_lang, src_lang]):
        raise DataError(f"data.extra_train.pairs_langs={langs}: the languages of a pairs line's two sides, left first, "
                        f"must be the run's: [{src_lang}, {tgt_lang}] or [{tgt_lang}, {src_lang}]")  # fmt: skip
    return langs != [src_lang, tgt_lang]


def extra_train_pairs(data_cfg) -> TextSplit | None:
    """The pairs ``data.extra_train`` adds to the training split (None: none): a ``source |||
    target`` file (``pairs``, its sides ordered by ``pairs_langs``) or two parallel files (``src``, ``tgt``)."""
    extra = data_cfg.extra_train
    swap = check_extra_train(extra.src, extra.tgt, extra.pairs, extra.pairs_langs, data_cfg.src_lang, data_cfg.tgt_lang)
    if extra.pairs is not None:
        return pairs_from_pairs_file(extra.pairs, data_cfg.cache_dir, swap)
    if extra.src is not None:
        return pairs_from_files(extra.src, extra.tgt, data_cfg.cache_dir)
    return None


def extra_train_size(data_cfg) -> int:
    """How many pairs ``data.extra_train`` adds to the training split (0: none); the last rows of
    :func:`load_corpus`'s training split are theirs."""
    extra = extra_train_pairs(data_cfg)
    return 0 if extra is None else len(extra)


def append_pairs(train: TextSplit, extra: TextSplit) -> TextSplit:
    """``train``'s pairs, then ``extra``'s: row ``len(train) + k`` is extra pair k."""
    first, second = train.pairs.select_columns(["src", "tgt"]), extra.pairs.select_columns(["src", "tgt"])
    if second.features != first.features:
        second = second.cast(first.features)
    log.info("training pairs: %d of the corpus, then %d from %s", len(first), len(second), extra.src_name)
    return TextSplit(datasets.concatenate_datasets([first, second]), f"{train.src_name} + {extra.src_name}",
                     f"{train.tgt_name} + {extra.tgt_name}")  # fmt: skip


def check_has_text(text: TextSplit, role: str) -> None:
    """Refuse a split with no pair that has text on both sides (an empty file, or only empty lines):
    sentencepiece cannot learn from it, and nothing can be trained or scored on it."""
    for table in arrow_batches(text.pairs, ("src", "tgt")):
        has = [pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(table.column(c).fill_null(""))), 0) for c in ("src", "tgt")]
        if pc.any(pc.and_(*has)).as_py():
            return
    what = "are empty (0 lines)" if len(text) == 0 else f"have {len(text)} lines but none with text on both sides"
    raise DataError(f"the {role} split {text.src_name} / {text.tgt_name} {what}; it needs sentence pairs")


def corpus_kind(data_cfg) -> str:
    """``data.kind``; checkpoints written before ``data=hf`` existed called it ``data.name``."""
    return data_cfg.get("kind") or data_cfg.get("name")


def _read_corpus(data_cfg) -> dict[str, TextSplit]:
    kind = corpus_kind(data_cfg)
    cache = Path(data_cfg.cache_dir)
    if kind == "multi30k":
        check_multi30k_pair(data_cfg.src_lang, data_cfg.tgt_lang)
        splits = {"train": data_cfg.train_split, "valid": data_cfg.valid_split}
        splits.update({split: split for split in data_cfg.test_splits})
        return {
            role: pairs_from_files(
                multi30k_file(split, data_cfg.src_lang, data_cfg.dir, cache),
                multi30k_file(split, data_cfg.tgt_lang, data_cfg.dir, cache),
                cache,
            )
            for role, split in splits.items()
        }
    if kind == "files":
        corpus = {
            "train": pairs_from_files(data_cfg.train_src, data_cfg.train_tgt, cache),
            "valid": pairs_from_files(data_cfg.valid_src, data_cfg.valid_tgt, cache),
        }
        if data_cfg.test_src is not None:
            corpus["test"] = pairs_from_files(data_cfg.test_src, data_cfg.test_tgt, cache)
        return corpus
    if kind == "synthetic":
        corpus = synthetic_corpus(
            seed=data_cfg.seed,
            vocab_size=data_cfg.words,
            min_len=data_cfg.min_words,
            max_len=data_cfg.max_words,
            sizes={"train": data_cfg.train_size, "valid": data_cfg.valid_size, "test": data_cfg.test_size},
        )
        return {role: TextSplit.from_text(text) for role, text in corpus.items()}
    if kind == "hf":
        return load_hub_splits(data_cfg)
    raise DataError(f"data.kind={kind!r}: choose multi30k, files, synthetic or hf")

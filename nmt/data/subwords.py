"""Training subword vocabularies: sentencepiece (Kudo & Richardson 2018) unigram or BPE models with the
four special ids of :mod:`nmt.tokens` (pad 0, unk 1, bos 2, eos 3).

Models are trained on the training split only, and cached under a key made from the training text
and the settings, so that a second run on the same data (whatever the file names) reuses them. On a
large corpus sentencepiece learns from a random sample of ``data.vocab.sample_size`` sentences, drawn
by its own reservoir sampling from a stream of the corpus (never all of it in memory), from a fixed
seed.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
import sentencepiece as spm

from nmt.data.corpora import arrow_batches, content_key
from nmt.files import atomic_write_bytes
from nmt.tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.vocab import Vocab

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VocabSettings:
    """How the subword models are trained (the ``data.vocab`` config node).

    :param type: ``unigram`` or ``bpe``.
    :param size: number of pieces, specials included; a soft limit on tiny corpora.
    :param joint: one model for both languages (needed for tied source/target embeddings).
    :param character_coverage: fraction of characters covered by the model's alphabet.
    :param sample_size: sentences sampled (per model) from a larger training corpus.
    """

    type: str
    size: int
    joint: bool
    character_coverage: float
    sample_size: int = 1_000_000


SAMPLING_SEED = 1  # sentencepiece's own generator (shuffling, sampling); fixed for reproducible models


def train_sentencepiece(lines: Iterable[str], settings: VocabSettings) -> bytes:
    """Train one sentencepiece model on ``lines`` (streamed: any number) and return its serialized proto."""
    sentences = (line for line in lines if line.strip())
    first = next(sentences, None)
    if first is None:
        raise ValueError("cannot train a sentencepiece model on an empty corpus")
    spm.set_random_generator_seed(SAMPLING_SEED)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=itertools.chain([first], sentences),
        model_writer=model,
        model_type=settings.type,
        vocab_size=settings.size,
        character_coverage=settings.character_coverage,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        hard_vocab_limit=False,  # tiny corpora get as many pieces as they support
        input_sentence_size=settings.sample_size,  # reservoir sampling over the stream
        shuffle_input_sentence=True,
        num_threads=2,
        minloglevel=2,
    )
    return model.getvalue()


def column_lines(pairs: datasets.Dataset, *columns: str) -> Iterator[str]:
    """The lines of ``columns`` one after the other, read in batches from Arrow."""
    for column in columns:
        for table in arrow_batches(pairs, [column], batch_size=10_000):
            yield from table.column(column).to_pylist()


def build_vocabs(pairs: datasets.Dataset, settings: VocabSettings, cache_dir: Path) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies for a training corpus, from the cache when possible.

    :param pairs: the training split, string columns ``src`` and ``tgt``.
    :param settings: model type, size, joint or separate, sample size.
    :param cache_dir: folder of cached models, ``<cache_dir>/<key>/{src,tgt}.model``.
    :return: ``(src_vocab, tgt_vocab)``; the same object twice when ``settings.joint``.
    """
    digest = hashlib.sha256(json.dumps(settings.__dict__, sort_keys=True).encode())
    digest.update(content_key(pairs).encode())
    folder = Path(cache_dir) / digest.hexdigest()[:20]
    src_path, tgt_path = folder / "src.model", folder / "tgt.model"
    if src_path.exists() and tgt_path.exists():
        log.info("reusing sentencepiece models from %s", folder)
        src, tgt = Vocab.load(src_path), Vocab.load(tgt_path)
        return (src, src) if settings.joint else (src, tgt)
    log.info("training %s sentencepiece model(s), %d pieces, into %s", settings.type, settings.size, folder)
    if settings.joint:
        src_proto = tgt_proto = train_sentencepiece(column_lines(pairs, "src", "tgt"), settings)
    else:
        src_proto = train_sentencepiece(column_lines(pairs, "src"), settings)
        tgt_proto = train_sentencepiece(column_lines(pairs, "tgt"), settings)
    atomic_write_bytes(src_path, src_proto)
    atomic_write_bytes(tgt_path, tgt_proto)
    src = Vocab(src_proto)
    return (src, src) if settings.joint else (src, Vocab(tgt_proto))

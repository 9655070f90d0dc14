"""A subword vocabulary: a loaded sentencepiece (Kudo & Richardson 2018) model, unigram or BPE.

Every model made here has the four special ids of :mod:`nmt.tokens` (pad 0, unk 1, bos 2, eos 3).

Models are trained by :mod:`nmt.data.subwords`; this module only loads one (a checkpoint holds two),
so that translating needs neither ``datasets`` nor pyarrow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from nmt.tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

WORD_START = "\u2581"  # "▁": sentencepiece marks the first piece of a whitespace word with it


class Vocab:
    """A loaded sentencepiece model with the fixed special ids.

    :param model_proto: the serialized sentencepiece model (the bytes of a ``.model`` file).
    """

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, model_proto: bytes) -> None:
        self.model_proto = bytes(model_proto)
        self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"sentencepiece model has special ids pad/unk/bos/eos={ids}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; train it with nmt.data.subwords.train_sentencepiece"
            )

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        return cls(Path(path).read_bytes())

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Subword ids of each line, without BOS/EOS."""
        return self.sp.encode(list(lines), out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenized text of one id sequence; special ids are skipped."""
        return self.sp.decode([i for i in ids if i > EOS_ID])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The subword strings of ``ids`` (for labelling alignment plots)."""
        return [self.sp.id_to_piece(int(i)) for i in ids]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.model_proto).hexdigest()

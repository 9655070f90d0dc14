"""Reading text: UTF-8 lines of plain or gzipped files and of standard input, split at ``\\n``
only, control characters turned into spaces, and errors that name the file and line. Both real
corpora (:mod:`nmt.data.corpora`) and the synthetic task (:mod:`nmt.data.synthetic`) return a
:class:`ParallelText` (in memory), which every training run reads as a :class:`TextSplit` (Arrow
columns, memory-mapped when they come from disk).
"""

from __future__ import annotations

import gzip
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.errors import DataError
from nmt.text_form import in_text_form

if TYPE_CHECKING:  # nmt.translate reads text too, and should not pay for importing datasets
    import datasets

log = logging.getLogger(__name__)


@dataclass
class ParallelText:
    """One split of a parallel corpus: ``src[i]`` translates to ``tgt[i]``."""

    src: list[str]
    tgt: list[str]
    src_path: str
    tgt_path: str

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class TextSplit:
    """One split of a parallel corpus: ``pairs["src"][i]`` translates to ``pairs["tgt"][i]``.

    :ivar pairs: a ``datasets.Dataset`` with the string columns ``src`` and ``tgt``.
    :ivar src_name: where the source side came from (a file, or ``<hf:wmt14/de-en:train.de>``), for messages.
    :ivar tgt_name: the same for the target side.
    """

    pairs: datasets.Dataset
    src_name: str
    tgt_name: str

    def __len__(self) -> int:
        return len(self.pairs)

    @classmethod
    def from_text(cls, text: ParallelText) -> TextSplit:
        """A split held in memory (the synthetic task, small test sets)."""
        import datasets

        return cls(datasets.Dataset.from_dict({"src": text.src, "tgt": text.tgt}), text.src_path, text.tgt_path)

    def to_text(self) -> ParallelText:
        """The split as Python lists (for evaluation splits, which are small)."""
        columns = self.pairs.select_columns(["src", "tgt"]).to_dict()
        return ParallelText(columns["src"], columns["tgt"], self.src_name, self.tgt_name)


def read_lines(path: str | Path, errors: str = "strict") -> list[str]:
    """Lines of a UTF-8 text file, gzipped (``.gz``) or plain, without their line endings.

    :param errors: ``strict`` refuses undecodable bytes naming the file and line; ``replace``
        substitutes U+FFFD.
    """
    path = Path(path)
    with _open(path) as f:
        try:
            raw = f.read()
        except (OSError, EOFError) as e:
            raise DataError(f"{path}: cannot read ({e}); is the file complete?") from e
    return decode_lines(raw, str(path), errors)


def iter_lines(path: str | Path, errors: str = "strict") -> Iterator[str]:
    """The lines of :func:`read_lines` one at a time, for files larger than memory."""
    path = Path(path)
    controlled: list[int] = []
    with _open(path) as f:
        number = 0
        while True:
            try:
                raw = f.readline()
            except (OSError, EOFError) as e:
                raise DataError(f"{path}: cannot read ({e}); is the file complete?") from e
            if not raw:
                break
            number += 1
            text, changed = _decode_line(raw.removesuffix(b"\n"), str(path), number, errors)
            if changed:
                controlled.append(number)
            yield text
    _warn_controlled(str(path), controlled)


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> ParallelText:
    """Both sides of a split; files with different line counts are refused."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(length_mismatch(src_path, len(src), tgt_path, len(tgt)))
    return ParallelText(src, tgt, str(src_path), str(tgt_path))


def length_mismatch(src_path: str | Path, n_src: int, tgt_path: str | Path, n_tgt: int) -> str:
    """The error of two sides of a corpus that differ in length."""
    return (
        f"parallel files differ in length: {src_path} has {n_src} lines, {tgt_path} has {n_tgt} lines; "
        "line i of one must translate line i of the other"
    )


def parallel_in_text_form(text: ParallelText, form: str, src_lang: str, tgt_lang: str) -> ParallelText:
    """Both sides of ``text`` in ``form``, each by its language's rules."""
    return ParallelText(in_text_form(text.src, form, src_lang), in_text_form(text.tgt, form, tgt_lang), text.src_path,
                        text.tgt_path)  # fmt: skip


def _open(path: Path):
    """A file, or a FIFO or device (``/dev/stdin``, a shell's ``<(...)``), for reading bytes."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder, not a text file; give the file inside it")
    if not path.exists():
        raise DataError(f"{path}: no such file")
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror or e})") from None


# C0 and C1 control characters but the tab (and the newline, which splits lines): NUL, escape,
# vertical tab... Sentencepiece would make each an unknown piece and split the next word into letters.
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def decode_lines(raw: bytes, name: str, errors: str = "strict", first_line: int = 1) -> list[str]:
    """Split UTF-8 bytes into lines at ``\\n`` only (not at the other characters ``str.splitlines``
    breaks on, such as ``\\x0b`` or ``\\u2028``), dropping one final empty line and trailing ``\\r``.
    Control characters other than the tab become spaces, with one warning naming the lines.

    :param name: the file name used in error messages (e.g. ``<stdin>``).
    :param errors: ``strict`` or ``replace``, as for :func:`read_lines`.
    :param first_line: the number of the first line in messages (a stream read in parts).
    """
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out, controlled = [], []
    for number, line in enumerate(lines, start=first_line):
        text, changed = _decode_line(line, name, number, errors)
        if changed:
            controlled.append(number)
        out.append(text)
    _warn_controlled(name, controlled)
    return out


def _decode_line(line: bytes, name: str, number: int, errors: str) -> tuple[str, bool]:
    """One line (without its ``\\n``) as text, and whether control characters were replaced."""
    try:
        text = line.decode("utf-8", errors=errors).rstrip("\r")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{name}, line {number}: invalid UTF-8 at byte {e.start} ({line[e.start : e.start + 4]!r}); "
            "re-encode the file as UTF-8"
        ) from None
    if CONTROL_CHARACTERS.search(text):
        return CONTROL_CHARACTERS.sub(" ", text), True
    return text, False


def _warn_controlled(name: str, controlled: list[int]) -> None:
    if controlled:
        shown = ", ".join(map(str, controlled[:5])) + (f" and {len(controlled) - 5} more" if len(controlled) > 5 else "")
        log.warning("%s: control characters (NUL, escape, ...) replaced by spaces on line(s) %s", name, shown)


MIN_ROWS_PER_PROCESS = 50_000  # smaller datasets are mapped in this process (workers cost ~1 s to start)


def worker_processes(num_proc: int, rows: int) -> int | None:
    """``num_proc`` for ``Dataset.map`` over ``rows`` rows: None (this process) unless it pays."""
    return num_proc if num_proc > 1 and rows >= MIN_ROWS_PER_PROCESS else None


BAD_UTF8 = ("error", "replace")


def read_input(path: str, on_bad_utf8: str) -> list[str]:
    """Lines of ``path`` (``-`` = stdin), split at ``\\n`` only: what the commands read.

    :param on_bad_utf8: ``error`` (a :class:`DataError` naming the line) or ``replace`` (U+FFFD).
    """
    if on_bad_utf8 not in BAD_UTF8:
        raise ValueError(f"on_bad_utf8={on_bad_utf8!r}: choose one of {', '.join(BAD_UTF8)}")
    errors = "strict" if on_bad_utf8 == "error" else "replace"
    try:
        if path == "-":
            return decode_lines(sys.stdin.buffer.read(), "<stdin>", errors)
        return read_lines(path, errors)
    except DataError as e:
        if "invalid UTF-8" not in str(e):
            raise
        raise DataError(f"{e}, or run with on_bad_utf8=replace") from None

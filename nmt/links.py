"""``python -m nmt.links``: word alignments of a whole parallel corpus by eflomal (Östling and
Tiedemann 2016), an unsupervised statistical aligner, for instance as the guide of guided-alignment
training (``train.guided_alignment.path``).

    python -m nmt.links src=train.de tgt=train.en output=train.links

or of the training pairs of a data config exactly as a run reads them: the corpus's pairs, then
``data.extra_train``'s, in ``data.text_form`` (``data.max_train_pairs`` does not apply: a run draws
its subset from these lines), so that the file fits ``train.guided_alignment.path``:

    python -m nmt.links data=multi30k data.src_lang=en data.tgt_lang=fr output=train.links

eflomal learns from the corpus it aligns, in both directions; the two directions' links are
combined (``symmetrize``, :func:`nmt.evaluation.word_alignment.symmetrize`) and written in Pharaoh
format, one line a pair (``i-j``: source word i, target word j, 0-based, words the whitespace
tokens of the lines as given; eflomal compares words lower-cased). A pair with an empty side gets
an empty line. eflomal is an optional extra: ``pip install 'nmt[align]'``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.configs import command
from nmt.data.corpora import load_corpus
from nmt.data.text import BAD_UTF8, DataError, read_input
from nmt.errors import ConfigError, command_errors
from nmt.evaluation.word_alignment import SYMMETRIZATIONS, Link, format_links, symmetrize
from nmt.files import check_output, write_command_output
from nmt.runtime import setup_logging

log = logging.getLogger("nmt.links")

INSTALL = "pip install 'nmt[align]' (or pip install eflomal)"


def eflomal_aligner() -> type:
    """eflomal's ``Aligner`` class.

    :raise ConfigError: eflomal is not installed, saying how to install it.
    """
    try:
        from eflomal import Aligner
    except ImportError:
        raise ConfigError(f"eflomal is not installed: {INSTALL}") from None
    return Aligner


def read_pharaoh_links(path: str | Path) -> list[set[Link]]:
    """The ``i-j`` links of each line of an aligner's output file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [{(int(i), int(j)) for i, _, j in (token.partition("-") for token in line.split())} for line in lines]


def eflomal_links(sources: Sequence[str], targets: Sequence[str]) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward (source->target) and backward links of every pair, both as (source word,
    target word), word i being the i-th whitespace token of the line as given.

    Only the pairs with words on both sides go to eflomal, each side as its words joined by one
    space (so that eflomal's words are exactly ``str.split``'s); the others get no links.

    :raise ConfigError: eflomal is not installed.
    :raise ValueError: ``sources`` and ``targets`` differ in length.
    :raise RuntimeError: eflomal's output does not fit the pairs (another number of lines, a word
        index beyond its sentence).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: one target a source")
    aligner = eflomal_aligner()
    src_words, tgt_words = [s.split() for s in sources], [t.split() for t in targets]
    kept = [k for k, (s, t) in enumerate(zip(src_words, tgt_words)) if s and t]  # pair k of the input
    forward: list[set[Link]] = [set() for _ in sources]
    backward: list[set[Link]] = [set() for _ in sources]
    if not kept:
        return forward, backward
    with tempfile.TemporaryDirectory(prefix="nmt-links-") as folder:
        fwd_path, rev_path = Path(folder) / "forward", Path(folder) / "backward"
        aligner().align([" ".join(src_words[k]) + "\n" for k in kept], [" ".join(tgt_words[k]) + "\n" for k in kept],
                        links_filename_fwd=str(fwd_path), links_filename_rev=str(rev_path))  # fmt: skip
        found = read_pharaoh_links(fwd_path), read_pharaoh_links(rev_path)
    for out, lines in zip((forward, backward), found):
        if len(lines) != len(kept):
            raise RuntimeError(f"eflomal wrote {len(lines)} lines of links for {len(kept)} sentence pairs")
        for k, links in zip(kept, lines):  # line n of eflomal's output is pair kept[n]
            if any(not (0 <= i < len(src_words[k]) and 0 <= j < len(tgt_words[k])) for i, j in links):
                raise RuntimeError(f"eflomal linked a word beyond pair {k + 1}'s words: {format_links(links)}")
            out[k] = links
    return forward, backward


def corpus_links(sources: Sequence[str], targets: Sequence[str], method: str) -> list[set[Link]]:
    """eflomal's links of every pair, its two directions combined by ``method`` (one of
    :data:`~nmt.evaluation.word_alignment.SYMMETRIZATIONS`)."""
    forward, backward = eflomal_links(sources, targets)
    return [symmetrize(f, b, method) for f, b in zip(forward, backward)]


def read_corpus(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """The sources and targets, one a line each: of ``src`` and ``tgt``, or the training pairs of ``data``.

    :raise DataError: the files differ in length.
    """
    if "data" in cfg:
        text = load_corpus(cfg.data)["train"].to_text()
        return text.src, text.tgt
    sources, targets = read_input(cfg.src, cfg.on_bad_utf8), read_input(cfg.tgt, cfg.on_bad_utf8)
    if len(sources) != len(targets):
        raise DataError(f"{cfg.tgt} has {len(targets)} lines but {cfg.src} has {len(sources)}: one target a source line")
    return sources, targets


def check_config(cfg: DictConfig) -> None:
    """Before any work: the required keys are given, the choices known, the output writable and
    eflomal installed."""
    if OmegaConf.is_missing(cfg, "output"):
        raise ConfigError("output is required: python -m nmt.links src=SRC tgt=TGT output=LINKS")
    if "data" in cfg and (cfg.src is not None or cfg.tgt is not None):
        raise ConfigError("give the sentences once: src=SRC tgt=TGT, or data=OPTION (its training pairs)")
    for key in ("src", "tgt") if "data" not in cfg else ():
        if cfg[key] is None:
            raise ConfigError(f"{key} is required: python -m nmt.links src=SRC tgt=TGT output=LINKS (or data=OPTION: "
                              "the training pairs of a data config)")  # fmt: skip
    for key, choices in (("symmetrize", SYMMETRIZATIONS), ("on_bad_utf8", BAD_UTF8)):
        if cfg[key] not in choices:
            raise ConfigError(f"{key}={cfg[key]!r}: choose one of {', '.join(choices)}")
    if cfg.output != "-":
        check_output(cfg.output, "output", inputs=[p for p in (cfg.src, cfg.tgt, *_data_files(cfg)) if p is not None])
    eflomal_aligner()


def _data_files(cfg: DictConfig) -> list[str]:
    """The files a data config names (its corpus's, for data=files, and data.extra_train's)."""
    if "data" not in cfg:
        return []
    keys = ["extra_train.pairs", "extra_train.src", "extra_train.tgt"]
    keys += ["train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt"] if cfg.data.kind == "files" else []
    return [str(OmegaConf.select(cfg.data, key)) for key in keys if OmegaConf.select(cfg.data, key) is not None]


def links(cfg: DictConfig) -> int:
    """Everything ``python -m nmt.links`` does; returns the number of pairs written."""
    check_config(cfg)
    sources, targets = read_corpus(cfg)
    log.info("aligning %d sentence pairs with eflomal (both directions)", len(sources))
    found = corpus_links(sources, targets, cfg.symmetrize)
    write_command_output(cfg.output, "".join(format_links(one) + "\n" for one in found))
    log.info("wrote %d lines of links (%s, %d links) to %s", len(found), cfg.symmetrize, sum(map(len, found)),
             cfg.output)  # fmt: skip
    return len(found)


@command("links")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        links(cfg)


if __name__ == "__main__":
    main()

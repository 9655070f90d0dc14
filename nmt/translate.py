"""``python -m nmt.translate``: translate a text file or stdin with a checkpoint, built on
:mod:`nmt.model` (loading) and :mod:`nmt.search` (decoding).

Exactly one output line per input line, in order: lines are split at ``\\n`` only; an empty line
gives an empty line; a line longer than ``max_src_len`` subwords is truncated (with a warning naming
it), never dropped. With ``n_best > 1`` each input line gives up to ``n_best`` lines
``index<TAB>score<TAB>text`` (index = 0-based input line; an empty input line gives one).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from nmt.checkpoint import load_model
from nmt.errors import ConfigError, command_errors
from nmt.model import Seq2Seq
from nmt.plotting import attention_figure, save_figure
from nmt.search import Hypothesis, SearchSettings, translate_ids
from nmt.text import DataError, decode_lines, read_lines
from nmt.utils import CONFIG_DIR, atomic_write_text, resolve_device, set_threads, setup_logging
from nmt.vocab import Vocab

log = logging.getLogger("nmt.translate")

BAD_UTF8 = ("error", "replace")


@dataclass
class Translation:
    """The result for one input line.

    :ivar src_ids: the source subwords translated (after truncation; [] for an empty line).
    :ivar hypotheses: best first; [] for an empty line.
    """

    src_ids: list[int]
    hypotheses: list[Hypothesis]


def check_output_is_not_input(input_path: str, output_path: str) -> None:
    """Refuse to write the translations over the source text: the same path, another spelling of
    it, or a link to it (the output would replace the input only after it was read, but the user's
    text would be gone)."""
    if "-" in (input_path, output_path):
        return
    source, target = Path(input_path), Path(output_path)
    same = source.resolve() == target.resolve()
    if not same and source.exists() and target.exists():
        same = os.path.samefile(source, target)  # hard links too
    if same:
        raise ValueError(
            f"output={output_path} is the input file {input_path}: writing the translations there would destroy "
            "the source text; choose another output file"
        )


def read_input(path: str, on_bad_utf8: str) -> list[str]:
    """Lines of ``path`` (``-`` = stdin), split at ``\\n`` only.

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


def encode_sources(lines: list[str], src_vocab: Vocab, max_src_len: int) -> list[list[int]]:
    """Subword ids of each line, truncated to ``max_src_len`` with a warning naming the line."""
    if max_src_len < 1:
        raise ValueError(f"max_src_len={max_src_len}: must be at least 1")
    ids = src_vocab.encode(lines)
    for number, line_ids in enumerate(ids, start=1):
        if len(line_ids) > max_src_len:
            log.warning("line %d: %d subwords, translating only the first %d (max_src_len=%d)",
                        number, len(line_ids), max_src_len, max_src_len)  # fmt: skip
            ids[number - 1] = line_ids[:max_src_len]
    return ids


def translate_lines(
    model: Seq2Seq,
    src_vocab: Vocab,
    lines: list[str],
    settings: SearchSettings,
    batch_size: int,
    batch_unit: str,
    device: torch.device,
    max_src_len: int,
    return_attention: bool = False,
    progress=None,
) -> list[Translation]:
    """Translate ``lines``; one :class:`Translation` per line, in order.

    Lines without any subword (empty, blank, or only characters the normaliser removes) are not
    given to the model: their translation is empty.

    :param settings: greedy or beam search, length penalty, output limit.
    :param batch_size: sentences, or padded source subwords, per batch (``batch_unit``).
    :param batch_unit: ``sentences`` or ``tokens``.
    :param max_src_len: longer sources are cut to their first ``max_src_len`` subwords (warning).
    :param return_attention: keep the best hypotheses' attention (T, S) for alignments.
    :param progress: optional callable ``progress(sentences_done)``, called after each batch.
    """
    src_ids = encode_sources(lines, src_vocab, max_src_len)
    nonempty = [i for i, ids in enumerate(src_ids) if ids]
    hyps = translate_ids(
        model, [src_ids[i] for i in nonempty], settings, batch_size, device, return_attention, progress, batch_unit
    )
    out = [Translation(ids, []) for ids in src_ids]
    for i, sentence_hyps in zip(nonempty, hyps):
        out[i].hypotheses = sentence_hyps
    return out


def _one_line(text: str) -> str:
    """A translation never breaks the one-line-per-input contract."""
    return text.replace("\r", " ").replace("\n", " ")


def format_translations(translations: list[Translation], tgt_vocab: Vocab, n_best: int) -> str:
    """The output text: one line per translation, or up to ``n_best`` tab-separated lines each."""
    out = []
    for index, translation in enumerate(translations):
        hyps = translation.hypotheses
        if n_best == 1:
            out.append(_one_line(tgt_vocab.decode(hyps[0].tokens)) if hyps else "")
        elif not hyps:
            out.append(f"{index}\t0.0000\t")
        else:
            out.extend(f"{index}\t{h.score:.4f}\t{_one_line(tgt_vocab.decode(h.tokens))}" for h in hyps[:n_best])
    return "".join(line + "\n" for line in out)


def write_attention(folder: str | Path, translations: list[Translation], src_vocab: Vocab, tgt_vocab: Vocab) -> int:
    """For each non-empty sentence ``i`` (0-based), ``{i:06d}.png`` (heatmap of the best hypothesis)
    and ``{i:06d}.json``: ``source`` (S subwords, ``</s>`` included), ``target`` (T subwords, ``</s>``
    included) and ``weights``, a T x S list (row t: attention over the source when emitting target t).

    :return: the number of sentences written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for index, translation in enumerate(translations):
        if not translation.hypotheses:
            continue
        best = translation.hypotheses[0]
        weights = best.attention.numpy()  # (T, S)
        src_labels = src_vocab.pieces(translation.src_ids) + ["</s>"]
        tgt_labels = tgt_vocab.pieces(best.tokens) + ["</s>"]
        record = {"index": index, "score": best.score, "source": src_labels, "target": tgt_labels,
                  "shape": list(weights.shape), "weights": np.round(weights.astype(np.float64), 6).tolist()}  # fmt: skip
        atomic_write_text(folder / f"{index:06d}.json", json.dumps(record, ensure_ascii=False) + "\n")
        save_figure(attention_figure(weights, src_labels, tgt_labels, title=f"sentence {index}"),
                    folder / f"{index:06d}.png")  # fmt: skip
        written += 1
    return written


def write_output(path: str, text: str) -> None:
    """To stdout (``-``, as UTF-8 whatever the locale) or atomically to a file."""
    if path == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        atomic_write_text(path, text)


SEARCH_KEYS = ("beam_size", "n_best", "length_penalty", "alpha", "max_len_a", "max_len_b")


def settings_from_config(cfg: DictConfig, checkpoint_config: DictConfig) -> SearchSettings:
    """The checkpoint's own decoding (``train.search``), with the keys set on the command line in its place."""
    return SearchSettings.from_checkpoint(checkpoint_config.train.search, {key: cfg[key] for key in SEARCH_KEYS})


def translate(cfg: DictConfig) -> dict[str, float]:
    """Everything ``python -m nmt.translate`` does; returns the summary figures."""
    check_output_is_not_input(cfg.input, cfg.output)
    lines = read_input(cfg.input, cfg.on_bad_utf8)  # bad input fails before the model loads
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    start = time.perf_counter()
    model, src_vocab, tgt_vocab, config = load_model(cfg.ckpt, device)
    load_seconds = time.perf_counter() - start
    settings = settings_from_config(cfg, config)
    if cfg.attention_dir is not None and not model.decoder.attention.has_alignment:
        raise ValueError(f"attention_dir={cfg.attention_dir}: this model has no attention (model.attention=none)")
    max_src_len = cfg.max_src_len if cfg.max_src_len is not None else config.data.max_len
    log.info("loaded %s in %.1fs; translating %d lines on %s, %s", cfg.ckpt, load_seconds, len(lines), device,
             "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}")  # fmt: skip

    start = time.perf_counter()
    bar = tqdm(total=len(lines), unit="sent", disable=not sys.stderr.isatty(), file=sys.stderr, leave=False)
    translations = translate_lines(
        model, src_vocab, lines, settings, cfg.batch_size, cfg.batch_unit, device, max_src_len,
        return_attention=cfg.attention_dir is not None, progress=bar.update,
    )  # fmt: skip
    bar.update(len(lines) - bar.n)  # the empty lines
    bar.close()
    seconds = time.perf_counter() - start
    write_output(cfg.output, format_translations(translations, tgt_vocab, settings.n_best))
    if cfg.attention_dir is not None:
        count = write_attention(cfg.attention_dir, translations, src_vocab, tgt_vocab)
        log.info("wrote %d alignments to %s", count, cfg.attention_dir)
    summary = {
        "sentences": float(len(lines)),
        "src_tokens": float(sum(len(t.src_ids) for t in translations)),
        "tgt_tokens": float(sum(len(t.hypotheses[0].tokens) for t in translations if t.hypotheses)),
        "seconds": seconds,
        "sentences_per_s": len(lines) / max(seconds, 1e-9),
        "load_seconds": load_seconds,
    }
    log.info("translated %d sentences, %d source / %d target subwords, in %.2fs: %.1f sentences/s",
             len(lines), summary["src_tokens"], summary["tgt_tokens"], seconds, summary["sentences_per_s"])  # fmt: skip
    return summary


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="translate")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        try:
            if OmegaConf.is_missing(cfg, "ckpt"):
                raise ConfigError("ckpt is required: python -m nmt.translate ckpt=RUN/checkpoints/best.pt ...")
            translate(cfg)
        except BrokenPipeError:  # e.g. `... | head`: the reader left, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            sys.exit(0)


if __name__ == "__main__":
    main()

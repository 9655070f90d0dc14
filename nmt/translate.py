"""``python -m nmt.translate``: translate a text file or stdin with a checkpoint, built on
:mod:`nmt.model` (loading) and :mod:`nmt.search` (decoding).

``ckpt=a.pt+b.pt+c.pt`` decodes with an ensemble of the checkpoints (:mod:`nmt.ensemble`);
``sample=N`` draws N translations a line at random instead of searching
(:class:`nmt.search.SamplingSettings`), written like an n-best list when N > 1;
``alignments=true`` appends `` ||| i-j ...`` word alignments from attention to every line.

A model trained on text in another form (``data.text_form``, e.g. lower-cased and tokenized) gets
each input line in that form, and writes its translations in it.

Exactly one output line per input line, in order: lines are split at ``\\n`` only; an empty line
gives an empty line; a line longer than ``max_src_len`` subwords is truncated (with a warning naming
it), never dropped. With ``n_best > 1`` each input line gives up to ``n_best`` lines
``index<TAB>score<TAB>text`` (index = 0-based input line; an empty input line gives one).

A file is translated in blocks of lines (:func:`block_lines`), each sorted by length into batches:
Ctrl-C leaves the output as it was and writes the blocks finished to ``OUTPUT.partial``.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from nmt.configs import command
from nmt.data.text import BAD_UTF8, DataError, decode_lines, read_input
from nmt.ensemble import load_system, split_members
from nmt.errors import ConfigError, command_errors
from nmt.evaluation.word_alignment import format_links, hard_links, word_attention
from nmt.files import atomic_write_bytes, atomic_write_text, check_output, check_output_dir, is_direct, write_command_output
from nmt.plotting import attention_figure, figure_png
from nmt.runtime import resolve_device, set_threads, setup_logging
from nmt.search import SamplingSettings, SearchSettings
from nmt.text_form import AS_IS
from nmt.translator import Translation, in_checkpoint_form, translate_lines
from nmt.vocab import Vocab

log = logging.getLogger("nmt.translate")

def _one_line(text: str) -> str:
    """A translation never breaks the one-line-per-input contract."""
    return text.replace("\r", " ").replace("\n", " ")


def format_translations(translations: list[Translation], tgt_vocab: Vocab, n_best: int, first_index: int = 0,
                        links: list[list[str]] | None = None) -> str:  # fmt: skip
    """The output text: one line per translation, or up to ``n_best`` tab-separated lines each
    (``index`` counts input lines from ``first_index``). With ``links`` (per translation, one
    Pharaoh string per hypothesis) each line ends in `` ||| links``."""
    out = []
    for k, (index, translation) in enumerate(enumerate(translations, start=first_index)):
        hyps = translation.hypotheses
        shown = hyps[:n_best] if hyps else []
        tail = [f" ||| {a}" for a in links[k]] if links is not None else [""] * max(len(shown), 1)
        if n_best == 1:
            out.append((_one_line(tgt_vocab.decode(hyps[0].tokens)) if hyps else "") + tail[0])
        elif not hyps:
            out.append(f"{index}\t0.0000\t" + tail[0])
        else:
            out.extend(f"{index}\t{h.score:.4f}\t{_one_line(tgt_vocab.decode(h.tokens))}{a}" for h, a in zip(shown, tail))
    return "".join(line + "\n" for line in out)


def hypothesis_links(model, src_vocab: Vocab, tgt_vocab: Vocab, lines: list[str], translations: list[Translation],
                     n_best: int, batch_size: int, device) -> list[list[str]]:  # fmt: skip
    """Pharaoh links of every hypothesis shown (per translation, in order): each is force-decoded
    again, its text as written, so the words are the output's whitespace tokens
    (:mod:`nmt.evaluation.word_alignment`)."""
    sources, targets, owner = [], [], []
    for k, (line, translation) in enumerate(zip(lines, translations)):
        for h in translation.hypotheses[:n_best]:
            sources.append(line)
            targets.append(_one_line(tgt_vocab.decode(h.tokens)))
            owner.append(k)
    matrices = word_attention(model, src_vocab, tgt_vocab, sources, targets, batch_size, device)
    links: list[list[str]] = [[] for _ in translations]
    for k, matrix in zip(owner, matrices):
        links[k].append(format_links(hard_links(matrix)))
    return [found or [""] for found in links]


def write_attention(
    folder: str | Path, translations: list[Translation], src_vocab: Vocab, tgt_vocab: Vocab, first_index: int = 0
) -> int:
    """For each non-empty sentence ``i`` (0-based), ``{i:06d}.png`` (heatmap of the best hypothesis)
    and ``{i:06d}.json``: ``source`` (S subwords, ``</s>`` included), ``target`` (T subwords, ``</s>``
    included) and ``weights``, a T x S list (row t: attention over the source when emitting target t).
    Each is written atomically under its name (:func:`nmt.files.atomic_write`): a symbolic link
    found there, in a folder others may write in too, is replaced, never written through.

    :return: the number of sentences written.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for index, translation in enumerate(translations, start=first_index):
        if not translation.hypotheses:
            continue
        best = translation.hypotheses[0]
        weights = best.attention.numpy()  # (T, S)
        src_labels = src_vocab.pieces(translation.src_ids) + ["</s>"]
        tgt_labels = tgt_vocab.pieces(best.tokens) + ["</s>"]
        record = {"index": index, "score": best.score, "source": src_labels, "target": tgt_labels,
                  "shape": list(weights.shape), "weights": np.round(weights.astype(np.float64), 6).tolist()}  # fmt: skip
        atomic_write_text(folder / f"{index:06d}.json", json.dumps(record, ensure_ascii=False) + "\n")
        figure = attention_figure(weights, src_labels, tgt_labels, title=f"sentence {index}")
        atomic_write_bytes(folder / f"{index:06d}.png", figure_png(figure))
        written += 1
    return written


def check_outputs(cfg: DictConfig) -> None:
    """Before any work: the output file and the attention folder can be written, and neither is
    the input or the checkpoint."""
    if cfg.output != "-":
        check_output(cfg.output, "output", inputs=[cfg.input, *split_members(cfg.ckpt)])
    if cfg.attention_dir is not None:
        check_output_dir(cfg.attention_dir, "attention_dir")


SEARCH_KEYS = tuple(f.name for f in fields(SearchSettings))  # the command's keys that override the checkpoint's


def sampling_from_config(cfg: DictConfig) -> SamplingSettings | None:
    """``sample=N`` (N >= 1) with its keys, or None for search."""
    if cfg.sample == 0:
        return None
    try:
        return SamplingSettings(cfg.sample, cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _method(settings: SearchSettings, sampling: SamplingSettings | None) -> str:
    if sampling is not None:
        return (f"{sampling.n} sample(s) a line (temperature {sampling.temperature}, top_k {sampling.top_k}, "
                f"top_p {sampling.top_p}, seed {sampling.seed})")  # fmt: skip
    return "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}"


def settings_from_config(cfg: DictConfig, checkpoint_config: DictConfig) -> SearchSettings:
    """The checkpoint's own decoding (``train.search``), with the keys set on the command line in its place."""
    return SearchSettings.from_checkpoint(checkpoint_config.train.search, {key: cfg[key] for key in SEARCH_KEYS})


def _load(cfg: DictConfig) -> tuple:
    """Threads, device and the model (one checkpoint, or an ensemble of ``a.pt+b.pt``): (model,
    src_vocab, tgt_vocab, decoding settings with the given keys, device, max_src_len, seconds
    spent loading, a function that puts input lines in the checkpoint's text form). An ensemble
    decodes with its first checkpoint's settings, data.max_len and text form."""
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    start = time.perf_counter()
    model, src_vocab, tgt_vocab, config = load_system(cfg.ckpt, device, cfg.ensemble_rule, cfg.precision)
    seconds = time.perf_counter() - start
    if cfg.alignments and not model.has_alignment:
        raise ValueError("alignments=true: this model has no attention (model.attention=none)")
    if cfg.attention_dir is not None and not model.has_alignment:
        raise ValueError(f"attention_dir={cfg.attention_dir}: this model has no attention (model.attention=none)")
    max_src_len = cfg.max_src_len if cfg.max_src_len is not None else config.data.max_len
    form = config.data.get("text_form", AS_IS)
    if form != AS_IS:
        log.info("the model was trained on text in the form %s (data.text_form): each input line is put in it, "
                 "and the translations are in it too", form)  # fmt: skip
    in_form = lambda lines: in_checkpoint_form(lines, config)  # noqa: E731
    return model, src_vocab, tgt_vocab, settings_from_config(cfg, config), device, max_src_len, seconds, in_form


def interactive(cfg: DictConfig) -> bool:
    """Stream (see :func:`translate_stream`) when standard input is a terminal or a pipe and the
    translations go to standard output; a file in, or a file out, is translated in batches."""
    if cfg.input != "-" or cfg.output != "-":
        return False
    return not stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)


def translate(cfg: DictConfig) -> dict[str, float]:
    """Everything ``python -m nmt.translate`` does; returns the summary figures."""
    check_outputs(cfg)
    if cfg.on_bad_utf8 not in BAD_UTF8:
        raise ConfigError(f"on_bad_utf8={cfg.on_bad_utf8!r}: choose one of {', '.join(BAD_UTF8)}")
    if interactive(cfg):
        return translate_stream(cfg)
    lines = read_input(cfg.input, cfg.on_bad_utf8)  # bad input fails before the model loads
    sampling = sampling_from_config(cfg)
    model, src_vocab, tgt_vocab, settings, device, max_src_len, load_seconds, in_form = _load(cfg)
    lines = in_form(lines)
    per_line = sampling.n if sampling is not None else settings.n_best
    log.info("loaded %s in %.1fs (precision %s); translating %d lines on %s, %s", cfg.ckpt, load_seconds,
             cfg.precision, len(lines), device, _method(settings, sampling))  # fmt: skip

    if not lines:
        log.warning("%s is empty: the output is empty too", cfg.input)
    start = time.perf_counter()
    bar = tqdm(total=len(lines), unit="sent", disable=not sys.stderr.isatty(), file=sys.stderr, leave=False)
    texts, done, src_tokens, tgt_tokens, figures = [], 0, 0, 0, 0
    block = block_lines(cfg.batch_size, cfg.batch_unit)
    try:
        for first in range(0, len(lines), block):  # line i of texts is always line i of the output
            part = lines[first : first + block]
            translations = translate_lines(
                model, src_vocab, part, settings, cfg.batch_size, cfg.batch_unit, device, max_src_len,
                return_attention=cfg.attention_dir is not None, progress=bar.update, first_line=first + 1,
                sampling=sampling,
            )  # fmt: skip
            links = (hypothesis_links(model, src_vocab, tgt_vocab, part, translations, per_line, cfg.batch_size, device)
                     if cfg.alignments else None)  # fmt: skip
            texts.append(format_translations(translations, tgt_vocab, per_line, first_index=first, links=links))
            if cfg.attention_dir is not None:
                figures += write_attention(cfg.attention_dir, translations, src_vocab, tgt_vocab, first_index=first)
            src_tokens += sum(len(t.src_ids) for t in translations)
            tgt_tokens += sum(len(t.hypotheses[0].tokens) for t in translations if t.hypotheses)
            done = first + len(part)
            bar.update(done - bar.n)  # the empty lines too
    except KeyboardInterrupt:
        raise KeyboardInterrupt(keep_partial(cfg.output, "".join(texts), done, len(lines))) from None
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    write_command_output(cfg.output, "".join(texts))
    if cfg.attention_dir is not None:
        log.info("wrote %d alignments to %s", figures, cfg.attention_dir)
    return _summary(len(lines), src_tokens, tgt_tokens, seconds, load_seconds)


BLOCK_BATCHES = 16  # batches of lines translated together: a Ctrl-C loses at most the block in progress


def block_lines(batch_size: int, batch_unit: str) -> int:
    """The lines of a file translated together, as ``BLOCK_BATCHES`` batches sorted by length: an
    interrupted translation keeps the blocks before. With ``batch_unit=tokens`` a batch of
    ``batch_size`` subwords is counted as lines of 16 subwords."""
    return BLOCK_BATCHES * (batch_size if batch_unit == "sentences" else max(1, batch_size // 16))


def keep_partial(output: str, text: str, done: int, total: int) -> str:
    """After Ctrl-C: keep ``text``, the output of the first ``done`` of ``total`` input lines, in
    ``OUTPUT.partial`` (written atomically; ``output`` itself is left as it was).

    :return: the line that says what was kept, and where.
    """
    if done == 0:
        return "interrupted before any line was translated: nothing was written"
    if output == "-" or is_direct(output):
        return (f"interrupted after {done} of {total} lines: nothing was written (the translations go to {output} "
                "at the end; with output=FILE, FILE.partial keeps the lines done)")  # fmt: skip
    partial = f"{output}.partial"
    try:
        atomic_write_text(partial, text)
    except OSError as e:
        return f"interrupted after {done} of {total} lines; they could not be kept: {' '.join(str(e).split())}"
    return (f"interrupted: {partial} holds the translations of the first {done} of {total} input lines; "
            f"{output} is as it was")  # fmt: skip


def translate_stream(cfg: DictConfig) -> dict[str, float]:
    """Load the model once, then translate standard input as it arrives: whatever complete lines
    one read returns are translated as one batch and written (and flushed) at once, so a user
    typing, or a program sending one line and waiting, gets each translation as soon as its line
    ends, while a fast pipe still fills batches. The output is the same as in batch mode."""
    sampling = sampling_from_config(cfg)
    model, src_vocab, tgt_vocab, settings, device, max_src_len, load_seconds, in_form = _load(cfg)
    per_line = sampling.n if sampling is not None else settings.n_best
    errors = "strict" if cfg.on_bad_utf8 == "error" else "replace"
    log.info("loaded %s (precision %s); translating standard input line by line as it arrives, %s", cfg.ckpt,
             cfg.precision, _method(settings, sampling))  # fmt: skip
    done = src_tokens = tgt_tokens = 0
    pending, start, fd = b"", time.perf_counter(), sys.stdin.fileno()
    try:
        while True:
            chunk = os.read(fd, 1 << 16)  # blocks until some input, or the end, is there
            if chunk:
                pending += chunk
                if b"\n" not in pending:
                    continue
                complete, pending = pending.rsplit(b"\n", 1)  # whole lines now; a partial one waits
            elif pending:  # the end, after a last line without a newline
                complete, pending = pending, b""
            else:
                break
            try:
                lines = decode_lines(complete + b"\n", "<stdin>", errors, first_line=done + 1)
            except DataError as e:
                raise DataError(f"{e}, or run with on_bad_utf8=replace") from None
            lines = in_form(lines)
            translations = translate_lines(model, src_vocab, lines, settings, cfg.batch_size, cfg.batch_unit, device,
                                           max_src_len, return_attention=cfg.attention_dir is not None,
                                           first_line=done + 1, sampling=sampling)  # fmt: skip
            links = (hypothesis_links(model, src_vocab, tgt_vocab, lines, translations, per_line, cfg.batch_size, device)
                     if cfg.alignments else None)  # fmt: skip
            write_command_output("-", format_translations(translations, tgt_vocab, per_line, first_index=done, links=links))
            if cfg.attention_dir is not None:
                write_attention(cfg.attention_dir, translations, src_vocab, tgt_vocab, first_index=done)
            done += len(lines)
            src_tokens += sum(len(t.src_ids) for t in translations)
            tgt_tokens += sum(len(t.hypotheses[0].tokens) for t in translations if t.hypotheses)
    except KeyboardInterrupt:  # how a user typing ends the command
        raise KeyboardInterrupt(f"interrupted after {done} lines, each written as it was translated") from None
    return _summary(done, src_tokens, tgt_tokens, time.perf_counter() - start, load_seconds)


def _summary(sentences: int, src_tokens: int, tgt_tokens: int, seconds: float, load_seconds: float) -> dict[str, float]:
    """The closing log line and the figures :func:`translate` returns."""
    rate = sentences / max(seconds, 1e-9)
    log.info("translated %d sentences, %d source / %d target subwords, in %.2fs: %.1f sentences/s",
             sentences, src_tokens, tgt_tokens, seconds, rate)  # fmt: skip
    return {"sentences": float(sentences), "src_tokens": float(src_tokens), "tgt_tokens": float(tgt_tokens),
            "seconds": seconds, "sentences_per_s": rate, "load_seconds": load_seconds}  # fmt: skip


@command("translate")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log, "interrupted before any line was translated: nothing was written"):
        try:
            if OmegaConf.is_missing(cfg, "ckpt"):
                raise ConfigError("ckpt is required: python -m nmt.translate ckpt=RUN/checkpoints/best.pt ...")
            translate(cfg)
        except BrokenPipeError:  # e.g. `... | head`: the reader left, which is not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            sys.exit(0)


if __name__ == "__main__":
    main()

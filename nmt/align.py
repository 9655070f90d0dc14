"""``python -m nmt.align``: word alignments from a model's attention, built on
:mod:`nmt.evaluation.word_alignment`.

Each (source, target) pair is force-decoded and its subword attention becomes a target-words x
source-words matrix; links are extracted from it (``argmax`` or ``threshold``) and written in
Pharaoh format, one line a pair (``i-j``: source word i, target word j, 0-based, words the
whitespace tokens of the lines as given), or as soft weights (``format=soft``). Without ``tgt``
the sources are first translated with the checkpoint's decoding, and each line is
``translation ||| links`` (as Marian and fairseq append alignments). With ``reverse_ckpt`` (a
target->source model: its languages are ``ckpt``'s, swapped) the two directions' links are
combined (``symmetrize``). With ``align.eos_unaligned`` a target word that attends to the source
``</s>`` more than to any source word gets no link; with ``align.full_context`` a Transformer's
attention is read from a pass that sees the whole target (for models trained with
``train.guided_alignment.full_context``). A checkpoint trained on text in another form
(``data.text_form``, e.g. lower-cased and tokenized) reads the sentences in that form, and the
links count the words of that form. With ``gold`` the alignment error rate,
precision and recall of every extraction method are reported, each with and without
``eos_unaligned`` (the names ending ``+eos_unaligned``), next to the diagonal baseline.
"""

from __future__ import annotations

import json
import logging

import numpy as np
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import direction
from nmt.configs import command
from nmt.data.text import BAD_UTF8, DataError, read_input
from nmt.ensemble import load_system, split_members
from nmt.errors import ConfigError, command_errors
from nmt.evaluation.word_alignment import (
    EXTRACTIONS,
    SYMMETRIZATIONS,
    Link,
    alignment_error_rate,
    choose_attention,
    diagonal_links,
    drop_eos,
    format_links,
    hard_links,
    read_gold,
    symmetrize,
    word_attention,
)
from nmt.files import check_output, write_command_output, write_output_text
from nmt.runtime import resolve_device, set_threads, setup_logging
from nmt.search import SearchSettings
from nmt.text_form import AS_IS, in_text_form
from nmt.translator import translate_lines

log = logging.getLogger("nmt.align")

FORMATS = ("pharaoh", "soft")
EOS_UNALIGNED = "+eos_unaligned"  # in the AER report, the suffix of the links extracted with align.eos_unaligned


def check_config(cfg: DictConfig) -> None:
    """Before any work: the choices are known, the inputs are given once, the outputs can be written."""
    for key, choices in (("format", FORMATS), ("method", EXTRACTIONS), ("symmetrize", SYMMETRIZATIONS),
                         ("on_bad_utf8", BAD_UTF8)):  # fmt: skip
        if cfg[key] not in choices:
            raise ConfigError(f"{key}={cfg[key]!r}: choose one of {', '.join(choices)}")
    if (cfg.pairs is None) == (cfg.src is None):
        raise ConfigError("give the sentences once: pairs=FILE ('source ||| target' lines), or src=FILE (and tgt=FILE)")
    if cfg.pairs is not None and cfg.tgt is not None:
        raise ConfigError("pairs holds the targets already; leave tgt out")
    if cfg.report is not None and cfg.gold is None:
        raise ConfigError("report needs gold links: give gold=FILE")
    inputs = [p for p in (cfg.src, cfg.tgt, cfg.pairs, cfg.gold) if p is not None]
    inputs += [*split_members(cfg.ckpt), *(split_members(cfg.reverse_ckpt) if cfg.reverse_ckpt else [])]
    for key in ("output", "report"):
        if cfg[key] not in (None, "-"):
            check_output(cfg[key], key, inputs=inputs)


def read_sentences(cfg: DictConfig) -> tuple[list[str], list[str] | None]:
    """The sources and the targets (None: to be translated)."""
    if cfg.pairs is not None:
        sources, targets = [], []
        for number, line in enumerate(read_input(cfg.pairs, cfg.on_bad_utf8), start=1):
            if line.count(" ||| ") != 1:
                raise DataError(f"{cfg.pairs}, line {number}: expected 'source ||| target', got {line[:60]!r}")
            source, target = line.split(" ||| ")
            sources.append(source)
            targets.append(target)
        return sources, targets
    sources = read_input(cfg.src, cfg.on_bad_utf8)
    if cfg.tgt is None:
        return sources, None
    targets = read_input(cfg.tgt, cfg.on_bad_utf8)
    if len(targets) != len(sources):
        raise DataError(f"{cfg.tgt} has {len(targets)} lines but {cfg.src} has {len(sources)}: one target a source line")
    return sources, targets


def soft_record(number: int, source: str, target: str, matrix: np.ndarray) -> str:
    """One JSON line: the words of both sides and each target word's weights over the source words."""
    return json.dumps({"line": number, "source": source.split(), "target": target.split(),
                       "weights": np.round(matrix, 4).tolist()}, ensure_ascii=False)  # fmt: skip


def align(cfg: DictConfig) -> dict:
    """Everything ``python -m nmt.align`` does; returns the AER report (empty without gold)."""
    check_config(cfg)
    sources, targets = read_sentences(cfg)
    gold = read_gold(cfg.gold, num_pairs=len(sources), one_based=cfg.gold_one_based) if cfg.gold else None
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    model, src_vocab, tgt_vocab, config = load_system(cfg.ckpt, device, cfg.ensemble_rule, cfg.precision)
    log.info("loaded %s (precision %s) on %s", cfg.ckpt, cfg.precision, device)
    if not model.has_alignment:
        raise ConfigError(f"ckpt={cfg.ckpt}: this model has no attention (model.attention=none); nothing to align")
    choose_attention(model, cfg.align.layer, cfg.align.heads, cfg.align.full_context)
    if cfg.reverse_ckpt is not None:
        reverse, rev_src, rev_tgt, rev_config = load_system(cfg.reverse_ckpt, device, cfg.ensemble_rule, cfg.precision)
        log.info("loaded %s (precision %s) on %s", cfg.reverse_ckpt, cfg.precision, device)
        check_reverse(cfg, config, rev_config)
        choose_attention(reverse, cfg.align.layer, cfg.align.heads, cfg.align.full_context)
    sources, targets = sentences_in_form(config.data, sources, targets, keep_words=gold is not None)
    translated = targets is None
    if translated:
        settings = SearchSettings(**config.train.search)
        translations = translate_lines(model, src_vocab, sources, settings, cfg.batch_size, "sentences", device,
                                       int(config.data.max_len))  # fmt: skip
        targets = [tgt_vocab.decode(t.hypotheses[0].tokens) if t.hypotheses else "" for t in translations]
    forward = word_attention(model, src_vocab, tgt_vocab, sources, targets, cfg.batch_size, device, cfg.align.shift,
                             keep_eos=True)  # fmt: skip
    backward = None
    if cfg.reverse_ckpt is not None:
        backward = word_attention(reverse, rev_src, rev_tgt, targets, sources, cfg.batch_size, device, cfg.align.shift,
                                  keep_eos=True)  # fmt: skip
    # with gold, both settings of eos_unaligned are scored; the output has the chosen one's links
    methods = extract_links(forward, backward, cfg.method, cfg.threshold,
                            (False, True) if gold is not None else (cfg.align.eos_unaligned,))  # fmt: skip
    chosen = cfg.symmetrize if cfg.reverse_ckpt is not None else "forward"
    links = methods[chosen + (EOS_UNALIGNED if cfg.align.eos_unaligned else "")]
    if cfg.format == "soft":
        lines = [soft_record(n, s, t, drop_eos(m)) for n, (s, t, m) in enumerate(zip(sources, targets, forward), start=1)]
    else:
        lines = [format_links(one) for one in links]
        if translated:
            lines = [f"{t.replace(chr(10), ' ')} ||| {a}" for t, a in zip(targets, lines)]
    text = "".join(line + "\n" for line in lines)
    write_command_output(cfg.output, text)
    log.info("aligned %d sentence pairs (%s%s%s)", len(sources), cfg.method,
             f", symmetrized by {cfg.symmetrize}" if cfg.reverse_ckpt else "",
             ", </s> unaligned" if cfg.align.eos_unaligned else "")  # fmt: skip
    return _report(cfg, methods, gold, sources, targets) if gold is not None else {}


def extract_links(forward: list[np.ndarray], backward: list[np.ndarray] | None, method: str, threshold: float,
                  eos_unaligned: tuple[bool, ...]) -> dict[str, list[set[Link]]]:  # fmt: skip
    """The links of every pair by each extraction: ``forward``, and with ``backward`` also
    ``backward`` and each symmetrization, once for each value in ``eos_unaligned`` (the names of
    the ``True`` ones end in ``+eos_unaligned``), both values of a method next to each other.

    :param forward: each pair's (target words, source words + 1) attention, the source ``</s>``
        last (:func:`word_attention` with ``keep_eos``); ``backward`` the reverse model's, of
        (source words, target words + 1).
    :return: each pair's links as ``(source word, target word)``, by name.
    """
    variants: dict[str, dict[str, list[set[Link]]]] = {}
    for unaligned in eos_unaligned:
        one = {"forward": [hard_links(drop_eos(m, unaligned), method, threshold) for m in forward]}
        if backward is not None:
            one["backward"] = [{(i, j) for j, i in hard_links(drop_eos(m, unaligned), method, threshold)}
                               for m in backward]  # fmt: skip
            for name in SYMMETRIZATIONS:
                one[name] = [symmetrize(f, b, name) for f, b in zip(one["forward"], one["backward"])]
        variants[EOS_UNALIGNED if unaligned else ""] = one
    names = next(iter(variants.values()))
    return {name + suffix: one[name] for name in names for suffix, one in variants.items()}


def check_reverse(cfg: DictConfig, config: DictConfig, rev_config: DictConfig) -> None:
    """``reverse_ckpt`` translates tgt->src of ``ckpt``'s src->tgt (the checkpoints' ``data``
    languages), or its links would be of another language pair, and reads text in the same form.

    :raise ConfigError: naming both checkpoints and their directions (or text forms).
    """
    forward, backward = direction(config), direction(rev_config)
    wanted = f"{config.data.tgt_lang}->{config.data.src_lang}"
    if backward != wanted:
        raise ConfigError(f"reverse_ckpt={cfg.reverse_ckpt} translates {backward}, but ckpt={cfg.ckpt} translates "
                          f"{forward}: the reverse model must translate {wanted}")  # fmt: skip
    if rev_config.data.text_form != config.data.text_form:
        raise ConfigError(f"reverse_ckpt={cfg.reverse_ckpt} was trained on text in the form {rev_config.data.text_form}, "
                          f"ckpt={cfg.ckpt} in {config.data.text_form} (data.text_form): their links would count "
                          "other words; give two models of one text form")  # fmt: skip


def sentences_in_form(data: DictConfig, sources: list[str], targets: list[str] | None,
                      keep_words: bool) -> tuple[list[str], list[str] | None]:  # fmt: skip
    """The sentences in the text form the checkpoint was trained in (its ``data.text_form``), each
    side by its language's rules; as given for ``as_is``.

    :param keep_words: refuse a sentence whose number of words the form changes (gold links count
        the words of the lines as given).
    :raise DataError: naming the line, with ``keep_words``.
    """
    if data.text_form == AS_IS:
        return sources, targets
    formed: list[list[str] | None] = []
    for side, lines, lang in (("source", sources, data.src_lang), ("target", targets, data.tgt_lang)):
        out = None if lines is None else in_text_form(lines, data.text_form, lang)
        changed = [n for n, (a, b) in enumerate(zip(lines or [], out or []), start=1) if len(a.split()) != len(b.split())]
        if changed and keep_words:
            n = changed[0]
            raise DataError(f"line {n}: in the text form the checkpoint was trained in ({data.text_form}) the {side} "
                            f"has {len(out[n - 1].split())} words, not {len(lines[n - 1].split())}, so gold links of the "
                            "words as given cannot be scored; give the sentences in that form")  # fmt: skip
        if changed:
            log.warning("%d %s sentences have other words in the checkpoint's text form (%s): their links count "
                        "those words", len(changed), side, data.text_form)  # fmt: skip
        formed.append(out)
    log.info("sentences put in the checkpoint's text form: %s", data.text_form)
    return formed[0], formed[1]


def _report(cfg: DictConfig, methods: dict[str, list[set[Link]]], gold: list, sources: list[str],
            targets: list[str]) -> dict:  # fmt: skip
    """AER, precision and recall of each extraction method (:func:`extract_links`) and the
    diagonal baseline, logged as a table and written to ``cfg.report``."""
    methods = {**methods, "diagonal": [diagonal_links(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]}
    scores = {name: alignment_error_rate(links, gold) for name, links in methods.items()}
    log.info("%-30s %6s %9s %6s %7s", "method", "AER", "precision", "recall", "links")
    for name, s in scores.items():
        log.info("%-30s %6.1f %9.1f %6.1f %7d", name, 100 * s["aer"], 100 * s["precision"], 100 * s["recall"], s["links"])
    report = {"ckpt": str(cfg.ckpt), "reverse_ckpt": cfg.reverse_ckpt, "gold": str(cfg.gold), "pairs": len(sources),
              "method": cfg.method, "threshold": cfg.threshold, "eos_unaligned": cfg.align.eos_unaligned,
              "full_context": cfg.align.full_context,
              "scores": scores}  # fmt: skip
    if cfg.report is not None:
        write_output_text(cfg.report, json.dumps(report, indent=2) + "\n")
    return report


@command("align")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(log):
        if OmegaConf.is_missing(cfg, "ckpt"):
            raise ConfigError("ckpt is required: python -m nmt.align ckpt=RUN/checkpoints/best.pt src=SRC tgt=TGT")
        align(cfg)


if __name__ == "__main__":
    main()

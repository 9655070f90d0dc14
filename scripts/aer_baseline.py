"""A classical word aligner beside attention: eflomal (Östling and Tiedemann 2016, ``pip install
'nmt[align]'``, run by :func:`nmt.links.eflomal_links`) on the same sentence pairs, scored against
the same gold links as ``nmt.align``.

    python scripts/aer_baseline.py --pairs en-fr.src-tgt --gold en-fr.gold --gold-one-based \\
        --extra-src multi30k/train.en.gz --extra-tgt multi30k/train.fr.gz --report eflomal.json

An unsupervised aligner learns from the text it aligns, so a small test set is usually aligned
together with a larger parallel corpus of the same pair (``--extra-src``/``--extra-tgt``, e.g. the
training corpus of the translation model), and only the test pairs' links are scored. Both are
aligned in the form of the NAACL 2003 English-French gold set, ``data.text_form=lowercase_tokenized``
(:mod:`nmt.text_form`: lower-cased, words and punctuation split, a French side's contractions
written out; ``--src-lang``/``--tgt-lang`` name the sides' languages), which keeps the gold set's
own words. Prints AER, precision and recall (%) of the forward and backward links, their four
symmetrizations (:mod:`nmt.evaluation.word_alignment`) and the diagonal baseline; ``--output``
writes the grow-diag-final links in Pharaoh format.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nmt.data.text import read_lines
from nmt.errors import ConfigError
from nmt.evaluation.word_alignment import (
    SYMMETRIZATIONS,
    alignment_error_rate,
    diagonal_links,
    format_links,
    read_gold,
    symmetrize,
)
from nmt.links import eflomal_links
from nmt.text_form import tokenize


def read_pairs(path: Path) -> tuple[list[str], list[str]]:
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if line.count(" ||| ") != 1:
            raise SystemExit(f"{path}, line {number}: expected 'source ||| target'")
        source, target = line.split(" ||| ")
        sources.append(" ".join(source.split()))
        targets.append(" ".join(target.split()))
    return sources, targets


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=Path, required=True, help="the test pairs, 'source ||| target' a line")
    parser.add_argument("--gold", type=Path, required=True, help="their gold links (Pharaoh or NAACL)")
    parser.add_argument("--gold-one-based", action="store_true", help="the gold Pharaoh links count words from 1")
    parser.add_argument("--extra-src", type=Path, help="more source text of the pair to learn from (plain or .gz)")
    parser.add_argument("--extra-tgt", type=Path, help="its translations, a line each")
    parser.add_argument("--src-lang", default="en", help="the language of the pairs' left side (default: en)")
    parser.add_argument("--tgt-lang", default="fr", help="the language of their right side (default: fr)")
    parser.add_argument("--output", type=Path, help="write the grow-diag-final links of the test pairs here")
    parser.add_argument("--report", type=Path, help="write every score as JSON here")
    args = parser.parse_args(argv)
    if (args.extra_src is None) != (args.extra_tgt is None):
        parser.error("give --extra-src and --extra-tgt together")
    sources, targets = read_pairs(args.pairs)
    gold = read_gold(args.gold, num_pairs=len(sources), one_based=args.gold_one_based)
    extra_src = [tokenize(line, args.src_lang) for line in read_lines(args.extra_src)] if args.extra_src else []
    extra_tgt = [tokenize(line, args.tgt_lang) for line in read_lines(args.extra_tgt)] if args.extra_tgt else []
    if len(extra_src) != len(extra_tgt):
        raise SystemExit(f"{args.extra_src} has {len(extra_src)} lines but {args.extra_tgt} has {len(extra_tgt)}")
    test_src, test_tgt = [tokenize(s, args.src_lang) for s in sources], [tokenize(t, args.tgt_lang) for t in targets]
    for number, pair in enumerate(zip(sources, targets, test_src, test_tgt), start=1):
        if [len(s.split()) for s in pair[:2]] != [len(s.split()) for s in pair[2:]]:
            raise SystemExit(f"{args.pairs}, line {number}: tokenizing changes its words, so the gold links would not fit")
    try:
        forward, backward = eflomal_links([*extra_src, *test_src], [*extra_tgt, *test_tgt])
    except ConfigError as e:  # eflomal is not installed
        raise SystemExit(str(e)) from None
    methods = {"forward": forward[len(extra_src) :], "backward": backward[len(extra_src) :]}
    for name in SYMMETRIZATIONS:
        methods[name] = [symmetrize(f, b, name) for f, b in zip(methods["forward"], methods["backward"])]
    methods["diagonal"] = [diagonal_links(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
    scores = {name: alignment_error_rate(links, gold) for name, links in methods.items()}
    print(f"{'eflomal':<16} {'AER':>6} {'precision':>9} {'recall':>6}")
    for name, s in scores.items():
        print(f"{name:<16} {100 * s['aer']:6.1f} {100 * s['precision']:9.1f} {100 * s['recall']:6.1f}")
    report = {"aligner": "eflomal", "pairs": str(args.pairs), "gold": str(args.gold), "extra_pairs": len(extra_src),
              "scores": scores}  # fmt: skip
    if args.output:
        args.output.write_text("".join(format_links(links) + "\n" for links in methods["grow_diag_final"]))
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

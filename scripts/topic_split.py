"""Split a parallel corpus in two by topic: the pairs whose chosen side matches a regular
expression ("in-domain") and the rest ("general"), line by line, each pair kept whole. It makes a
small domain out of a corpus, for trying domain adaptation (``train.init_from``) on data anyone can
download; the docs' fine-tuning walk-through splits Multi30k by the captions that mention a dog:

    python scripts/topic_split.py --src $D/train.de.gz --tgt $D/train.en.gz --side tgt \\
        --pattern '\\b(dog|dogs|puppy|puppies)\\b' --out data/dogs --name train
    python scripts/topic_split.py --src $D/val.de.gz --tgt $D/val.en.gz --side tgt \\
        --pattern '\\b(dog|dogs|puppy|puppies)\\b' --out data/dogs --name val

writes ``OUT/NAME.in.{src,tgt}`` and ``OUT/NAME.general.{src,tgt}`` (``--src-lang``/``--tgt-lang``
name the suffixes; default: the inputs' own, ``train.de.gz`` -> ``de``), plain UTF-8, each file
atomically. The match is case-insensitive unless ``--case-sensitive``. It prints how many pairs
each part has. Files of different lengths are refused, naming both counts; nothing is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from nmt.data.text import read_lines
from nmt.files import atomic_write_text, check_output_dir


def language(path: Path) -> str:
    """``train.de.gz`` -> ``de``: the last suffix before an optional ``.gz``."""
    name = path.name.removesuffix(".gz")
    return Path(name).suffix.lstrip(".") or "txt"


def split(src: list[str], tgt: list[str], pattern: re.Pattern, side: str) -> tuple[list[int], list[int]]:
    """The 0-based line numbers of the pairs whose ``side`` (``src`` or ``tgt``) matches
    ``pattern``, and of the others, each in corpus order."""
    lines = src if side == "src" else tgt
    inside = [n for n, line in enumerate(lines) if pattern.search(line)]
    chosen = set(inside)
    return inside, [n for n in range(len(lines)) if n not in chosen]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, required=True, help="source side, one sentence a line (plain or .gz)")
    parser.add_argument("--tgt", type=Path, required=True, help="target side, line by line with --src")
    parser.add_argument("--pattern", required=True, help="a Python regular expression")
    parser.add_argument("--side", choices=("src", "tgt"), default="tgt", help="the side the pattern is matched on")
    parser.add_argument("--case-sensitive", action="store_true")
    parser.add_argument("--out", type=Path, required=True, help="folder for the four files (made if missing)")
    parser.add_argument("--name", default="train", help="the files' first name: NAME.in.de ... (default: train)")
    parser.add_argument("--src-lang", help="suffix of the source files (default: --src's own)")
    parser.add_argument("--tgt-lang", help="suffix of the target files (default: --tgt's own)")
    args = parser.parse_args(argv)
    try:
        pattern = re.compile(args.pattern, 0 if args.case_sensitive else re.IGNORECASE)
    except re.error as e:
        raise SystemExit(f"--pattern {args.pattern!r} is not a regular expression: {e}") from None
    try:
        check_output_dir(args.out, "--out")
        src, tgt = read_lines(args.src), read_lines(args.tgt)
    except (OSError, ValueError) as e:
        raise SystemExit(str(e)) from None
    if len(src) != len(tgt):
        raise SystemExit(f"{args.src} has {len(src)} lines and {args.tgt} {len(tgt)}: give the two sides of one "
                         "corpus, line by line")  # fmt: skip
    inside, general = split(src, tgt, pattern, args.side)
    if not inside:
        raise SystemExit(f"--pattern {args.pattern!r} matches no line of {args.src if args.side == 'src' else args.tgt}: "
                         "nothing was written")  # fmt: skip
    langs = {"src": args.src_lang or language(args.src), "tgt": args.tgt_lang or language(args.tgt)}
    if langs["src"] == langs["tgt"]:
        raise SystemExit(f"both sides would be written as .{langs['src']}: give --src-lang and --tgt-lang")
    args.out.mkdir(parents=True, exist_ok=True)
    for part, rows in (("in", inside), ("general", general)):
        for side, lines in (("src", src), ("tgt", tgt)):
            atomic_write_text(args.out / f"{args.name}.{part}.{langs[side]}", "".join(lines[n] + "\n" for n in rows))
    print(f"{args.name}: {len(inside)} of {len(src)} pairs in-domain ({100 * len(inside) / len(src):.1f}%), "
          f"{len(general)} general -> {args.out}/{args.name}.{{in,general}}.{{{langs['src']},{langs['tgt']}}}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

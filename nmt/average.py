"""``python -m nmt.average`` (console script ``nmt-average``): average the weights of the last N
checkpoints of a run into one checkpoint for ``nmt.translate``.

    python -m nmt.average RUN [--last 5] [--output RUN/checkpoints/averaged.pt]
    python -m nmt.average a.pt b.pt c.pt --output averaged.pt

Averaging the parameters of the last checkpoints of a run usually translates a little better than
any one of them (Junczys-Dowmunt et al. 2016; Vaswani et al. 2017, section 6.1). Training keeps them
as ``RUN/checkpoints/step*.pt`` (``train.keep_checkpoints``). The checkpoints must share the model
config and the sentencepiece models; the result holds the weights only (it cannot resume training).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from nmt.checkpoint import average_checkpoints, run_checkpoints
from nmt.errors import command_errors
from nmt.runtime import setup_logging

log = logging.getLogger("nmt.average")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nmt-average", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="a run folder, or checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="how many of a run's last step*.pt to average")
    parser.add_argument("--output", type=Path, help="default: <run>/checkpoints/averaged.pt")
    args = parser.parse_args(argv)
    setup_logging()
    with command_errors(log):
        if len(args.inputs) == 1 and args.inputs[0].is_dir():
            paths = run_checkpoints(args.inputs[0], args.last)
        else:
            paths = args.inputs
        output = args.output or paths[-1].parent / "averaged.pt"
        average_checkpoints(paths, output)
    log.info("averaged %d checkpoints (%s) into %s", len(paths), ", ".join(p.name for p in paths), output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Average the weights of the last N checkpoints of a run into one checkpoint for ``nmt.translate``.

    python scripts/average_checkpoints.py RUN [--last 5] [--output RUN/checkpoints/averaged.pt]
    python scripts/average_checkpoints.py a.pt b.pt c.pt --output averaged.pt

Averaging the parameters of the last checkpoints of a run usually translates a little better than
any one of them (Junczys-Dowmunt et al. 2016; Vaswani et al. 2017, section 6.1). Training keeps them
as ``RUN/checkpoints/step*.pt`` (``train.keep_checkpoints``). The checkpoints must share the model
config and the sentencepiece models; the result holds the weights only (it cannot resume training).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

import torch

from nmt.errors import command_errors
from nmt.model import CheckpointError, load_checkpoint, model_from_checkpoint, save_checkpoint
from nmt.utils import setup_logging

log = logging.getLogger("average_checkpoints")


def run_checkpoints(run: Path, last: int) -> list[Path]:
    """The ``last`` periodic checkpoints of a run folder (or its ``checkpoints/`` folder), by step."""
    folder = run / "checkpoints" if (run / "checkpoints").is_dir() else run
    found = [(int(m.group(1)), p) for p in folder.glob("step*.pt") if (m := re.fullmatch(r"step(\d+)\.pt", p.name))]
    if not found:
        raise CheckpointError(f"{folder}: no step*.pt checkpoints (train with train.keep_checkpoints > 0)")
    return [path for _, path in sorted(found)[-last:]]


def average_checkpoints(paths: list[Path], output: Path) -> None:
    """Write the element-wise mean of the weights of ``paths`` (in float64, then cast back)."""
    payloads = [load_checkpoint(path) for path in paths]
    first = payloads[0]
    for path, payload in zip(paths[1:], payloads[1:]):
        if payload["config"]["model"] != first["config"]["model"] or payload["vocab"] != first["vocab"]:
            raise CheckpointError(f"{path}: another model config or vocabulary than {paths[0]}; cannot average")
    averaged = {}
    for name, tensor in first["model"].items():
        if tensor.is_floating_point():
            total = sum(payload["model"][name].double() for payload in payloads)
            averaged[name] = (total / len(payloads)).to(tensor.dtype)
        else:  # integer buffers (none in the current models): they must agree
            if any(not torch.equal(payload["model"][name], tensor) for payload in payloads):
                raise CheckpointError(f"non-float tensor {name} differs between the checkpoints; cannot average")
            averaged[name] = tensor
    last = payloads[-1]
    try:
        model, src_vocab, tgt_vocab, config = model_from_checkpoint({**last, "model": averaged})
    except CheckpointError as e:
        raise CheckpointError(f"{paths[-1]}: {e}") from None
    save_checkpoint(output, model, config, src_vocab, tgt_vocab, train_state=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="a run folder, or checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="how many of a run's last step*.pt to average")
    parser.add_argument("--output", type=Path, help="default: <run>/checkpoints/averaged.pt")
    args = parser.parse_args(argv)
    setup_logging()
    with command_errors(log):
        if len(args.inputs) == 1 and args.inputs[0].is_dir():
            if args.last < 1:
                raise CheckpointError(f"--last {args.last}: must be at least 1")
            paths = run_checkpoints(args.inputs[0], args.last)
        else:
            paths = args.inputs
        output = args.output or paths[-1].parent / "averaged.pt"
        average_checkpoints(paths, output)
    log.info("averaged %d checkpoints (%s) into %s", len(paths), ", ".join(p.name for p in paths), output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write the trained weights of a checkpoint made with ``train.ema`` as a checkpoint of their own.

    python scripts/trained_weights.py RUN/checkpoints/last.pt --output RUN/checkpoints/trained.pt

With ``train.ema`` on, a checkpoint's weights are the moving average, and the weights the optimizer
produced travel in its training state (for resuming). This writes those trained weights as a
weights-only checkpoint (same config and vocabularies), so that the two can be scored side by side:

    python -m nmt.evaluate ckpt=[ema:RUN/checkpoints/last.pt,trained:RUN/checkpoints/trained.pt] split=val ...
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from nmt.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from nmt.errors import CheckpointError, command_errors
from nmt.runtime import setup_logging

log = logging.getLogger("trained_weights")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a checkpoint with a training state, written with train.ema on")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    with command_errors(log):
        payload = load_checkpoint(args.checkpoint)
        trained = (payload["train_state"] or {}).get("trained_model")
        if trained is None:
            raise CheckpointError(f"{args.checkpoint}: holds no separate trained weights (was train.ema on, and is it "
                                  "last.pt/best.pt rather than a weights-only file?)")  # fmt: skip
        model, src_vocab, tgt_vocab, config = model_from_checkpoint({**payload, "model": trained})
        save_checkpoint(args.output, model, config, src_vocab, tgt_vocab, train_state=None)
    log.info("wrote the trained weights of %s to %s", args.checkpoint, args.output)


if __name__ == "__main__":
    main()

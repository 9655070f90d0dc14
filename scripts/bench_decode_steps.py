"""Time per decoder step as the output grows, for a Transformer decoding with its key-value cache
(one new position a step) and recomputing the whole prefix at every step (what a decoder without
a cache does).

    python scripts/bench_decode_steps.py [--experiment multi30k_de_en_transformer] [--rows 50]
        [--src-len 20] [--steps 100] [--rounds 5] [--threads 1]

Prints, at chosen output positions, the median milliseconds of one step of each way and their
ratio. The model is the experiment's architecture with random weights and a 10,000-piece
vocabulary: the time of a step does not depend on what the weights are.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from hydra import compose, initialize_config_module

import nmt.configs  # noqa: F401 (registers the config schemas)
from nmt.model import build_model
from nmt.tokens import BOS_ID

VOCAB = 10_000
REPORT_AT = (1, 10, 25, 50, 75, 100)


def step_times(model, src, src_lens, steps: int, cached: bool) -> list[float]:
    """Seconds of each of ``steps`` decoder steps, feeding random tokens."""
    gen = torch.Generator().manual_seed(0)
    prefix = torch.full((src.size(0), 1), BOS_ID)
    times = []
    with torch.inference_mode():
        memory, state = model.encode(src, src_lens)
        for _ in range(steps):
            start = time.perf_counter()
            if cached:
                _, state, _ = model.decode_step(prefix[:, -1], memory, state)
            else:  # the whole prefix again, keeping the last position's scores
                features, _ = model.decoder(prefix, memory, state, need_weights=False)
                model.decoder.logits(features[:, -1])
            times.append(time.perf_counter() - start)
            prefix = torch.cat([prefix, torch.randint(4, VOCAB, (src.size(0), 1), generator=gen)], dim=1)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="multi30k_de_en_transformer")
    parser.add_argument("--rows", type=int, default=50, help="decoder rows: sentences x beam (default 10 x 5)")
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with initialize_config_module("nmt.configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={args.experiment}"])
    torch.manual_seed(0)
    model = build_model(cfg.model, VOCAB, VOCAB).eval()
    src = torch.randint(4, VOCAB, (args.rows, args.src_len))
    src_lens = torch.full((args.rows,), args.src_len)
    runs: dict[bool, list[list[float]]] = {True: [], False: []}
    for _ in range(args.rounds):  # each round times both ways in turn, so a busy moment hits both
        for cached in (True, False):
            runs[cached].append(step_times(model, src, src_lens, args.steps, cached))
    print(f"{args.experiment}: {model.num_parameters():,} parameters, {args.rows} rows, source length {args.src_len}, "
          f"{args.threads} thread(s), torch {torch.__version__}; median of {args.rounds} rounds")  # fmt: skip
    print(f"{'output position':>16} {'cached ms/step':>15} {'recomputed ms/step':>19} {'ratio':>6}")
    for t in (t for t in REPORT_AT if t <= args.steps):
        cached = statistics.median(r[t - 1] for r in runs[True]) * 1e3
        full = statistics.median(r[t - 1] for r in runs[False]) * 1e3
        print(f"{t:>16} {cached:>15.2f} {full:>19.2f} {full / cached:>6.2f}")
    for cached, name in ((True, "cached"), (False, "recomputed")):
        total = statistics.median(sum(r) for r in runs[cached])
        print(f"{name}: {total:.2f} s for all {args.steps} steps")


if __name__ == "__main__":
    main()

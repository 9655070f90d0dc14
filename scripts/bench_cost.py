"""How the cost of one training update grows with the work in it: target tokens/s and peak memory
against the batch size in tokens, and against the sentence length.

    python scripts/bench_cost.py --data-dir /path/to/multi30k --plot docs/figures/cost_curves.png

- batch tokens: the ``multi30k_de_en`` reference model on Multi30k de-en, ``data.max_tokens`` 1k,
  2k, 4k, 8k and 16k (padded tokens a batch);
- sentence length: the same model on the synthetic task (its 60-word vocabularies: a smaller
  output layer than Multi30k's) with every sentence 10, 20, 40 or 60 words long
  (``data.min_words = data.max_words``), 4096-token batches.

Every point is one ``scripts/benchmark.py`` run in a process of its own, so that its peak resident
memory is its own; ``--threads`` and the rounds go to each. Prints both tables, the JSON of every
point, and draws the two curves (tokens/s on the left axis, peak memory on the right).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_gpu import run_json  # scripts/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parents[1]
BATCH_TOKENS = (1024, 2048, 4096, 8192, 16384)
LENGTHS = (10, 20, 40, 60)


def point(args: argparse.Namespace, experiment: str, overrides: list[str]) -> dict:
    command = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--experiment", experiment,
               "--data-dir", args.data_dir, "--threads", str(args.threads), "--updates", str(args.updates),
               "--repeats", str(args.repeats), "--overrides", f"data.cache_dir={args.cache_dir}", *overrides]  # fmt: skip
    return run_json(command)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--cache-dir", default=str(REPO / "data"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", type=Path, help="write the two curves to this PNG")
    args = parser.parse_args(argv)
    by_batch = {n: point(args, "multi30k_de_en", [f"data.max_tokens={n}"]) for n in BATCH_TOKENS}
    by_length = {n: point(args, "multi30k_de_en", [
        "data=synthetic", f"data.min_words={n}", f"data.max_words={n}", "data.train_size=2000", "data.valid_size=10",
        "data.test_size=10", "data.vocab.size=200", "data.vocab.joint=false"]) for n in LENGTHS}  # fmt: skip
    for title, unit, points in (("batch tokens", "tokens", by_batch), ("sentence length", "words", by_length)):
        print(f"\n{title:<16} {'tgt tokens/s':>13} {'s/update':>9} {'peak GiB':>9} {'GFLOP/s':>8} {'of matmul':>9}")
        for n, r in points.items():
            print(f"{n:>10} {unit:<5} {r['tgt_tokens_per_s']:>13.0f} {r['s_per_update']:>9.3f} "
                  f"{r['peak_rss_gib_rank0']:>9.2f} {r['achieved_gflops']:>8.1f} {r['ratio_to_matmul']:>9.2f}")  # fmt: skip
    report = {"by_batch_tokens": by_batch, "by_sentence_length": by_length}
    print(json.dumps(report))
    if args.plot:
        from nmt.files import atomic_write_bytes
        from nmt.plotting import figure_png

        atomic_write_bytes(args.plot, figure_png(cost_figure(by_batch, by_length)))
    return report


def cost_figure(by_batch: dict[int, dict], by_length: dict[int, dict]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.8))
    for ax, points, xlabel in zip(fig.subplots(1, 2), (by_batch, by_length),
                                  ("batch size (padded tokens)", "sentence length (words)")):  # fmt: skip
        xs = list(points)
        ax.plot(xs, [p["tgt_tokens_per_s"] for p in points.values()], marker="o", color="tab:blue")
        ax.set(xlabel=xlabel, ylabel="target tokens/s")
        ax.set_ylim(bottom=0)
        memory = ax.twinx()
        memory.plot(xs, [p["peak_rss_gib_rank0"] for p in points.values()], marker="s", color="tab:red")
        memory.set_ylabel("peak memory (GiB)", color="tab:red")
        memory.set_ylim(bottom=0)
        if points is by_batch:
            ax.set_xscale("log", base=2)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main(sys.argv[1:])

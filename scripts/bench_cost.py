"""How the cost of one training update grows with the work in it: target tokens/s and peak memory
against the batch size in tokens, and against the sentence length, for the RNN and the Transformer.

    python scripts/bench_cost.py --data-dir /path/to/multi30k --plot docs/figures/cost_curves.png
    python scripts/bench_cost.py --data-dir ... --models transformer       # one architecture only

For each architecture of ``--models`` (``rnn``: the ``multi30k_de_en`` reference model;
``transformer``: the ``multi30k_de_en_transformer`` recipe):

- batch tokens: the model on Multi30k de-en, ``data.max_tokens`` 1k, 2k, 4k, 8k and 16k (padded
  tokens a batch; ``--batch-tokens``);
- sentence length: the same model on the synthetic task (200-piece subword vocabularies: a smaller
  output layer than Multi30k's) with every sentence 10, 20, 40 or 60 words long
  (``data.min_words = data.max_words``; ``--lengths``), 4096-token batches. The RNN has a subword
  model a side, as the synthetic task does; the Transformer one joint model, since its recipe
  shares one embedding matrix between the source and the target.

Every point is one ``scripts/benchmark.py`` run in a process of its own, so that its peak resident
memory is its own; ``--threads`` and the rounds go to each. Prints the tables, the JSON of every
point, and draws the two panels (tokens/s on the left axis, peak memory on the right, a colour per
architecture).
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
# --models: the experiment each architecture's curves are measured with
EXPERIMENTS = {"rnn": "multi30k_de_en", "transformer": "multi30k_de_en_transformer"}
LABELS = {"rnn": "RNN (multi30k_de_en)", "transformer": "Transformer (multi30k_de_en_transformer)"}
COLOURS = {"rnn": "tab:blue", "transformer": "tab:orange"}


def point(args: argparse.Namespace, experiment: str, overrides: list[str]) -> dict:
    command = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--experiment", experiment,
               "--data-dir", args.data_dir, "--threads", str(args.threads), "--updates", str(args.updates),
               "--repeats", str(args.repeats), "--overrides", f"data.cache_dir={args.cache_dir}", *overrides]  # fmt: skip
    return run_json(command)


def synthetic(model: str, words: int) -> list[str]:
    """The overrides that train ``model`` on the synthetic task with every sentence ``words`` words long."""
    joint = "true" if model == "transformer" else "false"  # shared embeddings need one joint subword model
    return ["data=synthetic", f"data.min_words={words}", f"data.max_words={words}", "data.train_size=2000",
            "data.valid_size=10", "data.test_size=10", "data.vocab.size=200", f"data.vocab.joint={joint}"]  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--cache-dir", default=str(REPO / "data"))
    parser.add_argument("--models", nargs="+", choices=list(EXPERIMENTS), default=list(EXPERIMENTS))
    parser.add_argument("--batch-tokens", nargs="+", type=int, default=list(BATCH_TOKENS))
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS), help="words a sentence")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plot", type=Path, help="write the two panels to this PNG")
    args = parser.parse_args(argv)
    by_batch = {m: {n: point(args, EXPERIMENTS[m], [f"data.max_tokens={n}"]) for n in args.batch_tokens}
                for m in args.models}  # fmt: skip
    by_length = {m: {n: point(args, EXPERIMENTS[m], synthetic(m, n)) for n in args.lengths} for m in args.models}
    for model in args.models:
        for title, unit, points in (("batch tokens", "tokens", by_batch[model]),
                                    ("sentence length", "words", by_length[model])):  # fmt: skip
            print(f"\n{model}, {title}:")
            print(f"{'':<16} {'tgt tokens/s':>13} {'s/update':>9} {'peak GiB':>9} {'GFLOP/s':>8} {'of matmul':>9}")
            for n, r in points.items():
                print(f"{n:>10} {unit:<5} {r['tgt_tokens_per_s']:>13.0f} {r['s_per_update']:>9.3f} "
                      f"{r['peak_rss_gib_rank0']:>9.2f} {r['achieved_gflops']:>8.1f} "
                      f"{r['ratio_to_matmul']:>9.2f}")  # fmt: skip
    report = {"experiments": {m: EXPERIMENTS[m] for m in args.models}, "by_batch_tokens": by_batch,
              "by_sentence_length": by_length}  # fmt: skip
    print(json.dumps(report))
    if args.plot:
        from nmt.files import atomic_write_bytes
        from nmt.plotting import figure_png

        atomic_write_bytes(args.plot, figure_png(cost_figure(by_batch, by_length)))
    return report


def cost_figure(by_batch: dict[str, dict[int, dict]], by_length: dict[str, dict[int, dict]]):
    """Two panels (against batch tokens, against sentence length): per architecture (the outer keys),
    target tokens/s (solid, left axis) and peak memory (dashed, right axis)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    handles = []  # one legend for both panels: the first panel's lines
    for ax, curves, xlabel in zip(fig.subplots(1, 2), (by_batch, by_length),
                                  ("batch size (padded tokens)", "sentence length (words)")):  # fmt: skip
        memory = ax.twinx()
        for model, points in curves.items():
            xs, colour, label = list(points), COLOURS.get(model), LABELS.get(model, model)
            speed = ax.plot(xs, [p["tgt_tokens_per_s"] for p in points.values()], marker="o", color=colour,
                            label=f"{label}: target tokens/s")  # fmt: skip
            peak = memory.plot(xs, [p["peak_rss_gib_rank0"] for p in points.values()], marker="s", linestyle="--",
                               color=colour, label=f"{label}: peak memory")  # fmt: skip
            if curves is by_batch:
                handles += speed + peak
        ax.set(xlabel=xlabel, ylabel="target tokens/s (solid)")
        ax.set_ylim(bottom=0)
        memory.set_ylabel("peak memory, GiB (dashed)")
        memory.set_ylim(bottom=0)
        if curves is by_batch:
            ax.set_xscale("log", base=2)
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig


if __name__ == "__main__":
    main(sys.argv[1:])

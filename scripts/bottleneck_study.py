"""The bottleneck study: train the encoder-decoder without attention and with attention under one
budget, then score both on the test split(s) by source length (Bahdanau et al. 2014, Figure 2).

    python scripts/bottleneck_study.py --data synthetic --out runs/bottleneck_synthetic
    python scripts/bottleneck_study.py --data multi30k --data-dir /path/to/multi30k \\
        --out runs/bottleneck_multi30k --budget max_epochs=15

Every model is trained by ``python -m nmt.train`` with the same experiment, the same budget
(``--budget`` sets ``train.max_steps``/``train.max_epochs``; early stopping is off so that no model
stops sooner) and the same seed; only ``model/attention`` (and, for Luong, ``model/decoder``)
differs. Then ``python -m nmt.evaluate`` decodes each split with every best checkpoint. Layout:

    OUT/runs/<model>/        training run (checkpoints, train.log, tensorboard, results.json)
    OUT/<split>/             eval.json, bleu_by_length.png, alignments_<model>.png, hypotheses/
    OUT/tensorboard/         the evaluation figures, for TensorBoard
    OUT/summary.md           the command, a table of every model's training (parameters, wall
                             time, tokens/s, validation and test BLEU/chrF) and each split's table

``data=synthetic`` uses ``configs/experiment/synthetic_bottleneck.yaml`` (sentences up to 60 words);
``data=multi30k`` uses ``configs/experiment/multi30k_de_en.yaml``; ``--experiment`` picks another
(the README's attention table uses ``multi30k_de_en_bahdanau16``, the first tuned recipe).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from nmt.corpora import MULTI30K_SPLITS
from nmt.runlog import read_run

# model name -> the overrides that select it (everything else comes from the experiment); the
# decoder is always named, so that a model means the same whichever decoder the experiment has
MODELS = {
    "none": ["model/attention=none", "model/decoder=bahdanau"],
    "none_luong_dec": ["model/attention=none", "model/decoder=luong"],
    "bahdanau": ["model/attention=bahdanau", "model/decoder=bahdanau"],
    "bahdanau_luong_dec": ["model/attention=bahdanau", "model/decoder=luong"],
    "luong_general": ["model/attention=luong_general", "model/decoder=luong"],
    "luong_dot": ["model/attention=luong_dot", "model/decoder=luong"],
    "scaled_dot": ["model/attention=scaled_dot", "model/decoder=bahdanau"],
}
EXPERIMENTS = {"synthetic": "synthetic_bottleneck", "multi30k": "multi30k_de_en"}
DEFAULT_BINS = {"synthetic": "[10,20,30,40,50]", "multi30k": "[10,15,20,25]"}
DEFAULT_BEAM = {"synthetic": 1, "multi30k": 5}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=sorted(EXPERIMENTS), required=True)
    parser.add_argument("--experiment", help="the experiment config every model starts from (default: synthetic_"
                        "bottleneck or multi30k_de_en)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs, figures and tables")
    parser.add_argument("--data-dir", help="multi30k: folder holding the task-1 raw files (data.dir)")
    parser.add_argument("--models", nargs="+", default=["none", "bahdanau"], choices=sorted(MODELS),
                        help="models to train; the first is the baseline of the paired tests")  # fmt: skip
    parser.add_argument("--budget", nargs="*", default=[], metavar="KEY=VALUE",
                        help="max_steps=N and/or max_epochs=N for every model (default: the experiment's)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1234, help="train.seed of every model")
    parser.add_argument("--splits", nargs="+", help="splits to evaluate (default: every test split present)")
    parser.add_argument("--bins", help="nmt.evaluate bins= (default: synthetic [10,20,30,40,50], multi30k "
                        "[10,15,20,25])")  # fmt: skip
    parser.add_argument("--beam-size", type=int, help="beam of the evaluation (default: multi30k 5, synthetic 1 "
                        "= greedy, as the toy task is deterministic)")  # fmt: skip
    parser.add_argument("--cache-dir", help="data.cache_dir (subword models, tokenized data)")
    parser.add_argument("--jobs", type=int, default=1, help="models trained at once (each on one thread "
                        "for synthetic; 2 halves the wall time on a 2-core machine)")  # fmt: skip
    parser.add_argument("--skip-trained", action="store_true", help="reuse runs that have results.json")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every training run")
    return parser.parse_args(argv)


def budget_overrides(budget: list[str]) -> list[str]:
    out = []
    for item in budget:
        key, sep, value = item.partition("=")
        if key not in ("max_steps", "max_epochs") or not sep or not value.isdigit():
            raise SystemExit(f"--budget {item!r}: use max_steps=N and/or max_epochs=N")
        out.append(f"train.{key}={value}")
    return out


def test_splits(args: argparse.Namespace) -> list[str]:
    """The splits to evaluate: those asked for, else synthetic ``test``, else every Multi30k test
    split whose German and English files are in ``--data-dir`` (test_2016_flickr without one)."""
    if args.splits:
        return args.splits
    if args.data == "synthetic":
        return ["test"]
    if not args.data_dir:
        return ["test_2016_flickr"]
    folder = Path(args.data_dir)
    present = lambda split, lang: any((folder / f"{split}.{lang}{ext}").is_file() for ext in (".gz", ""))  # noqa: E731
    found = [s for s in MULTI30K_SPLITS if s not in ("train", "val") and present(s, "de") and present(s, "en")]
    return found or ["test_2016_flickr"]


def training_row(run_dir: Path) -> dict:
    """What a finished run's files say (:func:`nmt.runlog.read_run`): parameters, wall time (first
    to last log line, training and the final test decoding), median logged target tokens/s, best
    validation BLEU and the test scores of its best checkpoint."""
    record = read_run(run_dir)
    return {"params": record.params, "minutes": record.minutes, "tokens_per_s": record.tokens_per_s, **record.results}


def training_table(rows: dict[str, dict], test_role: str = "test_2016_flickr") -> list[str]:
    """A markdown table of :func:`training_row` results, one line per model."""
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    out = ["| model | parameters | updates | wall min | target tok/s | valid BLEU | test BLEU | test chrF |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, row in rows.items():
        out.append(
            f"| {name} | {fmt(row.get('params'), ',')} | {fmt(row.get('steps'), '.0f')} | {fmt(row.get('minutes'), '.1f')}"
            f" | {fmt(row.get('tokens_per_s'), '.0f')} | {fmt(row.get('best_valid_bleu'), '.2f')}"
            f" | {fmt(row.get(f'{test_role}_bleu'), '.2f')} | {fmt(row.get(f'{test_role}_chrf'), '.2f')} |"
        )
    return out


def run(command: list[str]) -> str:
    """Run a command, echo it, let its stderr through, return its stdout; stop on failure."""
    print("+", shlex.join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"failed (exit {result.returncode}): {shlex.join(command)}")
    return result.stdout


def run_all(commands: list[list[str]], jobs: int) -> None:
    """Run commands ``jobs`` at a time (their output passes through); stop at the first failure."""
    pending, running = list(commands), []
    while pending or running:
        while pending and len(running) < jobs:
            command = pending.pop(0)
            print("+", shlex.join(command), file=sys.stderr, flush=True)
            running.append((command, subprocess.Popen(command)))
        command, process = running.pop(0)
        if process.wait() != 0:
            for _, other in running:
                other.terminate()
                other.wait()
            raise SystemExit(f"failed (exit {process.returncode}): {shlex.join(command)}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = args.out.resolve()
    common = [f"experiment={args.experiment or EXPERIMENTS[args.data]}", f"train.seed={args.seed}", "train.patience=0"]
    common += budget_overrides(args.budget)
    if args.data_dir:
        common.append(f"data.dir={Path(args.data_dir).resolve()}")
    if args.cache_dir:
        common.append(f"data.cache_dir={Path(args.cache_dir).resolve()}")
    common += args.overrides
    checkpoints, training, run_dirs = {}, [], {}
    for name in args.models:
        run_dir = run_dirs[name] = out / "runs" / name
        checkpoints[name] = run_dir / "checkpoints" / "best.pt"
        if not (args.skip_trained and (run_dir / "results.json").is_file()):
            training.append([sys.executable, "-m", "nmt.train", *common, *MODELS[name], f"hydra.run.dir={run_dir}"])
    run_all(training, args.jobs)

    ckpt = ",".join(f"'{name}:{path}'" for name, path in checkpoints.items())
    splits = test_splits(args)
    summary = [
        f"# Bottleneck study ({args.data})", "",
        "```", shlex.join([Path(sys.executable).name, "scripts/bottleneck_study.py", *(argv or sys.argv[1:])]), "```",
        "", f"Training overrides shared by every model: `{' '.join(common)}`", "",
        *(f"- {name}: `{' '.join(MODELS[name])}`" for name in args.models), "",
        "## Training", "", *training_table({name: training_row(d) for name, d in run_dirs.items()}, splits[0]), "",
    ]  # fmt: skip
    for split in splits:
        evaluate = [
            sys.executable, "-m", "nmt.evaluate", f"ckpt=[{ckpt}]", f"split={split}", f"out_dir={out / split}",
            f"bins={args.bins or DEFAULT_BINS[args.data]}", f"search.beam_size={args.beam_size or DEFAULT_BEAM[args.data]}",
            f"tensorboard={out / 'tensorboard' / split}",
        ]  # fmt: skip
        if args.data_dir:
            evaluate.append(f"data_dir={Path(args.data_dir).resolve()}")
        table = run(evaluate)
        print(f"\n== {split} ==\n{table}", flush=True)
        summary += [
            f"## {split}",
            "",
            "```",
            table.rstrip(),
            "```",
            "",
            f"![BLEU by length]({split}/bleu_by_length.png)",
            "",
        ]
    (out / "summary.md").write_text("\n".join(summary) + "\n", encoding="utf-8")
    print(f"\nwrote {out / 'summary.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()

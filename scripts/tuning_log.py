"""Print a markdown record of training runs for ``docs/lab/tuning.md``, from the runs' own files.

    python scripts/tuning_log.py runs/best_de_en runs/best_en_de
    python scripts/tuning_log.py runs/t* --table        # one summary line per run

For each run: its command-line overrides, the validation BLEU after every epoch, the final and the
best validation BLEU, updates, wall time, the median logged target tokens/s and whether other
processes shared the machine (the logged CPU load); the test scores only where the run scored them
(``results.json``). Works on runs that are still training.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.training.runlog import RunRecord, read_run


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def entry(run_dir: Path, record: RunRecord) -> list[str]:
    """A markdown section for one run."""
    bleu = [b for _, b in record.valid_bleu]
    best = max(bleu, default=None)
    steps = record.valid_bleu[-1][0] if record.valid_bleu else None
    lines = [f"#### `{run_dir}`", "", f"- overrides: `{' '.join(record.overrides)}`",
             "- validation BLEU after each validation (update): "
             + (", ".join(f"{b:.2f} ({s})" for s, b in record.valid_bleu) or "none yet"),
             f"- final validation BLEU {_fmt(bleu[-1] if bleu else None, '.2f')}, best {_fmt(best, '.2f')}; "
             f"{_fmt(steps, 'd')} updates; {_fmt(record.minutes, '.1f')} min; "
             f"median {_fmt(record.tokens_per_s, '.0f')} target tokens/s; machine {record.machine()}; "
             f"{_fmt(record.params, ',')} parameters"]  # fmt: skip
    tests = {k[: -len("_bleu")]: v for k, v in record.results.items() if k.endswith("_bleu") and k != "best_valid_bleu"}
    if tests:
        lines.append("- test (once, the recipe's own decoding): "
                     + ", ".join(f"{split} BLEU {v:.2f}" for split, v in tests.items()))  # fmt: skip
    elif not record.results:
        lines.append("- still training, or stopped before the end (no results.json)")
    return [*lines, ""]


def table_row(run_dir: Path, record: RunRecord) -> str:
    bleu = [b for _, b in record.valid_bleu]
    return (f"| `{run_dir.name}` | `{' '.join(o for o in record.overrides if not o.startswith(('data.dir=', 'hydra.')))}` "
            f"| {len(bleu)} | {_fmt(bleu[-1] if bleu else None, '.2f')} | {_fmt(max(bleu, default=None), '.2f')} "
            f"| {_fmt(record.minutes, '.1f')} | {_fmt(record.tokens_per_s, '.0f')} | {record.machine()} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (hydra.run.dir of nmt.train)")
    parser.add_argument("--table", action="store_true", help="one line per run instead of a section")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "train.log").is_file()]
    if missing:
        parser.error(f"no train.log in {', '.join(missing)}: give run folders of nmt.train")
    if args.table:
        print("| run | overrides | validations | last valid BLEU | best | wall min | target tok/s | machine |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for run_dir in args.runs:
            print(table_row(run_dir, read_run(run_dir)))
        return
    for run_dir in args.runs:
        print("\n".join(entry(run_dir, read_run(run_dir))))


if __name__ == "__main__":
    main()

"""What a run folder says about its training: ``train.log`` (parameters, validation BLEU per
epoch and when it came, logged tokens/s and CPU load, wall time), ``.hydra/overrides.yaml`` (the command line) and
``results.json`` (best validation and test scores). Read by the study and tuning scripts, so
that every figure they tabulate comes from a recorded run.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]")
LOG_PARAMS = re.compile(r"model: ([\d,]+) parameters")
RESUMING = "] - resuming from "
LOG_PAIRS = re.compile(r"data: (\d+) training pairs")
LOG_SPEED = re.compile(r"update \d+: .* ([\d.]+) target tokens/s")
LOG_EPOCH = re.compile(r"epoch (\d+): (\d+) batches")
LOG_VALID = re.compile(r"validation at update (\d+): loss [\d.]+, ppl [\d.]+, BLEU ([\d.]+)")
LOG_LOAD = re.compile(r"CPU load ([\d.]+) \(cores (\d+), run threads (\d+)\)")
SHARED_MARGIN = 0.5  # load above the run's own threads by more than this: something else ran too


@dataclass
class RunRecord:
    """One run's training, as its files record it (None / empty where a file or line is missing).

    :ivar overrides: the Hydra command-line overrides.
    :ivar train_pairs: training pairs, as the data line of the log gives them.
    :ivar valid_bleu: (update, validation BLEU) in order; one per epoch unless ``train.eval_every``.
    :ivar valid_minutes: the run's working minutes when each of those validations was logged.
    :ivar minutes: first to last log line (training, validation and the final test decoding),
        less the time between a stop and the resumed run's first line.
    :ivar tokens_per_s: median of the logged target tokens/s, less the first line after each
        validation: earlier versions of the trainer divided that window's tokens by the time since
        the validation ended (a median 3-10% too high on the Multi30k runs); the window is left
        out of every log, so that old and new runs are measured alike.
    :ivar results: ``results.json`` (best_valid_bleu, steps, <split>_bleu, <split>_chrf), if finished.
    :ivar cpu_load: median of the logged 1-minute load averages (None in logs from before it was logged).
    :ivar cores: the machine's cores; ``threads``: the run's own threads (the last logged).
    :ivar epoch_batches: updates in an epoch, as the last epoch line gives them.
    """

    overrides: list[str] = field(default_factory=list)
    params: int | None = None
    train_pairs: int | None = None
    epochs_started: int = 0
    valid_bleu: list[tuple[int, float]] = field(default_factory=list)
    valid_minutes: list[float] = field(default_factory=list)
    minutes: float | None = None
    tokens_per_s: float | None = None
    results: dict = field(default_factory=dict)
    cpu_load: float | None = None
    cores: int | None = None
    threads: int | None = None
    epoch_batches: int | None = None

    @property
    def shared(self) -> bool | None:
        """Whether other processes ran beside it: its median load exceeds its own threads (each
        busy thread adds about 1 to the load). None where the load was not logged."""
        if self.cpu_load is None or self.threads is None:
            return None
        return self.cpu_load > self.threads + SHARED_MARGIN

    def machine(self) -> str:
        """``shared (load 2.0, 2 cores)``, ``alone (...)`` or ``-``: for a table's column."""
        if self.shared is None:
            return "-"
        return f"{'shared' if self.shared else 'alone'} (load {self.cpu_load:.1f}, {self.cores} cores)"


def _speeds(lines: list[str]) -> list[float]:
    """The logged target tokens/s, but not of a window that spanned a validation."""
    speeds, after_validation = [], False
    for line in lines:
        if LOG_VALID.search(line):
            after_validation = True
        elif m := LOG_SPEED.search(line):
            if not after_validation:
                speeds.append(float(m.group(1)))
            after_validation = False
    return speeds


def read_run(run_dir: Path) -> RunRecord:
    """Parse ``run_dir``; works on a run that is still training (no ``results.json`` yet)."""
    record = RunRecord()
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if overrides.is_file():  # a YAML list of strings, one "- key=value" a line
        record.overrides = [line[2:].strip() for line in overrides.read_text(encoding="utf-8").splitlines()
                            if line.startswith("- ")]  # fmt: skip
    log = run_dir / "train.log"
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    stamped = [(datetime.fromisoformat(m.group(1)), line) for line in lines if (m := LOG_TIME.match(line))]
    params = [int(m.group(1).replace(",", "")) for line in lines if (m := LOG_PARAMS.search(line))]
    speeds = _speeds(lines)
    epochs = [(int(m.group(1)), int(m.group(2))) for line in lines if (m := LOG_EPOCH.search(line))]
    record.params = params[-1] if params else None
    pairs = [int(m.group(1)) for line in lines if (m := LOG_PAIRS.search(line))]
    record.train_pairs = pairs[-1] if pairs else None
    record.epochs_started = max((epoch for epoch, _ in epochs), default=0)
    record.epoch_batches = epochs[-1][1] if epochs else None
    # a resumed run logs "resuming from" first: the time from the previous line (the run stopped,
    # perhaps for a day) is not the run's
    seconds, previous = 0.0, None
    for stamp, line in stamped:
        if previous is not None and RESUMING not in line:
            seconds += (stamp - previous).total_seconds()
        previous = stamp
        if m := LOG_VALID.search(line):
            record.valid_bleu.append((int(m.group(1)), float(m.group(2))))
            record.valid_minutes.append(seconds / 60)
    record.minutes = seconds / 60 if stamped else None
    record.tokens_per_s = statistics.median(speeds) if speeds else None
    loads = [m for line in lines if (m := LOG_LOAD.search(line))]
    if loads:
        record.cpu_load = statistics.median(float(m.group(1)) for m in loads)
        record.cores, record.threads = int(loads[-1].group(2)), int(loads[-1].group(3))
    results = run_dir / "results.json"
    if results.is_file():
        record.results = json.loads(results.read_text(encoding="utf-8"))
    return record


# --------------------------------------------------------------------------- tables of runs


def _fmt(value, spec: str) -> str:
    """A table cell: ``value`` formatted, or ``-`` where it is missing."""
    return "-" if value is None else format(value, spec)


def training_row(run_dir: Path) -> dict:
    """What a finished run's files say (:func:`read_run`): parameters, wall time (first
    to last log line, training and the final test decoding), median logged target tokens/s, whether
    it shared the machine (:meth:`RunRecord.machine`), best validation BLEU and the test
    scores of its best checkpoint."""
    record = read_run(run_dir)
    return {"params": record.params, "minutes": record.minutes, "tokens_per_s": record.tokens_per_s,
            "machine": record.machine(), **record.results}  # fmt: skip


def training_table(rows: dict[tuple[str, int], dict], test_role: str = "test_2016_flickr") -> list[str]:
    """A markdown table of :func:`training_row` results, one line per (model, seed)."""
    out = ["| model | seed | parameters | updates | wall min | target tok/s | machine "
           "| valid BLEU | test BLEU | test chrF |", "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]  # fmt: skip
    for (name, seed), row in rows.items():
        out.append(
            f"| {name} | {seed} | {_fmt(row.get('params'), ',')} | {_fmt(row.get('steps'), '.0f')}"
            f" | {_fmt(row.get('minutes'), '.1f')} | {_fmt(row.get('tokens_per_s'), '.0f')} | {row.get('machine', '-')}"
            f" | {_fmt(row.get('best_valid_bleu'), '.2f')} | {_fmt(row.get(f'{test_role}_bleu'), '.2f')}"
            f" | {_fmt(row.get(f'{test_role}_chrf'), '.2f')} |"
        )
    return out


def status_table(runs: dict[tuple[str, int], tuple[Path, dict]], jobs: int) -> list[str]:
    """Where a long study stands: per (model, seed) -> (run folder, the config it trains), whether
    the run is finished, partly trained (the share of its updates validated) or not started, and
    the minutes left, estimated from its own pace up to its last validation or else from the
    finished runs' median wall time (of the same model if there is one)."""
    records = {key: read_run(run_dir) for key, (run_dir, _) in runs.items()}
    finished = {key: r for key, r in records.items() if r.results and r.minutes}
    lines = ["| model | seed | state | best valid BLEU | wall min | min left (estimate) |", "|---|---:|---|---:|---:|---:|"]
    left_total = 0.0
    for (model, seed), (_, config) in runs.items():
        record, best = records[(model, seed)], max((b for _, b in records[(model, seed)].valid_bleu), default=None)
        train = config["train"]
        updates = train["max_steps"] or (
            train["max_epochs"] * record.epoch_batches // train["accum_steps"] if record.epoch_batches else None)
        done = record.valid_bleu[-1][0] if record.valid_bleu else 0
        if record.results:
            state, left = "finished", 0.0
        elif done and updates:
            pace = record.valid_minutes[-1] / done  # minutes an update, validation included
            state, left = f"{100 * done / updates:.0f}% of {updates} updates", pace * (updates - done)
        else:
            state = "started, no validation yet" if record.epochs_started else "not started"
            same = [r.minutes for (m, _), r in finished.items() if m == model] or [r.minutes for r in finished.values()]
            left = statistics.median(same) if same else None
        left_total += left or 0.0
        lines.append(f"| {model} | {seed} | {state} | {_fmt(best, '.2f')} | {_fmt(record.minutes, '.1f')}"
                     f" | {_fmt(left, '.0f')} |")  # fmt: skip
    lines += ["", f"About {left_total:.0f} minutes of training left, {left_total / jobs:.0f} of wall time with "
              f"--jobs {jobs} (estimates from the runs' logged pace; unknown ones count as 0)."]  # fmt: skip
    return lines

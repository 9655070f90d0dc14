"""A run's record as data, both ways: the trainer appends one JSON record a line to
``metrics.jsonl`` (:class:`MetricsLog`; the log lines of ``train.log`` are for people), and
:func:`read_run` reads it back with ``.hydra/overrides.yaml`` (the command line) and
``results.json`` (best validation and test scores): parameters, validation BLEU and when it came,
tokens/s and CPU load, wall time. The study, its ``--status`` and the tuning script read runs only
through :func:`read_run`, so that every figure they tabulate comes from a recorded run. Run
folders written before ``metrics.jsonl`` existed are read from ``train.log``.

The records of ``metrics.jsonl``, each with ``event`` and ``time`` (ISO 8601, local):

- ``start``: ``step`` (0, or the update a resumed run continues from), ``params``, ``train_pairs``,
  ``world_size``;
- ``epoch``: ``epoch`` (1-based), ``batches`` (updates of the epoch, all ranks);
- ``train``: ``step``, ``loss``, ``ppl``, ``lr``, ``grad_norm``, ``tgt_tokens_per_s``, and
  ``cpu_load``, ``cores``, ``threads`` (the 1-minute load average; null where the OS keeps none);
- ``valid``: ``step``, ``loss``, ``ppl``, ``bleu``, ``chrf``, ``seconds``;
- ``end``: ``step``, ``reason``, ``best_valid_bleu``, ``skipped_updates``;
- ``test``: ``split``, ``bleu``, ``chrf``.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nmt.files import atomic_write_text

LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]")
LOG_PARAMS = re.compile(r"model: ([\d,]+) parameters")
RESUMING = "] - resuming from "
LOG_PAIRS = re.compile(r"data: (\d+) training pairs")
LOG_SPEED = re.compile(r"update \d+: .* ([\d.]+) target tokens/s")
LOG_EPOCH = re.compile(r"epoch (\d+): (\d+) batches")
LOG_VALID = re.compile(r"validation at update (\d+): loss [\d.]+, ppl [\d.]+, BLEU ([\d.]+)")
LOG_LOAD = re.compile(r"CPU load ([\d.]+) \(cores (\d+), run threads (\d+)\)")
SHARED_MARGIN = 0.5  # load above the run's own threads by more than this: something else ran too
METRICS = "metrics.jsonl"


class MetricsLog:
    """Appends records to ``<run>/metrics.jsonl`` (see the module docstring); ``path`` None (the
    other ranks of a DDP job) writes nothing.

    Each record is one ``write`` of one line, flushed at once: a run killed while writing leaves at
    most a partial last line, which :func:`read_metrics` skips.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, event: str, **fields) -> None:
        if self.path is None:
            return
        record = {"event": event, "time": datetime.now().isoformat(timespec="milliseconds"), **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def read_metrics(path: Path) -> list[dict]:
    """The records of a ``metrics.jsonl``, in order; a line that is not a JSON object is skipped."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "event" in record and "time" in record:
            records.append(record)
    return records


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


def read_run(run_dir: Path) -> RunRecord:
    """Read ``run_dir``; works on a run that is still training (no ``results.json`` yet)."""
    record = RunRecord()
    overrides = run_dir / ".hydra" / "overrides.yaml"
    if overrides.is_file():  # a YAML list of strings, one "- key=value" a line
        record.overrides = [line[2:].strip() for line in overrides.read_text(encoding="utf-8").splitlines()
                            if line.startswith("- ")]  # fmt: skip
    if (run_dir / METRICS).is_file():
        _from_metrics(record, read_metrics(run_dir / METRICS))
    else:  # a run folder from before metrics.jsonl
        log = run_dir / "train.log"
        _from_metrics(record, log_records(log.read_text(encoding="utf-8").splitlines() if log.is_file() else []))
    results = run_dir / "results.json"
    if results.is_file():
        record.results = json.loads(results.read_text(encoding="utf-8"))
    return record


def _from_metrics(record: RunRecord, records: list[dict]) -> None:
    """Fill ``record`` from ``metrics.jsonl``'s records."""
    of = lambda event: [r for r in records if r["event"] == event]  # noqa: E731
    starts, epochs, trains = of("start"), of("epoch"), of("train")
    record.params = next((r["params"] for r in reversed(starts) if r["params"] is not None), None)
    record.train_pairs = next((r["train_pairs"] for r in reversed(starts) if r["train_pairs"] is not None), None)
    record.epochs_started = max((r["epoch"] for r in epochs), default=0)
    record.epoch_batches = epochs[-1]["batches"] if epochs else None
    speeds = [r["tgt_tokens_per_s"] for r in trains if r["tgt_tokens_per_s"] is not None]
    record.tokens_per_s = statistics.median(speeds) if speeds else None
    loads = [r for r in trains if r.get("cpu_load") is not None]
    if loads:
        record.cpu_load = statistics.median(r["cpu_load"] for r in loads)
        record.cores, record.threads = loads[-1]["cores"], loads[-1]["threads"]
    # working time: the gaps between records, less the gap before each start of a resumed run
    seconds, previous = 0.0, None
    for r in records:
        stamp = datetime.fromisoformat(r["time"])
        if previous is not None and r["event"] != "start":
            seconds += (stamp - previous).total_seconds()
        previous = stamp
        if r["event"] == "valid":
            record.valid_bleu.append((r["step"], r["bleu"]))
            record.valid_minutes.append(seconds / 60)
    record.minutes = seconds / 60 if records else None


def log_records(lines: list[str]) -> list[dict]:
    """The ``metrics.jsonl`` records that a ``train.log`` written before ``metrics.jsonl`` existed
    holds (run folders are converted once, when resumed, and read this way until then).

    A run, and each resumed part of it (from its ``resuming from`` line), opens with a ``start``
    record that the following data and model lines fill in. The rate logged right after a
    validation is left out (null): earlier versions of the trainer divided that window's tokens by the
    time since the validation ended (a median 3-10% too high on the Multi30k runs).
    """
    records: list[dict] = []
    after_validation = False
    for line in lines:
        if not (stamp := LOG_TIME.match(line)):
            continue
        time = datetime.fromisoformat(stamp.group(1)).isoformat(timespec="milliseconds")
        if not records or RESUMING in line:
            records.append({"event": "start", "time": time, "step": None, "params": None, "train_pairs": None,
                            "world_size": None})  # fmt: skip
        start = next(r for r in reversed(records) if r["event"] == "start")
        if m := LOG_PAIRS.search(line):
            start["train_pairs"] = int(m.group(1))
        elif m := LOG_PARAMS.search(line):
            start["params"] = int(m.group(1).replace(",", ""))
        elif m := LOG_EPOCH.search(line):
            records.append({"event": "epoch", "time": time, "epoch": int(m.group(1)), "batches": int(m.group(2))})
        elif m := LOG_VALID.search(line):
            records.append({"event": "valid", "time": time, "step": int(m.group(1)), "bleu": float(m.group(2))})
            after_validation = True
            continue
        elif m := LOG_SPEED.search(line):
            load = LOG_LOAD.search(line)
            records.append({"event": "train", "time": time,
                            "tgt_tokens_per_s": None if after_validation else float(m.group(1)),
                            "cpu_load": float(load.group(1)) if load else None,
                            "cores": int(load.group(2)) if load else None,
                            "threads": int(load.group(3)) if load else None})  # fmt: skip
        elif not (records and records[-1]["time"] == time):  # any other line still marks working time
            records.append({"event": "log", "time": time})
        after_validation = after_validation and not LOG_SPEED.search(line)
    return records


def convert_log(run_dir: Path) -> bool:
    """Write ``metrics.jsonl`` from the ``train.log`` of a run folder that has none (before the run
    is resumed, so that its record stays whole); True if it did."""
    log, metrics = run_dir / "train.log", run_dir / METRICS
    if metrics.exists() or not log.is_file():
        return False
    records = log_records(log.read_text(encoding="utf-8").splitlines())
    atomic_write_text(metrics, "".join(json.dumps(r) + "\n" for r in records))
    return True


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
    left_total, unknown = 0.0, 0
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
        unknown += left is None
        lines.append(f"| {model} | {seed} | {state} | {_fmt(best, '.2f')} | {_fmt(record.minutes, '.1f')}"
                     f" | {_fmt(left, '.0f')} |")  # fmt: skip
    if all(r.results for r in records.values()):
        closing = "Every run is finished: no training left."
    elif unknown == len(runs):  # no run finished, none validated: no pace to go by
        first = "Nothing has been trained yet" if not any(r.epochs_started for r in records.values()) else (
            "No run has validated yet")  # fmt: skip
        closing = f"{first}: no estimate of the time left until a run has logged its pace (at its first validation)."
    else:
        without = f"; {unknown} run(s) without an estimate yet are not counted" if unknown else ""
        closing = (f"About {left_total:.0f} minutes of training left, {left_total / jobs:.0f} of wall time with "
                   f"--jobs {jobs} (estimates from the runs' logged pace{without}).")  # fmt: skip
    return [*lines, "", closing]

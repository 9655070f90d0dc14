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

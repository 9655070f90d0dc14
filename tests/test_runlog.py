"""Run folders read back: the overrides, validation BLEU per epoch, speed and wall time come from
the run's own files, finished or still training; the tuning script prints them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from nmt.training.runlog import convert_log, read_metrics, read_run

LOG = (
    "[2026-11-30 10:00:00,001][nmt.train][INFO] - model: 12,277,056 parameters on cpu x 1 process(es)\n"
    "[2026-11-30 10:00:00,002][nmt.train][INFO] - epoch 1: 134 batches, 0.5% padding\n"
    "[2026-11-30 10:01:00,500][nmt.train][INFO] - update 50: loss 6.4, ppl 600.1, |g| 6.46, 1000 target tokens/s\n"
    "[2026-11-30 10:02:00,500][nmt.train][INFO] - update 100: loss 5.1, ppl 164.0, |g| 2.10, 1400 target tokens/s\n"
    "[2026-11-30 10:05:00,000][nmt.train][INFO] - validation at update 134: loss 3.1, ppl 22.20, BLEU 7.25, chrF 30.1\n"
    "[2026-11-30 10:05:00,100][nmt.train][INFO] - epoch 2: 134 batches, 0.5% padding\n"
    "[2026-11-30 10:06:00,500][nmt.train][INFO] - update 150: loss 4.7, ppl 110.0, |g| 1.90, 1500 target tokens/s\n"
    "[2026-11-30 10:10:00,000][nmt.train][INFO] - validation at update 268: loss 2.5, ppl 12.18, BLEU 15.50, chrF 40\n"
)


def _run_folder(tmp_path: Path, finished: bool) -> Path:
    (tmp_path / ".hydra").mkdir(parents=True)
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- experiment=multi30k_de_en_best\n- train.threads=1\n")
    (tmp_path / "train.log").write_text(LOG, encoding="utf-8")
    if finished:
        results = {"best_valid_bleu": 15.5, "steps": 268.0, "test_2016_flickr_bleu": 16.0}
        (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return tmp_path


def test_read_run_of_a_run_still_training(tmp_path: Path) -> None:
    record = read_run(_run_folder(tmp_path, finished=False))
    assert record.overrides == ["experiment=multi30k_de_en_best", "train.threads=1"]
    assert record.params == 12_277_056 and record.epochs_started == 2
    assert record.valid_bleu == [(134, 7.25), (268, 15.5)]
    assert record.valid_minutes == pytest.approx([5.0, 10.0], abs=1e-3) and record.epoch_batches == 134
    assert record.minutes == 10.0 and record.tokens_per_s == 1200.0  # first to last line; median rate
    assert record.results == {}


def test_the_rate_of_a_window_that_spanned_a_validation_is_left_out(tmp_path: Path) -> None:
    """Old trainers logged the first rate after a validation far too high (tokens of the whole window
    over the seconds since the validation); the median must not move with it."""
    folder = _run_folder(tmp_path, finished=False)
    assert read_run(folder).tokens_per_s == 1200.0  # 1000 and 1400; not 1500, logged after a validation
    inflated = LOG.replace("1500 target tokens/s", "60420 target tokens/s")
    (folder / "train.log").write_text(inflated, encoding="utf-8")
    assert read_run(folder).tokens_per_s == 1200.0


def test_wall_time_of_a_resumed_run_leaves_out_the_pause(tmp_path: Path) -> None:
    """A run stopped after epoch 2 and resumed the next day: its wall time is its working time."""
    folder = _run_folder(tmp_path, finished=False)
    resumed = (
        "[2026-12-01 09:00:00,000][nmt.train][INFO] - resuming from run/checkpoints/last.pt with the same config\n"
        "[2026-12-01 09:00:01,000][nmt.train][INFO] - epoch 3: 134 batches, 0.5% padding\n"
        "[2026-12-01 09:05:00,000][nmt.train][INFO] - validation at update 402: loss 2.2, ppl 9.0, BLEU 20.00, chrF 45\n"
    )
    with (folder / "train.log").open("a", encoding="utf-8") as log:
        log.write(resumed)
    record = read_run(folder)
    assert record.minutes == 15.0  # 10 minutes, then 5 the next day
    assert record.valid_minutes[-1] == pytest.approx(15.0, abs=1e-3)
    assert record.valid_bleu[-1] == (402, 20.0) and record.epochs_started == 3


def _update_line(minute: int, load: float, threads: int) -> str:
    return (f"[2026-11-30 11:{minute:02d}:00,000][nmt.train][INFO] - update {minute}: loss 4.0, ppl 55.0, "
            f"|g| 1.00, 1500 target tokens/s; CPU load {load:.2f} (cores 2, run threads {threads})\n")  # fmt: skip


def test_the_logged_cpu_load_says_whether_the_machine_was_shared(tmp_path: Path) -> None:
    """A one-thread run with another job beside it logs a load near 2; alone, near 1. The median
    decides, so a short burst of other work does not mark a run shared."""
    folder = _run_folder(tmp_path, finished=False)
    assert read_run(folder).shared is None and read_run(folder).machine() == "-"  # logs from before the load
    with (folder / "train.log").open("a", encoding="utf-8") as log:
        log.writelines(_update_line(m, load, 1) for m, load in enumerate([2.1, 1.9, 2.0, 0.9, 2.2]))
    record = read_run(folder)
    assert (record.cpu_load, record.cores, record.threads) == (2.0, 2, 1)
    assert record.shared and record.machine() == "shared (load 2.0, 2 cores)"
    alone = _run_folder(tmp_path / "alone", finished=False)
    with (alone / "train.log").open("a", encoding="utf-8") as log:
        log.writelines(_update_line(m, load, 2) for m, load in enumerate([2.0, 2.2, 1.8, 3.9]))
    assert read_run(alone).shared is False  # two threads of its own load two cores
    assert read_run(alone).machine() == "alone (load 2.1, 2 cores)"


def test_tuning_log_prints_every_validation_and_the_test_score_once(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", finished=True)
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "tuning_log.py"), str(run)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "7.25 (134), 15.50 (268)" in proc.stdout
    assert "final validation BLEU 15.50, best 15.50; 268 updates; 10.0 min; median 1200 target tokens/s" in proc.stdout
    assert proc.stdout.count("test_2016_flickr BLEU 16.00") == 1
    missing = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "tuning_log.py"), str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 2 and "no train.log" in missing.stderr


def test_a_run_writes_its_record_as_data_and_the_record_reads_back(smoke_run) -> None:
    """metrics.jsonl holds what train.log says in words: the reader finds the same figures in it."""
    records = read_metrics(smoke_run.folder / "metrics.jsonl")
    events = [r["event"] for r in records]
    assert events[0] == "start" and events.count("end") == 1 and "test" in events
    valid = [r for r in records if r["event"] == "valid"]
    log = (smoke_run.folder / "train.log").read_text()
    assert [f"validation at update {r['step']}: loss {r['loss']:.4f}" in log for r in valid] == [True] * len(valid)
    record = read_run(smoke_run.folder)
    results = json.loads((smoke_run.folder / "results.json").read_text())
    assert record.valid_bleu[-1][0] == results["steps"]
    assert max(b for _, b in record.valid_bleu) == results["best_valid_bleu"]
    assert record.params == records[0]["params"] > 0 and record.tokens_per_s > 0 and record.minutes > 0


def test_an_old_run_folder_reads_from_its_log_and_is_converted_once(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, finished=True)
    from_log = read_run(folder)
    assert convert_log(folder) and not convert_log(folder)  # once
    assert read_run(folder) == from_log  # the same record, now read from metrics.jsonl

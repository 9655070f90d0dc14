"""One error path for every command: a checkpoint, config or data problem is one line without a
traceback and exit status 2 in train, translate, evaluate and the averaging script alike."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun

from nmt.checkpoint import load_checkpoint
from nmt.errors import CheckpointError, ConfigError, DataError, command_errors


def _incomplete_checkpoint(smoke_run: SmokeRun, folder: Path) -> Path:
    """An nmt checkpoint whose config lacks most of the model (as if written by another version)."""
    payload = load_checkpoint(smoke_run.checkpoint)
    path = folder / "step00000001.pt"
    torch.save({**payload, "config": {"model": {"dropout": 0.1}, "train": {}}}, path)
    return path


COMMANDS = {
    "translate": lambda ckpt, tmp: ["-m", "nmt.translate", f"ckpt={ckpt}", f"input={tmp / 'in.txt'}"],
    "evaluate": lambda ckpt, tmp: ["-m", "nmt.evaluate", f"ckpt={ckpt}", f"src={tmp / 'in.txt'}",
                                   f"ref={tmp / 'in.txt'}", f"out_dir={tmp / 'out'}"],  # fmt: skip
    "average": lambda ckpt, tmp: ["-m", "nmt.average", str(ckpt), str(ckpt),
                                  "--output", str(tmp / "avg.pt")],  # fmt: skip
    "train": lambda ckpt, tmp: ["-m", "nmt.train", "experiment=smoke", f"train.resume={ckpt}",
                                f"hydra.run.dir={tmp / 'run'}", f"data.cache_dir={tmp / 'cache'}"],  # fmt: skip
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.slow
def test_a_bad_checkpoint_is_one_line_and_status_2_everywhere(command: str, smoke_run: SmokeRun, tmp_path: Path) -> None:
    ckpt = _incomplete_checkpoint(smoke_run, tmp_path)
    (tmp_path / "in.txt").write_text("toga sala\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, *COMMANDS[command](ckpt, tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert proc.returncode == 2 and "Traceback" not in output, output[-3000:]
    assert len(errors) == 1 and str(ckpt) in errors[0], output[-3000:]


@pytest.mark.parametrize(
    ("error", "status"),
    [(ConfigError("k=1: bad"), 2), (DataError("f, line 2: bad"), 2), (CheckpointError("c.pt: bad"), 2),
     (ValueError("bad\nvalue"), 2), (OSError(28, "No space left on device"), 1), (KeyboardInterrupt(), 130),
     (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), 1), (MemoryError(), 1),
     (RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to "
                   "allocate 40000000000000 bytes."), 1)],
)  # fmt: skip
def test_command_errors_maps_each_error_to_one_line_and_a_status(error: BaseException, status: int, caplog) -> None:
    log = logging.getLogger("test_errors")
    with caplog.at_level(logging.ERROR, logger="test_errors"), pytest.raises(SystemExit) as exit_info:
        with command_errors(log, interrupted="stopped"):
            raise error
    assert exit_info.value.code == status
    (record,) = caplog.records
    assert "\n" not in record.getMessage() and record.getMessage()


def test_running_out_of_memory_says_which_setting_to_lower(caplog) -> None:
    with caplog.at_level(logging.ERROR, logger="test_errors"), pytest.raises(SystemExit):
        with command_errors(logging.getLogger("test_errors")):
            torch.empty(10**14)  # 400 TB: the allocator refuses it at once
    (record,) = caplog.records
    assert record.getMessage().startswith("out of memory (") and "lower data.max_tokens" in record.getMessage()


def test_another_runtime_error_is_not_taken_for_running_out_of_memory() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        with command_errors(logging.getLogger("test_errors")):
            raise RuntimeError("a bug")


@pytest.mark.parametrize(("args", "key"), [(["-m", "nmt.train", "train.max_epoch=3"], "train.max_epoch"),
                                           (["-m", "nmt.train", "train.seed=abc"], "train.seed"),
                                           (["-m", "nmt.translate", "ckpt=x.pt", "beam_size=wide"], "beam_size"),
                                           (["-m", "nmt.evaluate", "out_dir=o", "search.alpha=high"], "search.alpha"),
                                           (["-m", "nmt.demo", "n_bset=3"], "n_bset")])  # fmt: skip
@pytest.mark.slow
def test_a_command_line_that_does_not_compose_is_one_line_and_status_2(args: list[str], key: str, tmp_path: Path) -> None:
    """An unknown key or a wrongly typed value is refused by the config schema before the command
    runs: one line naming the key, status 2, nothing written (train makes no run folder)."""
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{key}: " in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == []

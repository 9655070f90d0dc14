"""What every command shares about the process it runs in: seeding,
the device and thread choice, logging, the provenance of results, and the ``[name:PATH, ...]``
lists of the command lines."""

from __future__ import annotations

import copy
import functools
import logging
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from nmt.errors import ConfigError


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


PROVENANCE_PACKAGES = ("nmt", "torch", "sacrebleu", "sentencepiece", "datasets", "hydra-core")


def provenance() -> dict[str, object]:
    """What produced a result: package versions and, when the package runs from a git checkout,
    its commit and whether the working tree had changes. Saved in checkpoints, ``results.json``
    and ``eval.json`` so that a reported figure can be traced to its code.

    Read once a process, at the first call (the trainer makes it when it starts): a commit made
    while a run trains is not the code that trained it."""
    return copy.deepcopy(_provenance())


@functools.cache
def _provenance() -> dict[str, object]:
    from importlib import metadata

    versions = {}
    for name in PROVENANCE_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = dirty = None
    root = Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        try:
            git = lambda *args: subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,  # noqa: E731
                                               timeout=10, check=True).stdout.strip()  # fmt: skip
            commit, dirty = git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
        except (OSError, subprocess.SubprocessError):
            pass
    return {"versions": versions, "git_commit": commit, "git_dirty": dirty}


def resolve_device(name: str, key: str = "device") -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``, ``cuda`` and ``cuda:<index>`` are
    checked against what this process can see.

    :param key: the setting's name in messages.
    :raise ConfigError: one line for an unknown device, or a GPU that is not there.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{key}={name!r}: choose auto, cpu, cuda or cuda:<index>") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={name!r}: no GPU is visible to this process; use {key}=auto or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"{key}={name!r}: there are {torch.cuda.device_count()} GPUs (cuda:0 ...)")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{key}={name!r}: choose auto, cpu, cuda or cuda:<index>")
    return device


def set_threads(num_threads: int) -> None:
    """``0`` keeps torch's default (one thread per core); otherwise use exactly that many."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)


CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # translate, evaluate: times only
RUN_LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # train.log: dates, for wall times


def setup_logging(log_file: str | Path | None = None, fmt: str = CONSOLE_FORMAT, level: int = logging.INFO) -> None:
    """Log to stderr and, when given, to ``log_file``, unless such handlers exist already; safe to
    call more than once.

    :param fmt: a ``logging`` format; :data:`CONSOLE_FORMAT` shows times, :data:`RUN_LOG_FORMAT` dates too.
    """
    root = logging.getLogger()
    root.setLevel(level)
    fmt = logging.Formatter(fmt, "%H:%M:%S" if fmt == CONSOLE_FORMAT else None)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(fmt)
        root.addHandler(handler)
    if log_file is not None:
        path = str(Path(log_file).resolve())
        if not any(getattr(h, "baseFilename", None) == path for h in root.handlers):
            file_handler = logging.FileHandler(path, encoding="utf-8")
            file_handler.setFormatter(fmt)
            root.addHandler(file_handler)


def parse_named(items, what: str) -> dict[str, str]:
    """``[name:PATH, ...]`` (or one bare PATH) -> {name: path}; a bare path is named by its stem."""
    if items is None:
        return {}
    items = [items] if isinstance(items, str) else list(items)
    named = {}
    for item in items:
        name, sep, path = str(item).partition(":")
        if not sep or "/" in name or not name:
            name, path = Path(str(item)).stem, str(item)
        if name in named:
            raise ValueError(f"{what}: the name {name!r} is used twice; write {what}=[name1:PATH,name2:PATH]")
        named[name] = path
    return named

"""Training: ``python -m nmt.train`` (Hydra entry point) and :func:`train`, which reads top to
bottom: open the run folder, build the :class:`~nmt.trainer.Trainer`, then for every update train,
validate when due, and stop on a signal; finally score the test splits.

A run folder holds ``config.yaml``, ``.hydra/``, ``train.log``, ``checkpoints/{best,last}.pt``,
``tensorboard/``, ``hypotheses/`` and ``results.json``.
"""

from __future__ import annotations

import logging
import math
import signal
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nmt import distributed
from nmt.checkpoint import load_checkpoint
from nmt.config import resume_changes, validate_config
from nmt.distributed import Dist
from nmt.errors import command_errors
from nmt.trainer import Trainer
from nmt.utils import CONFIG_DIR, RUN_LOG_FORMAT, atomic_write_text, seed_everything, set_threads, setup_logging

log = logging.getLogger("nmt.train")


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Train the model ``cfg`` describes, writing everything into ``run_dir``.

    Under ``torchrun`` every process runs this function on its shard of each epoch; only rank 0
    logs, validates and writes files, and it tells the others when to stop.

    :return: the final metrics (best validation BLEU, test BLEU/chrF per test split...).
    """
    validate_config(cfg)  # before anything is read or written
    run_dir = Path(run_dir)
    resume = _check_resume(cfg, run_dir)  # may refuse the command: still nothing written
    job = distributed.setup(cfg.train.device, cfg.train.dist_backend)
    open_run(cfg, run_dir, job, resume)
    seed_everything(cfg.train.seed + job.rank)  # different dropout masks on each rank
    set_threads(cfg.train.threads)
    trainer = Trainer(cfg, run_dir, job, resume[:2] if resume else None)
    del resume  # the checkpoint's tensors are in the model and optimizer now
    stop = _StopRequest()
    try:
        while not trainer.finished():
            for group in trainer.start_epoch():
                trainer.update(group)
                if trainer.validation_due():
                    trainer.validate_and_save()
                if job.broadcast(stop.signal) is not None:  # rank 0's signal stops every rank
                    return trainer.save_for_resume(stop.signal)
                if trainer.done or trainer.end_of_epoch:
                    break
            trainer.close_epoch()
    finally:
        stop.restore()
    return trainer.finish()


# --------------------------------------------------------------------------- opening the run folder


def _check_resume(cfg: DictConfig, run_dir: Path) -> tuple[Path, dict, list[str]] | None:
    """The checkpoint to resume, its payload and the config changes it accepts; None for a new run.

    :raise ConfigError: the command changes what the checkpoint fixes (see :func:`nmt.config.resume_changes`).
    """
    path = _resume_path(cfg.train.resume, run_dir)
    if path is None:
        return None
    payload = load_checkpoint(path)  # read, on the CPU
    return path, payload, resume_changes(payload["config"], cfg, path)


def open_run(cfg: DictConfig, run_dir: Path, job: Dist, resume: tuple[Path, dict, list[str]] | None) -> None:
    """Rank 0: the folders, ``train.log``, ``config.yaml`` and ``.hydra/``; other ranks log warnings only."""
    if not job.is_main:  # warnings still reach the console; train.log is rank 0's
        root = logging.getLogger()
        root.setLevel(logging.WARNING)
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
        return
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    setup_logging(run_dir / "train.log", RUN_LOG_FORMAT)
    _remove_temporary_files(run_dir)
    _write_run_config(run_dir, cfg, resume[0] if resume else None, resume[2] if resume else [])
    if cfg.train.resume == "auto" and resume is None:
        log.info("train.resume=auto: no checkpoint at %s, so this is a new run", run_dir / "checkpoints" / "last.pt")


class _StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each update (then saves and exits)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:  # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self.signal = signum

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def _write_run_config(run_dir: Path, cfg: DictConfig, resume: Path | None, changes: list[str]) -> None:
    """``config.yaml`` (the resolved config this run trains with) and, under Hydra, ``.hydra/`` (the
    composed config, Hydra's own and the overrides), written only once the config is accepted."""
    header = ""
    if resume is not None:
        log.info("resuming from %s%s", resume, f" with changed settings, applied from now on: {'; '.join(changes)}"
                 if changes else " with the same config")  # fmt: skip
        header = "".join(f"# resumed from {resume}" + (" with changed settings:" if changes else "") + "\n")
        header += "".join(f"#   {change}\n" for change in changes)
    atomic_write_text(run_dir / "config.yaml", header + OmegaConf.to_yaml(cfg, resolve=True))
    if HydraConfig.initialized():  # hydra.output_subdir is null so that Hydra writes nothing before this point
        hydra_cfg = HydraConfig.get()
        atomic_write_text(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
        atomic_write_text(run_dir / ".hydra" / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
        atomic_write_text(run_dir / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(list(hydra_cfg.overrides.task)))


def _remove_temporary_files(run_dir: Path) -> None:
    """Delete the temporary files of writes that a killed run left half done (``.<name>.*.tmp``,
    see :func:`nmt.utils.atomic_write`); the files under final names are always complete."""
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "hypotheses"):
        for stale in folder.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
            log.info("removed %s, left by an interrupted write", stale)


def _resume_path(resume: str | None, run_dir: Path) -> Path | None:
    if resume in (None, "", "none"):
        return None
    if resume == "auto":
        last = run_dir / "checkpoints" / "last.pt"
        return last if last.exists() else None
    return Path(resume)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def main(cfg: DictConfig) -> float:
    setup_logging(fmt=RUN_LOG_FORMAT)  # the console; train() adds <run>/train.log once the config is accepted
    interrupted = "interrupted: stopped without saving (checkpoints/last.pt, if any, is complete)"  # a 2nd Ctrl-C
    try:
        with command_errors(logging.getLogger("nmt"), interrupted):
            results = train(cfg, HydraConfig.get().runtime.output_dir)
    finally:
        distributed.teardown()
    best = results.get("best_valid_bleu", float("nan"))
    return best if math.isfinite(best) else 0.0  # for Hydra sweepers


if __name__ == "__main__":
    main()

"""Training: ``python -m nmt.train`` (Hydra entry point) and :func:`train`, which reads top to
bottom: check the config and the run folder, build the :class:`~nmt.training.trainer.Trainer` (data, model,
optimizer), open the run folder, then for every update train, validate when due, and stop on a
signal; finally score the test splits.

A run folder holds ``config.yaml``, ``.hydra/``, ``train.log``, ``metrics.jsonl``,
``checkpoints/{best,last}.pt``, ``tensorboard/``, ``hypotheses/`` and ``results.json``. Nothing is written into it until the
config, the data and a resumed checkpoint are accepted, so a refused or failed start leaves every
folder that existed before the command as it was, and removes the folders the command made for
the run (:mod:`nmt.training.run_folder`). A folder that holds a run (checkpoints or results) is
never trained into by accident: only ``train.resume=auto`` continues it and only
``train.overwrite=true`` starts it over. ``python -m nmt.train train.resume=auto hydra.run.dir=RUN``
continues a run with the settings its folder saved (:func:`continue_run`); ``train.init_from=CKPT``
starts a new run from the weights and subword models of a trained model (:mod:`nmt.training.init_from`).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import math
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from nmt.checkpoint import load_checkpoint
from nmt.configs import command
from nmt.data.batches import Splits, prepare_data
from nmt.errors import ConfigError, command_errors
from nmt.files import atomic_write_text
from nmt.model import Seq2Seq, build_model
from nmt.runtime import RUN_LOG_FORMAT, seed_everything, set_threads, setup_logging
from nmt.training import distributed
from nmt.training.checks import continued_config, merge_overrides, resume_changes, validate_config
from nmt.training.distributed import Dist
from nmt.training.init_from import Start, report_coverage, start_from
from nmt.training.run_folder import made_for, make_folders, make_new_folder, remove_made
from nmt.training.runlog import METRICS, convert_log
from nmt.training.trainer import Progress, Trainer, stop_reason
from nmt.vocab import Vocab

log = logging.getLogger("nmt.train")

_CLAIMED: dict[str, str] = {}


def claim_folder(base: str) -> str:
    """A run folder of its own for this process: ``base`` or, when another command holds it (two
    runs started in the same second), ``base-1``, ``base-2``... It is made here, with a ``mkdir``
    that fails if the folder exists, so no two commands get the same one; the same ``base``
    always gives this process the same folder. Behind the default ``hydra.run.dir``
    (``${nmt.new_folder:outputs/DATE/TIME}``). The folders made are recorded as the command's own
    (:mod:`nmt.training.run_folder`)."""
    if base not in _CLAIMED:
        make_folders(Path(base).parent)
        for n in range(10_000):
            folder = base if n == 0 else f"{base}-{n}"
            try:
                make_new_folder(folder)
            except FileExistsError:
                continue
            _CLAIMED[base] = folder
            break
        else:
            raise ConfigError(f"{base}: 10000 run folders of this name exist; give hydra.run.dir=...")
    return _CLAIMED[base]


OmegaConf.register_new_resolver("nmt.new_folder", claim_folder, replace=True)


def train(cfg: DictConfig, run_dir: str | Path, overrides: list[str] | None = None) -> dict[str, float]:
    """Train the model ``cfg`` describes, writing everything into ``run_dir``.

    Under ``torchrun`` every process runs this function on its shard of each epoch; only rank 0
    logs, validates and writes files, and it tells the others when to stop.

    :param overrides: the command line that composes ``cfg``, recorded in ``.hydra/overrides.yaml``
        (None: Hydra's, when it runs the command).
    :return: the final metrics (best validation BLEU, test BLEU/chrF per test split...).
    :raise ConfigError: the config is invalid, or ``run_dir`` holds a run and neither
        ``train.resume`` nor ``train.overwrite`` says what to do with it; nothing is written.
    """
    run_dir = Path(run_dir)
    made = made_for(run_dir)  # the folders this command made for it: removed again if the start is refused or fails
    early = _LogBuffer()  # what is logged before train.log exists goes into it once it does
    try:
        validate_config(cfg)  # before anything is read or written
        job = distributed.setup(cfg.train.device, cfg.train.dist_backend)
        run_dir = _same_folder_on_every_rank(run_dir, made, job)
        resume = check_run_folder(cfg, run_dir)  # may refuse the command: still nothing written
        start = start_from(cfg, (resume.path, resume.payload) if resume else None)  # train.init_from: a new run's weights
        if start is not None:
            cfg = start.recorded_in(cfg)  # config.yaml and the checkpoints name the file
        if job.is_main:
            what = f"continuing {resume.path.resolve()}" if resume else "a new run"
            what += f" from the weights of {start.path}" if start else ""
            log.info("run folder %s (%s)", run_dir.resolve(), what)
        if resume is not None and resume.finished and (run_dir / "results.json").is_file():
            early.close()  # nothing is written: the run folder stays as it is
            return _already_finished(run_dir, resume)
        seed_everything(cfg.train.seed + job.rank)  # different dropout masks on each rank
        set_threads(cfg.train.threads)
        data, model, optimizer, scheduler = build(cfg, job, resume, start)
        trainer = Trainer(cfg, run_dir, job, data, model, optimizer, scheduler,
                          (resume.path, resume.payload) if resume else None)  # fmt: skip
    except BaseException:
        early.close()
        remove_made(made)
        raise
    if cfg.train.overwrite and job.is_main:
        clear_run(run_dir)
    open_run(cfg, run_dir, job, resume, early, overrides)
    trainer.open()
    del resume, start  # the checkpoints' tensors are in the model and optimizer now
    with _StopRequest() as stop:
        while not trainer.done:
            for group, last in trainer.epoch():
                stats = trainer.update(group, end_of_epoch=last)
                if trainer.log_due():
                    trainer.log(stats)
                if trainer.validation_due(end_of_epoch=last):
                    trainer.validate_and_save()
                if job.broadcast(stop.signal) is not None:  # rank 0's signal stops every rank
                    return trainer.save_for_resume(stop.signal)
                if trainer.done:
                    break
    results = trainer.finish()
    if job.is_main:
        log.info("run folder %s: results.json, checkpoints/best.pt, train.log", run_dir.resolve())
    return results


# --------------------------------------------------------------------------- the run folder

# Everything a run writes, deleted by train.overwrite=true.
RUN_FILES = ("checkpoints", "hypotheses", "tensorboard", ".hydra", "results.json", "train.log", "metrics.jsonl",
             "config.yaml")


def run_outputs(run_dir: Path) -> list[str]:
    """The checkpoints and results ``run_dir`` holds, as paths relative to it (empty: no run there)."""
    found = [str(path.relative_to(run_dir)) for path in sorted((run_dir / "checkpoints").glob("*.pt"))]
    if (run_dir / "results.json").exists():
        found.append("results.json")
    found += [str(path.relative_to(run_dir)) for path in sorted((run_dir / "hypotheses").glob("*.txt"))]
    return found


@dataclass
class Resume:
    """A checkpoint to continue from: its path, loaded payload, the config changes it accepts,
    and why its run had already met its budget under the new config (None: it had not)."""

    path: Path
    payload: dict
    changes: list[str]
    finished: str | None


def check_run_folder(cfg: DictConfig, run_dir: Path) -> Resume | None:
    """Decide what the command does with ``run_dir``: continue a checkpoint (a :class:`Resume`),
    or start a new run (None) in a folder that holds none, or that ``train.overwrite`` frees.

    :raise ConfigError: the folder holds a run and the command neither resumes nor overwrites it;
        the command resumes a checkpoint of another folder into it; or the command changes what
        the checkpoint fixes (see :func:`nmt.training.checks.resume_changes`).
    """
    tcfg = cfg.train
    path = _resume_path(tcfg.resume, run_dir)
    if tcfg.overwrite and tcfg.resume not in (None, "", "none"):
        raise ConfigError("train.overwrite=true starts the run over; it cannot be combined with train.resume: drop one")
    found = run_outputs(run_dir)
    own_checkpoint = path is not None and path.resolve().parent == (run_dir / "checkpoints").resolve()
    if found and not tcfg.overwrite and not own_checkpoint:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        ways = ("continue it with train.resume=auto" if (run_dir / "checkpoints" / "last.pt").is_file()
                else "it has no checkpoints/last.pt to continue")  # fmt: skip
        what = f"resuming {path} into it would mix two runs" if path is not None else "it would be replaced"
        raise ConfigError(
            f"{run_dir} holds a run ({shown}); {what}: {ways}, start it over with train.overwrite=true "
            "(deletes its checkpoints, logs and results), or train into another folder (hydra.run.dir=...)"
        )
    if path is None:
        return None
    payload = load_checkpoint(path)  # read, on the CPU
    changes = resume_changes(payload["config"], cfg, path)
    state = payload["train_state"]
    finished = stop_reason(Progress(**state["progress"]), tcfg) if isinstance(state, dict) else None
    return Resume(path, payload, changes, finished)


def _already_finished(run_dir: Path, resume: Resume) -> dict:
    """A resumed run that had met its budget: say so and change nothing."""
    progress = resume.payload["train_state"]["progress"]
    log.info("%s: this run is finished (%s at update %d); nothing to do. To train it further, raise train.max_epochs, "
             "train.max_steps or train.patience", run_dir, resume.finished, progress["step"])  # fmt: skip
    return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))


def _same_folder_on_every_rank(run_dir: Path, made: list[Path], job: Dist) -> Path:
    """Under ``torchrun`` every process composes its own default folder name: all use rank 0's,
    and the others remove the folders made for them."""
    chosen = Path(job.broadcast(str(run_dir)))
    if chosen != run_dir:
        remove_made(made)
    return chosen


def clear_run(run_dir: Path) -> None:
    """``train.overwrite=true``: delete what an earlier run wrote into ``run_dir`` (only nmt's files)."""
    removed = []
    for name in RUN_FILES:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    if removed:
        log.info("train.overwrite=true: deleted the earlier run's %s in %s", ", ".join(removed), run_dir)


class _LogBuffer(logging.handlers.MemoryHandler):
    """Holds the records logged before ``train.log`` exists (data preparation, the model line), so
    that the run's log starts at the command's start; :func:`open_run` hands them over."""

    def __init__(self) -> None:
        super().__init__(capacity=1_000_000, flushLevel=logging.CRITICAL + 1)
        root = logging.getLogger()
        root.addHandler(self)
        if root.getEffectiveLevel() > logging.INFO:  # the level train.log is written at (setup_logging's)
            root.setLevel(logging.INFO)

    def shouldFlush(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging's name)
        return False  # only when the target is set

    def hand_over(self, target: logging.Handler) -> None:
        self.setTarget(target)
        self.flush()
        self.close()

    def close(self) -> None:
        logging.getLogger().removeHandler(self)
        super().close()


def open_run(cfg: DictConfig, run_dir: Path, job: Dist, resume: Resume | None, early: _LogBuffer,
             overrides: list[str] | None = None) -> None:  # fmt: skip
    """Rank 0: the folders, ``train.log``, ``config.yaml`` and ``.hydra/``; other ranks log warnings only."""
    if not job.is_main:  # warnings still reach the console; train.log is rank 0's
        early.close()
        root = logging.getLogger()
        root.setLevel(logging.WARNING)
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
        return
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    if resume is not None and convert_log(run_dir):  # a run from before metrics.jsonl: its record stays whole
        log.info("wrote %s from the run's train.log", run_dir / METRICS)
    setup_logging(run_dir / "train.log", RUN_LOG_FORMAT)
    log_file = next(h for h in logging.getLogger().handlers if getattr(h, "baseFilename", None)
                    == str((run_dir / "train.log").resolve()))  # fmt: skip
    early.hand_over(log_file)
    _remove_temporary_files(run_dir)
    _write_run_config(run_dir, cfg, resume.path if resume else None, resume.changes if resume else [], overrides)
    if cfg.train.resume == "auto" and resume is None:
        log.info("train.resume=auto: no checkpoint at %s, so this is a new run", run_dir / "checkpoints" / "last.pt")


class _StopRequest:
    """Inside, SIGINT/SIGTERM set a flag the loop checks after each update (then saves and exits);
    a second one stops at once. The previous handlers come back on leaving."""

    def __enter__(self) -> _StopRequest:
        self.signal: int | None = None
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:  # a second Ctrl-C stops at once
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def build(cfg: DictConfig, job: Dist, resume: Resume | None,
          start: Start | None = None) -> tuple[Splits, Seq2Seq, Optimizer, LRScheduler]:  # fmt: skip
    """The data, the model (on the job's device), its optimizer and its learning-rate schedule.

    A resumed run keeps its checkpoint's subword models, whatever the cache holds now; a new run
    started from a trained model (``start``: ``train.init_from``) encodes its corpus with that
    checkpoint's subword models and begins with its weights. Under ``torchrun`` rank 0 prepares
    and caches the data first, and the other ranks then read the cache.
    """
    vocabs = (Vocab(resume.payload["vocab"]["src"]), Vocab(resume.payload["vocab"]["tgt"])) if resume else None
    if start is not None:
        vocabs = start.vocabs()
    if not job.is_main:
        job.barrier()
    data = prepare_data(cfg.data, vocabs, links=cfg.train.guided_alignment.path)
    if job.is_main:
        job.barrier()
    if start is not None and job.is_main:
        report_coverage(data, start.path)
    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    if start is not None:
        start.load_weights(model)  # on every rank, as DDP expects
    model = model.to(job.device)
    optimizer = hydra.utils.instantiate(cfg.train.optimizer)(model.parameters())
    scheduler = hydra.utils.instantiate(cfg.train.scheduler)(optimizer)
    return data, model, optimizer, scheduler


def _write_run_config(run_dir: Path, cfg: DictConfig, resume: Path | None, changes: list[str],
                      overrides: list[str] | None) -> None:  # fmt: skip
    """``config.yaml`` (the resolved config this run trains with) and, under Hydra, ``.hydra/`` (the
    composed config, Hydra's own and the overrides: ``overrides``, else Hydra's), written only once
    the config is accepted."""
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
        given = list(hydra_cfg.overrides.task) if overrides is None else overrides
        atomic_write_text(run_dir / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(given))


def _remove_temporary_files(run_dir: Path) -> None:
    """Delete the temporary files of writes that a killed run left half done (``.<name>.*.tmp``,
    see :func:`nmt.files.atomic_write`); the files under final names are always complete."""
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


def continue_run(run_dir: Path, given: list[str]) -> tuple[DictConfig, list[str]]:
    """The config of ``train.resume`` into ``run_dir``, which holds its run's ``config.yaml``: that
    config, with what the command line's overrides ``given`` change in it
    (:func:`nmt.training.checks.continued_config`); the run's own overrides
    (``.hydra/overrides.yaml``) need not be given again. Composes with Hydra, inside :func:`main`.

    :return: the config and the overrides that compose it (``.hydra/overrides.yaml`` of the continued run).
    """
    file = run_dir / ".hydra" / "overrides.yaml"
    saved = [str(o) for o in OmegaConf.load(file)] if file.is_file() else []
    overrides = merge_overrides(saved, given)
    searchpath = _searchpath(run_dir)  # where the run found configs of its own, if it had any
    try:
        before, after = (hydra.compose("train", overrides=searchpath + o) for o in (saved, overrides))
    except (HydraException, OmegaConfBaseException) as e:
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ConfigError(f"{file}: the run's overrides {saved} do not compose now ({first}); give the run's "
                          "settings on the command line and remove the file") from None  # fmt: skip
    cfg = continued_config(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml")), before, after)
    log.info("train.resume: the settings of %s%s", run_dir / "config.yaml",
             f", with {' '.join(given)}" if given else "")  # fmt: skip
    return cfg, overrides


def _searchpath(run_dir: Path) -> list[str]:
    """``hydra.searchpath=[...]`` naming the config folders the run in ``run_dir`` was started with
    beside the package's (``--config-dir`` or ``hydra.searchpath``, from its ``.hydra/hydra.yaml``),
    so that its saved overrides compose again without them; [] when it had none."""
    file = run_dir / ".hydra" / "hydra.yaml"
    saved = OmegaConf.load(file) if file.is_file() else OmegaConf.create()
    sources = OmegaConf.select(saved, "hydra.runtime.config_sources", default=None)
    folders = [f"{source.schema}://{source.path}" for source in sources or []
               if source.provider in USER_CONFIG_PROVIDERS and source.schema == "file"]  # fmt: skip
    return [f"hydra.searchpath=[{','.join(folders)}]"] if folders else []


# How Hydra names config folders that the command line added (``--config-dir``, ``hydra.searchpath``)
USER_CONFIG_PROVIDERS = ("command-line", "hydra.searchpath in command-line")


@command("train")
def main(cfg: DictConfig) -> float:
    setup_logging(fmt=RUN_LOG_FORMAT)  # the console; train() adds <run>/train.log once the config is accepted
    interrupted = "interrupted: stopped without saving (checkpoints/last.pt, if any, is complete)"  # a 2nd Ctrl-C
    hydra_cfg = HydraConfig.get()
    run_dir, overrides = Path(hydra_cfg.runtime.output_dir), list(hydra_cfg.overrides.task)
    try:
        with command_errors(logging.getLogger("nmt"), interrupted):
            if cfg.train.resume not in (None, "", "none") and (run_dir / "config.yaml").is_file():
                cfg, overrides = continue_run(run_dir, overrides)
            results = train(cfg, run_dir, overrides)
    finally:
        distributed.teardown()
    best = results.get("best_valid_bleu", float("nan"))
    return best if math.isfinite(best) else 0.0  # for Hydra sweepers


if __name__ == "__main__":
    main()

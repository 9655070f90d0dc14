"""Training: ``python -m nmt.train`` (Hydra entry point) and :func:`train`.

The loop reads top to bottom: batch, forward, loss, backward, clip, step, log, validate,
checkpoint. A run folder holds ``config.yaml``, ``train.log``, ``checkpoints/{best,last}.pt``,
``tensorboard/``, ``hypotheses/`` and ``results.json``.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from nmt import distributed
from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.config import flatten, resume_changes, validate_config
from nmt.corpora import load_corpus
from nmt.data import Batch, PairData, filter_training_pairs, shard, tokenize
from nmt.distributed import Dist
from nmt.ema import WeightAverage
from nmt.errors import CheckpointError, command_errors
from nmt.metrics import corpus_scores, perplexity, teacher_forced_nll, translate_data
from nmt.model import Seq2Seq, build_model
from nmt.plotting import attention_figure
from nmt.search import SearchSettings, greedy_search
from nmt.utils import (
    CONFIG_DIR,
    RUN_LOG_FORMAT,
    atomic_write_text,
    provenance,
    seed_everything,
    set_threads,
    setup_logging,
)
from nmt.vocab import Vocab, VocabSettings, build_vocabs

log = logging.getLogger("nmt.train")


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so a run resumes exactly."""

    step: int = 0  # updates done
    epoch: int = 0  # current epoch (0-based)
    update_in_epoch: int = 0  # updates of the current epoch done (each uses accum_steps batches per rank)
    world_size: int = 1  # processes that made this progress
    best_bleu: float = -1.0
    stale_validations: int = 0  # validations since the best one
    bad_steps: int = 0  # non-finite losses in a row
    skipped_updates: int = 0  # updates skipped for a non-finite loss or gradient, in all


@dataclass
class Splits:
    """Everything a run reads: vocabularies, the filtered training data and the evaluation sets."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train: PairData
    evaluation: dict[str, tuple[PairData, list[str], list[str]]]  # role -> (ids, sources, references)


def prepare_data(data_cfg: DictConfig) -> Splits:
    """Read the corpus, build (or reuse) the subword models and the tokenized datasets."""
    corpus = load_corpus(data_cfg)
    cache = Path(data_cfg.cache_dir)
    src_vocab, tgt_vocab = build_vocabs(
        corpus["train"].src, corpus["train"].tgt, VocabSettings(**data_cfg.vocab), cache / "spm"
    )
    datasets_ = {role: tokenize(text, src_vocab, tgt_vocab, cache / "tokenized") for role, text in corpus.items()}
    train_data = PairData(filter_training_pairs(datasets_["train"], data_cfg.max_len))
    evaluation = {
        role: (PairData(ds), corpus[role].src, corpus[role].tgt) for role, ds in datasets_.items() if role != "train"
    }
    log.info(
        "data: %d training pairs, %s; vocabularies %d/%d pieces",
        len(train_data), ", ".join(f"{r} {len(d[0])}" for r, d in evaluation.items()), len(src_vocab), len(tgt_vocab),
    )  # fmt: skip
    return Splits(src_vocab, tgt_vocab, train_data, evaluation)


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


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, float]:
    """Train the model ``cfg`` describes, writing everything into ``run_dir``.

    Under ``torchrun`` every process runs this function on its shard of each epoch; only rank 0
    logs, validates and writes files, and it tells the others when to stop.

    :return: the final metrics (best validation BLEU, test BLEU/chrF per test split...).
    """
    validate_config(cfg)  # before anything is read or written
    run_dir, tcfg = Path(run_dir), cfg.train
    resume = _resume_path(tcfg.resume, run_dir)
    saved = load_checkpoint(resume) if resume is not None else None  # read, on the CPU
    changes = resume_changes(saved["config"], cfg, resume) if saved is not None else []  # may refuse: nothing written yet
    job = distributed.setup(tcfg.device, tcfg.dist_backend)
    if job.is_main:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        setup_logging(run_dir / "train.log", RUN_LOG_FORMAT)
        _remove_temporary_files(run_dir)
        _write_run_config(run_dir, cfg, resume, changes)
        if tcfg.resume == "auto" and resume is None:
            log.info("train.resume=auto: no checkpoint at %s, so this is a new run", run_dir / "checkpoints" / "last.pt")
    else:  # warnings still reach the console; train.log (which Hydra opens on every rank) is rank 0's
        root = logging.getLogger()
        root.setLevel(logging.WARNING)
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
    seed_everything(tcfg.seed + job.rank)  # different dropout masks on each rank
    set_threads(tcfg.threads)
    device = job.device

    data = prepare_data(cfg.data)
    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab)).to(device)
    objective = Objective(model)
    net = DistributedDataParallel(objective) if job.enabled else objective  # the plain model is what gets saved
    optimizer = hydra.utils.instantiate(tcfg.optimizer)(model.parameters())
    scheduler = hydra.utils.instantiate(tcfg.scheduler)(optimizer)
    settings = SearchSettings(**tcfg.search)  # the final test scores; validation is greedy or a small beam
    val_settings = replace(settings, beam_size=tcfg.val_beam_size, n_best=1)
    ema = WeightAverage(model, tcfg.ema) if tcfg.ema else None
    averaged = lambda: ema.swapped_into(model) if ema is not None else nullcontext()  # noqa: E731
    progress = Progress()
    if saved is not None:
        progress = _restore(saved, resume, model, optimizer, scheduler, job, ema)
        del saved
    log.info("model: %s parameters on %s x %d process(es); %s; effective batch %d x %d x %d tokens",
             f"{model.num_parameters():,}", device, job.world_size, _describe(cfg.model), cfg.data.max_tokens,
             job.world_size, tcfg.accum_steps)  # fmt: skip

    writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=progress.step or None) if job.is_main else None
    stop = _StopRequest()
    checkpoint = lambda name, **kw: save_checkpoint(  # noqa: E731
        run_dir / "checkpoints" / name, model, cfg, data.src_vocab, data.tgt_vocab, **kw
    )
    train_state = lambda: _train_state(progress, optimizer, scheduler, job, model if ema else None)  # noqa: E731
    done, reason = False, "max_epochs reached"
    window_tokens, window_start = 0, time.perf_counter()
    try:
        while not done and progress.epoch < tcfg.max_epochs:
            batches = data.train.token_batches(cfg.data.max_tokens, shuffle=True, seed=tcfg.seed, epoch=progress.epoch)
            if progress.update_in_epoch == 0:
                log.info("epoch %d: %d batches, %.1f%% padding", progress.epoch + 1, len(batches),
                         100 * data.train.padding_fraction(batches))  # fmt: skip
            mine = shard(batches, job.rank, job.world_size)
            groups = [mine[i : i + tcfg.accum_steps] for i in range(0, len(mine), tcfg.accum_steps)]
            bar = tqdm(total=len(groups), initial=progress.update_in_epoch, desc=f"epoch {progress.epoch + 1}",
                       disable=not (job.is_main and sys.stderr.isatty()), leave=False, dynamic_ncols=True)  # fmt: skip
            for group in groups[progress.update_in_epoch :]:
                stats = train_update(net, optimizer, [data.train.collate(ix).to(device) for ix in group], tcfg, job)
                progress.update_in_epoch += 1
                if not math.isfinite(stats.grad_norm):
                    progress.bad_steps, progress.skipped_updates = progress.bad_steps + 1, progress.skipped_updates + 1
                    log.warning("non-finite loss or gradient at update %d: skipped (%d in a row, %d in all)",
                                progress.step + 1, progress.bad_steps, progress.skipped_updates)  # fmt: skip
                    if progress.bad_steps >= tcfg.max_bad_steps:
                        raise FloatingPointError(
                            f"{progress.bad_steps} non-finite losses in a row (train.max_bad_steps={tcfg.max_bad_steps});"
                            f" lower train.optimizer.lr or check the data. The last good checkpoint is "
                            f"{run_dir / 'checkpoints' / 'last.pt'}"
                        )
                else:
                    progress.bad_steps = 0
                    if not isinstance(scheduler, ReduceLROnPlateau):
                        scheduler.step()
                    progress.step += 1
                    window_tokens += stats.tokens
                    if ema is not None:
                        ema.update(model)
                bar.update(1)
                if job.is_main and progress.step % tcfg.log_every == 0 and progress.bad_steps == 0:
                    tok_s = window_tokens * job.world_size / (time.perf_counter() - window_start)
                    _log_train(writer, progress.step, stats, optimizer.param_groups[0]["lr"], tok_s)
                    bar.set_postfix(loss=f"{stats.loss:.3f}", tok_s=f"{tok_s:.0f}")
                    window_tokens, window_start = 0, time.perf_counter()
                end_of_epoch = progress.update_in_epoch == len(groups)
                if end_of_epoch:
                    progress.epoch, progress.update_in_epoch = progress.epoch + 1, 0
                if tcfg.max_steps and progress.step >= tcfg.max_steps:
                    done, reason = True, "max_steps reached"
                due = (tcfg.eval_every and progress.step % tcfg.eval_every == 0 and progress.bad_steps == 0) or (
                    not tcfg.eval_every and end_of_epoch
                )
                if due or done:
                    if job.is_main:
                        with averaged():
                            bleu = _validate(model, data, val_settings, cfg, writer, progress.step, run_dir)
                    else:
                        bleu = 0.0
                    bleu = job.broadcast(bleu)
                    if isinstance(scheduler, ReduceLROnPlateau):
                        scheduler.step(bleu)
                    improved = bleu > progress.best_bleu
                    progress.best_bleu = max(progress.best_bleu, bleu)
                    progress.stale_validations = 0 if improved else progress.stale_validations + 1
                    state = train_state()
                    if job.is_main:
                        with averaged():  # the files' weights are the average; the state holds the trained ones
                            checkpoint("last.pt", train_state=state)
                            if improved:
                                checkpoint("best.pt", train_state=state)
                            _keep_periodic(checkpoint, run_dir, progress.step, tcfg.keep_checkpoints)
                    if tcfg.patience and progress.stale_validations >= tcfg.patience:
                        done, reason = True, f"early stopping: no better validation BLEU in {tcfg.patience} validations"
                    window_start = time.perf_counter()
                if job.broadcast(stop.signal) is not None:  # rank 0's signal stops every rank
                    state = train_state()
                    if job.is_main:
                        with averaged():
                            checkpoint("last.pt", train_state=state)
                        log.info("signal %d: saved %s; resume with train.resume=auto hydra.run.dir=%s",
                                 stop.signal, run_dir / "checkpoints" / "last.pt", run_dir)  # fmt: skip
                    return {"interrupted": 1.0, "steps": float(progress.step)}
                if done or end_of_epoch:
                    break
            bar.close()
    finally:
        stop.restore()
    log.info("training stopped after %d updates (%d skipped for a non-finite loss): %s; best validation BLEU %.2f",
             progress.step, progress.skipped_updates, reason, progress.best_bleu)  # fmt: skip
    if not job.is_main:
        return {"best_valid_bleu": progress.best_bleu, "steps": float(progress.step)}
    results = _final_evaluation(model, data, settings, cfg, run_dir, progress)
    writer.add_hparams(_hparams(cfg), {"hparam/best_valid_bleu": progress.best_bleu}, run_name=".")
    writer.close()
    atomic_write_text(run_dir / "results.json", json.dumps(results, indent=2) + "\n")
    return results


# --------------------------------------------------------------------------- helpers of the loop


@dataclass
class UpdateStats:
    """What one update measured: smoothed loss and NLL per target token (this rank), its target
    tokens, and the gradient norm before clipping (non-finite: the update was skipped)."""

    loss: float
    nll: float
    tokens: int
    grad_norm: float


class Objective(torch.nn.Module):
    """The training loss as a module's ``forward``, so that DDP can wrap it (DDP synchronises
    gradients only through ``forward``). Checkpoints hold ``objective.model``.

    :param model: the model being trained.
    """

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
        """:return: smoothed loss sum and NLL sum over the batch's real target tokens."""
        return self.model.loss(batch.src, batch.src_lens, batch.tgt_in, batch.tgt_out, label_smoothing)


def train_update(net: torch.nn.Module, optimizer, batches: list[Batch], tcfg: DictConfig, job: Dist) -> UpdateStats:
    """One optimizer update from ``batches`` (gradient accumulation) on every rank.

    :param net: the :class:`Objective`, or DDP around it.

    The loss is normalised by the target tokens of all batches on all ranks, so that k batches
    accumulated, or k ranks with one batch each, give the gradient of one batch holding them all.
    DDP averages gradients over ranks, hence the factor ``world_size``.
    """
    local_tokens = sum(b.num_tgt_tokens for b in batches)
    total_tokens = job.sum(local_tokens)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = nll_sum = 0.0
    net.train()
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        sync = nullcontext() if last or not job.enabled else net.no_sync()  # all-reduce once, at the end
        with sync, _autocast(batch.src.device, tcfg.amp):
            loss, nll = net(batch, tcfg.label_smoothing)
            (loss * (job.world_size / total_tokens)).backward()
        loss_sum, nll_sum = loss_sum + float(loss.detach()), nll_sum + float(nll)
    # the same (all-reduced) gradients on every rank, so every rank takes the same decision
    limit = tcfg.clip_norm if tcfg.clip_norm > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(net.parameters(), limit))
    if math.isfinite(grad_norm):
        optimizer.step()
    return UpdateStats(loss_sum / local_tokens, nll_sum / local_tokens, local_tokens, grad_norm)


def _autocast(device: torch.device, amp: str):
    """bf16 autocast on GPUs when ``train.amp=bf16``; nothing on the CPU."""
    if amp == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def _log_train(writer: SummaryWriter, step: int, stats: UpdateStats, lr: float, tok_s: float) -> None:
    log.info("update %d: loss %.4f, ppl %.2f, lr %.2e, |g| %.2f, %.0f target tokens/s",
             step, stats.loss, perplexity(stats.nll), lr, stats.grad_norm, tok_s)  # fmt: skip
    writer.add_scalar("train/loss", stats.loss, step)
    writer.add_scalar("train/ppl", perplexity(stats.nll), step)
    writer.add_scalar("train/lr", lr, step)
    writer.add_scalar("train/grad_norm", stats.grad_norm, step)
    writer.add_scalar("train/tgt_tokens_per_s", tok_s, step)


def _validate(model: Seq2Seq, data: Splits, settings, cfg, writer, step: int, run_dir: Path) -> float:
    """Loss, perplexity, BLEU and chrF on the validation split; hypotheses and heatmaps saved."""
    device = next(model.parameters()).device
    valid, _, references = data.evaluation["valid"]
    start = time.perf_counter()
    nll, _ = teacher_forced_nll(model, valid, cfg.data.max_tokens, device)
    hyps, _ = translate_data(model, valid, data.tgt_vocab, settings, cfg.train.decode_batch_size, device)
    scores = corpus_scores(hyps, references)
    atomic_write_text(run_dir / "hypotheses" / f"valid-step{step}.txt", "".join(h + "\n" for h in hyps))
    writer.add_scalar("valid/loss", nll, step)
    writer.add_scalar("valid/ppl", perplexity(nll), step)
    writer.add_scalar("valid/bleu", scores.bleu, step)
    writer.add_scalar("valid/chrf", scores.chrf, step)
    if model.decoder.attention.has_alignment:
        _log_heatmaps(model, valid, data, settings, cfg.train.num_heatmaps, writer, step, device)
    log.info("validation at update %d: loss %.4f, ppl %.2f, BLEU %.2f, chrF %.2f (%.1fs) [%s]",
             step, nll, perplexity(nll), scores.bleu, scores.chrf, time.perf_counter() - start,
             scores.bleu_signature)  # fmt: skip
    return scores.bleu


def _log_heatmaps(model, valid: PairData, data: Splits, settings, count: int, writer, step: int, device) -> None:
    """Greedy alignments of the first ``count`` validation sentences, as TensorBoard figures."""
    for i in range(min(count, len(valid))):
        batch = valid.collate(np.array([i])).to(device)
        (hyp,) = greedy_search(
            model, batch.src, batch.src_lens, settings.max_len_a, settings.max_len_b, return_attention=True
        )[0]
        src_labels = data.src_vocab.pieces(valid.src_ids[i]) + ["</s>"]
        tgt_labels = data.tgt_vocab.pieces(hyp.tokens) + ["</s>"]
        fig = attention_figure(hyp.attention.numpy(), src_labels, tgt_labels, title=f"valid {i}, update {step}")
        writer.add_figure(f"attention/valid_{i}", fig, step)  # closes the figure


def _keep_periodic(checkpoint, run_dir: Path, step: int, keep: int) -> None:
    """Save a weights-only checkpoint of this update and delete all but the newest ``keep``."""
    if keep <= 0:
        return
    checkpoint(f"step{step:08d}.pt")
    for old in sorted((run_dir / "checkpoints").glob("step*.pt"))[:-keep]:
        old.unlink(missing_ok=True)


def _final_evaluation(model: Seq2Seq, data: Splits, settings, cfg, run_dir: Path, progress: Progress) -> dict:
    """Score the best checkpoint on every test split; hypotheses go to ``hypotheses/<split>.txt``."""
    device = next(model.parameters()).device
    best = run_dir / "checkpoints" / "best.pt"
    if best.exists():
        model.load_state_dict(load_checkpoint(best, device)["model"])
    results: dict = {"best_valid_bleu": progress.best_bleu, "steps": float(progress.step)}
    for role, (split, _, references) in data.evaluation.items():
        if role == "valid":
            continue
        hyps, _ = translate_data(model, split, data.tgt_vocab, settings, cfg.train.decode_batch_size, device)
        scores = corpus_scores(hyps, references)
        atomic_write_text(run_dir / "hypotheses" / f"{role}.txt", "".join(h + "\n" for h in hyps))
        results[f"{role}_bleu"], results[f"{role}_chrf"] = scores.bleu, scores.chrf
        log.info("%s: BLEU %.2f, chrF %.2f [%s]", role, scores.bleu, scores.chrf, scores.bleu_signature)
        results["bleu_signature"] = scores.bleu_signature
    results["checkpoint"] = str(best) if best.exists() else "the final weights"
    results["search"] = asdict(settings)  # the decoding of these scores
    results["provenance"] = provenance()
    return results


def _train_state(progress: Progress, optimizer, scheduler, job: Dist, trained: Seq2Seq | None) -> dict:
    """Everything besides the weights that an exact resume needs; a collective under DDP (it
    gathers every rank's random-number state).

    :param trained: with ``train.ema`` the model, whose trained weights are copied here (the
        checkpoint's ``model`` entry then holds the average); None otherwise.
    """
    progress.world_size = job.world_size
    return {
        "trained_model": None if trained is None else {k: v.detach().clone() for k, v in trained.state_dict().items()},
        "progress": asdict(progress),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "torch_rng": job.gather(torch.get_rng_state()),  # one per rank
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


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


def _restore(
    payload: dict, path: Path, model: Seq2Seq, optimizer, scheduler, job: Dist, ema: WeightAverage | None
) -> Progress:
    """Load the weights, optimizer, scheduler, average and random state of ``payload`` (read from
    ``path``); :return: where training stood."""
    state = payload["train_state"]
    if state is None:
        raise CheckpointError(f"{path}: holds weights only (no optimizer state); it cannot be resumed")
    trained = state.get("trained_model")  # present when the run kept an average (the file's weights)
    model.load_state_dict(trained if trained is not None else payload["model"])
    if ema is not None:
        ema.load_from(payload["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    progress = Progress(**state["progress"])
    if progress.world_size == job.world_size:
        torch.set_rng_state(state["torch_rng"][job.rank].cpu())
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    else:  # other shards: continue at the same fraction of the epoch, with fresh dropout masks
        progress.update_in_epoch = progress.update_in_epoch * progress.world_size // job.world_size
        torch.manual_seed(progress.step * 1000 + job.rank)
        log.warning("resuming with %d processes from a run with %d: the epoch continues at about the same place, "
                    "not at exactly the same batch", job.world_size, progress.world_size)  # fmt: skip
    log.info("resumed from %s at update %d (epoch %d, update %d of the epoch)", path, progress.step, progress.epoch + 1,
             progress.update_in_epoch)  # fmt: skip
    return progress


def _describe(model_cfg: DictConfig) -> str:
    name = lambda node: node._target_.rsplit(".", 1)[-1]  # noqa: E731
    return f"{name(model_cfg.encoder)} + {name(model_cfg.attention)} + {name(model_cfg.decoder)}"


def _hparams(cfg: DictConfig) -> dict:
    flat = {}
    for section in ("model", "train", "data"):
        for key, value in flatten(OmegaConf.to_container(cfg[section], resolve=True), section).items():
            flat[key] = value if isinstance(value, int | float | str | bool) else str(value)
    return flat




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

"""The training loop's machinery: one update (:func:`train_update`), and the :class:`Trainer` that
holds the model, optimizer, schedule, moving average and progress of a run and does its
bookkeeping: counting updates, logging (``train.log`` for people, ``metrics.jsonl`` for programs:
:mod:`nmt.training.runlog`), validating, checkpointing, resuming and the final test scores.
:func:`nmt.train.train` drives it; this module has no command line.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.profiler import record_function
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.data.batches import Batch, PairData, Splits, shard
from nmt.errors import CheckpointError
from nmt.evaluation.metrics import corpus_scores, perplexity, teacher_forced_nll, translate_data
from nmt.files import atomic_write_text
from nmt.model import Seq2Seq
from nmt.plotting import alignment_grid_figure, attention_figure
from nmt.runtime import provenance
from nmt.search import SearchSettings, greedy_search
from nmt.tokens import BOS_ID
from nmt.training.checks import flatten, guided_attention
from nmt.training.distributed import Dist
from nmt.training.ema import WeightAverage
from nmt.training.runlog import METRICS, MetricsLog
from nmt.training.schedule import stepped_every

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


def stop_reason(progress: Progress, tcfg: DictConfig) -> str | None:
    """Why a run at ``progress`` has met the budget of ``tcfg`` (``train``), or None if it has not."""
    if tcfg.max_steps and progress.step >= tcfg.max_steps:
        return "max_steps reached"
    if progress.epoch >= tcfg.max_epochs:
        return "max_epochs reached"
    if tcfg.patience and progress.stale_validations >= tcfg.patience:
        return f"early stopping: no better validation BLEU in {tcfg.patience} validations"
    return None


@dataclass
class UpdateStats:
    """What one update measured: smoothed loss and NLL per target token (this rank), its target
    tokens, the gradient norm before clipping (non-finite: the update was skipped), and with guided
    alignment its attention's cross-entropy against the links, per target token (else None)."""

    loss: float
    nll: float
    tokens: int
    grad_norm: float
    alignment: float | None = None


class Objective(torch.nn.Module):
    """The training loss as a module's ``forward``, so that DDP can wrap it (DDP synchronises
    gradients only through ``forward``). Checkpoints hold ``objective.model``.

    :param model: the model being trained.
    """

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, batch: Batch, label_smoothing: float, guide_weight: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:return: the loss to minimise (smoothed cross-entropy, plus ``guide_weight`` x guided
        alignment's cross-entropy when the batch carries links), the NLL sum over the batch's real
        target tokens, and the alignment loss sum (detached; None without guidance)."""
        args = batch.src, batch.src_lens, batch.tgt_in, batch.tgt_out, label_smoothing
        if batch.guide is None or guide_weight == 0.0:
            return *self.model.loss(*args), None
        loss, alignment, nll = self.model.guided_loss(*args, batch.guide)
        return loss + guide_weight * alignment, nll, alignment.detach()


def train_update(net: torch.nn.Module, optimizer, batches: list[Batch], tcfg: DictConfig, job: Dist,
                 guide_weight: float = 0.0) -> UpdateStats:  # fmt: skip
    """One optimizer update from ``batches`` (gradient accumulation) on every rank.

    :param net: the :class:`Objective`, or DDP around it.
    :param guide_weight: the weight of guided alignment's loss (batches without links: unused).

    The loss is normalised by the target tokens of all batches on all ranks, so that k batches
    accumulated, or k ranks with one batch each, give the gradient of one batch holding them all.
    DDP averages gradients over ranks, hence the factor ``world_size``.
    """
    local_tokens = sum(b.num_tgt_tokens for b in batches)
    total_tokens = job.sum(local_tokens)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = nll_sum = 0.0
    alignment_sum: float | None = None
    net.train()
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        sync = nullcontext() if last or not job.enabled else net.no_sync()  # all-reduce once, at the end
        with sync, _autocast(batch.src.device, tcfg.amp):
            with record_function("forward"):  # the phases, labelled for torch.profiler (scripts/profile_update.py)
                loss, nll, alignment = net(batch, tcfg.label_smoothing, guide_weight)
            with record_function("backward"):
                (loss * (job.world_size / total_tokens)).backward()
        loss_sum, nll_sum = loss_sum + float(loss.detach()), nll_sum + float(nll)
        if alignment is not None:
            alignment_sum = (alignment_sum or 0.0) + float(alignment)
    with record_function("optimizer"):
        # the same (all-reduced) gradients on every rank, so every rank takes the same decision
        limit = tcfg.clip_norm if tcfg.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(net.parameters(), limit))
        if math.isfinite(grad_norm):
            optimizer.step()
    alignment = None if alignment_sum is None else alignment_sum / local_tokens
    return UpdateStats(loss_sum / local_tokens, nll_sum / local_tokens, local_tokens, grad_norm, alignment)


def _autocast(device: torch.device, amp: str):
    """bf16 autocast on GPUs when ``train.amp=bf16``; nothing on the CPU."""
    if amp == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def cpu_load() -> float | None:
    """The 1-minute load average: processes running or waiting for a core, this run's included
    (``None`` where the OS keeps none). Next to the run's own threads it tells whether anything else
    shared the machine, and so whether a tokens/s figure is the machine's or half of it."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has no load average
        return None


def _log_train(writer: SummaryWriter, metrics: MetricsLog, step: int, stats: UpdateStats, lr: float, tok_s: float,
               threads: int) -> None:  # fmt: skip
    """One log line, ``metrics.jsonl`` record and set of TensorBoard points per ``train.log_every``
    updates; ``threads``: the run's own (all its processes')."""
    load = cpu_load()
    machine = "" if load is None else f"; CPU load {load:.2f} (cores {os.cpu_count()}, run threads {threads})"
    guided = "" if stats.alignment is None else f", alignment {stats.alignment:.4f}"
    log.info("update %d: loss %.4f, ppl %.2f%s, lr %.2e, |g| %.2f, %.0f target tokens/s%s",
             step, stats.loss, perplexity(stats.nll), guided, lr, stats.grad_norm, tok_s, machine)  # fmt: skip
    metrics.write("train", step=step, loss=stats.loss, ppl=perplexity(stats.nll), lr=lr, grad_norm=stats.grad_norm,
                  tgt_tokens_per_s=tok_s, cpu_load=load, cores=os.cpu_count(), threads=threads,
                  **({} if stats.alignment is None else {"alignment": stats.alignment}))  # fmt: skip
    if stats.alignment is not None:
        writer.add_scalar("train/alignment", stats.alignment, step)
    if load is not None:
        writer.add_scalar("train/cpu_load", load, step)
    writer.add_scalar("train/loss", stats.loss, step)
    writer.add_scalar("train/ppl", perplexity(stats.nll), step)
    writer.add_scalar("train/lr", lr, step)
    writer.add_scalar("train/grad_norm", stats.grad_norm, step)
    writer.add_scalar("train/tgt_tokens_per_s", tok_s, step)


class TokenRate:
    """Target tokens per second of training over the updates between two log lines. Validation
    and checkpointing pause the clock: the tokens trained before a validation are divided by the
    seconds spent training them, not by the time since the validation ended.

    :param clock: seconds, monotonic (a test passes a fake one).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.tokens, self.seconds, self.since = 0, 0.0, clock()

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def pause(self) -> None:
        self.seconds += self.clock() - self.since

    def resume(self) -> None:
        self.since = self.clock()

    def take(self) -> float:
        """The window's rate (0.0 for an empty window); starts the next window."""
        now = self.clock()
        seconds = self.seconds + (now - self.since)
        rate = self.tokens / seconds if seconds > 0 else 0.0
        self.tokens, self.seconds, self.since = 0, 0.0, now
        return rate


class Trainer:
    """One run's training state and bookkeeping (every rank has one; rank 0 alone logs and writes).
    :func:`nmt.train.train` runs the loop: for each group of batches of :meth:`epoch`,
    :meth:`update`, then :meth:`log`, :meth:`validate_and_save` and :meth:`save_for_resume` when
    due; :meth:`finish` at the end.

    :param cfg: the composed, validated config.
    :param run_dir: the run folder (opened by :func:`nmt.train.open_run` before :meth:`open`).
    :param job: this process's place in the (possibly single-process) job.
    :param data: the prepared splits (:func:`build`).
    :param model: the model, on ``job.device``.
    :param optimizer: its optimizer; ``scheduler``: the learning-rate schedule of that optimizer.
    :param resume: the checkpoint being resumed and its loaded payload, or None for a new run.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, job: Dist, data: Splits, model: Seq2Seq, optimizer: Optimizer,
                 scheduler: LRScheduler, resume: tuple[Path, dict] | None) -> None:  # fmt: skip
        self.cfg, self.tcfg, self.run_dir, self.job = cfg, cfg.train, run_dir, job
        self.data, self.model, self.optimizer, self.scheduler = data, model, optimizer, scheduler
        if self.tcfg.guided_alignment.path:
            guided_attention(self.model, self.tcfg.guided_alignment)  # the attention the loss guides
        objective = Objective(self.model)
        self.net = DistributedDataParallel(objective) if job.enabled else objective  # the plain model gets saved
        self.settings = SearchSettings(**self.tcfg.search)  # the final test scores
        self.val_settings = replace(self.settings, beam_size=self.tcfg.val_beam_size, n_best=1)
        self.ema = WeightAverage(self.model, self.tcfg.ema) if self.tcfg.ema else None
        self.progress = Progress()
        if resume is not None:
            path, payload = resume
            self.progress = _restore(payload, path, self.model, self.optimizer, self.scheduler, job, self.ema)
        log.info("model: %s parameters on %s x %d process(es); %s; effective batch %d x %d x %d tokens",
                 f"{self.model.num_parameters():,}", job.device, job.world_size, _describe(cfg.model),
                 cfg.data.max_tokens, job.world_size, self.tcfg.accum_steps)  # fmt: skip
        self.writer: SummaryWriter | None = None  # made by open(), once the run folder is opened
        self.metrics = MetricsLog(None)  # the same
        self.reason = stop_reason(self.progress, self.tcfg)
        self.done = self.reason is not None
        self.bar: tqdm | None = None  # the progress bar of the epoch in progress (a terminal only)
        self.rate = TokenRate()
        provenance()  # the code as it is now, before a commit made while the run trains

    def open(self) -> None:
        """Start writing TensorBoard events (rank 0), once :func:`nmt.train.open_run` accepted the folder."""
        if self.job.is_main:
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.progress.step or None)
            self.metrics = MetricsLog(self.run_dir / METRICS)
            self.metrics.write("start", step=self.progress.step, params=self.model.num_parameters(),
                               train_pairs=len(self.data.train), world_size=self.job.world_size)  # fmt: skip

    # ----------------------------------------------------------------- the loop's steps

    def epoch(self) -> Iterator[tuple[list[np.ndarray], bool]]:
        """This rank's groups of batches of the current epoch not yet trained on (one group an
        update, ``train.accum_steps`` batches each), each with whether it is the epoch's last."""
        p, tcfg = self.progress, self.tcfg
        batches = self.data.train.token_batches(self.cfg.data.max_tokens, shuffle=True, seed=tcfg.seed, epoch=p.epoch)
        if p.update_in_epoch == 0:
            log.info("epoch %d: %d batches, %.1f%% padding", p.epoch + 1, len(batches),
                     100 * self.data.train.padding_fraction(batches))  # fmt: skip
            self.metrics.write("epoch", epoch=p.epoch + 1, batches=len(batches))
        mine = shard(batches, self.job.rank, self.job.world_size)
        groups = [mine[i : i + tcfg.accum_steps] for i in range(0, len(mine), tcfg.accum_steps)]
        self.bar = tqdm(total=len(groups), initial=p.update_in_epoch, desc=f"epoch {p.epoch + 1}", leave=False,
                        disable=not (self.job.is_main and sys.stderr.isatty()), dynamic_ncols=True)  # fmt: skip
        try:
            for i in range(p.update_in_epoch, len(groups)):
                yield groups[i], i == len(groups) - 1
                self.bar.update(1)
        finally:
            self.bar.close()

    def update(self, group: list[np.ndarray], end_of_epoch: bool) -> UpdateStats:
        """One optimizer update on ``group``'s batches, then counting and the position (the next
        epoch after the last group of one; done once the budget is met).

        :return: what the update measured (a non-finite ``grad_norm``: it was skipped).
        """
        # with subword sampling, a batch's segmentations follow from the seed, the epoch and its first
        # pair (no two batches of an epoch share one): the same after a resume, on any rank
        seed, epoch = self.tcfg.seed, self.progress.epoch
        batches = [self.data.train.collate(indices, sample_seed=(seed, epoch, int(indices[0]))).to(self.job.device)
                   for indices in group]  # fmt: skip
        stats = train_update(self.net, self.optimizer, batches, self.tcfg, self.job, self.guide_weight())
        p = self.progress
        p.update_in_epoch += 1
        if math.isfinite(stats.grad_norm):
            self._count(stats)
        else:
            self._skip()
        if end_of_epoch:
            p.epoch, p.update_in_epoch = p.epoch + 1, 0
            if stepped_every(self.scheduler) == "epoch":
                self.scheduler.step()
        self._check_budget()
        return stats

    def guide_weight(self) -> float:
        """Guided alignment's weight in the current epoch: ``weight x decay^epoch`` (0 without links)."""
        guided = self.tcfg.guided_alignment
        return float(guided.weight) * float(guided.decay) ** self.progress.epoch if guided.path else 0.0

    def log_due(self) -> bool:
        """Every ``train.log_every`` good updates, on rank 0."""
        return self.job.is_main and self.progress.step % self.tcfg.log_every == 0 and self.progress.bad_steps == 0

    def _check_budget(self) -> None:
        """Done once the budget is met: the update that meets it is then validated and saved."""
        self.reason = stop_reason(self.progress, self.tcfg)
        self.done = self.reason is not None

    def _count(self, stats: UpdateStats) -> None:
        """A good update: the schedule steps, the average follows."""
        self.progress.bad_steps = 0
        if stepped_every(self.scheduler) == "update":
            self.scheduler.step()
        self.progress.step += 1
        self.rate.add(stats.tokens)
        if self.ema is not None:
            self.ema.update(self.model)

    def _skip(self) -> None:
        """A non-finite loss or gradient: the update was not applied; too many in a row stop the run."""
        p, limit = self.progress, self.tcfg.max_bad_steps
        p.bad_steps, p.skipped_updates = p.bad_steps + 1, p.skipped_updates + 1
        log.warning("non-finite loss or gradient at update %d: skipped (%d in a row, %d in all)",
                    p.step + 1, p.bad_steps, p.skipped_updates)  # fmt: skip
        if p.bad_steps >= limit:
            last = self.run_dir / "checkpoints" / "last.pt"
            raise FloatingPointError(
                f"{p.bad_steps} non-finite losses in a row (train.max_bad_steps={limit}); lower "
                f"train.optimizer.lr or check the data. The last good checkpoint is {last}"
            )

    def log(self, stats: UpdateStats) -> None:
        """The log line, ``metrics.jsonl`` record and TensorBoard points of an update."""
        tok_s = self.rate.take() * self.job.world_size
        threads = torch.get_num_threads() * self.job.world_size  # every process of a one-machine job
        _log_train(self.writer, self.metrics, self.progress.step, stats, self.optimizer.param_groups[0]["lr"], tok_s,
                   threads)  # fmt: skip
        self.bar.set_postfix(loss=f"{stats.loss:.3f}", tok_s=f"{tok_s:.0f}")

    def validation_due(self, end_of_epoch: bool) -> bool:
        """Every ``train.eval_every`` good updates (0: at each epoch's end), and when training is done."""
        p, every = self.progress, self.tcfg.eval_every
        due = (every and p.step % every == 0 and p.bad_steps == 0) or (not every and end_of_epoch)
        return bool(due or self.done)

    def validate_and_save(self) -> None:
        """Validate (rank 0; every rank learns the score), step a plateau schedule, track the best
        score and early stopping, and write ``last.pt``, ``best.pt`` and the periodic weights."""
        p = self.progress
        self.rate.pause()
        bleu = 0.0
        if self.job.is_main:
            with self._averaged():
                bleu = _validate(self.model, self.data, self.val_settings, self.cfg, self.writer, self.metrics, p.step,
                                 self.run_dir)  # fmt: skip
        bleu = self.job.broadcast(bleu)
        if stepped_every(self.scheduler) == "validation":
            self.scheduler.step(bleu)
        improved = bleu > p.best_bleu
        p.best_bleu = max(p.best_bleu, bleu)
        p.stale_validations = 0 if improved else p.stale_validations + 1
        state = self._train_state()
        if self.job.is_main:
            with self._averaged():  # the files' weights are the average; the state holds the trained ones
                self._checkpoint("last.pt", train_state=state)
                if improved:
                    self._checkpoint("best.pt", train_state=state)
                self._keep_periodic()
        self._check_budget()
        self.rate.resume()

    def save_for_resume(self, signum: int) -> dict[str, float]:
        """After SIGINT/SIGTERM: write ``last.pt`` and stop (every rank)."""
        state = self._train_state()
        if self.job.is_main:
            with self._averaged():
                self._checkpoint("last.pt", train_state=state)
            saved = (self.run_dir / "checkpoints" / "last.pt").resolve()
            log.info("signal %d: saved %s; continue the run with: %s", signum, saved, resume_command(self.run_dir, self.job))
        return {"interrupted": 1.0, "steps": float(self.progress.step)}

    def finish(self) -> dict:
        """Log why training stopped; on rank 0 score the best checkpoint on the test splits and
        write ``results.json``."""
        p = self.progress
        log.info("training stopped after %d updates (%d skipped for a non-finite loss): %s; best validation BLEU %.2f",
                 p.step, p.skipped_updates, self.reason, p.best_bleu)  # fmt: skip
        if not self.job.is_main:
            return {"best_valid_bleu": p.best_bleu, "steps": float(p.step)}
        self.metrics.write("end", step=p.step, reason=self.reason, best_valid_bleu=p.best_bleu,
                           skipped_updates=p.skipped_updates)  # fmt: skip
        results = _final_evaluation(self.model, self.data, self.settings, self.cfg, self.run_dir, p, self.metrics)
        self.writer.add_hparams(_hparams(self.cfg), {"hparam/best_valid_bleu": p.best_bleu}, run_name=".")
        self.writer.close()
        atomic_write_text(self.run_dir / "results.json", json.dumps(results, indent=2) + "\n")
        return results

    # ----------------------------------------------------------------- small helpers

    def _averaged(self):
        """Inside: the model holds the moving average of its weights (when ``train.ema`` is on)."""
        return self.ema.swapped_into(self.model) if self.ema is not None else nullcontext()

    def _checkpoint(self, name: str, **kw) -> None:
        save_checkpoint(self.run_dir / "checkpoints" / name, self.model, self.cfg, self.data.src_vocab,
                        self.data.tgt_vocab, **kw)  # fmt: skip

    def _keep_periodic(self) -> None:
        """Save a weights-only checkpoint of this update and delete all but the newest ``keep_checkpoints``."""
        keep = self.tcfg.keep_checkpoints
        if keep <= 0:
            return
        self._checkpoint(f"step{self.progress.step:08d}.pt")
        for old in sorted((self.run_dir / "checkpoints").glob("step*.pt"))[:-keep]:
            old.unlink(missing_ok=True)

    def _train_state(self) -> dict:
        return _train_state(self.progress, self.optimizer, self.scheduler, self.job, self.model if self.ema else None)


def resume_command(run_dir: Path, job) -> str:
    """The command that continues the run in ``run_dir`` with its saved settings, to paste into a
    shell: ``python -m nmt.train train.resume=auto hydra.run.dir=/abs/run`` (``torchrun
    --nproc_per_node=N -m nmt.train ...`` for a job of N processes)."""
    launch = f"torchrun --nproc_per_node={job.world_size}" if job.world_size > 1 else "python"
    return f"{launch} -m nmt.train train.resume=auto {shlex.quote(f'hydra.run.dir={run_dir.resolve()}')}"


# --------------------------------------------------------------------------- what the trainer calls


def _validate(model: Seq2Seq, data: Splits, settings, cfg, writer, metrics: MetricsLog, step: int, run_dir: Path) -> float:
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
    if model.has_alignment:
        _log_heatmaps(model, valid, data, settings, cfg.train.num_heatmaps, writer, step, device)
    seconds = time.perf_counter() - start
    log.info("validation at update %d: loss %.4f, ppl %.2f, BLEU %.2f, chrF %.2f (%.1fs) [%s]",
             step, nll, perplexity(nll), scores.bleu, scores.chrf, seconds, scores.bleu_signature)  # fmt: skip
    metrics.write("valid", step=step, loss=nll, ppl=perplexity(nll), bleu=scores.bleu, chrf=scores.chrf, seconds=seconds)
    return scores.bleu


def _log_heatmaps(model, valid: PairData, data: Splits, settings, count: int, writer, step: int, device) -> None:
    """Greedy alignments of the first ``count`` validation sentences, as TensorBoard figures."""
    for i in range(min(count, len(valid))):
        batch = valid.collate(np.array([i])).to(device)
        (hyp,) = greedy_search(
            model, batch.src, batch.src_lens, settings.max_len_a, settings.max_len_b, return_attention=True
        )[0]
        src_labels = data.src_vocab.pieces(valid.source(i)) + ["</s>"]
        tgt_labels = data.tgt_vocab.pieces(hyp.tokens) + ["</s>"]
        fig = attention_figure(hyp.attention.numpy(), src_labels, tgt_labels, title=f"valid {i}, update {step}")
        writer.add_figure(f"attention/valid_{i}", fig, step)  # closes the figure
        tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]], device=device)  # (1, T): the output, teacher-forced
        maps = model.attention_maps(batch.src, batch.src_lens, tgt_in)[0].float().cpu().numpy()  # (L, h, T, S)
        if maps.shape[0] * maps.shape[1] > 1:  # every layer's heads and their average, a row per layer
            panels = [(layer_maps[h], src_labels, tgt_labels, f"layer {layer + 1}, head {h + 1}")
                      for layer, layer_maps in enumerate(maps) for h in range(maps.shape[1])]  # fmt: skip
            for layer in range(maps.shape[0]):
                panels.insert((layer + 1) * (maps.shape[1] + 1) - 1,
                              (maps[layer].mean(0), src_labels, tgt_labels, f"layer {layer + 1}, average"))  # fmt: skip
            grid = alignment_grid_figure(panels, ncols=maps.shape[1] + 1, title=f"cross-attention, valid {i}, update {step}")
            writer.add_figure(f"cross_attention/valid_{i}", grid, step)


def _final_evaluation(model: Seq2Seq, data: Splits, settings, cfg, run_dir: Path, progress: Progress,
                      metrics: MetricsLog) -> dict:  # fmt: skip
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
        metrics.write("test", split=role, bleu=scores.bleu, chrf=scores.chrf)
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
        **random_state(job),
    }


def random_state(job: Dist) -> dict:
    """Every rank's random-number state, gathered (a collective under DDP): the CPU generator's,
    and the generator of the GPU the rank trains on (None on the CPU). Each rank's own, so that
    after a resume every rank continues its own dropout stream."""
    cuda = torch.cuda.get_rng_state(job.device) if job.device.type == "cuda" else None
    return {"torch_rng": job.gather(torch.get_rng_state()), "cuda_rng_by_rank": job.gather(cuda)}


def restore_random_state(state: dict, job: Dist) -> None:
    """Set this rank's generators to the states :func:`random_state` saved for its rank.

    Checkpoints written before the states were gathered per rank hold ``cuda_rng``: rank 0's
    states of every visible GPU, right for one process only, which is the only case restored."""
    torch.set_rng_state(state["torch_rng"][job.rank].cpu())
    by_rank = state.get("cuda_rng_by_rank")
    if by_rank is not None:
        if by_rank[job.rank] is not None and job.device.type == "cuda":
            torch.cuda.set_rng_state(by_rank[job.rank].cpu(), job.device)
    elif state.get("cuda_rng") is not None and job.world_size == 1 and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])


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
        restore_random_state(state, job)
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





"""A new run that starts from a trained model (``train.init_from``): the weights and both subword
models of a checkpoint, and nothing of its training state, so that the optimizer, the learning-rate
schedule, the update counter, the best score and early stopping start afresh. This is fine-tuning:
continued training of a trained model on a new corpus or domain (Luong & Manning 2015, "Stanford
neural machine translation systems for spoken language domains"; Freitag & Al-Onaizan 2016).

The new run's config must describe the checkpoint's model and subword models (dropout rates may
change; :func:`nmt.training.checks.init_changes`), and the new corpus is encoded with the
checkpoint's subword models: characters they never saw become ``<unk>``, whose share of the
training subwords is logged (a warning above :data:`UNK_WARNING`).
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import checkpoint_file, load_checkpoint
from nmt.data.batches import PairData, Splits
from nmt.errors import CheckpointError, ConfigError
from nmt.model import Seq2Seq, build_model
from nmt.tokens import UNK_ID
from nmt.training.checks import init_changes
from nmt.vocab import Vocab
from nmt.weights import check_fits, declare

log = logging.getLogger("nmt.train")

UNK_WARNING = 0.01  # a share of <unk> among a side's training subwords above which the run warns
UNK_SAMPLE = 20_000  # training pairs the share is measured on (all of a smaller corpus)
SHOWN_CHARACTERS = 8  # uncovered characters named in the warning


@dataclass
class Start:
    """The checkpoint a new run starts from.

    :ivar path: the checkpoint file, absolute.
    :ivar payload: the loaded checkpoint (:func:`nmt.checkpoint.load_checkpoint`).
    """

    path: Path
    payload: dict

    def vocabs(self) -> tuple[Vocab, Vocab]:
        """The checkpoint's source and target subword models, which encode the new corpus."""
        return Vocab(self.payload["vocab"]["src"]), Vocab(self.payload["vocab"]["tgt"])

    def load_weights(self, model: Seq2Seq) -> None:
        """Copy the checkpoint's weights into ``model`` (built from the new run's config). With a
        moving average kept by the checkpoint's run, these are the averaged weights: the ones
        its validation scored and that translate."""
        model.load_state_dict(self.payload["model"])

    def recorded_in(self, cfg: DictConfig) -> DictConfig:
        """A copy of ``cfg`` whose ``train.init_from`` is the checkpoint file's absolute path, so that
        the new run's ``config.yaml`` and checkpoints say which file its weights came from."""
        cfg = copy.deepcopy(cfg)
        OmegaConf.update(cfg, "train.init_from", str(self.path), merge=False)
        return cfg


def start_from(cfg: DictConfig, resumed: tuple[Path, dict] | None) -> Start | None:
    """The checkpoint of ``train.init_from``, loaded and checked against the new run's config; the
    same on every process of a ``torchrun`` job (each reads the file).

    A resumed run continues its own checkpoint: ``train.init_from`` is then ignored (logged), as
    when ``train.resume=auto`` continues a run that was started from another model.

    :param resumed: the path and payload of the checkpoint the command resumes, or None.
    :return: None without ``train.init_from``, or when resuming.
    :raise ConfigError: ``train.init_from`` with an explicit ``train.resume`` checkpoint whose run
        did not start from it; a config that differs from the checkpoint's where it shapes the
        weights or the subword models (one line naming every such key).
    :raise CheckpointError: the file is missing or not a usable checkpoint, or its weights do not
        fit the model the new config builds.
    """
    given = cfg.train.init_from
    if given in (None, ""):
        return None
    if resumed is not None:
        path, payload = resumed
        recorded = payload["config"]["train"].get("init_from")
        if cfg.train.resume != "auto" and not _same_file(given, recorded):
            raise ConfigError(
                f"train.init_from={given} with train.resume={cfg.train.resume}: a resumed run continues its checkpoint "
                "and a new run starts from train.init_from; give one of them"
            )
        log.info("train.init_from=%s is ignored: the run continues from its own checkpoint %s", given, path)
        return None
    path = checkpoint_file(given).resolve()
    try:
        payload = load_checkpoint(path)
    except CheckpointError as e:
        raise CheckpointError(f"train.init_from: {e}") from None
    changes = init_changes(payload["config"], cfg, path)
    start = Start(path, payload)
    src_vocab, tgt_vocab = start.vocabs()
    declared = declare(lambda: build_model(cfg.model, len(src_vocab), len(tgt_vocab)), len(payload["model"]))
    check_fits(declared, payload["model"], f"the weights of {path}")
    state = payload["train_state"]
    trained = f" (update {state['progress']['step']} of its run)" if isinstance(state, dict) else ""
    log.info("train.init_from: a new run from the weights and subword models of %s%s; the optimizer, schedule, "
             "update count, best score and early stopping start afresh%s", path, trained,
             f"; changed: {'; '.join(changes)}" if changes else "")  # fmt: skip
    return start


def _same_file(given: str, recorded: str | None) -> bool:
    """Whether ``train.init_from=given`` names the checkpoint file a run recorded as its start."""
    return recorded is not None and checkpoint_file(given).resolve() == Path(recorded).resolve()


# --------------------------------------------------------------------------- coverage of the new corpus


def unknown_shares(pairs: PairData, sample: int = UNK_SAMPLE) -> tuple[float, float]:
    """The share of ``<unk>`` among the source and among the target subwords of ``pairs``, measured
    on ``sample`` pairs drawn at random (always the same ones) from a larger split.

    :return: ``(source share, target share)``, each in [0, 1].
    """
    rows = np.arange(len(pairs))
    if len(pairs) > sample:
        rows = np.sort(np.random.default_rng(0).choice(len(pairs), size=sample, replace=False))
    unknown, total = np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)  # (source, target)
    for i in rows:
        for side, ids in enumerate((pairs.source(int(i)), pairs.target(int(i)))):
            unknown[side] += int(np.count_nonzero(ids == UNK_ID))
            total[side] += len(ids)
    src, tgt = (unknown / np.maximum(total, 1)).tolist()
    return src, tgt


def uncovered_characters(lines: list[str], vocab: Vocab) -> list[tuple[str, int]]:
    """The characters of ``lines`` that ``vocab`` encodes as ``<unk>``, most frequent first, with
    their counts (white space aside)."""
    counts = Counter(ch for line in lines for ch in line if not ch.isspace())
    chars = [ch for ch, _ in counts.most_common()]
    return [(ch, counts[ch]) for ch, ids in zip(chars, vocab.encode(chars)) if UNK_ID in ids]


def report_coverage(data: Splits, path: Path, limit: float = UNK_WARNING) -> None:
    """Log the share of ``<unk>`` in the new training data, encoded with the subword models of the
    checkpoint ``path``: a warning when a side's share exceeds ``limit``, naming the most frequent
    characters of the validation text that the subword models lack."""
    src, tgt = unknown_shares(data.train)
    if max(src, tgt) <= limit:
        log.info("train.init_from: <unk> is %.2f%% of the source and %.2f%% of the target training subwords",
                 100 * src, 100 * tgt)  # fmt: skip
        return
    _, sources, references = data.evaluation["valid"]
    sides = (("source", sources, data.src_vocab), ("target", references, data.tgt_vocab))
    missing = [(side, uncovered_characters(lines, vocab)[:SHOWN_CHARACTERS]) for side, lines, vocab in sides]
    shown = "; ".join(f"{side} " + ", ".join(f"{ch!r} x{n}" for ch, n in chars) for side, chars in missing if chars)
    log.warning(
        "train.init_from: <unk> is %.1f%% of the source and %.1f%% of the target training subwords (over %.0f%%): "
        "the subword models of %s do not cover this corpus's characters, which the model reads as <unk> and cannot "
        "write%s",
        100 * src, 100 * tgt, 100 * limit, path,
        f" (most frequent in the validation data: {shown})" if shown else "",
    )  # fmt: skip

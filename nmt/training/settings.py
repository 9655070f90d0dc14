"""The schema of the ``train`` group: every key of ``train.*`` with its type, registered with
Hydra's ConfigStore (see :mod:`nmt.configs`) so that composing a config refuses a key the loop does
not know (a typo in a recipe or on the command line) and a value of the wrong type, before any
command runs. The defaults and their meaning are written once, in ``configs/train/default.yaml``;
the ranges and choices a type cannot say are checked by :mod:`nmt.training.checks`.

The optimizer and the schedule are free-form (``_target_`` + that class's own arguments), and the
test decoding ``train.search`` is typed as :class:`nmt.search.SearchSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from nmt.search import SearchSchema


@dataclass
class GuidedAlignmentSettings:
    """``train.guided_alignment.*``: attention trained towards an aligner's word links."""

    path: Optional[str] = MISSING  # noqa: UP045
    weight: float = MISSING
    decay: float = MISSING
    layer: Optional[int] = MISSING  # noqa: UP045
    heads: Optional[list[int]] = MISSING  # noqa: UP045
    full_context: bool = MISSING


@dataclass
class TrainSettings:
    """``train.*``: the training loop of :mod:`nmt.train` (defaults: ``configs/train/default.yaml``)."""

    optimizer: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] = field(default_factory=dict)
    search: SearchSchema = MISSING
    label_smoothing: float = MISSING
    clip_norm: float = MISSING
    max_epochs: int = MISSING
    max_steps: int = MISSING
    patience: int = MISSING
    seed: int = MISSING
    device: str = MISSING
    threads: int = MISSING
    accum_steps: int = MISSING
    amp: str = MISSING
    dist_backend: str = MISSING
    eval_every: int = MISSING
    log_every: int = MISSING
    keep_checkpoints: int = MISSING
    resume: Optional[str] = MISSING  # noqa: UP045 (OmegaConf reads the annotation at run time)
    init_from: Optional[str] = MISSING  # noqa: UP045
    overwrite: bool = MISSING
    max_bad_steps: int = MISSING
    num_heatmaps: int = MISSING
    decode_batch_size: int = MISSING
    ema: float = MISSING
    val_beam_size: int = MISSING
    guided_alignment: GuidedAlignmentSettings = MISSING

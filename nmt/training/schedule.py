"""Learning-rate schedules, and when the trainer steps each: :func:`stepped_every` says it in one
place (once per update; :class:`MultiStep` in epochs at each epoch's end; ``ReduceLROnPlateau`` per
validation, with the score)."""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, MultiStepLR, ReduceLROnPlateau

UNITS = ("epoch", "update")


def stepped_every(scheduler: LRScheduler | ReduceLROnPlateau) -> str:
    """``"update"``, ``"epoch"`` or ``"validation"``: when the trainer calls ``scheduler.step()``."""
    if isinstance(scheduler, ReduceLROnPlateau):
        return "validation"
    if isinstance(scheduler, MultiStep) and scheduler.unit == "epoch":
        return "epoch"
    return "update"


class MultiStep(MultiStepLR):
    """Multiply the lr by ``gamma`` after each milestone: a schedule for a known budget.

    :param milestones: epochs (``unit="epoch"``: the lr changes after the last update of each of
        these epochs, however many updates an epoch has) or update counts (``unit="update"``).
    :param gamma: the factor (0.5 halves the lr).
    :param unit: ``epoch`` or ``update``.
    """

    def __init__(self, optimizer: Optimizer, milestones: list[int], gamma: float = 0.5, unit: str = "epoch") -> None:
        if unit not in UNITS:
            raise ValueError(f"train.scheduler.unit={unit!r}: choose one of {', '.join(UNITS)}")
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in milestones):
            raise ValueError(f"train.scheduler.milestones={list(milestones)}: give {unit} counts >= 1")
        self.unit = unit
        super().__init__(optimizer, list(milestones), gamma)


class WarmupInverseSqrt(LambdaLR):
    """Linear warmup over ``warmup_steps`` updates to the optimizer's lr, then decay as 1/sqrt(step).

    :param optimizer: the optimizer whose lr is the peak.
    :param warmup_steps: updates to reach the peak (> 0).
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int) -> None:
        if warmup_steps <= 0:
            raise ValueError(f"train.scheduler.warmup_steps={warmup_steps}: must be positive")
        self.warmup_steps = warmup_steps

        def factor(step: int) -> float:
            step = step + 1
            return min(step / warmup_steps, (warmup_steps / step) ** 0.5)

        super().__init__(optimizer, factor)

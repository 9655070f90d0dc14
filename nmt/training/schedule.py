"""Learning-rate schedules stepped once per update (``ReduceLROnPlateau`` is stepped per validation)."""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


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

"""Learning-rate schedules: the epoch milestones of ``multistep`` halve the rate after the last
update of each named epoch (the same schedule as update milestones at those epochs' ends), in a
real run too, and a bad unit or milestone is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import train_in_process

from nmt.training.runlog import read_metrics
from nmt.training.schedule import MultiStep, stepped_every


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0)


@pytest.mark.parametrize("updates_per_epoch", [1, 7, 134])
def test_epoch_milestones_equal_update_milestones_at_the_epoch_ends(updates_per_epoch: int) -> None:
    """The trainer steps an epoch schedule once per epoch and an update schedule once per update:
    the rate of every update is the same."""
    epochs, milestones = 16, [10, 12, 14]
    by_epoch, by_update = _optimizer(), _optimizer()
    epoch_schedule = MultiStep(by_epoch, milestones, gamma=0.5, unit="epoch")
    update_schedule = MultiStep(by_update, [m * updates_per_epoch for m in milestones], gamma=0.5, unit="update")
    assert (stepped_every(epoch_schedule), stepped_every(update_schedule)) == ("epoch", "update")
    rates = []
    for _ in range(epochs):
        for _ in range(updates_per_epoch):
            rates.append(by_epoch.param_groups[0]["lr"])
            assert by_update.param_groups[0]["lr"] == rates[-1]
            update_schedule.step()
        epoch_schedule.step()
    assert rates[10 * updates_per_epoch - 1] == 1.0 and rates[10 * updates_per_epoch] == 0.5
    assert rates[-1] == 0.125


def test_plateau_is_stepped_per_validation() -> None:
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(_optimizer())
    constant = torch.optim.lr_scheduler.ConstantLR(_optimizer(), factor=1.0, total_iters=0)
    assert (stepped_every(plateau), stepped_every(constant)) == ("validation", "update")


@pytest.mark.parametrize(("kwargs", "message"),
                         [({"unit": "epochs"}, "train.scheduler.unit='epochs': choose one of epoch, update"),
                          ({"milestones": [0, 3]}, "milestones=.0, 3.: give epoch counts >= 1")])  # fmt: skip
def test_bad_unit_or_milestone_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MultiStep(_optimizer(), **{"milestones": [2], **kwargs})


def test_a_run_halves_the_rate_after_the_named_epoch(tmp_path: Path) -> None:
    """Three epochs, halved after epoch 1: every update of epoch 1 at the full rate, every later
    one at half, whatever the number of updates an epoch has. (An update's record holds the rate
    after it, the one the next update uses, as with update schedules.)"""
    overrides = ["experiment=smoke", f"data.cache_dir={tmp_path / 'cache'}", "train.device=cpu",
                 "train/scheduler=multistep", "train.scheduler.milestones=[1]", "train.max_epochs=3", "train.log_every=1",
                 "train.num_heatmaps=0"]  # fmt: skip
    train_in_process(overrides, tmp_path / "run")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    first_epoch = next(r["batches"] for r in records if r["event"] == "epoch")
    rates = [r["lr"] for r in records if r["event"] == "train"]
    assert first_epoch > 1 and len(rates) > first_epoch
    lr = rates[0]
    assert rates[: first_epoch - 1] == [lr] * (first_epoch - 1)
    assert rates[first_epoch - 1 :] == [lr / 2] * (len(rates) - first_epoch + 1)

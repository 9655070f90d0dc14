"""Data-parallel training with ``torchrun``: process-group setup and the few collectives the loop needs.

``torchrun --nproc_per_node=N -m nmt.train ...`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``;
without them everything here is a no-op for a single process. The backend is ``nccl`` when the
processes use GPUs and ``gloo`` on the CPU, unless ``train.dist_backend`` names one.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from nmt.runtime import resolve_device


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: ``rank`` of ``world_size``, and its device."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def sum(self, value: float) -> float:
        """Sum of ``value`` over all ranks."""
        if not self.enabled:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(tensor)
        return float(tensor.item())

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank (e.g. the decision to stop)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        if self.enabled:
            dist.barrier()

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def _comm_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")


def setup(device_name: str, backend: str) -> Dist:
    """Join the ``torchrun`` job if there is one and pick this process's device.

    :param device_name: ``auto``, ``cpu``, ``cuda``...; with several processes on GPUs each takes
        ``cuda:LOCAL_RANK``.
    :param backend: ``auto`` (nccl on GPUs, gloo on CPUs), ``gloo`` or ``nccl``.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(device_name, "train.device")
    if world_size == 1:
        return Dist(0, 1, device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=60))
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()

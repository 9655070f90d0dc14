"""A model declared without memory, checked against stored weights, then made of them.

:func:`declare` builds a model on PyTorch's ``meta`` device (shapes and dtypes, no storage, no
initialisation), stopping at the first layer beyond what the stored tensors could fill;
:func:`check_fits` compares its parameters and persistent buffers with a state dict (names,
shapes, dtypes); :func:`assign` makes the stored tensors the model's. The checkpoint loader
(:mod:`nmt.checkpoint`) reads every model this way, so a file's config cannot make a process
allocate or build more than the file's own weights hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from nmt.errors import CheckpointError

M = TypeVar("M", bound=nn.Module)


def declare(build: Callable[[], M], stored: int) -> M:
    """``build()`` on the meta device, in a budget: at most twice ``stored`` parameters and
    buffers (plus a margin for tied and absent ones) and four times as many modules.

    The budget bounds the time as well as the memory: 100000 GRU layers would take hours to
    build even on the meta device, and are cut short at the first layer past the budget.

    :param stored: the number of tensors in the state dict the model will be compared with.
    :raise CheckpointError: a model that registers more than the budget.
    """
    limits = {"parameters and buffers": 2 * stored + 64, "modules": 4 * stored + 64}
    try:
        with torch.device("meta"), _registration_budget(limits):
            return build()
    except _OverBudget as e:
        raise CheckpointError(
            f"the config stored in the checkpoint declares a model of more than {limits[e.kind]} {e.kind}, but the "
            f"checkpoint holds {stored} tensors: its weights cannot be this model's (too many layers?)"
        ) from None


class _OverBudget(Exception):
    """Raised inside the build (not a RuntimeError or ValueError, which constructors' callers catch)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@contextmanager
def _registration_budget(limits: dict[str, int]) -> Iterator[None]:
    """Count the parameters, buffers and modules that modules built in this thread register, and
    raise :class:`_OverBudget` at the first one past its limit."""
    thread, counts = threading.get_ident(), dict.fromkeys(limits, 0)

    def counter(kind: str) -> Callable[..., None]:
        def hook(*args: Any) -> None:
            if threading.get_ident() == thread:
                counts[kind] += 1
                if counts[kind] > limits[kind]:
                    raise _OverBudget(kind)

        return hook

    tensors, modules = counter("parameters and buffers"), counter("modules")
    handles = [torch_module.register_module_parameter_registration_hook(tensors),
               torch_module.register_module_buffer_registration_hook(tensors),
               torch_module.register_module_module_registration_hook(modules)]  # fmt: skip
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def check_fits(model: nn.Module, weights: dict[str, torch.Tensor], what: str) -> None:
    """The names, shapes and dtypes of ``weights`` are exactly ``model``'s parameters and
    persistent buffers (a tied tensor under each of its names).

    :param what: the weights' name in the message, e.g. ``checkpoint weights``.
    :raise CheckpointError: one line with the first differences.
    """
    expected = model.state_dict(keep_vars=True)
    problems = [f"missing {name}" for name in expected if name not in weights]
    problems += [f"unexpected {name}" for name in weights if name not in expected]
    for name, tensor in expected.items():
        stored = weights.get(name)
        if stored is not None and (stored.shape != tensor.shape or stored.dtype != tensor.dtype):
            problems.append(f"{name} is {_describe(stored)} in the file, {_describe(tensor)} in the model")
    if problems:
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
        raise CheckpointError(f"{what} do not fit the model its config describes: {shown}")


def _describe(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"


def assign(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Make the stored tensors (already :func:`check_fits`) the declared model's: tied parameters
    stay one tensor, and nothing may be left on the meta device.

    :raise CheckpointError: tied parameters stored with different values, or a tensor of the
        model that the state dict does not hold (a non-persistent buffer).
    """
    state: dict[str, torch.Tensor] = {}
    shared: dict[int, tuple[str, nn.Parameter]] = {}  # id of a meta parameter -> its first name, its new tensor
    for name, param in model.named_parameters(remove_duplicate=False):
        stored = weights[name]
        if id(param) not in shared:  # a Parameter is assigned as it is: one object under every tied name
            shared[id(param)] = (name, nn.Parameter(stored, requires_grad=param.requires_grad))
        first, tensor = shared[id(param)]
        if first != name and not _same(tensor, stored):
            raise CheckpointError(f"{first} and {name} are one tensor in the model but differ in the checkpoint")
        state[name] = tensor
    state.update({name: weights[name] for name, _ in model.named_buffers(remove_duplicate=False) if name in weights})
    model.load_state_dict(state, strict=True, assign=True)
    left = [name for name, tensor in chain(model.named_parameters(), model.named_buffers()) if tensor.is_meta]
    left += [f"{name}.{key}" if name else key for name, module in model.named_modules()
             for key, value in vars(module).items() if isinstance(value, torch.Tensor) and value.is_meta]  # fmt: skip
    if left:
        raise CheckpointError(f"the model's {', '.join(left[:4])} has no value after loading (not in the state dict: "
                              "a non-persistent buffer?); its class cannot be loaded from a checkpoint")  # fmt: skip


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same elements: one stored tensor under two names, or equal copies."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()) or torch.equal(a, b)

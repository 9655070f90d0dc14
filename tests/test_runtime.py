"""nmt.runtime: a device setting is checked against what the process can see, in one line."""

from __future__ import annotations

import pytest
import torch

from nmt.errors import ConfigError
from nmt.runtime import resolve_device


def test_auto_and_cpu_resolve() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("name", ["gpu", "tpu", "cuda:x", ""])
def test_an_unknown_device_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ConfigError, match=r"device=.*choose auto, cpu, cuda"):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a process that sees no GPU")
def test_a_gpu_that_is_not_there_is_refused_with_the_setting_named() -> None:
    with pytest.raises(ConfigError, match=r"^train\.device='cuda:1': no GPU is visible"):
        resolve_device("cuda:1", "train.device")

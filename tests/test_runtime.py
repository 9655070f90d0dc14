"""nmt.runtime: a device setting is checked against what the process can see, in one line; the
provenance of a result is the code the process started with."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from nmt import runtime
from nmt.errors import ConfigError
from nmt.runtime import provenance, resolve_device


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


def test_provenance_keeps_the_commit_the_process_started_with(monkeypatch: pytest.MonkeyPatch) -> None:
    heads = iter(["a" * 40, "", "b" * 40, ""])  # rev-parse, then status, for each read of git

    def fake_git(args, **kwargs):
        return subprocess.CompletedProcess(args, 0, stdout=next(heads) + "\n", stderr="")

    monkeypatch.setattr(runtime.subprocess, "run", fake_git)
    runtime._provenance.cache_clear()
    try:
        first = provenance()
        first["git_commit"] = "changed by a caller"
        later = provenance()  # a commit was made meanwhile ("b..."): the run's results keep "a..."
    finally:
        runtime._provenance.cache_clear()
    if (Path(runtime.__file__).resolve().parents[1] / ".git").exists():
        assert later["git_commit"] == "a" * 40 and later["git_dirty"] is False
    else:  # an installed copy: no checkout to read
        assert later["git_commit"] is None
    assert later["versions"]["torch"] == torch.__version__

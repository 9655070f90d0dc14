"""The CUDA path, on a machine with a GPU: ``scripts/bench_gpu.py`` runs these first
(``pytest -o addopts="" tests/gpu``); the CPU suite leaves this folder out (``--ignore=tests/gpu``
in pyproject.toml), as there is nothing here a CPU can check.

The GPU computes what the CPU computes (the same losses, gradients and greedy translations, to
float tolerance); a run trains on the GPU in fp32 and bf16 and its checkpoint loads on the CPU;
and the search runs on the device.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import SmokeRun, build_tiny_model, random_batch, train_in_process

from nmt.checkpoint import load_model
from nmt.search import SearchSettings, translate_ids

if not torch.cuda.is_available():  # run on a CPU by mistake: say so, do not pass
    raise RuntimeError("tests/gpu needs a CUDA device; the CPU suite is `pytest` (it leaves tests/gpu out)")

GPU, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.mark.parametrize(("attention", "decoder"), [("bahdanau", "bahdanau"), ("luong_general", "luong_feed"),
                                                    ("scaled_dot", "bahdanau"), ("none", "bahdanau"),
                                                    ("multihead", "transformer")])  # fmt: skip
def test_loss_and_gradients_equal_the_cpus(attention: str, decoder: str) -> None:
    src, src_lens, tgt_in = random_batch([9, 7, 4, 9, 2, 6], tgt_len=8)
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    results = {}
    for device in (CPU, GPU):
        if decoder == "transformer":  # the tiny Transformer of tests/test_transformer.py, seed 0
            from test_transformer import tiny

            model = tiny("transformer").to(device)
        else:
            model = build_tiny_model(attention, decoder).to(device)  # the same weights (seed 0) on both
        loss, _ = model.loss(src.to(device), src_lens.to(device), tgt_in.to(device), tgt_out.to(device), 0.1)
        loss.backward()
        results[device.type] = (loss.item(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})
    assert results["cuda"][0] == pytest.approx(results["cpu"][0], rel=1e-4)
    assert results["cuda"][1].keys() == results["cpu"][1].keys()
    for name, grad in results["cpu"][1].items():
        assert torch.allclose(results["cuda"][1][name], grad, rtol=1e-3, atol=1e-5), name


def test_greedy_and_beam_translate_as_on_the_cpu(smoke_run: SmokeRun) -> None:
    cpu_model, src_vocab, _, config = load_model(smoke_run.checkpoint, CPU)
    gpu_model, *_ = load_model(smoke_run.checkpoint, GPU)
    ids = src_vocab.encode(smoke_run.test_src)
    for beam in (1, 4):
        settings = SearchSettings(**{**config.train.search, "beam_size": beam})
        on_cpu = [h[0].tokens for h in translate_ids(cpu_model, ids, settings, 16, CPU)]
        on_gpu = [h[0].tokens for h in translate_ids(gpu_model, ids, settings, 16, GPU)]
        same = sum(a == b for a, b in zip(on_cpu, on_gpu))
        assert same >= 0.95 * len(ids), f"beam {beam}: {same} of {len(ids)} translations agree"


@pytest.mark.parametrize("amp", ["none", "bf16"])
@pytest.mark.parametrize("experiment", ["smoke", "smoke_transformer"])
def test_a_run_trains_on_the_gpu_and_its_checkpoint_loads_on_the_cpu(tmp_path: Path, amp: str, experiment: str) -> None:
    run = tmp_path / "run"
    results = train_in_process([f"experiment={experiment}", f"data.cache_dir={tmp_path / 'cache'}", "train.device=cuda",
                                f"train.amp={amp}", "train.num_heatmaps=0"], run)  # fmt: skip
    assert math.isfinite(results["test_bleu"]) and results["test_bleu"] > 20  # the smoke corpus is learned
    model, *_ = load_model(run / "checkpoints" / "best.pt", CPU)
    assert all(p.device.type == "cpu" for p in model.parameters())

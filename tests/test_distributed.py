"""Data-parallel training (``nmt/training/distributed.py`` and its use in ``nmt/train.py``), on the CPU with
gloo and two processes on the loopback interface:

- two ranks with one batch each take the same step as one process with both batches, accumulated or
  concatenated (and likewise with gradient accumulation on each rank);
- every pair of an epoch goes to exactly one rank, and every rank makes the same number of updates;
- under ``torchrun`` only rank 0 writes the log, TensorBoard events, checkpoints, hypotheses and
  results, and validates once;
- a DDP checkpoint translates in one process and resumes there, a single-process checkpoint resumes
  under ``torchrun``, and both ranks stop together on early stopping.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import CONFIG_DIR, REPO_ROOT, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE, ToyCorpus, compose_model_cfg, make_toy_corpus
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nmt.checkpoint import load_checkpoint, model_from_checkpoint
from nmt.data.batches import PairData, shard
from nmt.model import build_model
from nmt.train import train
from nmt.training.distributed import Dist
from nmt.training.trainer import Objective, train_update
from nmt.translate import translate

CPU = torch.device("cpu")
WORLD_SIZE = 2
TIMEOUT_S = 240  # a hung collective (one rank waiting for the other) fails the test instead of the suite


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    """Wait for ``proc``; past ``timeout`` kill its whole process group (it runs in its own session)."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{proc.args[:6]}... did not finish within {timeout} s (a rank waiting for another?)")


def _random_pairs(n: int, seed: int, max_len: int = 12) -> PairData:
    """``n`` random pairs whose ids fit the tiny models' vocabularies (23 source / 29 target)."""
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, SRC_VOCAB_SIZE, int(k)).tolist() for k in rng.integers(1, max_len, n)]
    tgt = [rng.integers(4, TGT_VOCAB_SIZE, int(k)).tolist() for k in rng.integers(1, max_len, n)]
    return PairData(datasets.Dataset.from_dict({"src": ["x"] * n, "tgt": ["y"] * n, "src_ids": src, "tgt_ids": tgt}))


# --------------------------------------------------------------------------- one step: k ranks == k batches

WORKER = '''
"""One rank: for each scenario, rebuild the model from the same weights, wrap the objective in DDP
and make the given updates with nmt.training.trainer.train_update on this rank's batches."""
import sys

import torch
from omegaconf import OmegaConf
from torch.nn.parallel import DistributedDataParallel

from nmt.training import distributed
from nmt.model import build_model
from nmt.training.trainer import Objective, train_update

spec = torch.load(sys.argv[1], weights_only=False)
torch.set_num_threads(1)
job = distributed.setup("cpu", "auto")
tcfg = OmegaConf.create(spec["train"])
out = {"backend": torch.distributed.get_backend(), "rank": job.rank, "world_size": job.world_size, "params": []}
for updates in spec["scenarios"]:
    model = build_model(OmegaConf.create(spec["model"]), spec["src_vocab"], spec["tgt_vocab"])
    model.load_state_dict(spec["init"])
    net = DistributedDataParallel(Objective(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=spec["lr"])
    for per_rank in updates:
        train_update(net, optimizer, per_rank[job.rank], tcfg, job)
    out["params"].append(model.state_dict())
torch.save(out, f"{sys.argv[2]}.rank{job.rank}")
distributed.teardown()
'''


def _run_workers(spec: dict, tmp_path: Path) -> list[dict]:
    """Run :data:`WORKER` as ``WORLD_SIZE`` gloo processes (env:// rendezvous on 127.0.0.1)."""
    (tmp_path / "worker.py").write_text(WORKER)
    torch.save(spec, tmp_path / "spec.pt")
    port = free_port()
    procs, logs = [], []
    for rank in range(WORLD_SIZE):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD_SIZE), "OMP_NUM_THREADS": "1"}  # fmt: skip
        logs.append(tmp_path / f"rank{rank}.log")
        with logs[-1].open("w") as log_file:
            procs.append(subprocess.Popen(
                [sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "spec.pt"), str(tmp_path / "out")],
                cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
    codes = [_wait(proc, TIMEOUT_S) for proc in procs]
    assert codes == [0] * WORLD_SIZE, "\n".join(log.read_text()[-3000:] for log in logs)
    return [torch.load(f"{tmp_path / 'out'}.rank{rank}", weights_only=False) for rank in range(WORLD_SIZE)]


def _single_process(model_cfg, init: dict, updates: list[list], tcfg, lr: float) -> dict:
    """The same updates in this process (world size 1), each with the given list of batches."""
    model = build_model(model_cfg, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE)
    model.load_state_dict(init)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for batches in updates:
        train_update(Objective(model), optimizer, batches, tcfg, Dist(0, 1, CPU))
    return model.state_dict()


def _assert_same_params(actual: dict, expected: dict, what: str) -> None:
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        label = f"{what}: {name}"
        torch.testing.assert_close(actual[name], tensor, rtol=1e-4, atol=2e-6, msg=lambda m, label=label: f"{label}: {m}")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_ranks_with_one_batch_each_equal_one_process_with_all_batches(compose_cfg, tmp_path: Path, arch: str) -> None:
    """k = 3 SGD updates; the data order is the training loop's: ``token_batches`` dealt by ``shard``.

    Clipping is off: it would hide a wrong normalisation of the loss (any scale clips to the same
    step). Dropout is 0 so that both sides compute the same function.
    """
    if arch == "transformer":
        from test_transformer import model_cfg as transformer_cfg

        model_cfg = transformer_cfg("transformer", ("model.dropout=0.0",))
    else:
        model_cfg = compose_model_cfg("bahdanau", "bahdanau", extra=("model.dropout=0.0",))
    tcfg = compose_cfg("train.clip_norm=0", "train.label_smoothing=0.1").train
    data = _random_pairs(160, seed=3)
    batches = data.token_batches(60, shuffle=True, seed=7, epoch=0)
    mine = [[data.collate(ix) for ix in shard(batches, rank, WORLD_SIZE)] for rank in range(WORLD_SIZE)]
    indices = [shard(batches, rank, WORLD_SIZE) for rank in range(WORLD_SIZE)]
    assert len(mine[0]) == len(mine[1]) >= 6

    # updates[i][rank] = the batches rank uses for update i: one each, then two each (accumulation)
    one_each = [[mine[rank][i : i + 1] for rank in range(WORLD_SIZE)] for i in range(3)]
    two_each = [[mine[rank][2 * i : 2 * i + 2] for rank in range(WORLD_SIZE)] for i in range(3)]
    torch.manual_seed(0)
    init = build_model(model_cfg, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE).state_dict()
    spec = {
        "model": OmegaConf.to_container(model_cfg, resolve=True), "src_vocab": SRC_VOCAB_SIZE,
        "tgt_vocab": TGT_VOCAB_SIZE, "init": init, "train": OmegaConf.to_container(tcfg, resolve=True),
        "lr": 1.0, "scenarios": [one_each, two_each],
    }  # fmt: skip
    outputs = _run_workers(spec, tmp_path)
    assert [o["rank"] for o in outputs] == [0, 1] and {o["world_size"] for o in outputs} == {2}
    assert {o["backend"] for o in outputs} == {"gloo"}, "backend=auto picks gloo on the CPU"

    for scenario, updates in enumerate((one_each, two_each)):
        ddp = outputs[0]["params"][scenario]
        _assert_same_params(outputs[1]["params"][scenario], ddp, f"scenario {scenario}: rank 1 vs rank 0")
        accumulated = [[b for per_rank in update for b in per_rank] for update in updates]
        _assert_same_params(ddp, _single_process(model_cfg, init, accumulated, tcfg, 1.0),
                            f"scenario {scenario}: 2 ranks vs 1 process accumulating")  # fmt: skip
        # the check can fail: the step really depends on the other rank's batches, and it moved the weights
        rank0_only = _single_process(model_cfg, init, [update[0] for update in updates], tcfg, 1.0)
        assert any(not torch.allclose(ddp[k], rank0_only[k], rtol=1e-3, atol=1e-4) for k in ddp)
        assert max(float((ddp[k] - init[k]).abs().max()) for k in ddp) > 1e-2

    # one process with one batch holding the pairs of both ranks' batches
    concatenated = [[data.collate(np.concatenate([indices[rank][i] for rank in range(WORLD_SIZE)]))] for i in range(3)]
    _assert_same_params(outputs[0]["params"][0], _single_process(model_cfg, init, concatenated, tcfg, 1.0),
                        "2 ranks vs 1 process with the concatenated batch")  # fmt: skip


# --------------------------------------------------------------------------- each pair once per epoch


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("max_tokens", [40, 97, 300])
def test_each_pair_goes_to_one_rank_once_per_epoch(world_size: int, max_tokens: int) -> None:
    """The loop's data path (``token_batches`` -> ``shard`` -> groups of ``accum_steps``), per epoch."""
    data = _random_pairs(157, seed=world_size)
    for epoch in range(3):
        batches = data.token_batches(max_tokens, shuffle=True, seed=1234, epoch=epoch)
        shards = [shard(batches, rank, world_size) for rank in range(world_size)]
        seen = [int(i) for mine in shards for b in mine for i in b]
        assert sorted(seen) == list(range(len(data))), "every pair exactly once across the ranks"
        for mine in shards:
            assert all(len(b) > 0 for b in mine)
            for b in mine:  # a piece of a batch is no bigger than the batch (or a single long pair)
                assert len(b) == 1 or len(b) * int(np.maximum(data.src_lens, data.tgt_lens)[b].max()) <= max_tokens
        for accum_steps in (1, 2, 3):
            updates = {len(range(0, len(mine), accum_steps)) for mine in shards}
            assert len(updates) == 1, "every rank makes the same number of updates (or DDP would hang)"


def test_shard_keeps_a_leftover_batch_smaller_than_the_world() -> None:
    """Regression: a last batch with fewer pairs than ranks (e.g. one over-long pair) was dropped."""
    batches = [np.arange(0, 4), np.arange(4, 8), np.array([8])]
    shards = [shard(batches, rank, 2) for rank in range(2)]
    assert len(shards[0]) == len(shards[1])
    assert sorted(int(i) for mine in shards for b in mine for i in b) == list(range(9))
    with pytest.raises(ValueError, match="cannot be shared"):
        shard([np.array([0])], 0, 2)


# --------------------------------------------------------------------------- torchrun end to end

TOY_VOCAB = ["data.vocab.joint=false", "data.vocab.size=40"]


@dataclass
class TorchrunRun:
    """A finished ``torchrun --nproc_per_node=2 -m nmt.train`` run and what it was given."""

    folder: Path
    corpus: ToyCorpus
    overrides: list[str]  # the shared ones (data, model, logging), without run dir / steps / resume
    output: str


def _torchrun(overrides: list[str], run_dir: Path, output_file: Path) -> str:
    port = free_port()
    command = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD_SIZE}", "--nnodes=1",
        "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "nmt.train", *overrides, f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    with output_file.open("w") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    code = _wait(proc, TIMEOUT_S)
    output = output_file.read_text()
    assert code == 0, output[-5000:]
    return output


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> TorchrunRun:
    """4 updates of a tiny model on 2 processes, validating every 2 (both ranks build the data cache)."""
    root = tmp_path_factory.mktemp("ddp")
    corpus = make_toy_corpus(root / "corpus", train_size=200)
    shared = ["experiment=smoke", *corpus.overrides(), *TOY_VOCAB, "data.max_tokens=200",
              f"data.cache_dir={root / 'cache'}", "train.threads=1", "train.log_every=1", "train.num_heatmaps=0",
              "train.keep_checkpoints=1"]  # fmt: skip
    output = _torchrun([*shared, "train.max_steps=4", "train.eval_every=2"], root / "run", root / "run.out")
    return TorchrunRun(root / "run", corpus, shared, output)


def _compose(config: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config, overrides=overrides)


def _events(folder: Path) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return events


@pytest.mark.slow
def test_torchrun_only_rank_0_writes(ddp_run: TorchrunRun) -> None:
    run = ddp_run.folder
    results = json.loads((run / "results.json").read_text())
    assert results["steps"] == 4.0 and "test_bleu" in results

    log = (run / "train.log").read_text()
    assert log.count("on cpu x 2 process(es)") == 1, "the log names the world size, once"
    assert log.count("effective batch 200 x 2 x 1 tokens") == 1
    validations = [line.split("validation at update ")[1].split(":")[0] for line in log.splitlines()
                   if "validation at update" in line]  # fmt: skip
    assert validations == ["2", "4"], "validation runs once, on rank 0"
    assert sum("training stopped after 4 updates" in line for line in log.splitlines()) == 1
    assert "WARNING" not in log and "ERROR" not in log

    # TensorBoard: every event file comes from one process (rank 0), each update logged once
    event_files = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert event_files and len({f.name.rsplit(".", 2)[-2] for f in event_files}) == 1, event_files
    events = _events(run / "tensorboard")
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("valid/bleu")] == [2, 4]

    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.pt", "last.pt", "step00000004.pt"]
    assert sorted(p.name for p in (run / "hypotheses").iterdir()) == ["test.txt", "valid-step2.txt", "valid-step4.txt"]
    state = load_checkpoint(checkpoints / "last.pt")["train_state"]
    assert state["progress"]["step"] == 4 and state["progress"]["world_size"] == 2
    assert len(state["torch_rng"]) == 2, "every rank's random state is saved (by rank 0)"
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")], "no half-written files left behind"


@pytest.mark.slow
def test_ddp_checkpoint_translates_in_one_process(ddp_run: TorchrunRun, tmp_path: Path, in_process) -> None:
    best = ddp_run.folder / "checkpoints" / "best.pt"
    model, src_vocab, tgt_vocab, config = model_from_checkpoint(load_checkpoint(best))
    assert not any(k.startswith(("module.", "model.")) for k in load_checkpoint(best)["model"]), "the plain model"
    assert config.data.max_tokens == 200 and len(tgt_vocab) == model.decoder.output.out_features

    lines = [*ddp_run.corpus.src_lines[:5], "", ddp_run.corpus.src_lines[5]]
    source = tmp_path / "input.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    output = tmp_path / "output.txt"
    translate(_compose("translate", [f"ckpt={best}", f"input={source}", f"output={output}", "beam_size=2",
                                     "threads=1", "device=cpu"]))  # fmt: skip
    assert len(output.read_text(encoding="utf-8").split("\n")) == len(lines) + 1, "one line per input line"


@pytest.mark.slow
def test_ddp_run_resumes_in_one_process_then_under_torchrun(ddp_run: TorchrunRun, tmp_path: Path, in_process) -> None:
    """2 processes -> 1 (in this process) -> 2 (``torchrun``), which stops early on every rank."""
    single = tmp_path / "single"
    ddp_last = ddp_run.folder / "checkpoints" / "last.pt"
    cfg = _compose("train", [*ddp_run.overrides, "train.max_steps=6", "train.eval_every=2", f"train.resume={ddp_last}"])
    results = train(cfg, single)
    assert results["steps"] == 6.0
    log = (single / "train.log").read_text()
    assert "resuming with 1 processes from a run with 2" in log
    assert f"resumed from {ddp_last} at update 4" in log
    assert [e.step for e in _events(single / "tensorboard").Scalars("train/loss")] == [5, 6], "continues at update 5"
    assert load_checkpoint(single / "checkpoints" / "last.pt")["train_state"]["progress"]["world_size"] == 1

    # and back to two processes. Validation output is cut to one subword, so BLEU is 0 and cannot beat
    # the best so far: with patience one more than the validations already without a better score,
    # the first validation stops training, and every rank must stop
    single_last = single / "checkpoints" / "last.pt"
    patience = load_checkpoint(single_last)["train_state"]["progress"]["stale_validations"] + 1
    again = tmp_path / "again"
    _torchrun([*ddp_run.overrides, f"train.resume={single_last}", "train.eval_every=1", f"train.patience={patience}",
               "train.search.max_len_a=0", "train.search.max_len_b=1"], again, tmp_path / "again.out")  # fmt: skip
    log = (again / "train.log").read_text()
    assert f"resumed from {single_last} at update 6" in log
    assert log.count("resuming with 2 processes from a run with 1") == 1, "rank 1 does not write the log"
    assert re.search(r"training stopped after 7 updates.*: early stopping", log), log[-2000:]
    results = json.loads((again / "results.json").read_text())
    assert results["steps"] == 7.0
    assert load_checkpoint(again / "checkpoints" / "last.pt")["train_state"]["progress"]["world_size"] == 2

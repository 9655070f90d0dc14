"""Training-speed benchmark: time a fixed number of real training updates of a config.

    python scripts/benchmark.py --data-dir ../shared/data/multi30k            # the reference model
    python scripts/benchmark.py --data-dir ... --experiment multi30k_de_en_transformer   # the Transformer recipe
    python scripts/benchmark.py --data-dir ... --overrides model/attention=none train.threads=1
    torchrun --nproc_per_node=2 scripts/benchmark.py --data-dir ... --threads 1   # DDP, 2 x 1 thread
    python scripts/benchmark.py --data-dir ... --compile     # the decoder's step through torch.compile
    python scripts/benchmark.py --data-dir ... --device cuda --overrides train.amp=bf16   # one GPU, bf16
    torchrun --nproc_per_node=8 scripts/benchmark.py --data-dir ... --device cuda     # DDP over nccl, 8 GPUs

Prints target/source tokens per second, sentences per second, seconds per update, peak resident
memory (on a GPU: the peak allocated on rank 0's device), the model's analytic FLOPs per target
token, the GFLOP/s that implies, and the machine's matmul GFLOP/s measured in the same run (on a GPU
in fp32 and bf16); then the same figures as one JSON line. Each of ``--repeats`` rounds times
``--updates`` updates after ``--warmup`` untimed ones, right after one second of 2048 x 2048 matmuls
(8192 on a GPU); ``ratio_to_matmul`` is the median over rounds of each round's achieved GFLOP/s
over the matmul rate just before it, so that a machine whose speed drifts during the run moves
both sides of the ratio alike. Every rate is a median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

import hydra
import numpy as np
import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from nmt.data.batches import PairData, prepare_data
from nmt.model import Seq2Seq, build_model
from nmt.runtime import set_threads
from nmt.training.distributed import Dist
from nmt.training.trainer import Objective, train_update
from nmt.transformer import TransformerDecoder, TransformerEncoder

try:  # registers the config schemas (train/schema, search/schema) that configs/*.yaml start from
    import nmt.configs  # noqa: F401
except ModuleNotFoundError:  # a commit from before the schemas (scripts/compare_speed.py)
    pass

REPO = Path(__file__).resolve().parents[1]


def matmul_gflops(size: int, rows: int | None = None, seconds: float = 1.0, device: torch.device | None = None,
                  dtype: torch.dtype = torch.float32) -> float:  # fmt: skip
    """GFLOP/s of (rows x size) @ (size x size) matmuls in ``dtype`` on ``device``, run for about ``seconds``."""
    rows, device = rows or size, device or torch.device("cpu")
    a = torch.randn(rows, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.mm(a, b)
    sync()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        count += 1
        if device.type == "cuda" and count % 10:
            continue
        sync()
    sync()
    return 2 * rows * size * size * count / (time.perf_counter() - start) / 1e9


def analytic_macs(model: Seq2Seq, src_len: float, tgt_len: float) -> tuple[float, float]:
    """Multiply-accumulates of one forward pass per target token and per source token.

    Counts every matmul of the model (embedding lookups and elementwise ops are free). Attention
    costs grow with the lengths: ``src_len`` keys for the attention over the source, and ``tgt_len``
    for a Transformer decoder's self-attention (computed over the whole target, then masked).
    """
    per_src = _encoder_macs(model.encoder, src_len)
    per_tgt, dec_per_src = _decoder_macs(model.decoder, model.encoder.output_dim, src_len, tgt_len)
    return per_tgt, per_src + dec_per_src


def _linear_weights(module: torch.nn.Module, skip=lambda name: False) -> int:
    """Weights of the ``Linear`` layers in ``module`` whose names ``skip`` does not pick: one MAC each a row."""
    return sum(m.weight.numel() for name, m in module.named_modules() if isinstance(m, torch.nn.Linear) and not skip(name))


def _encoder_macs(enc: torch.nn.Module, src_len: float) -> float:
    """MACs per source token of an RNN or Transformer encoder."""
    if isinstance(enc, TransformerEncoder):
        # every layer: its projections, then Q K^T and the weighted sum of V over S keys (d_model each)
        return _linear_weights(enc) + len(enc.layers) * 2 * enc.output_dim * src_len
    # W_ih and W_hh of each layer and direction: one MAC per weight
    return sum(p.numel() for name, p in enc.rnn.named_parameters() if name.startswith("weight"))


def _decoder_macs(dec: torch.nn.Module, memory_dim: int, src_len: float, tgt_len: float) -> tuple[float, float]:
    """MACs per target token, and per source token (the keys projected once per sentence), of a decoder."""
    if isinstance(dec, TransformerDecoder):
        per_src = sum(layer.cross_attention.w_kv.weight.numel() for layer in dec.layers)
        # every layer: self-attention over T positions and cross-attention over S, d_model a key
        per_tgt = _linear_weights(dec, lambda name: name.endswith("cross_attention.w_kv"))
        per_tgt += len(dec.layers) * 2 * dec.d_model * (tgt_len + src_len)
        return per_tgt, per_src
    attn = dec.attention
    key_proj = getattr(attn, "key_proj", None)
    per_src = key_proj.weight.numel() if isinstance(key_proj, torch.nn.Linear) else 0.0
    per_tgt = _linear_weights(dec, lambda name: name in ("attention.key_proj", "bridge"))
    if attn.has_alignment:
        score_width = attn.energy.in_features if hasattr(attn, "energy") else memory_dim
        per_tgt += src_len * (score_width + memory_dim)  # scores + weighted sum of the states
    return per_tgt, per_src


def update_batches(train: PairData, cfg: DictConfig, count: int, rank: int = 0, world: int = 1) -> list[np.ndarray]:
    """The pairs of the ``count`` updates this benchmark runs on ``rank`` of ``world``: epoch 0's
    shuffled ``data.max_tokens`` batches in order (dealt round-robin to the ranks), from the start
    again when there are fewer. Also used by ``scripts/bench_joey_train.py``, which gives Joey NMT
    the same batches."""
    batches = train.token_batches(cfg.data.max_tokens, shuffle=True, seed=cfg.train.seed, epoch=0)
    return [batches[(i * world + rank) % len(batches)] for i in range(count)]


def load_setup(experiment: str, data_dir: str, overrides: list[str]):
    """The composed training config of ``experiment`` with ``overrides``, its prepared data and the
    model it builds (seeded with ``train.seed``, on the CPU). Also used by ``scripts/profile_update.py``."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", f"++data.dir={data_dir}", *overrides])
    torch.manual_seed(cfg.train.seed)
    data = prepare_data(cfg.data)
    return cfg, data, build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="multi30k_de_en")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides, e.g. model/attention=none")
    parser.add_argument("--updates", type=int, default=20, help="timed updates per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process; 0 = one per core")
    parser.add_argument("--compile", action="store_true", help="torch.compile the decoder's step (the recurrence "
                        "and attention of one target position, dynamic shapes) before timing")  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: one GPU a process "
                        "(under torchrun, cuda:LOCAL_RANK), nccl between them")  # fmt: skip
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    set_threads(args.threads)
    cfg, data, model = load_setup(args.experiment, args.data_dir, args.overrides)
    model = model.to(device)
    if args.compile and not hasattr(model.decoder, "_recur"):
        parser.error(f"--compile compiles a recurrent decoder's step; {type(model.decoder).__name__} has none")
    if args.compile:  # an experiment: the training loop itself runs the step eagerly
        model.decoder._recur = torch.compile(model.decoder._recur, dynamic=True)
    net = Objective(model)
    if distributed:
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    optimizer = hydra.utils.instantiate(cfg.train.optimizer)(model.parameters())
    batches = update_batches(data.train, cfg, args.warmup + args.updates * args.repeats, rank, world)
    big = 8192 if cuda else 2048  # large enough to reach the device's peak
    machine_step = matmul_gflops(512, rows=256, device=device) if rank == 0 else 0.0
    machine_bf16 = matmul_gflops(big, device=device, dtype=torch.bfloat16) if rank == 0 and cuda else None

    job = Dist(rank, world, device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def run(indices) -> tuple[int, int, int]:
        batch = data.train.collate(indices).to(device)
        stats = train_update(net, optimizer, [batch], cfg.train, job)
        return stats.tokens, int(batch.src_lens.sum()), len(indices)

    for indices in batches[: args.warmup]:
        run(indices)
    rounds, machine_rounds = [], []
    for r in range(args.repeats):
        chunk = batches[args.warmup + r * args.updates : args.warmup + (r + 1) * args.updates]
        # the machine's rate right before each round, so that each round's ratio compares like with like
        # on a machine whose speed drifts (another tenant, the clock)
        machine_rounds.append(matmul_gflops(big, device=device) if rank == 0 else 0.0)
        if distributed:
            dist.barrier()
        sync()
        start = time.perf_counter()
        counts = torch.tensor([run(indices) for indices in chunk]).sum(0)  # tgt, src, sentences
        sync()
        if distributed:
            dist.barrier()
            counts = counts.to(device)
            dist.all_reduce(counts)
            counts = counts.cpu()
        seconds = time.perf_counter() - start
        rounds.append((seconds, *counts.tolist()))
    # each rate is the median over rounds of that round's own ratio (not a ratio of two medians,
    # which could come from different rounds)
    rate = lambda i: statistics.median(r[i] / r[0] for r in rounds)  # noqa: E731
    seconds = statistics.median(r[0] for r in rounds)
    tgt, src, sentences = (sum(r[i] for r in rounds) for i in (1, 2, 3))
    per_tgt, per_src = analytic_macs(model, src / sentences, tgt / sentences)
    flops_per_tgt = 3 * 2 * (per_tgt + per_src * src / tgt)  # forward + backward ~ 3 forward passes
    machine = statistics.median(machine_rounds)
    ratios = [flops_per_tgt * r[1] / r[0] / 1e9 / m / world for r, m in zip(rounds, machine_rounds) if m]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB -> GiB
    peak_device = torch.cuda.max_memory_allocated(device) / 1024**3 if cuda else None
    result = {
        "config": [f"experiment={args.experiment}", *args.overrides],
        "compiled_step": args.compile,
        "device": str(device.type) if not cuda else torch.cuda.get_device_name(device),
        "processes": world,
        "threads_per_process": torch.get_num_threads(),
        "updates": args.updates,
        "repeats": args.repeats,
        "tgt_tokens_per_s": rate(1),
        "src_tokens_per_s": rate(2),
        "sentences_per_s": rate(3),
        "s_per_update": seconds / args.updates,
        "peak_rss_gib_rank0": peak,
        "peak_gpu_memory_gib_rank0": peak_device,
        "mflop_per_tgt_token": flops_per_tgt / 1e6,
        "achieved_gflops": flops_per_tgt * rate(1) / 1e9,
        "machine_matmul_gflops_2048": machine,
        "machine_matmul_gflops_256x512x512": machine_step,
        "machine_matmul_gflops_bf16": machine_bf16,
        "ratio_to_matmul": statistics.median(ratios) if ratios else None,
        "all_rounds_tgt_tokens_per_s": [r[1] / r[0] for r in rounds],
        "all_rounds_tgt_tokens": [r[1] for r in rounds],
        "all_rounds_matmul_gflops_2048": machine_rounds,
        "all_rounds_ratio_to_matmul": ratios,
    }
    if rank == 0:
        for key, value in result.items():
            print(f"{key:34s} {value:.4g}" if isinstance(value, float) else f"{key:34s} {value}")
        print(json.dumps(result))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Training-speed benchmark: time a fixed number of real training updates of a config.

    python scripts/benchmark.py --data-dir ../shared/data/multi30k            # the reference model
    python scripts/benchmark.py --data-dir ... --overrides model/attention=none train.threads=1
    torchrun --nproc_per_node=2 scripts/benchmark.py --data-dir ... --threads 1   # DDP, 2 x 1 thread

Prints target/source tokens per second, sentences per second, seconds per update, peak resident
memory, the model's analytic FLOPs per target token, the GFLOP/s that implies, and the machine's
matmul GFLOP/s measured in the same run (so the ratio means something on a busy machine); then
the same figures as one JSON line. Each of ``--repeats`` rounds times ``--updates`` updates after
``--warmup`` untimed ones; medians are reported.
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
import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir

from nmt.data.batches import prepare_data
from nmt.model import Seq2Seq, build_model
from nmt.runtime import set_threads
from nmt.training.distributed import Dist
from nmt.training.trainer import Objective, train_update

REPO = Path(__file__).resolve().parents[1]


def matmul_gflops(size: int, rows: int | None = None, seconds: float = 1.0) -> float:
    """fp32 GFLOP/s of (rows x size) @ (size x size) matmuls, run for about ``seconds``."""
    rows = rows or size
    a, b = torch.randn(rows, size), torch.randn(size, size)
    torch.mm(a, b)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        count += 1
    return 2 * rows * size * size * count / (time.perf_counter() - start) / 1e9


def analytic_macs(model: Seq2Seq, src_len: float) -> tuple[float, float]:
    """Multiply-accumulates of one forward pass per target token and per source token.

    Counts every matmul of the model (embedding lookups and elementwise ops are free); attention
    costs grow with the source length ``src_len``.
    """
    enc, dec = model.encoder, model.decoder
    per_src = 0.0
    for name, p in enc.rnn.named_parameters():
        if name.startswith("weight"):
            per_src += p.numel()  # W_ih and W_hh of each layer and direction: one MAC per weight
    attn = dec.attention
    key_proj = getattr(attn, "key_proj", None)
    if isinstance(key_proj, torch.nn.Linear):
        per_src += key_proj.weight.numel()
    per_tgt = 0.0
    for name, module in dec.named_modules():
        if isinstance(module, torch.nn.Linear) and name not in ("attention.key_proj", "bridge"):
            per_tgt += module.weight.numel()
    memory_dim = enc.output_dim
    if attn.has_alignment:
        score_width = attn.energy.in_features if hasattr(attn, "energy") else memory_dim
        per_tgt += src_len * (score_width + memory_dim)  # scores + weighted sum of the states
    return per_tgt, per_src


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="multi30k_de_en")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides, e.g. model/attention=none")
    parser.add_argument("--updates", type=int, default=20, help="timed updates per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process; 0 = one per core")
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    set_threads(args.threads)
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={args.experiment}", f"data.dir={args.data_dir}", *args.overrides])
    torch.manual_seed(cfg.train.seed)
    data = prepare_data(cfg.data)
    model: torch.nn.Module = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    net = Objective(model)
    net = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    optimizer = hydra.utils.instantiate(cfg.train.optimizer)(model.parameters())
    batches = data.train.token_batches(cfg.data.max_tokens, shuffle=True, seed=cfg.train.seed, epoch=0)
    need = args.warmup + args.updates * args.repeats
    batches = [batches[(i * world + rank) % len(batches)] for i in range(need)]
    machine = matmul_gflops(2048) if rank == 0 else 0.0
    machine_step = matmul_gflops(512, rows=256) if rank == 0 else 0.0

    job = Dist(rank, world, torch.device("cpu"))

    def run(indices) -> tuple[int, int, int]:
        batch = data.train.collate(indices)
        stats = train_update(net, optimizer, [batch], cfg.train, job)
        return stats.tokens, int(batch.src_lens.sum()), len(indices)

    for indices in batches[: args.warmup]:
        run(indices)
    rounds = []
    for r in range(args.repeats):
        chunk = batches[args.warmup + r * args.updates : args.warmup + (r + 1) * args.updates]
        if distributed:
            dist.barrier()
        start = time.perf_counter()
        counts = torch.tensor([run(indices) for indices in chunk]).sum(0)  # tgt, src, sentences
        if distributed:
            dist.barrier()
            dist.all_reduce(counts)
        seconds = time.perf_counter() - start
        rounds.append((seconds, *counts.tolist()))
    # each rate is the median over rounds of that round's own ratio (not a ratio of two medians,
    # which could come from different rounds)
    rate = lambda i: statistics.median(r[i] / r[0] for r in rounds)  # noqa: E731
    seconds = statistics.median(r[0] for r in rounds)
    tgt, src, sentences = (sum(r[i] for r in rounds) for i in (1, 2, 3))
    mean_src_len = src / sentences
    per_tgt, per_src = analytic_macs(model, mean_src_len)
    flops_per_tgt = 3 * 2 * (per_tgt + per_src * src / tgt)  # forward + backward ~ 3 forward passes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB -> GiB
    result = {
        "config": [f"experiment={args.experiment}", *args.overrides],
        "processes": world,
        "threads_per_process": torch.get_num_threads(),
        "updates": args.updates,
        "repeats": args.repeats,
        "tgt_tokens_per_s": rate(1),
        "src_tokens_per_s": rate(2),
        "sentences_per_s": rate(3),
        "s_per_update": seconds / args.updates,
        "peak_rss_gib_rank0": peak,
        "mflop_per_tgt_token": flops_per_tgt / 1e6,
        "achieved_gflops": flops_per_tgt * rate(1) / 1e9,
        "machine_matmul_gflops_2048": machine,
        "machine_matmul_gflops_256x512x512": machine_step,
        "all_rounds_tgt_tokens_per_s": [r[1] / r[0] for r in rounds],
    }
    if rank == 0:
        for key, value in result.items():
            print(f"{key:34s} {value:.4g}" if isinstance(value, float) else f"{key:34s} {value}")
        print(json.dumps(result))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

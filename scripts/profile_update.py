"""Where one training update's time goes: ``torch.profiler`` over real updates of a config.

    python scripts/profile_update.py --data-dir ../shared/data/multi30k                 # the reference model
    python scripts/profile_update.py --data-dir ... --experiment multi30k_de_en_best    # the tuned recipe
    python scripts/profile_update.py --data-dir ... --rows 40 --trace /tmp/update.json  # + a Chrome trace

Runs ``--warmup`` untimed updates, then profiles ``--updates`` more. Prints, per update:

* the wall time, and how it splits between the forward pass, the backward pass and the optimizer
  (gradient clipping and Adam), the phases that :func:`nmt.training.trainer.train_update` marks
  with ``torch.profiler.record_function``;
* the time by kind of operator (matrix products, the encoder's GRU kernel, pointwise arithmetic,
  softmax and loss, copies and reshapes, the optimizer's kernels) as a share of the update;
* the ``--rows`` operators with the most self CPU time.

The same figures as one JSON line last. Self time is an operator's own time, without the operators
it calls; "autograd and Python" is the wall time no operator accounts for: the cost of the autograd
engine, of dispatching each operator and of the Python between them. Profiling adds overhead to
every operator, so the update is slower here than in ``scripts/benchmark.py``; the shares are what
this script is for.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import hydra
import torch
from torch.profiler import ProfilerActivity, profile

from nmt.runtime import set_threads
from nmt.training.distributed import Dist
from nmt.training.trainer import Objective, train_update

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # however this script is run (runpy, an import)
from benchmark import load_setup  # noqa: E402

#: operator kinds by aten name (without ``aten::`` and a trailing ``_``, so ``add_`` is ``add``); a name
#: ending in ``_backward`` belongs where its operator does, unless listed itself
KINDS: dict[str, set[str]] = {
    "encoder GRU kernel": {"gru", "_thnn_fused_gru_cell", "gru_cell", "mkldnn_rnn_layer"},
    "optimizer kernels": {"_fused_adam", "_foreach_add", "_foreach_mul", "_foreach_norm", "_foreach_addcmul",
                          "_foreach_addcdiv", "_foreach_sqrt", "_foreach_div", "_foreach_lerp", "linalg_vector_norm",
                          "_amp_foreach_non_finite_check_and_unscale", "clamp", "stack_norm"},  # fmt: skip
    "matrix products": {"addmm", "mm", "bmm", "matmul", "linear", "mv", "addmv", "baddbmm", "dot",
                        "embedding_dense_backward", "embedding_backward"},  # fmt: skip
    "softmax and loss": {"_softmax", "softmax", "_log_softmax", "log_softmax", "_softmax_backward_data",
                         "_log_softmax_backward_data", "nll_loss", "nll_loss_forward", "nll_loss_backward",
                         "cross_entropy_loss", "logsumexp"},  # fmt: skip
    "copies and reshapes": {"copy", "cat", "stack", "index", "index_select", "embedding", "fill", "zero", "zeros",
                            "zeros_like", "empty", "empty_like", "empty_strided", "clone", "contiguous",
                            "masked_fill", "where", "_pack_padded_sequence", "_pad_packed_sequence",
                            "pad_sequence", "repeat", "repeat_interleave", "sort", "narrow", "select", "slice",
                            "split", "split_with_sizes", "chunk", "unbind", "view", "reshape", "_reshape_alias",
                            "t", "transpose", "expand", "squeeze", "unsqueeze", "as_strided", "permute", "flatten",
                            "unflatten", "_to_copy", "to", "detach", "resize", "set", "new_zeros", "new_empty",
                            "new_full", "full", "ones", "ones_like", "scatter_add", "gather", "index_put",
                            "_index_put_impl", "masked_scatter", "pad", "constant_pad_nd", "alias", "lift_fresh",
                            "_unsafe_view", "unfold", "select_backward", "slice_backward"},  # fmt: skip
}
POINTWISE = "pointwise arithmetic"  # every other aten operator: add, mul, tanh, sigmoid, dropout's bernoulli, ...
PHASES = ("forward", "backward", "optimizer")


def kind_of(name: str) -> str:
    """The :data:`KINDS` entry of an operator name (``aten::addmm_``), else :data:`POINTWISE`."""
    base = name.removeprefix("aten::").rstrip("_") or name
    for candidate in (base, base.removesuffix("_backward")):
        for kind, names in KINDS.items():
            if candidate in names:
                return kind
    return POINTWISE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="multi30k_de_en")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--overrides", nargs="*", default=[], help="Hydra overrides, e.g. model/attention=none")
    parser.add_argument("--updates", type=int, default=5, help="profiled updates")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = one per core")
    parser.add_argument("--rows", type=int, default=25, help="operators listed")
    parser.add_argument("--trace", type=Path, help="also write a Chrome trace (chrome://tracing, Perfetto)")
    args = parser.parse_args()

    set_threads(args.threads)
    cfg, data, model = load_setup(args.experiment, args.data_dir, args.overrides)
    net = Objective(model)
    optimizer = hydra.utils.instantiate(cfg.train.optimizer)(model.parameters())
    order = data.train.token_batches(cfg.data.max_tokens, shuffle=True, seed=cfg.train.seed, epoch=0)
    batches = [data.train.collate(order[i % len(order)]) for i in range(args.warmup + args.updates)]
    job = Dist(0, 1, torch.device("cpu"))
    step = lambda batch: train_update(net, optimizer, [batch], cfg.train, job)  # noqa: E731  (the trainer's update)

    for batch in batches[: args.warmup]:
        step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for batch in batches[args.warmup :]:
            step(batch)
        wall = (time.perf_counter() - start) / args.updates * 1e3  # ms per update
    if args.trace:
        prof.export_chrome_trace(str(args.trace))

    events = prof.key_averages()
    phases = {e.key: e.cpu_time_total / args.updates / 1e3 for e in events if e.key in PHASES}  # ms per update
    by_kind: dict[str, float] = defaultdict(float)
    ops = []
    for e in events:
        if e.key in PHASES or not e.key.startswith("aten::"):
            continue  # the labels, and autograd's own nodes (their aten work is counted as aten)
        ms = e.self_cpu_time_total / args.updates / 1e3
        by_kind[kind_of(e.key)] += ms
        ops.append((ms, e.count // args.updates, e.key))
    profiled = sum(phases.values())  # ms per update, as the profiler saw it
    by_kind["autograd and Python"] = max(profiled - sum(by_kind.values()), 0.0)
    tokens = sum(b.num_tgt_tokens for b in batches[args.warmup :]) / args.updates

    print(f"config: experiment={args.experiment} {' '.join(args.overrides)}")
    print(f"threads {torch.get_num_threads()}, {args.updates} updates of {tokens:.0f} target tokens on average; "
          f"{wall:.0f} ms per update under the profiler ({profiled:.0f} ms in the three phases)")  # fmt: skip
    print("\nphase                     ms/update   share")
    for name in PHASES:
        print(f"{name:24s} {phases.get(name, 0.0):10.1f} {phases.get(name, 0.0) / profiled:7.1%}")
    print("\nkind of work              ms/update   share")
    for name, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{name:24s} {ms:10.1f} {ms / profiled:7.1%}")
    top = sorted(ops, reverse=True)[: args.rows]
    print(f"\n{'operator':32s} {'calls/update':>12s} {'self ms/update':>15s}   share")
    for ms, calls, name in top:
        print(f"{name:32s} {calls:12d} {ms:15.1f} {ms / profiled:7.1%}")
    print(json.dumps({
        "config": [f"experiment={args.experiment}", *args.overrides],
        "threads": torch.get_num_threads(),
        "ms_per_update_profiled": wall,
        "tgt_tokens_per_update": tokens,
        "phases_ms": phases,
        "kinds_ms": dict(by_kind),
        "top_ops": [{"op": name, "calls": calls, "self_ms": ms} for ms, calls, name in top],
    }))  # fmt: skip


if __name__ == "__main__":
    main()

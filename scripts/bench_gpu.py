"""The GPU check and benchmark, in one command, for a machine with CUDA devices:

    python scripts/bench_gpu.py --data-dir /path/to/multi30k --out gpu.json
    python scripts/bench_gpu.py --data-dir ... --updates 100 -- data.max_tokens=16384   # larger batches
    python scripts/bench_gpu.py --data-dir ... --experiment multi30k_de_en_transformer --skip-tests   # the Transformer

1. the CUDA tests (``pytest -o addopts="" tests/gpu``): the GPU computes what the CPU does, and a
   run trains there in fp32 and bf16;
2. ``scripts/benchmark.py --device cuda`` on one GPU: the recipe (``--experiment``, default
   ``multi30k_de_en_best``) for a fixed number of updates, in fp32 and in bf16 (``train.amp=bf16``);
3. the same through ``torchrun`` with one process per visible GPU (DDP over nccl), in bf16.

It prints a table (target tokens/s, seconds per update, peak GPU memory, achieved GFLOP/s, the
device's matmul GFLOP/s measured in the same run and the ratio of the two) and writes every figure
to ``--out`` as JSON. Arguments after ``--`` are Hydra overrides for every benchmark run. It stops
with a one-line message where no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def run_json(command: list[str]) -> dict:
    """Run a benchmark command (``scripts/benchmark.py``, which ends its output with one JSON line)
    from the repository root; that line, parsed. Also used by ``scripts/bench_cost.py``."""
    print("+", " ".join(command), file=sys.stderr, flush=True)
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(command)}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="the Multi30k folder (data.dir)")
    parser.add_argument("--experiment", default="multi30k_de_en_best")
    parser.add_argument("--updates", type=int, default=50, help="timed updates per round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-tests", action="store_true", help="benchmark only")
    parser.add_argument("--out", type=Path, help="write every figure here as JSON")
    parser.add_argument("overrides", nargs="*", help="after --: Hydra overrides for every benchmark run")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device is visible: this script checks and measures GPUs (scripts/benchmark.py "
                         "measures a CPU)")  # fmt: skip
    gpus = torch.cuda.device_count()
    names = [torch.cuda.get_device_name(i) for i in range(gpus)]
    print(f"{gpus} GPU(s): {', '.join(names)}; torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    report: dict = {"gpus": names, "torch": torch.__version__, "cuda": torch.version.cuda, "tests": None, "runs": {}}
    if not args.skip_tests:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "tests/gpu"], cwd=REPO)
        report["tests"] = "passed" if tests.returncode == 0 else f"failed (exit {tests.returncode})"
        print(f"tests/gpu: {report['tests']}", flush=True)
    bench = [str(REPO / "scripts" / "benchmark.py"), "--device", "cuda", "--experiment", args.experiment,
             "--data-dir", args.data_dir, "--updates", str(args.updates), "--repeats", str(args.repeats)]  # fmt: skip
    plans = {
        "1 GPU, fp32": [sys.executable, *bench, "--overrides", *args.overrides],
        "1 GPU, bf16": [sys.executable, *bench, "--overrides", "train.amp=bf16", *args.overrides],
        f"{gpus} GPU(s), DDP nccl, bf16": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            f"--nproc_per_node={gpus}", *bench, "--overrides", "train.amp=bf16",
                                            *args.overrides],  # fmt: skip
    }
    for name, command in plans.items():
        report["runs"][name] = run_json(command)
    print(f"\n{'run':<28} {'tgt tok/s':>10} {'s/update':>9} {'peak GiB':>9} {'GFLOP/s':>9} {'matmul':>9} {'ratio':>6}")
    for name, r in report["runs"].items():
        bf16 = "bf16" in name
        matmul = r["machine_matmul_gflops_bf16"] if bf16 else r["machine_matmul_gflops_2048"]
        ratio = r["achieved_gflops"] / (matmul * r["processes"]) if matmul else float("nan")
        memory = r["peak_gpu_memory_gib_rank0"]
        print(f"{name:<28} {r['tgt_tokens_per_s']:>10.0f} {r['s_per_update']:>9.3f} {memory:>9.2f} "
              f"{r['achieved_gflops']:>9.0f} {matmul:>9.0f} {ratio:>6.3f}")  # fmt: skip
    print("matmul: the device's GFLOP/s on 8192 x 8192 matmuls in the run's precision, measured in the same run; "
          "ratio: achieved / (matmul x processes)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

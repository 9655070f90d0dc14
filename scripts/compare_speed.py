"""Training speed of this checkout against another commit, side by side in one run.

    python scripts/compare_speed.py --base c782ac7 --data-dir /path/to/multi30k
    python scripts/compare_speed.py --base HEAD~3 --rounds 5 -- --threads 1 --overrides model/attention=none

The base commit is checked out into a temporary git worktree; then ``scripts/benchmark.py`` of the
two trees runs alternately, ``--rounds`` times each (base, new, base, new, ...), so that a change in
the machine's load hits both alike. Arguments after ``--`` go to both benchmarks. Prints every
round's target tokens/s, the median of each tree and the ratio new / base. Run it on an otherwise
idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def benchmark(tree: Path, args: list[str]) -> dict:
    """One run of ``tree``'s benchmark script with ``tree``'s ``nmt`` (first on ``PYTHONPATH``), from
    this checkout's folder, so the data caches are shared; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, str(tree / "scripts" / "benchmark.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"benchmark of {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare with (any git revision)")
    parser.add_argument("--rounds", type=int, default=3, help="benchmark runs of each tree")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("rest", nargs="*", help="after --: arguments for both benchmarks")
    args = parser.parse_args(argv)
    shared = ["--data-dir", args.data_dir, *args.rest]
    with tempfile.TemporaryDirectory(prefix="nmt-base-") as folder:
        base_tree = Path(folder) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree), args.base],
                       check=True, capture_output=True)  # fmt: skip
        try:
            speeds: dict[str, list[float]] = {"base": [], "new": []}
            for r in range(args.rounds):
                for name, tree in (("base", base_tree), ("new", REPO)):
                    result = benchmark(tree, shared)
                    # the median of the run's per-round rates: computed the same way by every version
                    speed = statistics.median(result["all_rounds_tgt_tokens_per_s"])
                    speeds[name].append(speed)
                    print(f"round {r + 1} {name:4s}: {speed:8.1f} target tokens/s "
                          f"(machine {result['machine_matmul_gflops_2048']:.0f} GFLOP/s)", flush=True)  # fmt: skip
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)], check=False)
    base, new = statistics.median(speeds["base"]), statistics.median(speeds["new"])
    print(f"median: base {args.base} {base:.1f}, this checkout {new:.1f} target tokens/s; new / base = {new / base:.3f}")
    print(json.dumps({"base": args.base, "args": shared, "tokens_per_s": speeds, "median_base": base,
                      "median_new": new, "ratio": new / base}))  # fmt: skip


if __name__ == "__main__":
    main()

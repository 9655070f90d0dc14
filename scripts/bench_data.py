"""Preparing a large corpus: time and peak memory, from text files to the first training update.

    python scripts/bench_data.py --pairs 5000000
    python scripts/bench_data.py --pairs 1000000 --rev d1c4e3a     # the same for another commit

Generates (once, then reuses) a parallel corpus of ``--pairs`` pairs under ``--corpus-dir``: an
artificial language pair with Multi30k-like sentence lengths (gamma-distributed, mean ~11.4 words,
up to 60) over a Zipfian vocabulary of 30,000 words, each source word translated by one target word.
Then, in a fresh process with an empty cache, it runs what ``python -m nmt.train data=files`` does
before training (the sentencepiece model, subword ids, the length-sorted batches of the first epoch)
and one update of the reference model; then a second process does the same from the cache. The
resident memory of each process and its children (the ``data.num_proc`` workers) is sampled every
0.1 s. Prints one JSON line:

    pairs, rev, peak_rss_gib, prepare_s (start -> first batch), first_update_s, cached_start_s
    (second start -> first update), cached_peak_rss_gib, corpus_mib

With ``--rev`` the code and configs of that commit are benchmarked (a temporary git worktree), on the
same corpus. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WORDS = 30_000
VALID_PAIRS = 1014


# --------------------------------------------------------------------------- the corpus


def _vocabulary(rng: np.random.Generator, size: int, upper: bool) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzäöü"))
    words = {"".join(rng.choice(letters, size=int(n))) for n in rng.integers(2, 11, size=size * 2)}
    words = sorted(words)[:size]
    rng.shuffle(words)
    return np.array([w.upper() if upper else w for w in words], dtype=object)


def write_corpus(folder: Path, pairs: int, seed: int = 0) -> dict[str, Path]:
    """``train.{src,tgt}`` with ``pairs`` lines and ``valid.{src,tgt}``; reused when complete."""
    paths = {name: folder / name for name in ("train.src", "train.tgt", "valid.src", "valid.tgt")}
    done = folder / "complete"
    if done.is_file():
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    src_words, tgt_words = _vocabulary(rng, WORDS, False), _vocabulary(rng, WORDS, True)
    zipf = 1.0 / np.arange(1, WORDS + 1) ** 1.07
    zipf /= zipf.sum()
    for split, count in (("train", pairs), ("valid", VALID_PAIRS)):
        src_path, tgt_path = paths[f"{split}.src"], paths[f"{split}.tgt"]
        with open(src_path, "w", encoding="utf-8") as fs, open(tgt_path, "w", encoding="utf-8") as ft:
            for start in range(0, count, 200_000):
                n = min(200_000, count - start)
                lengths = np.clip(np.rint(rng.gamma(6.0, 1.9, size=n)), 1, 60).astype(np.int64)
                ids = rng.choice(WORDS, size=int(lengths.sum()), p=zipf)
                cuts = np.cumsum(lengths)[:-1]
                src, tgt = np.split(src_words[ids], cuts), np.split(tgt_words[ids], cuts)
                fs.write("".join(" ".join(words) + "\n" for words in src))
                ft.write("".join(" ".join(words) + "\n" for words in tgt))
    done.write_text("ok\n")
    return paths


# --------------------------------------------------------------------------- one measured process


def worker(tree: str, cache: str, corpus: str, overrides: list[str]) -> None:
    """In a fresh process: prepare the data with ``tree``'s code and configs, cut the first epoch's
    batches, train one update; print the times (seconds since the process started) as JSON. The
    parent puts ``tree`` first on ``PYTHONPATH``, so ``nmt`` is that tree's."""
    import torch
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nmt.data.batches import prepare_data
    from nmt.model import build_model

    try:  # registers the config schemas (train/schema, search/schema) that configs/*.yaml start from
        import nmt.configs  # noqa: F401
    except ModuleNotFoundError:  # a commit from before the schemas
        pass

    started = time.time() - float(os.environ["BENCH_T0"])
    folder = Path(corpus)
    args = [
        "data=files", f"data.train_src={folder / 'train.src'}", f"data.train_tgt={folder / 'train.tgt'}",
        f"data.valid_src={folder / 'valid.src'}", f"data.valid_tgt={folder / 'valid.tgt'}", f"data.cache_dir={cache}",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(Path(tree) / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=args)
    for item in overrides:  # integer settings; those this commit does not have are left out
        key, value = item.split("=", 1)
        node, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, node)
        if parent is not None and leaf in parent:
            OmegaConf.update(cfg, key, int(value))
    torch.set_num_threads(2)
    data = prepare_data(cfg.data)
    prepared = time.time() - float(os.environ["BENCH_T0"])
    batches = data.train.token_batches(cfg.data.max_tokens, shuffle=True, seed=1, epoch=0)
    batch = data.train.collate(batches[0])
    first_batch = time.time() - float(os.environ["BENCH_T0"])
    torch.manual_seed(0)
    model = build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss, _ = model.loss(batch.src, batch.src_lens, batch.tgt_in, batch.tgt_out, 0.1)
    loss.backward()
    optimizer.step()
    update = time.time() - float(os.environ["BENCH_T0"])
    print(json.dumps({"imports_s": started, "data_s": prepared, "first_batch_s": first_batch, "first_update_s": update,
                      "train_pairs": len(data.train), "batches": len(batches), "loss": float(loss)}))  # fmt: skip


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 once it is gone)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(tree: Path, cache: Path, corpus: Path, overrides: list[str], timeout: float) -> dict:
    """Run :func:`worker` in a child process; its result plus the peak resident memory of its tree."""
    env = {**os.environ, "BENCH_T0": repr(time.time()), "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), str(cache), str(corpus), *overrides]
    proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"failed": f"timed out after {timeout:.0f} s", "peak_rss_gib": peak[0] / 2**30}
    finally:
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        return {"failed": f"exit status {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}",
                "peak_rss_gib": peak[0] / 2**30}  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "peak_rss_gib": peak[0] / 2**30}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, required=True, help="training pairs to generate (or reuse)")
    parser.add_argument("--rev", default=None, help="benchmark this commit's code instead of the checkout's")
    parser.add_argument("--corpus-dir", default=str(REPO / "data" / "bench"), help="where corpora are generated")
    parser.add_argument("--num-proc", type=int, default=2, help="data.num_proc (where the commit has it)")
    parser.add_argument("--sample-size", type=int, default=1_000_000, help="data.vocab.sample_size (where it exists)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed to each process")
    args = parser.parse_args(argv)
    t = time.time()
    corpus = write_corpus(Path(args.corpus_dir) / f"pairs{args.pairs}", args.pairs)["train.src"].parent
    generate_s = time.time() - t
    overrides = [f"data.num_proc={args.num_proc}", f"data.vocab.sample_size={args.sample_size}"]
    with tempfile.TemporaryDirectory(prefix="nmt-bench-data-", dir=REPO / "data") as scratch:
        tree = REPO
        if args.rev:
            tree = Path(scratch) / "tree"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), args.rev],
                           check=True, capture_output=True)  # fmt: skip
        try:
            cache = Path(scratch) / "cache"
            first = measure(tree, cache, corpus, overrides, args.timeout)
            second = measure(tree, cache, corpus, overrides, args.timeout) if "failed" not in first else {}
        finally:
            if args.rev:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
            shutil.rmtree(Path(scratch) / "cache", ignore_errors=True)
    size = sum(p.stat().st_size for p in corpus.glob("train.*"))
    print(json.dumps({
        "pairs": args.pairs, "rev": args.rev or "checkout", "peak_rss_gib": round(first["peak_rss_gib"], 3),
        "prepare_s": round(first.get("first_batch_s", float("nan")), 1),
        "first_update_s": round(first.get("first_update_s", float("nan")), 1),
        "cached_start_s": round(second.get("first_update_s", float("nan")), 1),
        "cached_peak_rss_gib": round(second.get("peak_rss_gib", float("nan")), 3),
        "failed": first.get("failed") or second.get("failed"), "train_pairs": first.get("train_pairs"),
        "corpus_mib": round(size / 2**20), "generate_s": round(generate_s, 1), "first": first, "second": second,
    }))  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    else:
        main()

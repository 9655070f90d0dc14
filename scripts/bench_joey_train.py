"""Training speed and memory of ``nmt`` and of Joey NMT 2.3 on one model and the same batches, side by side.

    python scripts/bench_joey_train.py --joey-python /tmp/joey/bin/python --data-dir D --model transformer
    python scripts/bench_joey_train.py --joey-python /tmp/joey/bin/python --data-dir D --model rnn

Both toolkits build ``--model``'s architecture with random weights, as ``scripts/bench_joey.py``
does (the Joey NMT environment is set up as its docstring says), and train it on the same
Multi30k de-en batches: ``--warmup`` untimed updates, then ``--updates`` timed ones. An update is
the forward pass, the label-smoothed cross-entropy, the backward pass, gradient clipping and an
Adam step, with the recipe's settings (``train.label_smoothing`` 0.1, ``train.clip_norm``,
``train.optimizer``'s learning rate and betas); no learning-rate schedule, no validation.
``nmt``'s Adam is its fused one (``train.optimizer.fused``), Joey NMT's the one its
``build_optimizer`` makes (``torch.optim.Adam``, torch's default implementation).

The batches. ``nmt``'s ``data.max_tokens`` (4,096) counts padded tokens: a batch holds as many
pairs, taken in order of length, as keep rows x longest side (source subwords + EOS, or target
subwords + BOS) at most 4,096. Joey NMT's ``batch_type: token`` counts rows x max(source + 1,
target + 1) as well, but takes the pairs in random order (no bucketing) and closes a batch once it
reaches ``batch_size``, so the same number gives batches with more padding and fewer real target
tokens. So that both do the same work, both train on the very same batches: ``nmt``'s first
batches of epoch 0 (``scripts/benchmark.py``'s ``update_batches``), whose pairs Joey NMT reads as
text, tokenizes with the same sentencepiece model and pads with its own ``collate_fn``. The target
tokens of a batch, counted alike by both (real target subwords + EOS: ``nmt``'s
``Batch.num_tgt_tokens``, Joey NMT's ``batch.ntokens``), are then equal; every round checks it.

Each round runs Joey NMT's worker under ``--joey-python`` (its ``prepare`` builds the vocabulary,
data, model and loss as its training does, its ``TrainManager`` the optimizer and clipping, and its
``TrainManager._train_step`` runs each forward and backward), then ``scripts/benchmark.py`` for
``nmt`` (one timed round); each in a process of its own, ``--threads`` threads each. Timed: each
update including the padding of its batch from subword ids (reading and tokenizing the text,
building the model and the matmul measurements of ``scripts/benchmark.py`` are not). Memory: the
peak resident set of each process (getrusage), so interpreter, libraries, data, model, optimizer
state and the updates. Prints every round, the medians over ``--rounds`` rounds, the ratio
nmt / Joey NMT, then the figures as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_gpu import run_json  # scripts/ is on sys.path when a script in it runs
from bench_joey import MODELS, joey_config, nmt_config, write_vocab

REPO = Path(__file__).resolve().parents[1]


def joey_train_config(work: Path, spm_model: Path, voc_file: Path, cfg) -> dict:
    """A Joey NMT 2.3 training config of ``nmt``'s composed config ``cfg``: its model, its loss and its
    optimizer settings, training on ``work/train.{src_lang,tgt_lang}`` (:func:`write_pairs`).

    :raise ValueError: ``train.optimizer`` is not Adam (Joey NMT is given the same optimizer).
    """
    optimizer = cfg.train.optimizer
    if optimizer._target_ != "torch.optim.Adam":
        raise ValueError(f"train.optimizer is {optimizer._target_}; this comparison gives both toolkits Adam")
    joey = joey_config(work, spm_model, voc_file, cfg)
    joey["data"]["train"] = str(work / "train")
    joey["testing"] = {"beam_size": 1}
    joey["training"] = {
        "random_seed": cfg.train.seed, "optimizer": "adam", "learning_rate": optimizer.lr,
        "adam_betas": list(optimizer.betas), "weight_decay": optimizer.weight_decay, "loss": "crossentropy",
        "label_smoothing": cfg.train.label_smoothing, "normalization": "tokens",  # loss / target tokens, as nmt
        "clip_grad_norm": cfg.train.clip_norm if cfg.train.clip_norm > 0 else None,
        "batch_type": "token", "batch_size": cfg.data.max_tokens,  # unused: the worker makes the batches
        "scheduling": "decaying",  # Joey NMT wants one; it steps after an epoch, which is not reached here
        "epochs": 1, "use_cuda": False, "overwrite": True,
    }  # fmt: skip
    return joey


def joey_worker(config_path: Path, sizes_path: Path, warmup: int, threads: int) -> None:
    """Runs under ``--joey-python``: build Joey NMT's model, data and trainer as its training does, then
    run ``warmup`` untimed and the remaining updates timed, on the batches of ``sizes`` consecutive
    pairs of its training files; prints one JSON line."""
    import torch
    import yaml
    from joeynmt.config import parse_global_args, set_validation_args
    from joeynmt.prediction import prepare
    from joeynmt.training import TrainManager

    torch.set_num_threads(threads)
    args = parse_global_args(yaml.safe_load(config_path.read_text()), rank=0, mode="train")
    model, train_data, _, _ = prepare(args, rank=0, mode="train")  # vocabulary, tokenizer, model, its loss
    trainer = TrainManager(model=model, model_dir=args.model_dir, device=args.device, n_gpu=0, rank=0, num_workers=0,
                           autocast=args.autocast, seed=args.seed, train_args=args.train,
                           dev_args=set_validation_args(args.test))  # fmt: skip
    pairs = [train_data[i] for i in range(len(train_data))]  # (index, source pieces, target pieces), untimed
    groups, start = [], 0
    for size in json.loads(sizes_path.read_text()):
        groups.append(pairs[start : start + size])
        start += size

    def update(group: list) -> int:  # as TrainManager.train_and_validate does an update
        batch = train_data.collate_fn(group, pad_index=model.pad_index, eos_index=model.eos_index, device=args.device)
        trainer._train_step(batch)  # forward, loss / target tokens, backward
        if trainer.clip_grad_fun is not None:
            trainer.clip_grad_fun(parameters=model.parameters())
        trainer.optimizer.step()
        model.zero_grad()
        return batch.ntokens

    for group in groups[:warmup]:
        update(group)
    start_time = time.perf_counter()
    tokens = sum(update(group) for group in groups[warmup:])
    seconds = time.perf_counter() - start_time
    print(json.dumps({
        "joeynmt": __import__("joeynmt").__version__, "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()), "updates": len(groups) - warmup,
        "seconds": seconds, "tgt_tokens": tokens, "tgt_tokens_per_s": tokens / seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,  # KiB -> GiB
    }))  # fmt: skip


def write_pairs(work: Path, cfg, data, groups: list) -> None:
    """Write the pairs of the batches ``groups`` (positions in ``data.train``), batch after batch, as Joey
    NMT's training files ``work/train.{src_lang,tgt_lang}``, and the batch sizes as ``work/sizes.json``."""
    import numpy as np

    from nmt.data.corpora import load_corpus

    if cfg.data.max_train_pairs:  # its rows are a subset of the corpus's: not the lines read below
        raise ValueError("data.max_train_pairs: the pairs' text is read from the whole corpus")
    rows = data.train.rows[np.concatenate(groups)]  # positions -> rows of the corpus (its lines)
    text = load_corpus(cfg.data)["train"].pairs.select(rows.tolist())
    for column, lang in (("src", cfg.data.src_lang), ("tgt", cfg.data.tgt_lang)):
        # one line a pair: Joey NMT splits its files with str.splitlines, which also splits at U+2028 and the like
        lines = (" ".join(line.splitlines()) for line in text[column])
        (work / f"train.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    (work / "sizes.json").write_text(json.dumps([len(g) for g in groups]))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--joey-python", default="python", help="an interpreter with joeynmt==2.3.0 installed")
    parser.add_argument("--model", choices=list(MODELS), default="rnn", help="the architecture both train")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "data", help="sentencepiece and corpus cache")
    parser.add_argument("--updates", type=int, default=20, help="timed updates a round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates before them")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--joey-worker", nargs=2, type=Path, metavar=("CONFIG", "SIZES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.joey_worker:
        joey_worker(*args.joey_worker, args.warmup, args.threads)
        return {}

    import yaml
    from benchmark import update_batches

    from nmt.data.batches import prepare_data
    from nmt.model import build_model

    experiment, changes = MODELS[args.model]
    data_overrides = [f"data.dir={args.data_dir}", f"data.cache_dir={args.cache_dir}"]
    cfg = nmt_config(args.model, data_overrides)
    data = prepare_data(cfg.data)
    groups = update_batches(data.train, cfg, args.warmup + args.updates)
    expected = sum(int(data.train.tgt_lens[g].sum()) for g in groups[args.warmup :])  # = Batch.num_tgt_tokens
    parameters = sum(p.numel() for p in build_model(cfg.model, len(data.src_vocab), len(data.tgt_vocab)).parameters())
    ours = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "--experiment", experiment,
            "--data-dir", str(args.data_dir), "--threads", str(args.threads), "--updates", str(args.updates),
            "--warmup", str(args.warmup), "--repeats", "1", "--overrides", *changes, data_overrides[1]]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="nmt-joey-train-") as tmp:
        work = Path(tmp)
        (work / "model").mkdir()
        write_pairs(work, cfg, data, groups)
        spm_model, voc_file = write_vocab(work, data.src_vocab)  # a joint vocabulary: both sides
        cfg_path = work / "joey.yaml"
        cfg_path.write_text(yaml.safe_dump(joey_train_config(work, spm_model, voc_file, cfg)))
        worker = [args.joey_python, str(Path(__file__).resolve()), "--joey-worker", str(cfg_path),
                  str(work / "sizes.json"), "--warmup", str(args.warmup), "--threads", str(args.threads)]  # fmt: skip
        print(f"{args.model}: {args.updates} timed updates after {args.warmup}, {expected:,} target tokens "
              f"({expected / args.updates:.0f} an update), {args.threads} threads, {args.rounds} rounds",
              flush=True)  # fmt: skip
        rounds = []
        for r in range(args.rounds):
            proc = subprocess.run(worker, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"the Joey NMT worker failed:\n{proc.stderr[-3000:]}")
            joey = json.loads(proc.stdout.strip().splitlines()[-1])
            nmt = run_json(ours)
            rounds.append({"joey": joey, "nmt": nmt})
            print(f"round {r + 1}: Joey NMT {joey['tgt_tokens_per_s']:7.0f} target tokens/s, peak "
                  f"{joey['peak_rss_gib']:.2f} GiB | nmt {nmt['tgt_tokens_per_s']:7.0f} target tokens/s, peak "
                  f"{nmt['peak_rss_gib_rank0']:.2f} GiB", flush=True)  # fmt: skip
            for name, counted in (("Joey NMT", joey["tgt_tokens"]), ("nmt", nmt["all_rounds_tgt_tokens"][0])):
                if counted != expected:
                    print(f"warning: {name} trained on {counted:,} target tokens, not {expected:,}: the batches "
                          "differ", flush=True)  # fmt: skip
    return report(args, rounds, expected, parameters)


def report(args: argparse.Namespace, rounds: list[dict], expected: int, parameters: int) -> dict:
    """Print the medians over rounds and the ratio, then everything as one JSON line."""
    median = lambda tool, key: statistics.median(r[tool][key] for r in rounds)  # noqa: E731
    figures = {
        "joey": {"tgt_tokens_per_s": median("joey", "tgt_tokens_per_s"), "peak_rss_gib": median("joey", "peak_rss_gib"),
                 "s_per_update": median("joey", "seconds") / args.updates, "tgt_tokens": rounds[0]["joey"]["tgt_tokens"],
                 "all_tgt_tokens_per_s": [r["joey"]["tgt_tokens_per_s"] for r in rounds]},
        "nmt": {"tgt_tokens_per_s": median("nmt", "tgt_tokens_per_s"), "peak_rss_gib": median("nmt", "peak_rss_gib_rank0"),
                "s_per_update": median("nmt", "s_per_update"), "tgt_tokens": rounds[0]["nmt"]["all_rounds_tgt_tokens"][0],
                "all_tgt_tokens_per_s": [r["nmt"]["tgt_tokens_per_s"] for r in rounds]},
    }  # fmt: skip
    ratio = figures["nmt"]["tgt_tokens_per_s"] / figures["joey"]["tgt_tokens_per_s"]
    result = {"model": args.model, "config": [f"experiment={MODELS[args.model][0]}", *MODELS[args.model][1]],
              "updates": args.updates, "warmup": args.warmup, "threads": args.threads, "rounds": args.rounds,
              "tgt_tokens_expected": expected, "joeynmt": rounds[0]["joey"]["joeynmt"],
              "parameters": {"nmt": parameters, "joeynmt": rounds[0]["joey"]["parameters"]},
              **figures, "ratio_nmt_to_joey": ratio}  # fmt: skip
    print(f"median of {args.rounds} rounds, {args.updates} updates each:")
    for tool, label in (("joey", "Joey NMT"), ("nmt", "nmt")):
        f = figures[tool]
        print(f"  {label:8s} {f['tgt_tokens_per_s']:7.0f} target tokens/s  {f['s_per_update']:6.3f} s/update  "
              f"peak RSS {f['peak_rss_gib']:.2f} GiB")  # fmt: skip
    print(f"nmt trains {ratio:.2f}x as many target tokens a second as Joey NMT")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

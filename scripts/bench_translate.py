"""Translation speed: Multi30k test_2016_flickr (1,000 sentences) with greedy search and beam 5,
in fp32 and in dynamic int8 (``precision=int8``, :mod:`nmt.quantization`) side by side.

    python scripts/bench_translate.py --ckpt RUN/checkpoints/best.pt [--data-dir ../shared/data/multi30k]
    python scripts/bench_translate.py --ckpt RUN/checkpoints/best.pt --repeat 5 --precisions fp32 int8
    python scripts/bench_translate.py --untrained     # the reference model with random weights
    python scripts/bench_translate.py --untrained --experiment multi30k_de_en_transformer   # the Transformer recipe's

Prints, per precision and search, the median seconds over ``--repeat`` rounds, sentences/s and
target subwords/s (and BLEU for a trained model), the model loading (and quantizing) time
separately, the int8 / fp32 speed ratios, then one JSON line with every figure. Each round runs
every precision in turn, so that a change in the machine's load hits them alike. Length penalty
and output limit are the checkpoint's (``train.search``); batching is ``configs/translate.yaml``'s
unless given here.

``--untrained`` builds the ``--experiment``'s model (default the ``multi30k_de_en`` reference model;
``multi30k_de_en_transformer``: the Transformer recipe) with random weights (its
sentencepiece models are trained on, or taken from the cache of, the Multi30k training split). Such a
model seldom ends a sentence, so its output limit is cut to one target subword per source subword
(``max_len_a=1, max_len_b=0``), about what a trained model produces on this data; its timings
approximate a trained model's and its BLEU means nothing (not reported).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_model
from nmt.data.corpora import multi30k_file, pairs_from_files
from nmt.data.subwords import VocabSettings, build_vocabs
from nmt.data.text import read_lines
from nmt.model import build_model
from nmt.quantization import PRECISIONS, quantize
from nmt.runtime import resolve_device, seed_everything, set_threads
from nmt.search import SearchSettings
from nmt.translator import translate_lines

try:  # registers the config schemas (train/schema, search/schema) that configs/*.yaml start from
    import nmt.configs  # noqa: F401
except ModuleNotFoundError:  # a commit from before the schemas
    pass

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = OmegaConf.load(REPO / "configs" / "translate.yaml")


def untrained_reference(data_dir: Path, cache_dir: Path, experiment: str = "multi30k_de_en"):
    """The ``experiment``'s model with random weights, its vocabularies and config."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", f"data.dir={data_dir}",
                                          f"data.cache_dir={cache_dir}"])  # fmt: skip
    train = pairs_from_files(
        multi30k_file(cfg.data.train_split, cfg.data.src_lang, str(data_dir), cache_dir),
        multi30k_file(cfg.data.train_split, cfg.data.tgt_lang, str(data_dir), cache_dir),
        cache_dir,
    )
    src_vocab, tgt_vocab = build_vocabs(train.pairs, VocabSettings(**cfg.data.vocab), cache_dir / "spm")
    seed_everything(0)
    return build_model(cfg.model, len(src_vocab), len(tgt_vocab)).eval(), src_vocab, tgt_vocab, cfg


def time_searches(models: dict, src_vocab, lines, settings, args, device) -> dict[str, tuple[float, list]]:
    """Per model (precision -> model), the median of ``args.repeat`` timed runs over all ``lines``
    and one run's output. Each round times every model in turn, after one untimed warm-up batch each."""
    run = lambda model, chunk: translate_lines(  # noqa: E731
        model, src_vocab, chunk, settings, args.batch_size, args.batch_unit, device, args.max_src_len
    )
    for model in models.values():
        run(model, lines[: min(len(lines), 32)])
    seconds: dict[str, list[float]] = {name: [] for name in models}
    results: dict[str, list] = {}
    for _ in range(args.repeat):
        for name, model in models.items():
            start = time.perf_counter()
            results[name] = run(model, lines)
            seconds[name].append(time.perf_counter() - start)
    return {name: (statistics.median(seconds[name]), results[name]) for name in models}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", type=Path, help="a trained checkpoint (else --untrained)")
    parser.add_argument("--untrained", action="store_true", help="the --experiment's model with random weights")
    parser.add_argument("--experiment", default="multi30k_de_en", help="with --untrained: e.g. multi30k_de_en_transformer")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "data", help="sentencepiece cache (--untrained)")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size)
    parser.add_argument("--batch-unit", default=DEFAULTS.batch_unit, choices=["sentences", "tokens"])
    parser.add_argument("--threads", type=int, default=DEFAULTS.threads, help="0 = torch's default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds; the median is reported")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8"], choices=list(PRECISIONS))
    parser.add_argument("--limit", type=int, default=0, help="only the first N sentences (0 = all)")
    args = parser.parse_args(argv)
    if (args.ckpt is None) == (not args.untrained):
        parser.error("give exactly one of --ckpt and --untrained")
    set_threads(args.threads)
    device = resolve_device(args.device)

    start = time.perf_counter()
    if args.untrained:
        model, src_vocab, tgt_vocab, cfg = untrained_reference(args.data_dir, args.cache_dir, args.experiment)
        model = model.to(device)
        max_len_a, max_len_b = 1.0, 0
    else:
        model, src_vocab, tgt_vocab, cfg = load_model(args.ckpt, device)
        max_len_a, max_len_b = cfg.train.search.max_len_a, cfg.train.search.max_len_b
    load_seconds = time.perf_counter() - start
    models, quantize_seconds = {}, {}
    for precision in args.precisions:
        start = time.perf_counter()
        models[precision] = quantize(model, precision)
        quantize_seconds[precision] = round(time.perf_counter() - start, 3)
    args.max_src_len = cfg.data.max_len
    src_path = multi30k_file(args.split, cfg.data.src_lang, str(args.data_dir), args.cache_dir)
    ref_path = multi30k_file(args.split, cfg.data.tgt_lang, str(args.data_dir), args.cache_dir)
    sources, references = read_lines(src_path), read_lines(ref_path)
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]

    report = {"model": "untrained" if args.untrained else "trained", "ckpt": str(args.ckpt or ""),
              "experiment": args.experiment if args.untrained else None,
              "split": args.split, "sentences": len(sources), "threads": torch.get_num_threads(),
              "device": str(device), "batch_size": args.batch_size, "batch_unit": args.batch_unit,
              "max_len_a": max_len_a, "max_len_b": max_len_b, "load_seconds": round(load_seconds, 3),
              "quantize_seconds": quantize_seconds, "repeat": args.repeat}  # fmt: skip
    name = args.ckpt or f"{args.experiment} with random weights"
    print(f"model: {name}, loaded in {load_seconds:.2f}s; {len(sources)} sentences of {args.split}, "
          f"{report['threads']} threads, batches of {args.batch_size} {args.batch_unit}; median of {args.repeat} "
          "rounds")  # fmt: skip
    for search, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        settings = SearchSettings(beam_size=beam, n_best=1, length_penalty=cfg.train.search.length_penalty,
                                  alpha=cfg.train.search.alpha, max_len_a=max_len_a, max_len_b=max_len_b)  # fmt: skip
        for precision, (seconds, result) in time_searches(models, src_vocab, sources, settings, args, device).items():
            hyps = [tgt_vocab.decode(t.hypotheses[0].tokens) if t.hypotheses else "" for t in result]
            tokens = sum(len(t.hypotheses[0].tokens) + 1 for t in result if t.hypotheses)
            figures = {"seconds": round(seconds, 3), "sentences_per_s": round(len(sources) / seconds, 1),
                       "tgt_tokens_per_s": round(tokens / seconds, 1)}  # fmt: skip
            line = f"{search:>7} {precision}: {seconds:7.2f}s  {figures['sentences_per_s']:7.1f} sentences/s  " \
                   f"{figures['tgt_tokens_per_s']:8.1f} target subwords/s"  # fmt: skip
            if not args.untrained:
                bleu = BLEU()
                figures["bleu"] = round(bleu.corpus_score(hyps, [references]).score, 2)
                figures["bleu_signature"] = str(bleu.get_signature())
                line += f"  BLEU {figures['bleu']:.2f}"
            print(line)
            report[f"{search}_{precision}" if precision != "fp32" else search] = figures
        if "fp32" in models and "int8" in models:
            ratio = report[search]["seconds"] / report[f"{search}_int8"]["seconds"]
            report[f"{search}_int8_speedup"] = round(ratio, 3)
            print(f"{search:>7}: int8 translates {ratio:.2f}x as many sentences a second as fp32")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

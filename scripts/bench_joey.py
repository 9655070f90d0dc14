"""Translation speed of ``nmt`` and of Joey NMT 2.3 on one model and one input, side by side.

    python -m venv --system-site-packages /tmp/joey
    /tmp/joey/bin/pip install joeynmt==2.3.0 "sentencepiece<0.2" importlib_metadata
    python scripts/bench_joey.py --joey-python /tmp/joey/bin/python [--data-dir ../shared/data/multi30k]
    python scripts/bench_joey.py --joey-python /tmp/joey/bin/python --model transformer

Both toolkits build the same architecture (``--model``) with random weights, Joey NMT's
configuration derived from ``nmt``'s composed one (:func:`joey_model`):

- ``rnn`` (the default): a bidirectional GRU encoder (256 a direction, 256-dimensional
  embeddings), additive (Bahdanau) attention and a GRU decoder of 512 with input feeding, an initial
  state bridged from the encoder, and the 8,000-piece joint sentencepiece model of Multi30k de-en
  (``experiment=multi30k_de_en_best`` without its layer norm, which Joey NMT does not have);
- ``transformer``: the Transformer recipe (``experiment=multi30k_de_en_transformer``): 4 + 4 pre-norm
  layers, d_model 128, 4 heads, feed-forward 256, sinusoidal positions, and its 10,000-piece joint
  sentencepiece model with one embedding matrix for the source, the target and the output layer
  (Joey NMT: ``tied_embeddings`` and ``tied_softmax``). Joey NMT applies its one dropout rate to the
  attention weights and inside the feed-forward network as well, so ``nmt`` does too here
  (``model.attention_dropout``, ``model.activation_dropout``; only training feels it).

Each translates the German side of ``--split`` (test_2016_flickr: 1,000 sentences) through its own
translation code, in batches of ``--batch-size`` sentences, with greedy search and with beam
search, ``--threads`` threads each. (Joey NMT's Transformer recomputes the whole output prefix at
every step; ``nmt``'s keeps every layer's keys and values.)

Random weights seldom end a sentence, so both are held to exactly ``--length`` target subwords a
sentence (Joey NMT: ``min_output_length = max_output_length``; ``nmt``: the output limit, EOS
included), about the length of a trained model's output on this data. Both then do the same work,
and the target subwords/s of each are printed with the sentences/s; their BLEU means nothing.

Joey NMT runs in its own interpreter (``--joey-python``, one with ``joeynmt==2.3.0``; it pins
versions this project does not want, and needs sentencepiece < 0.2, whose
``SetVocabulary`` it calls) as a worker process of this script. Each round runs Joey NMT, then
``nmt``, and medians over ``--rounds`` rounds are reported, with the ratio; model loading is not
timed. Then the figures as one JSON line. Training speed: ``scripts/bench_joey_train.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOEY_SPECIALS = {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>", "pad_id": 1,
                 "bos_token": "<s>", "bos_id": 2, "eos_token": "</s>", "eos_id": 3}  # fmt: skip
# --model: the nmt experiment, and the overrides that make it an architecture Joey NMT 2.3 builds too
MODELS = {
    "rnn": ("multi30k_de_en_best", ["model.decoder.layer_norm=false"]),
    "transformer": ("multi30k_de_en_transformer",
                    ["model.attention_dropout=${model.dropout}", "model.activation_dropout=${model.dropout}"]),
}  # fmt: skip


def nmt_config(model: str, overrides: list[str] = ()):
    """The composed training config of ``--model``'s architecture (:data:`MODELS`), with ``overrides``."""
    from hydra import compose, initialize_config_dir

    import nmt.configs  # noqa: F401  (registers the config schemas)

    experiment, changes = MODELS[model]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("train", overrides=[f"experiment={experiment}", *changes, *overrides])


def joey_model(model) -> dict:
    """Joey NMT's ``model`` section for ``nmt``'s ``model`` config: a bidirectional GRU encoder with a
    GRU decoder (Luong's, with input feeding; additive attention), or a Transformer. Any setting Joey
    NMT cannot express the same way is refused, so that both build one architecture.

    :raise ValueError: naming the setting.
    """
    enc, dec = model.encoder, model.decoder
    init = {"initializer": "xavier_uniform", "embed_initializer": "normal", "bias_initializer": "zeros"}
    # nmt's share_embeddings: source = target embeddings; tie_embeddings: output layer = target embeddings
    tying = {"tied_embeddings": model.share_embeddings, "tied_softmax": model.tie_embeddings}
    if (enc._target_, dec._target_) == ("nmt.transformer.TransformerEncoder", "nmt.transformer.TransformerDecoder"):
        _require(enc.norm_first == dec.norm_first and enc.positions == dec.positions == "sinusoidal",
                 "Joey NMT's Transformer: one layer norm placement, sinusoidal positions")  # fmt: skip
        _require(model.attention.num_heads == dec.num_heads, "Joey NMT: as many cross-attention heads as self-attention")
        rates = {enc.dropout, enc.attention_dropout, enc.activation_dropout, dec.dropout, dec.attention_dropout,
                 dec.activation_dropout, model.attention.dropout}  # fmt: skip
        _require(len(rates) == 1, f"Joey NMT's Transformer has one dropout rate, this model {sorted(rates)}")
        side = lambda s: {"type": "transformer", "num_layers": s.num_layers, "num_heads": s.num_heads,  # noqa: E731
                          "embeddings": {"embedding_dim": model.emb_dim, "scale": True}, "hidden_size": s.d_model,
                          "ff_size": s.ff_dim, "dropout": s.dropout,
                          "layer_norm": "pre" if s.norm_first else "post"}  # fmt: skip
        return {**init, **tying, "encoder": side(enc), "decoder": side(dec)}
    _require((enc._target_, dec._target_, model.attention._target_) ==
             ("nmt.encoder.RNNEncoder", "nmt.decoder.LuongDecoder", "nmt.attention.BahdanauAttention"),
             "a bi-GRU encoder, Luong's GRU decoder and additive attention, or a Transformer")  # fmt: skip
    _require(enc.bidirectional and dec.input_feeding and not dec.layer_norm,
             "Joey NMT's GRUs: a bidirectional encoder, input feeding, no layer norm")  # fmt: skip
    _require(dec.output_dim == dec.hidden_dim and model.attention.attn_dim == dec.hidden_dim,
             "Joey NMT: attentional vector and attention as wide as the decoder state")  # fmt: skip
    return {
        **init, **tying,
        # Joey NMT's dropouts: on the embeddings; between stacked GRUs; on the attentional layer's input
        # (nmt's output_dropout is under the softmax, its encoder's hidden_dropout on the annotations too)
        "encoder": {"type": "recurrent", "rnn_type": "gru", "hidden_size": enc.hidden_dim, "bidirectional": True,
                    "embeddings": {"embedding_dim": enc.emb_dim, "dropout": enc.emb_dropout},
                    "num_layers": enc.num_layers, "dropout": enc.hidden_dropout},
        "decoder": {"type": "recurrent", "rnn_type": "gru", "hidden_size": dec.hidden_dim, "attention": "bahdanau",
                    "embeddings": {"embedding_dim": dec.emb_dim, "dropout": dec.emb_dropout},
                    "input_feeding": True, "init_hidden": dec.init_state, "num_layers": dec.num_layers,
                    "dropout": dec.hidden_dropout, "hidden_dropout": dec.output_dropout},
    }  # fmt: skip


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(f"not an architecture Joey NMT 2.3 builds the same way: {what}")


def joey_config(work: Path, spm_model: Path, voc_file: Path, cfg) -> dict:
    """The parts of a Joey NMT 2.3 config that translation and training share, for ``nmt``'s composed
    config ``cfg``: the languages, the subword model and vocabulary (both sides), and
    :func:`joey_model` of its ``model``."""
    side = lambda lang: {"lang": lang, "level": "bpe", "lowercase": False, "voc_file": str(voc_file),  # noqa: E731
                         "tokenizer_type": "sentencepiece", "tokenizer_cfg": {"model_file": str(spm_model)}}  # fmt: skip
    return {"name": "joey_speed", "model_dir": str(work / "model"), "use_cuda": False,
            "data": {"src": side(cfg.data.src_lang), "trg": side(cfg.data.tgt_lang), "special_symbols": JOEY_SPECIALS,
                     "dataset_type": "plain"},
            "model": joey_model(cfg.model)}  # fmt: skip


def joey_translate_config(work: Path, spm_model: Path, voc_file: Path, cfg, batch_size: int, length: int) -> dict:
    """A Joey NMT 2.3 config of the architecture of ``nmt``'s config ``cfg``, decoding to exactly
    ``length`` subwords."""
    joey = joey_config(work, spm_model, voc_file, cfg)
    joey["data"]["test"] = str(work / "lines")  # Joey NMT asks for a path; translating a stream reads none
    joey["testing"] = {"load_model": str(work / "random.ckpt"), "batch_size": batch_size, "batch_type": "sentence",
                       "beam_size": 1, "beam_alpha": 1.0, "max_output_length": length,
                       "min_output_length": length}  # fmt: skip
    joey["training"] = {"random_seed": 1, "batch_size": batch_size, "batch_type": "sentence", "normalization": "tokens"}
    return joey


def write_vocab(work: Path, vocab) -> tuple[Path, Path]:
    """Write ``nmt``'s joint subword model and the same pieces as a Joey NMT vocabulary file (Joey NMT
    puts its special symbols first): :return: their paths."""
    spm_model, voc_file = work / "spm.model", work / "vocab.txt"
    spm_model.write_bytes(vocab.model_proto)
    specials = set(JOEY_SPECIALS.values())
    pieces = [vocab.sp.id_to_piece(i) for i in range(4, len(vocab))]
    voc_file.write_text("\n".join(p for p in pieces if p not in specials) + "\n", encoding="utf-8")
    return spm_model, voc_file


def joey_worker(config_path: Path, lines_path: Path, beams: list[int], threads: int) -> None:
    """Runs under ``--joey-python``: load Joey NMT's model as its ``translate`` does, then time its
    ``predict`` on every line, once per beam size; prints one JSON line."""
    import torch
    import yaml
    from joeynmt.config import parse_global_args
    from joeynmt.prediction import predict, prepare

    torch.set_num_threads(threads)
    cfg = yaml.safe_load(config_path.read_text())
    lines = lines_path.read_text(encoding="utf-8").splitlines()
    out = {"threads": torch.get_num_threads(), "joeynmt": __import__("joeynmt").__version__}
    for beam in beams:
        cfg["testing"]["beam_size"] = beam
        args = parse_global_args(cfg, rank=0, mode="translate")
        model, _, _, data = prepare(args, rank=0, mode="translate")
        out["parameters"] = sum(p.numel() for p in model.parameters())
        for line in lines[:32]:  # an untimed warm-up batch, as for nmt
            data.set_item(line)
        _joey_predict(predict, model, data, args)
        data.reset_cache()
        for line in lines:
            data.set_item(line)
        start = time.perf_counter()
        hypotheses, tokens = _joey_predict(predict, model, data, args)
        out[f"beam{beam}"] = {"seconds": time.perf_counter() - start, "sentences": len(hypotheses),
                              "tokens": sum(len(t) for t in tokens)}  # fmt: skip
    print(json.dumps(out))


def _joey_predict(predict, model, data, args) -> tuple[list, list]:
    """Joey NMT's ``predict`` as its ``translate`` calls it: the hypotheses and their tokens."""
    _, _, hypotheses, tokens, _, _ = predict(model=model, data=data, compute_loss=False, device=args.device, rank=0,
                                             n_gpu=0, normalization="none", num_workers=0, args=args.test,
                                             autocast=args.autocast)  # fmt: skip
    return hypotheses, tokens


def build_joey(work: Path, joey_python: str, cfg_path: Path) -> None:
    """Write Joey NMT's randomly initialised checkpoint (its own initializers) with ``joey_python``."""
    code = (
        "import sys, torch, yaml\n"
        "from joeynmt.config import parse_global_args\n"
        "from joeynmt.data import load_data\n"
        "from joeynmt.model import build_model\n"
        "cfg = yaml.safe_load(open(sys.argv[1]))\n"
        "cfg['testing'].pop('load_model')  # not written yet\n"
        "args = parse_global_args(cfg, rank=0, mode='translate')\n"
        "src, trg, *_ = load_data(cfg=args.data, datasets=['stream'])\n"
        "torch.manual_seed(1)\n"
        "model = build_model(args.model, src_vocab=src, trg_vocab=trg)\n"
        "torch.save({'model_state': model.state_dict(), 'steps': 0}, sys.argv[2])\n"
    )
    proc = subprocess.run([joey_python, "-c", code, str(cfg_path), str(work / "random.ckpt")], capture_output=True,
                          text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"building the Joey NMT model failed:\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--joey-python", default="python", help="an interpreter with joeynmt==2.3.0 installed")
    parser.add_argument("--model", choices=list(MODELS), default="rnn", help="the architecture both build")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "data", help="sentencepiece and corpus cache")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--length", type=int, default=16, help="target subwords a sentence, both toolkits")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="only the first N sentences (0 = all)")
    parser.add_argument("--joey-worker", nargs=2, type=Path, metavar=("CONFIG", "LINES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    beams = [1, args.beam]
    if args.joey_worker:
        joey_worker(*args.joey_worker, beams, args.threads)
        return {}

    import torch
    import yaml

    from nmt.data.corpora import multi30k_file, pairs_from_files
    from nmt.data.subwords import VocabSettings, build_vocabs
    from nmt.data.text import read_lines
    from nmt.model import build_model
    from nmt.runtime import seed_everything, set_threads
    from nmt.search import SearchSettings
    from nmt.translator import translate_lines

    set_threads(args.threads)
    cfg = nmt_config(args.model, [f"data.dir={args.data_dir}", f"data.cache_dir={args.cache_dir}"])
    files = lambda split: [multi30k_file(split, lang, str(args.data_dir), args.cache_dir)  # noqa: E731
                           for lang in (cfg.data.src_lang, cfg.data.tgt_lang)]  # fmt: skip
    train = pairs_from_files(*files(cfg.data.train_split), args.cache_dir)
    src_vocab, tgt_vocab = build_vocabs(train.pairs, VocabSettings(**cfg.data.vocab), args.cache_dir / "spm")
    seed_everything(0)
    model = build_model(cfg.model, len(src_vocab), len(tgt_vocab)).eval()
    lines = read_lines(files(args.split)[0])[: args.limit or None]

    with tempfile.TemporaryDirectory(prefix="nmt-joey-") as tmp:
        work = Path(tmp)
        (work / "model").mkdir()
        spm_model, voc_file = write_vocab(work, src_vocab)  # a joint vocabulary: both sides
        (work / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        cfg_path = work / "joey.yaml"
        joey_cfg = joey_translate_config(work, spm_model, voc_file, cfg, args.batch_size, args.length)
        cfg_path.write_text(yaml.safe_dump(joey_cfg))
        build_joey(work, args.joey_python, cfg_path)

        worker = [args.joey_python, str(Path(__file__).resolve()), "--joey-worker", str(cfg_path),
                  str(work / "lines.txt"), "--beam", str(args.beam), "--threads", str(args.threads)]  # fmt: skip
        rounds: list[dict] = []
        for _ in range(args.rounds):
            proc = subprocess.run(worker, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"the Joey NMT worker failed:\n{proc.stderr[-3000:]}")
            joey = json.loads(proc.stdout.strip().splitlines()[-1])
            ours = {}
            for beam in beams:
                settings = SearchSettings(beam_size=beam, n_best=1, length_penalty="gnmt", alpha=1.0, max_len_a=0.0,
                                          max_len_b=args.length + 1)  # fmt: skip
                translate_lines(model, src_vocab, lines[:32], settings, args.batch_size, "sentences",
                                torch.device("cpu"), cfg.data.max_len)  # warm-up  # fmt: skip
                start = time.perf_counter()
                result = translate_lines(model, src_vocab, lines, settings, args.batch_size, "sentences",
                                         torch.device("cpu"), cfg.data.max_len)  # fmt: skip
                tokens = sum(len(t.hypotheses[0].tokens) for t in result if t.hypotheses)
                ours[f"beam{beam}"] = {"seconds": time.perf_counter() - start, "sentences": len(result), "tokens": tokens}
            rounds.append({"joey": joey, "nmt": ours})

    report = {"model": args.model, "config": [f"experiment={MODELS[args.model][0]}", *MODELS[args.model][1]],
              "split": args.split, "sentences": len(lines), "length": args.length, "batch_size": args.batch_size,
              "threads": args.threads, "rounds": args.rounds, "joeynmt": rounds[0]["joey"]["joeynmt"],
              "parameters": {"nmt": sum(p.numel() for p in model.parameters()),
                             "joeynmt": rounds[0]["joey"]["parameters"]}}  # fmt: skip
    print(f"{args.model}: {len(lines)} sentences of {args.split}, {args.length} target subwords each, batches of "
          f"{args.batch_size}, {args.threads} threads; parameters: nmt {report['parameters']['nmt']:,}, "
          f"Joey NMT {report['parameters']['joeynmt']:,}; median of {args.rounds} rounds")  # fmt: skip
    for beam in beams:
        key, name = f"beam{beam}", "greedy" if beam == 1 else f"beam {beam}"
        figures = {}
        for tool in ("joey", "nmt"):
            seconds = statistics.median(r[tool][key]["seconds"] for r in rounds)
            tokens = statistics.median(r[tool][key]["tokens"] for r in rounds)
            figures[tool] = {"seconds": round(seconds, 3), "sentences_per_s": round(len(lines) / seconds, 1),
                             "tgt_tokens_per_s": round(tokens / seconds, 1), "tokens": tokens,
                             "all_seconds": [round(r[tool][key]["seconds"], 3) for r in rounds]}  # fmt: skip
        figures["ratio_nmt_to_joey"] = round(figures["joey"]["seconds"] / figures["nmt"]["seconds"], 2)
        report[key] = figures
        for tool, label in (("joey", "Joey NMT"), ("nmt", "nmt")):
            f = figures[tool]
            print(f"{name:>7} {label:8s} {f['seconds']:7.2f}s  {f['sentences_per_s']:7.1f} sentences/s  "
                  f"{f['tgt_tokens_per_s']:8.1f} target subwords/s")  # fmt: skip
        print(f"{name:>7}: nmt translates {figures['ratio_nmt_to_joey']:.2f}x as many sentences a second as Joey NMT")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

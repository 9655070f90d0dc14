"""``python -m nmt.evaluate``: several systems (hypothesis files or checkpoints) scored overall and
by sentence length (:mod:`nmt.evaluation.report`, :mod:`nmt.evaluation.length_bins`), with paired significance, a
BLEU-by-length plot, and attention maps and statistics (:mod:`nmt.evaluation.alignment`). Where gold word
alignments are known (``alignments.gold``, or a synthetic split's own), each attending checkpoint's
attention is also scored as a word alignment, overall and per length bin
(:mod:`nmt.evaluation.word_alignment`). The scores that training uses too live in :mod:`nmt.evaluation.metrics`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import direction, load_checkpoint, upgrade_config
from nmt.configs import command
from nmt.data.corpora import corpus_kind, load_corpus
from nmt.data.multi30k import load_multi30k
from nmt.data.synthetic import gold_links
from nmt.data.text import DataError, ParallelText, parallel_in_text_form, read_lines
from nmt.ensemble import Ensemble, split_members, system_from_payloads
from nmt.errors import CheckpointError, ConfigError, command_errors
from nmt.evaluation.alignment import attention_stats
from nmt.evaluation.length_bins import assign_bins, word_lengths
from nmt.evaluation.report import LengthSettings, format_report, length_figure, score_systems, write_outputs
from nmt.evaluation.word_alignment import (
    EXTRACTIONS,
    GoldAlignment,
    Link,
    aer_by_bin,
    alignment_error_rate,
    attention_shown,
    choose_attention,
    describe_attention,
    diagonal_links,
    drop_eos,
    format_links,
    hard_links,
    read_gold,
    shifted,
    word_attention,
)
from nmt.files import check_output, check_output_dir, write_output_text
from nmt.model import Seq2Seq
from nmt.plotting import alignment_grid_figure
from nmt.runtime import parse_named, provenance, resolve_device, set_threads, setup_logging
from nmt.search import SearchSettings, translate_ids
from nmt.vocab import Vocab

log = logging.getLogger(__name__)


@dataclass
class Decoded:
    """A checkpoint's translations of a list of sources.

    :ivar hypotheses: detokenized best hypotheses.
    :ivar alignments: per sentence (T+1, S+1) attention weights (EOS rows/columns included), or
        None when the model does not attend.
    :ivar src_pieces: per sentence the source subwords plus ``</s>`` (heatmap labels).
    :ivar tgt_pieces: per sentence the hypothesis subwords plus ``</s>``.
    """

    hypotheses: list[str]
    alignments: list[np.ndarray] | None
    src_pieces: list[list[str]]
    tgt_pieces: list[list[str]]


def decode_sources(
    model: Seq2Seq | Ensemble, src_vocab: Vocab, tgt_vocab: Vocab, sources: list[str], settings: SearchSettings,
    batch_size: int, device: torch.device,
) -> Decoded:  # fmt: skip
    """Translate ``sources`` with a model or ensemble, keeping attention if it attends."""
    attends = model.has_alignment
    src_ids = src_vocab.encode(sources)
    best = [hyps[0] for hyps in translate_ids(model, src_ids, settings, batch_size, device, attends)]
    return Decoded(
        [tgt_vocab.decode(h.tokens) for h in best],
        [h.attention.float().numpy() for h in best] if attends else None,
        [src_vocab.pieces(ids) + ["</s>"] for ids in src_ids],
        [tgt_vocab.pieces(h.tokens) + ["</s>"] for h in best],
    )


def default_split(data_cfg: DictConfig) -> str:
    """The first test split of a corpus: ``data.test_splits[0]`` for Multi30k, else ``test``."""
    return data_cfg.test_splits[0] if corpus_kind(data_cfg) == "multi30k" else "test"


# The corpora whose splits a checkpoint may name: a Multi30k split is read from the user's folder
# (or downloaded from its one address), a synthetic one regenerated from its seed. A checkpoint's
# own files, dataset or folder are never read: a crafted file must not choose what is read.
SPLIT_CORPORA = ("multi30k", "synthetic")


def split_text(data_cfg: DictConfig, split: str | None, data_dir: str | None) -> ParallelText:
    """Source and reference of ``split`` of the corpus a checkpoint was trained on, in the text
    form it was trained in (``data.text_form``: its references too).

    :param split: a Multi30k split name, ``test``/``valid`` for the synthetic task; None = the
        first test split.
    :param data_dir: the user's Multi30k folder; None = ``$NMT_MULTI30K_DIR``, else the download
        cache in ``data_cfg.cache_dir``. The checkpoint's ``data.dir`` is never read.
    :raise ConfigError: a corpus of files or of the Hub: give ``src=`` and ``ref=`` instead.
    """
    kind = corpus_kind(data_cfg)
    if kind not in SPLIT_CORPORA:
        raise ConfigError(f"the checkpoint was trained on a {kind!r} corpus, whose files a checkpoint does not choose: "
                          "give the test set as src=FILE ref=FILE")  # fmt: skip
    split = split or default_split(data_cfg)
    if kind == "multi30k":
        text = load_multi30k(data_cfg.src_lang, data_cfg.tgt_lang, {split: split}, data_dir, data_cfg.cache_dir)[split]
        return parallel_in_text_form(text, data_cfg.text_form, data_cfg.src_lang, data_cfg.tgt_lang)
    if split not in ("test", "valid"):
        raise DataError(f"split={split!r}: a {kind} corpus has the splits test and valid")
    return load_corpus(data_cfg, extra_train=False)[split].to_text()  # regenerated from its seed: no file is read


def pick_sentences(chosen, count: int, total: int, seed: int) -> list[int]:
    """The line numbers to draw: ``chosen`` if given, else ``count`` random ones (seeded), sorted."""
    if chosen:
        bad = [i for i in chosen if not 0 <= int(i) < total]
        if bad:
            raise ValueError(f"alignments.sentences {bad} out of range: there are {total} sentences")
        return [int(i) for i in chosen]
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(total, size=min(count, total), replace=False))


def load_test_set(cfg: DictConfig, payloads: dict[str, dict]) -> tuple[ParallelText, str | None]:
    """The sources and references: ``src``/``ref`` files (split None), else the split (``split``,
    or the first test split) of the corpus the checkpoints, or the run of ``run_config``, trained
    on, and its name.

    A checkpoint or run config names its corpus (Multi30k or synthetic, :func:`split_text`), but what is
    read and where a split is downloaded and cached are this command's ``data_dir`` and ``cache_dir``:
    a file from elsewhere never decides what is read or written."""
    split = None
    if (cfg.src is None) != (cfg.ref is None):
        raise ValueError("give both src=FILE and ref=FILE (or neither, with ckpt=... split=...)")
    if cfg.src is not None:
        text = ParallelText(read_lines(cfg.src), read_lines(cfg.ref), str(cfg.src), str(cfg.ref))
        return check_test_set(text), split
    configs = {f"ckpt {name}": payload["config"] for name, payload in payloads.items()}
    if cfg.run_config is not None:
        configs[f"run_config {cfg.run_config}"] = read_run_config(cfg.run_config)
    if not configs:
        raise ValueError("give src=FILE ref=FILE hyps=[name:FILE,...], or ckpt=PATH (split=NAME), or hyps with "
                         "run_config=RUN/config.yaml (split=NAME)")  # fmt: skip
    directions = {label: direction(config) for label, config in configs.items()}
    if len(set(directions.values())) > 1:
        shown = ", ".join(f"{label} translates {way}" for label, way in directions.items())
        raise DataError(f"the systems translate different directions ({shown}): no split is a test set of "
                        "all of them; evaluate each direction on its own")  # fmt: skip
    for label, config in configs.items():
        kind = corpus_kind(config["data"])
        if kind not in SPLIT_CORPORA:
            raise ConfigError(f"{label} was trained on a {kind!r} corpus, whose files a checkpoint or run does not "
                              "choose: give the test set as src=FILE ref=FILE")  # fmt: skip
    data_cfgs = [OmegaConf.create({**config["data"], "cache_dir": cfg.cache_dir}) for config in configs.values()]
    split = cfg.split or default_split(data_cfgs[0])
    texts = [split_text(data_cfg, split, cfg.data_dir) for data_cfg in data_cfgs]
    if any(t.src != texts[0].src or t.tgt != texts[0].tgt for t in texts[1:]):
        raise DataError(f"the systems' {split} splits differ; give src= and ref= instead")
    return check_test_set(texts[0]), split


def read_run_config(path: str) -> dict:
    """A training run's ``config.yaml`` (``run_config=``), brought to today's keys: it names the corpus of
    the split that hypothesis files translate when no checkpoint is left to name it."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise ConfigError(f"run_config={path}: cannot read it as a run's config.yaml ({err}); give the "
                          "config.yaml of the training run whose translations these are") from err  # fmt: skip
    if not isinstance(config, dict) or not isinstance(config.get("data"), dict):
        raise ConfigError(f"run_config={path}: no data section; give the config.yaml of a training run folder")
    return upgrade_config(config)


def check_test_set(text: ParallelText) -> ParallelText:
    """``text`` if its sides have the same number of lines, and some."""
    if len(text.src) != len(text.tgt):
        raise DataError(f"{text.src_path} has {len(text.src)} lines but {text.tgt_path} has {len(text.tgt)}")
    if not text.src:
        raise DataError(f"{text.src_path} has no lines; give one sentence a line")
    return text


DIAGONAL = "diagonal"  # the word-alignment baseline's name in the tables (nmt.evaluation.word_alignment.diagonal_links)
SYNTHETIC_GOLD = "synthetic"  # the gold name of a synthetic split's own alignments (nmt.data.synthetic.gold_links)


def load_gold(cfg: DictConfig, payloads: dict[str, dict], text: ParallelText,
              split: str | None) -> tuple[list[GoldAlignment] | None, str | None]:  # fmt: skip
    """The gold word alignments of the test set and where they came from: ``alignments.gold`` (a
    file with a line of links a sentence pair), else the exact links of a split of the synthetic
    task (the checkpoints' own corpus), else none."""
    if cfg.alignments.gold is not None:
        gold = read_gold(cfg.alignments.gold, num_pairs=len(text.src), one_based=cfg.alignments.gold_one_based)
        return gold, str(cfg.alignments.gold)
    if split is not None and payloads and all(corpus_kind(p["config"]["data"]) == "synthetic" for p in payloads.values()):
        return [GoldAlignment(links, set(links)) for links in map(gold_links, text.src)], SYNTHETIC_GOLD
    return None, None


def alignment_scores(links: list[set[Link]], gold: list[GoldAlignment], bin_ids, report: dict) -> dict:
    """AER, precision and recall of a system's links over the test set and per length bin (the
    report's bins): ``{aer, precision, recall, links, bins: [{lo, hi, count, aer, ...}]}``."""
    bounds = [0, *report["edges"]]
    per_bin = aer_by_bin(links, gold, bin_ids, len(bounds))
    return {**alignment_error_rate(links, gold),
            "bins": [{"lo": lo, "hi": hi, **b} for lo, hi, b in zip(bounds, [*report["edges"], None], per_bin)]}  # fmt: skip


def reference_links(model, src_vocab, tgt_vocab, text: ParallelText, cfg: DictConfig, device) -> list[set[Link]]:
    """The reference force-decoded, each target word linked by the model's attention (``alignments.*``)."""
    matrices = word_attention(model, src_vocab, tgt_vocab, text.src, text.tgt, cfg.batch_size, device,
                              cfg.alignments.shift, keep_eos=True)  # fmt: skip
    return _hard_links(matrices, cfg.alignments.eos_unaligned, cfg)


def _hard_links(matrices: list[np.ndarray], eos_unaligned: bool, cfg: DictConfig) -> list[set[Link]]:
    """Each :func:`word_attention` matrix (``</s>`` column kept) as links, by ``alignments.method``."""
    return [hard_links(drop_eos(m, eos_unaligned), cfg.alignments.method, cfg.alignments.threshold) for m in matrices]


def extraction_name(shift: bool, eos_unaligned: bool) -> str:
    """``plain``, ``shift``, ``eos_unaligned`` or ``shift+eos_unaligned``."""
    return "+".join(name for name, on in (("shift", shift), ("eos_unaligned", eos_unaligned)) if on) or "plain"


def links_by_extraction(model, src_vocab, tgt_vocab, text: ParallelText, cfg: DictConfig,
                        device) -> dict[str, list[set[Link]]]:  # fmt: skip
    """:func:`reference_links` with every combination of ``alignments.shift`` and
    ``alignments.eos_unaligned`` (two force-decodings), by :func:`extraction_name`."""
    out = {}
    for shift in (False, True):
        matrices = word_attention(model, src_vocab, tgt_vocab, text.src, text.tgt, cfg.batch_size, device, shift,
                                  keep_eos=True)  # fmt: skip
        for eos in (False, True):
            out[extraction_name(shift, eos)] = _hard_links(matrices, eos, cfg)
    return out


def attention_panels(result: Decoded, picked: list[int], sources: list[str],
                     shift: bool) -> list[tuple[np.ndarray, list[str], list[str], str]]:  # fmt: skip
    """The heatmaps of the ``picked`` sentences for :func:`alignment_grid_figure`; with ``shift``
    read as Shift-Att (:func:`shifted`): target subword t's row is the attention of the step where
    t is the decoder input, and the final ``</s>``, nobody's input, has no row."""
    panels = []
    for i in picked:
        weights, tgt_labels = result.alignments[i], result.tgt_pieces[i]
        if shift:
            weights, tgt_labels = shifted(weights), tgt_labels[:-1]  # (T+1, S+1) -> (T, S+1)
        panels.append((weights, result.src_pieces[i], tgt_labels, f"sentence {i} ({len(sources[i].split())} words)"))
    return panels


def attention_title(name: str, shift: bool, shown: str) -> str:
    """A system's attention-map title: its name, the reading (each row at the step that emits its
    target subword, or Shift-Att) and, for a Transformer, the layer and heads shown."""
    reading = ("Shift-Att: row t = the step where target t is the decoder input" if shift
               else "row t = the step that emits target t")  # fmt: skip
    return f"{name} ({'; '.join(part for part in (reading, shown) if part)})"


def planned_outputs(cfg: DictConfig, checkpoints: dict[str, str]) -> list[Path]:
    """The files :func:`evaluate` writes whatever the data (figures depend on it, and are PNGs),
    and the word alignments it writes where gold ones are known."""
    out_dir = Path(cfg.out_dir)
    named = [out_dir / folder / f"{name}.txt" for folder in ("hypotheses", "word_alignments") for name in checkpoints]
    return [out_dir / "eval.json", out_dir / "gold_alignments.txt", *named]


def check_outputs(cfg: DictConfig, checkpoints: dict[str, str], hyp_files: dict[str, str]) -> None:
    """Before any work: ``out_dir`` can be made, and no file written there is one of the inputs
    (a hypothesis file, the source, the reference, the gold alignments or a checkpoint)."""
    check_output_dir(cfg.out_dir, "out_dir")
    if cfg.tensorboard is not None:
        check_output_dir(cfg.tensorboard, "tensorboard")
    members = [str(path) for spec in checkpoints.values() for path in split_members(spec)]
    given = (cfg.src, cfg.ref, cfg.alignments.gold, cfg.run_config)
    inputs = [*hyp_files.values(), *members, *(str(f) for f in given if f is not None)]
    for path in planned_outputs(cfg, checkpoints):
        named = path.parent.name in ("hypotheses", "word_alignments")
        key = f"ckpt name {path.stem!r} (out_dir/{path.parent.name}/{path.name})" if named else "out_dir"
        check_output(path, key, inputs)


def evaluate(cfg: DictConfig) -> dict:
    """Everything ``python -m nmt.evaluate`` does; returns the report written to ``eval.json``."""
    out_dir = Path(cfg.out_dir)
    set_threads(cfg.threads)
    device = resolve_device(cfg.device)
    checkpoints = parse_named(cfg.ckpt, "ckpt")
    hyp_files = parse_named(cfg.hyps, "hyps")
    for name in checkpoints:
        if name in hyp_files:
            raise ValueError(f"system name {name!r} is both in hyps and ckpt; name them apart (ckpt=[other:PATH])")
    check_outputs(cfg, checkpoints, hyp_files)
    if cfg.alignments.method not in EXTRACTIONS:
        raise ConfigError(f"alignments.method={cfg.alignments.method!r}: choose one of {', '.join(EXTRACTIONS)}")
    members = {name: split_members(spec) for name, spec in checkpoints.items()}  # an ensemble: a.pt+b.pt
    read = {name: [load_checkpoint(path) for path in paths] for name, paths in members.items()}
    payloads = {name: loaded[0] for name, loaded in read.items()}  # the first member's data and decoding
    text, split = load_test_set(cfg, payloads)
    gold, gold_name = load_gold(cfg, payloads, text, split)
    if gold is not None and DIAGONAL in checkpoints:
        raise ConfigError(f"ckpt name {DIAGONAL!r} is the word-alignment baseline's; name the system otherwise "
                          "(ckpt=[other:PATH])")  # fmt: skip
    systems = {name: read_lines(path) for name, path in hyp_files.items()}
    for name, hyps in systems.items():
        if len(hyps) != len(text.src):
            raise DataError(f"hyps {name}: {hyp_files[name]} has {len(hyps)} lines but the source has {len(text.src)}")
    decoded, searches, links, layer_links, extraction_links, shown = {}, {}, {}, {}, {}, {}
    files: dict[Path, str] = {}  # written with the report, once everything is computed: a failed command writes nothing
    for name, payload in payloads.items():
        log.info("decoding %d sentences with %s (precision %s)", len(text.src), checkpoints[name], cfg.precision)
        try:
            settings = SearchSettings.from_checkpoint(payload["config"]["train"]["search"], cfg.search)
            model, src_vocab, tgt_vocab, _ = system_from_payloads(members[name], read[name], device, cfg.ensemble_rule,
                                                                   cfg.precision)
            layers = model.cross_attention_layers if isinstance(model, Seq2Seq) else 1  # per layer: single models
            full_context = cfg.alignments.full_context
            if isinstance(model, Ensemble) or layers > 1 or full_context:  # an RNN system keeps its one attention
                choose_attention(model, cfg.alignments.layer, cfg.alignments.heads, full_context)
            decoded[name] = decode_sources(model, src_vocab, tgt_vocab, text.src, settings, cfg.batch_size, device)
            shown[name] = describe_attention(attention_shown(model))  # the layer and heads the maps show
            if gold is not None and model.has_alignment:  # the reference force-decoded, its attention as links
                extraction_links[name] = links_by_extraction(model, src_vocab, tgt_vocab, text, cfg, device)
                links[name] = extraction_links[name][extraction_name(cfg.alignments.shift, cfg.alignments.eos_unaligned)]
                for layer in range(layers if layers > 1 else 0):  # each Transformer layer, all heads
                    choose_attention(model, layer, None, full_context)
                    layer_links.setdefault(name, []).append(reference_links(model, src_vocab, tgt_vocab, text, cfg, device))
        except (CheckpointError, KeyError, TypeError) as e:
            raise CheckpointError(f"{checkpoints[name]}: {e if isinstance(e, CheckpointError) else repr(e)}") from None
        searches[name] = asdict(settings)
        systems[name] = decoded[name].hypotheses
        hyp_files[name] = str(out_dir / "hypotheses" / f"{name}.txt")
        files[Path(hyp_files[name])] = "".join(h + "\n" for h in systems[name])
    if not systems:
        raise ValueError("no systems: give hyps=[name:FILE,...] or ckpt=PATH")
    if cfg.alignments.gold is not None and not links:
        raise ConfigError(f"alignments.gold={cfg.alignments.gold}: no checkpoint system attends, so there is no "
                          "alignment to score; give ckpt= of a model with attention")  # fmt: skip
    settings = LengthSettings(
        bins=cfg.bins if isinstance(cfg.bins, str) else tuple(cfg.bins), bin_by=cfg.bin_by,
        min_count=cfg.min_count, n_bootstrap=cfg.n_bootstrap, seed=cfg.seed, significance=cfg.significance,
        significance_samples=cfg.significance_samples, variants=tuple(cfg.variants),
    )  # fmt: skip
    report = {"src": text.src_path, "ref": text.tgt_path, "split": split,
              **score_systems(text.src, text.tgt, systems, settings), "provenance": provenance()}  # fmt: skip
    if links:
        bin_ids = assign_bins(word_lengths(text.src if report["bin_by"] == "source" else text.tgt), report["edges"])
        diagonal = [diagonal_links(len(s.split()), len(t.split())) for s, t in zip(text.src, text.tgt)]
        report["word_alignment"] = {"gold": gold_name, "method": cfg.alignments.method,
                                    "threshold": cfg.alignments.threshold,
                                    DIAGONAL: alignment_scores(diagonal, gold, bin_ids, report)}  # fmt: skip
        report["word_alignment"].update(shift=cfg.alignments.shift, eos_unaligned=cfg.alignments.eos_unaligned,
                                        full_context=cfg.alignments.full_context,
                                        layer=cfg.alignments.layer, heads=cfg.alignments.heads)  # fmt: skip
        for name, system_links in links.items():
            report["systems"][name]["word_alignment"] = alignment_scores(system_links, gold, bin_ids, report)
            report["systems"][name]["word_alignment"]["extractions"] = {  # every extraction, beside the chosen one
                extraction: alignment_scores(one, gold, bin_ids, report)
                for extraction, one in extraction_links[name].items()
            }
            if name in layer_links:  # a Transformer's every cross-attention layer, heads averaged
                report["systems"][name]["word_alignment"]["layers"] = [
                    alignment_scores(one, gold, bin_ids, report) for one in layer_links[name]
                ]
            files[out_dir / "word_alignments" / f"{name}.txt"] = "".join(format_links(one) + "\n" for one in system_links)
        if gold_name == SYNTHETIC_GOLD:
            files[out_dir / "gold_alignments.txt"] = "".join(format_links(g.sure) + "\n" for g in gold)
    title = split or Path(text.src_path).name
    other = report["other_binning"]
    figures = {
        "bleu_by_length": length_figure(report, title=title),
        f"bleu_by_{other['bin_by']}_length": length_figure({**other, "min_count": cfg.min_count}, title=title),
    }
    picked = pick_sentences(list(cfg.alignments.sentences), cfg.alignments.num, len(text.src), cfg.seed)
    for name, system in report["systems"].items():
        system["hypotheses"], system["checkpoint"], system["attention"] = hyp_files[name], checkpoints.get(name), None
        system["search"] = searches.get(name)  # the decoding of a checkpoint system (None for hypothesis files)
        system.setdefault("word_alignment", None)  # AER against gold links, for systems that attend
        result = decoded.get(name)
        if result is None or result.alignments is None:
            continue
        system["attention"] = attention_stats(result.alignments, cfg.alignments.band).to_dict()
        panels = attention_panels(result, picked, text.src, cfg.alignments.shift)
        if panels:
            title = attention_title(name, cfg.alignments.shift, shown[name])
            figures[f"alignments_{name}"] = alignment_grid_figure(panels, cfg.alignments.ncols, title=title)
    for path, text in files.items():
        write_output_text(path, text)
    write_outputs(report, out_dir, figures, cfg.tensorboard)
    return report


@command("evaluate")
def main(cfg: DictConfig) -> None:
    setup_logging()
    with command_errors(logging.getLogger("nmt")):
        report = evaluate(cfg)
    print(format_report(report))  # the table is the command's output
    log.info("wrote %s", Path(cfg.out_dir) / "eval.json")


if __name__ == "__main__":
    main()

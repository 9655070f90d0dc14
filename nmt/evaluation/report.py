"""The evaluation report of several systems on one test set: every number of ``eval.json``
(corpus BLEU/chrF with signatures and intervals, BLEU variants, per-length-bin scores, paired
p-values against the first system), the terminal table, and the BLEU-by-length figure.

``eval.json`` (``nmt.evaluate`` adds ``src``, ``ref``, ``split`` and, per system, ``hypotheses``,
``checkpoint`` and ``attention``, the statistics of :mod:`nmt.evaluation.alignment` or null)::

    num_sentences, bin_by ("source" | "reference"), bin_spec, edges, bin_labels, min_count,
    n_bootstrap, seed,
    significance: {test, baseline, signature, correction} | null   (null with one system)
    systems: {name: {
        bleu, chrf, signature, chrf_signature, ci_low, ci_high,
        p_value: {bleu, chrf} | null                         (null for the baseline)
        variants: {"lowercase": {bleu, signature}, ...},
        bins: [{lo, hi, count, bleu, chrf, ci_low, ci_high, flag, p_value, p_holm}, ...]}}
    other_binning: {bin_by, edges, bin_labels, systems: {name: {bins: [...]}}}
    word_alignment: {gold, method, threshold, diagonal: {aer, precision, recall, links, bins}}
                    (only where gold word alignments are known; each attending checkpoint system
                    then has ``word_alignment``: {aer, precision, recall, links,
                    bins: [{lo, hi, count, aer, precision, recall, links}, ...],
                    extractions: {plain | shift | eos_unaligned | shift+eos_unaligned: the same
                    scores}, and a Transformer's layers: [the same scores a layer]}, the others null)

A bin's ``hi`` is null for the open last bin; an empty bin has ``count`` 0, null scores and
``flag`` "empty"; a bin with fewer than ``min_count`` sentences is scored and flagged
"few sentences"; ``p_value`` compares the bin's sentences with the baseline's, and ``p_holm`` is
that p-value Holm-adjusted over the system's tested bins (a bin is significant when it is below
0.05). ``other_binning`` bins the same sentences by the other side's length (by reference length,
compare-mt's convention, when ``bin_by`` is source), with the same edges.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from torch.utils.tensorboard import SummaryWriter

from nmt.evaluation.length_bins import (
    assign_bins,
    bin_edges,
    bin_scores,
    bleu_from_statistics,
    bleu_statistics,
    bootstrap_ci,
    holm,
    make_bins,
    paired_test,
    paired_test_by_bin,
    word_lengths,
)
from nmt.files import atomic_write_bytes, write_output_text
from nmt.plotting import bleu_by_length_figure, figure_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure  # imported by nmt.plotting when a figure is drawn

BIN_BY = ("source", "reference")


@dataclass(frozen=True)
class LengthSettings:
    """How :func:`score_systems` bins and tests (the ``nmt.evaluate`` options of the same names).

    :param bins: inner bin edges in words, or ``"quantile:K"``.
    :param bin_by: ``source`` or ``reference``: whose length decides the bin.
    :param min_count: bins with fewer sentences are flagged.
    :param n_bootstrap: resamples for the 95% intervals (0: none).
    :param seed: of the resampling.
    :param significance: ``bs``, ``ar`` or ``none``.
    :param significance_samples: resamples/trials of the paired test; 0 = sacreBLEU's default.
    :param variants: extra BLEU variants (see :func:`bleu_variant`).
    """

    bins: tuple[int, ...] | str = (10, 15, 20, 25)
    bin_by: str = "source"
    min_count: int = 30
    n_bootstrap: int = 1000
    seed: int = 12345
    significance: str = "bs"
    significance_samples: int = 0
    variants: tuple[str, ...] = ()


def bleu_variant(name: str) -> BLEU:
    """``lowercase``, ``tok:NAME`` or ``lowercase+tok:NAME`` -> a configured sacreBLEU BLEU."""
    kwargs: dict = {}
    for part in name.split("+"):
        if part == "lowercase":
            kwargs["lowercase"] = True
        elif part.startswith("tok:") and len(part) > 4:
            kwargs["tokenize"] = part[4:]
        else:
            raise ValueError(f"BLEU variant {name!r}: use lowercase, tok:NAME or lowercase+tok:NAME")
    return BLEU(**kwargs)


def score_systems(
    sources: list[str], references: list[str], systems: dict[str, list[str]], settings: LengthSettings
) -> dict:
    """Every number of ``eval.json``: per system BLEU, chrF, signatures, an overall interval,
    variants, per-bin scores and (against the first system) paired p-values, binned by
    ``settings.bin_by`` and, in ``other_binning``, by the other side's length.

    :param systems: name -> detokenized hypotheses, line i translating ``sources[i]``; the first
        system is the baseline of the paired tests.
    """
    for name, hyps in systems.items():
        if len(hyps) != len(references) or len(sources) != len(references):
            raise ValueError(f"system {name}: {len(hyps)} lines for {len(references)} references")
    if settings.bin_by not in BIN_BY:
        raise ValueError(f"bin_by={settings.bin_by!r}: choose source or reference")
    test = settings.significance
    p_values, test_signature = {}, ""
    if test != "none":
        p_values, test_signature = paired_test(systems, references, test, settings.significance_samples)
    other = BIN_BY[1 - BIN_BY.index(settings.bin_by)]
    binned = {by: _binning(sources if by == "source" else references, references, systems, settings)
              for by in (settings.bin_by, other)}  # fmt: skip
    primary = binned[settings.bin_by]
    report_systems = {}
    for name, hyps in systems.items():
        bleu, chrf = BLEU(), CHRF()
        stats = bleu_statistics(bleu, hyps, references)  # (N, C)
        low, high = bootstrap_ci(bleu, stats, settings.n_bootstrap, np.random.default_rng([settings.seed, 0]))
        report_systems[name] = {
            "bleu": bleu_from_statistics(bleu, stats.sum(axis=0)),
            "chrf": chrf.corpus_score(hyps, [references]).score,
            "signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "ci_low": low,
            "ci_high": high,
            "p_value": p_values.get(name),  # {"bleu": p, "chrf": p} against the baseline
            "variants": {v: _variant_score(v, hyps, references) for v in settings.variants},
            "bins": primary["bins"][name],
        }
    _no_test_for_ties(report_systems)
    return {
        "num_sentences": len(references),
        "bin_by": settings.bin_by,
        "bin_spec": primary["spec"],
        "edges": primary["edges"],
        "bin_labels": primary["labels"],
        "min_count": settings.min_count,
        "n_bootstrap": settings.n_bootstrap,
        "seed": settings.seed,
        "significance": {"test": test, "baseline": next(iter(systems)), "signature": test_signature,
                         "correction": "holm over each system's bins"}  # fmt: skip
        if test_signature
        else None,  # None with one system or significance=none
        "systems": report_systems,
        "other_binning": {
            "bin_by": other,
            "edges": binned[other]["edges"],
            "bin_labels": binned[other]["labels"],
            "systems": {name: {"bins": bins} for name, bins in binned[other]["bins"].items()},
        },
    }


def _binning(lengths_of: list[str], references: list[str], systems: dict[str, list[str]], settings: LengthSettings) -> dict:
    """The sentences binned by the word lengths of ``lengths_of`` (sources or references): the
    edges, labels and, per system, the bins' scores with raw and Holm-adjusted p-values."""
    lengths = word_lengths(lengths_of)
    spec = settings.bins if isinstance(settings.bins, str) else list(settings.bins)
    edges = bin_edges(spec, lengths)
    bins = make_bins(edges)
    bin_ids = assign_bins(lengths, edges)
    p_by_bin = {}
    if settings.significance != "none":
        p_by_bin = paired_test_by_bin(systems, references, bin_ids, len(bins), settings.significance,
                                      settings.significance_samples)  # fmt: skip
    scores = {}
    for name, hyps in systems.items():
        per_bin = bin_scores(hyps, references, bin_ids, bins, settings.min_count, settings.n_bootstrap, settings.seed)
        for b, score in enumerate(per_bin):
            score.p_value = p_by_bin[name][b] if name in p_by_bin else None
        scores[name] = per_bin
    baseline = next(iter(systems))
    for name in p_by_bin:  # a bin where the system ties the baseline is no difference (p = 1), then Holm
        for own, base in zip(scores[name], scores[baseline]):
            if own.p_value is not None and own.bleu == base.bleu:
                own.p_value = 1.0
        for score, adjusted in zip(scores[name], holm([s.p_value for s in scores[name]])):
            score.p_holm = adjusted
    return {"spec": spec, "edges": edges, "labels": [b.label for b in bins],
            "bins": {name: [asdict(s) for s in per_bin] for name, per_bin in scores.items()}}  # fmt: skip


def _no_test_for_ties(systems: dict[str, dict]) -> None:
    """A system scoring exactly the baseline's BLEU or chrF overall gets p = 1 there: there is no
    difference to test. sacreBLEU's paired tests would report 1 / (resamples + 1) for such a tie,
    which reads as significant (:func:`_binning` does the same within each bin)."""
    baseline, *others = systems.values()
    for system in others:
        for metric in list(system["p_value"] or {}):
            if system[metric] == baseline[metric]:
                system["p_value"][metric] = 1.0


def _variant_score(variant: str, hypotheses: list[str], references: list[str]) -> dict:
    metric = bleu_variant(variant)
    return {"bleu": metric.corpus_score(hypotheses, [references]).score, "signature": str(metric.get_signature())}


def format_report(report: dict) -> str:
    """The terminal table: a row per length bin, a column per system, BLEU [95% interval]; then
    the same by the other side's length (``other_binning``)."""
    names = list(report["systems"])
    systems = [report["systems"][n] for n in names]
    width = max(24, *(len(n) + 2 for n in names))
    baseline = report["significance"]["baseline"] if report["significance"] else None
    lines = _bin_rows(report, names, width)
    overall = "".join(_cell(s["bleu"], s["ci_low"], s["ci_high"], (s["p_value"] or {}).get("bleu"), width)
                      for s in systems)  # fmt: skip
    lines.append(f"{'all':<8}{report['num_sentences']:>6}  {overall}")
    chrf = "".join(_cell(s["chrf"], None, None, (s["p_value"] or {}).get("chrf"), width) for s in systems)
    lines.append(f"{'chrF':<8}{'':>6}  {chrf}")
    for variant in systems[0]["variants"]:
        row = "".join(_cell(s["variants"][variant]["bleu"], None, None, None, width) for s in systems)
        lines.append(f"{variant:<14}  {row}")
    if "other_binning" in report:  # eval.json written before it was added lacks it
        lines += ["", *_bin_rows({**report["other_binning"], "min_count": report["min_count"]}, names, width)]
    if report.get("word_alignment"):
        lines += ["", *_aer_rows(report)]
    notes = [f"! fewer than {report['min_count']} sentences (or none), or too short for 4-grams "
             "(BLEU 0 whatever the output)"]
    if baseline is not None:
        notes.append(f"* p < 0.05 against {baseline} (paired {report['significance']['test']}; in a bin, "
                     "Holm-adjusted over the system's bins)")
    lines.append("   ".join(notes))
    lines.append(f"BLEU: {systems[0]['signature']}")
    lines.append(f"chrF: {systems[0]['chrf_signature']}")
    for variant, values in systems[0]["variants"].items():
        lines.append(f"BLEU ({variant}): {values['signature']}")
    if baseline is not None:
        lines.append(f"paired test: {report['significance']['signature']}")
    return "\n".join(lines)


def _cell(bleu: float | None, low: float | None, high: float | None, p_value: float | None, width: int) -> str:
    if bleu is None:
        return "-".ljust(width)
    text = f"{bleu:5.2f}" + (f" [{low:5.2f}, {high:5.2f}]" if low is not None else "")
    return (text + (" *" if p_value is not None and p_value < 0.05 else "")).ljust(width)


def _bin_rows(view: dict, names: list[str], width: int) -> list[str]:
    """The heading and one row per bin of a binning (a report, or its ``other_binning``); a
    bin's star reads its Holm-adjusted p-value (the raw one in eval.json written before Holm)."""
    lines = [
        f"corpus BLEU by {view['bin_by']} length (words), [95% bootstrap interval]",
        f"{'bin':<8}{'n':>6}  " + "".join(n.ljust(width) for n in names),
    ]
    for b, label in enumerate(view["bin_labels"]):
        cells = [view["systems"][n]["bins"][b] for n in names]
        mark = "!" if cells[0]["flag"] else " "
        row = "".join(_cell(c["bleu"], c["ci_low"], c["ci_high"], c.get("p_holm", c["p_value"]), width) for c in cells)
        lines.append(f"{label:<8}{cells[0]['count']:>6}{mark} {row}")
    return lines


def _aer_rows(report: dict) -> list[str]:
    """AER (%) by length bin of the systems scored as word aligners, and of the diagonal baseline."""
    view = report["word_alignment"]
    scored = {}
    for name, system in report["systems"].items():
        if system.get("word_alignment"):
            scored[name] = system["word_alignment"]
            for layer, scores in enumerate(system["word_alignment"].get("layers", [])):  # a Transformer's layers
                scored[f"{name} L{layer + 1}"] = scores
    scored["diagonal"] = view["diagonal"]
    width = max(12, *(len(n) + 2 for n in scored))
    cell = lambda x: ("-" if x is None else f"{100 * x:5.1f}").ljust(width)  # noqa: E731
    shift = ", each word read at the step it is the input (shift)" if view.get("shift") else ""
    lines = [f"alignment error rate (%) by {report['bin_by']} length, {view['method']} links of the force-decoded "
             f"reference against gold {view['gold']}{shift}",  # fmt: skip
             f"{'bin':<8}{'n':>6}  " + "".join(n.ljust(width) for n in scored)]
    for b, label in enumerate(report["bin_labels"]):
        lines.append(f"{label:<8}{view['diagonal']['bins'][b]['count']:>6}  "
                     + "".join(cell(a["bins"][b]["aer"]) for a in scored.values()))  # fmt: skip
    lines.append(f"{'all':<8}{report['num_sentences']:>6}  " + "".join(cell(a["aer"]) for a in scored.values()))
    lines.append(f"{'P / R':<14}  " + "".join(f"{100 * a['precision']:.1f} / {100 * a['recall']:.1f}".ljust(width)
                                               for a in scored.values()))  # fmt: skip
    return lines + _extraction_rows(report)


def _extraction_rows(report: dict) -> list[str]:
    """AER (%) over the whole set of each system's attention read every way (plain, shifted,
    ``</s>`` as unaligned, both), a row a system."""
    systems = {n: s["word_alignment"]["extractions"] for n, s in report["systems"].items()
               if (s.get("word_alignment") or {}).get("extractions")}  # fmt: skip
    if not systems:
        return []
    names = list(next(iter(systems.values())))
    width = max(10, *(len(n) + 2 for n in names))
    lines = ["", "alignment error rate (%) of each extraction, the whole set",
             f"{'system':<16}" + "".join(n.ljust(width) for n in names)]  # fmt: skip
    for system, scores in systems.items():
        lines.append(f"{system:<16}" + "".join(f"{100 * scores[n]['aer']:5.1f}".ljust(width) for n in names))
    return lines


def length_figure(report: dict, title: str = "") -> Figure:
    """BLEU against length for every system of a report (see :func:`nmt.plotting.bleu_by_length_figure`)."""
    nan = lambda x: float("nan") if x is None else x  # noqa: E731
    systems = {
        name: np.array([[nan(b["bleu"]), nan(b["ci_low"]), nan(b["ci_high"])] for b in s["bins"]])  # (B, 3)
        for name, s in report["systems"].items()
    }
    counts = [b["count"] for b in next(iter(report["systems"].values()))["bins"]]
    return bleu_by_length_figure(report["bin_labels"], counts, systems, report["min_count"],
                                 xlabel=f"{report['bin_by']} length (words)", title=title)  # fmt: skip


def write_outputs(report: dict, out_dir: Path, figures: dict[str, Figure], tensorboard: str | None) -> None:
    """``eval.json`` and the figures (``<name>.png``) into ``out_dir``; figures into TensorBoard too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_output_text(out_dir / "eval.json", json.dumps(report, indent=2) + "\n")
    writer = SummaryWriter(tensorboard) if tensorboard else None
    for name, fig in figures.items():
        if writer is not None:
            writer.add_figure(f"evaluate/{name}", fig, close=False)
        atomic_write_bytes(out_dir / f"{name}.png", figure_png(fig))
    if writer is not None:
        writer.close()

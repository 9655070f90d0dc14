"""Results over seeds: every seed's ``nmt.evaluate`` report of one split combined into each bin's
mean and standard deviation, how many seeds found a difference significant, and the length result
in one number, and, where gold word alignments were known, each model's alignment error rate per
bin; with the tables and the band plot that show them (used by :mod:`nmt.study`).
"""

from __future__ import annotations

import statistics

import numpy as np

from nmt.plotting import bleu_by_length_figure


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); sd is None for fewer than two values."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def aggregate(reports: dict[int, dict], baseline: str) -> dict:
    """Every seed's ``nmt.evaluate`` report of one split -> the figures over seeds::

        seeds, baseline,
        overall: {model: {seeds, bleu: {mean, sd}, chrf: {mean, sd},
                          per_seed: {seed: {bleu, ci_low, ci_high, chrf, p_value}}}}
        binnings: {"source" | "reference": {edges, bin_labels, counts, min_count,
            models: {model: {seeds,
                bins: [{lo, hi, label, count, mean, sd, significant, tested,
                        per_seed: {seed: {bleu, ci_low, ci_high, p_value, p_holm}}}],
                retained: {bin, mean, sd, per_seed: {seed: that bin's BLEU as % of the first's}}}}}}

    A bin's ``significant`` counts the seeds where the model's difference to the baseline has a
    Holm-adjusted p-value under 0.05, among the ``tested`` seeds that trained both; a bin's
    ``mean`` and ``sd`` (sample, n - 1; null with one seed) are over the seeds' corpus BLEU of the
    bin. ``retained`` is the length result in one number: the BLEU of ``bin``, the longest bin
    holding at least ``min_count`` sentences (the last bin if none does), as a percentage of the
    first bin's. Seeds are JSON keys, hence strings.
    """
    first = next(iter(reports.values()))
    models = list(dict.fromkeys(name for report in reports.values() for name in report["systems"]))
    views = {}
    for binning in ("primary", "other"):
        view = first if binning == "primary" else first["other_binning"]

        def bins_of(report: dict, model: str, binning: str = binning) -> list[dict]:
            return (report if binning == "primary" else report["other_binning"])["systems"][model]["bins"]

        counts = [b["count"] for b in bins_of(first, models[0])]
        # the length result in one number: the longest bin with enough sentences to decide something
        longest = max((b for b, n in enumerate(counts) if n >= first["min_count"]), default=len(counts) - 1)
        per_model = {}
        for model in models:
            seeds = [s for s, r in reports.items() if model in r["systems"]]
            tested = [s for s in seeds if model != baseline and baseline in reports[s]["systems"]]
            bins = []
            for b, label in enumerate(view["bin_labels"]):
                cells = {s: bins_of(reports[s], model)[b] for s in seeds}
                mean, sd = _mean_sd([c["bleu"] for c in cells.values() if c["bleu"] is not None])
                bins.append({
                    "lo": cells[seeds[0]]["lo"], "hi": cells[seeds[0]]["hi"], "label": label,
                    "count": cells[seeds[0]]["count"], "mean": mean, "sd": sd,
                    "significant": sum(1 for s in tested if (cells[s].get("p_holm") or 1.0) < 0.05),
                    "tested": len(tested),
                    "per_seed": {s: {k: c.get(k) for k in ("bleu", "ci_low", "ci_high", "p_value", "p_holm")}
                                 for s, c in cells.items()},
                })  # fmt: skip
            ratios = {s: 100 * c[longest]["bleu"] / c[0]["bleu"] for s in seeds
                      if (c := bins_of(reports[s], model))[0]["bleu"] and c[longest]["bleu"] is not None}  # fmt: skip
            mean, sd = _mean_sd(list(ratios.values()))
            retained = {"bin": view["bin_labels"][longest], "mean": mean, "sd": sd, "per_seed": ratios}
            per_model[model] = {"seeds": seeds, "bins": bins, "retained": retained}
        views[view["bin_by"]] = {
            "edges": view["edges"], "bin_labels": view["bin_labels"], "min_count": first["min_count"],
            "counts": counts, "models": per_model,
        }  # fmt: skip
    overall = {}
    for model in models:
        seeds = [s for s, r in reports.items() if model in r["systems"]]
        systems = {s: reports[s]["systems"][model] for s in seeds}
        overall[model] = {
            "seeds": seeds,
            **{metric: dict(zip(("mean", "sd"), _mean_sd([x[metric] for x in systems.values()])))
               for metric in ("bleu", "chrf")},
            "per_seed": {s: {"bleu": x["bleu"], "ci_low": x["ci_low"], "ci_high": x["ci_high"], "chrf": x["chrf"],
                             "p_value": (x["p_value"] or {}).get("bleu")} for s, x in systems.items()},
        }  # fmt: skip
    return {"seeds": list(reports), "baseline": baseline, "overall": overall, "binnings": views,
            "word_alignment": aggregate_alignment(reports)}  # fmt: skip


def aggregate_alignment(reports: dict[int, dict]) -> dict | None:
    """The seeds' word-alignment scores (``nmt.evaluate`` with gold links) over seeds, or None
    when no report has them::

        gold, method, bin_by, edges, bin_labels, counts,
        models: {model (and "diagonal"): {seeds, aer: {mean, sd}, precision: {mean, sd}, recall: {mean, sd},
                 bins: [{label, count, mean, sd, per_seed: {seed: aer}}]}}

    AER, precision and recall are fractions; ``diagonal`` is the baseline that needs no model. A
    Transformer's every cross-attention layer (heads averaged) follows it as ``"<model> layer K"``
    (0-based, as ``align.layer``), so that the layers can be compared bin by bin.
    """
    scored = {s: r for s, r in reports.items() if r.get("word_alignment")}
    if not scored:
        return None
    first = next(iter(scored.values()))
    per_seed: dict[str, dict] = {}  # model -> seed -> scores
    for seed, report in scored.items():
        for model, system in report["systems"].items():
            if system.get("word_alignment"):
                per_seed.setdefault(model, {})[seed] = system["word_alignment"]
                for layer, scores in enumerate(system["word_alignment"].get("layers") or []):  # a Transformer's
                    per_seed.setdefault(f"{model} layer {layer}", {})[seed] = scores
        per_seed.setdefault("diagonal", {})[seed] = report["word_alignment"]["diagonal"]
    models = {}
    for model, seeds in per_seed.items():
        bins = []
        for b, label in enumerate(first["bin_labels"]):
            values = {s: x["bins"][b]["aer"] for s, x in seeds.items()}
            mean, sd = _mean_sd([v for v in values.values() if v is not None])
            bins.append({"label": label, "count": next(iter(seeds.values()))["bins"][b]["count"], "mean": mean,
                         "sd": sd, "per_seed": values})  # fmt: skip
        models[model] = {"seeds": list(seeds), "bins": bins,
                         **{k: dict(zip(("mean", "sd"), _mean_sd([x[k] for x in seeds.values()])))
                            for k in ("aer", "precision", "recall")}}  # fmt: skip
    view = first["word_alignment"]
    return {"gold": view["gold"], "method": view["method"], "bin_by": first["bin_by"], "edges": first["edges"],
            "bin_labels": first["bin_labels"], "counts": [b["count"] for b in view["diagonal"]["bins"]],
            "models": models, "extractions": _extractions(per_seed)}  # fmt: skip


def _extractions(per_seed: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """model -> extraction (plain, shift, ...) -> AER over the set: {mean, sd, per_seed}."""
    out: dict[str, dict[str, dict]] = {}
    for model, seeds in per_seed.items():
        for seed, scores in seeds.items():
            for extraction, one in (scores.get("extractions") or {}).items():
                out.setdefault(model, {}).setdefault(extraction, {"per_seed": {}})["per_seed"][seed] = one["aer"]
    for by_extraction in out.values():
        for entry in by_extraction.values():
            entry["mean"], entry["sd"] = _mean_sd(list(entry["per_seed"].values()))
    return out


def extraction_table(summary: dict) -> list[str]:
    """A markdown table of the alignment error rate (%) over the whole set, mean ± sd over seeds,
    a row a model, a column per way of reading its attention; empty when nothing was scored."""
    view = (summary.get("word_alignment") or {}).get("extractions")
    if not view:
        return []
    names = list(next(iter(view.values())))
    pct = lambda e: _mean_sd_text(None if e["mean"] is None else 100 * e["mean"],  # noqa: E731
                                  None if e["sd"] is None else 100 * e["sd"])  # fmt: skip
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for model, by_extraction in view.items():
        lines.append(f"| {model} | " + " | ".join(pct(by_extraction[n]) for n in names) + " |")
    return lines


def alignment_table(summary: dict) -> list[str]:
    """A markdown table of the alignment error rate (%) per length bin over seeds, a column per
    model that attends and one for the diagonal baseline; empty when nothing was scored."""
    view = summary.get("word_alignment")
    if not view:
        return []
    pct = lambda m, sd: _mean_sd_text(None if m is None else 100 * m, None if sd is None else 100 * sd)  # noqa: E731
    head = [f"{m} ({len(v['seeds'])} seed{'s' if len(v['seeds']) > 1 else ''})" if m != "diagonal" else m
            for m, v in view["models"].items()]  # fmt: skip
    lines = [f"| {view['bin_by']} words | sentences | " + " | ".join(head) + " |",
             "|---|---:|" + "---|" * len(head)]  # fmt: skip
    for b, label in enumerate(view["bin_labels"]):
        cells = [pct(v["bins"][b]["mean"], v["bins"][b]["sd"]) for v in view["models"].values()]
        lines.append(f"| {label} | {view['counts'][b]} | " + " | ".join(cells) + " |")
    for key, name in (("aer", "all"), ("precision", "precision"), ("recall", "recall")):
        cells = [pct(v[key]["mean"], v[key]["sd"]) for v in view["models"].values()]
        lines.append(f"| {name} | {sum(view['counts']) if key == 'aer' else ''} | " + " | ".join(cells) + " |")
    return lines


def _mean_sd_text(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def aggregate_table(summary: dict, bin_by: str) -> list[str]:
    """A markdown table of one binning over seeds: a row per bin, a column per model (mean ± sd,
    and in how many seeds the difference to the baseline is significant after Holm)."""
    view = summary["binnings"][bin_by]
    models = view["models"]
    head = [f"{m} ({len(v['seeds'])} seed{'s' if len(v['seeds']) > 1 else ''})" for m, v in models.items()]
    lines = [f"| {bin_by} words | sentences | " + " | ".join(head) + " |", "|---|---:|" + "---|" * len(models)]
    for b, label in enumerate(view["bin_labels"]):
        count = view["counts"][b]
        cells = []
        for model in models.values():
            cell = model["bins"][b]
            text = _mean_sd_text(cell["mean"], cell["sd"])
            if cell["tested"]:
                text += f" ({cell['significant']}/{cell['tested']})"
            cells.append(text)
        few = " (few)" if count < view["min_count"] else ""
        lines.append(f"| {label}{few} | {count} | " + " | ".join(cells) + " |")
    overall = [_mean_sd_text(summary["overall"][m]["bleu"]["mean"], summary["overall"][m]["bleu"]["sd"]) for m in models]
    lines.append("| all | " + str(sum(view["counts"])) + " | " + " | ".join(overall) + " |")
    retained = [_mean_sd_text(v["retained"]["mean"], v["retained"]["sd"]) for v in models.values()]
    longest = next(iter(models.values()))["retained"]["bin"]
    lines.append(f"| {longest} as % of {view['bin_labels'][0]} | | " + " | ".join(retained) + " |")
    return lines


def overall_table(summary: dict, rows: dict[tuple[str, int], dict]) -> list[str]:
    """A markdown table, a row per model, of the whole split over seeds: parameters, the best
    validation BLEU of training (greedy), the split's corpus BLEU and chrF as ``nmt.evaluate`` scored
    them (mean ± sd), and in how many seeds BLEU differs from the baseline's (paired bootstrap over
    the whole split, p < 0.05). ``rows``: :func:`nmt.training.runlog.training_row` per (model, seed)."""
    baseline = summary["baseline"]
    lines = [f"| model | seeds | parameters | valid BLEU (greedy) | BLEU | chrF | p < 0.05 vs {baseline} |",
             "|---|---|---:|---|---|---|---:|"]  # fmt: skip
    for model, over in summary["overall"].items():
        trained = [rows.get((model, int(s)), {}) for s in over["seeds"]]
        valid = [r["best_valid_bleu"] for r in trained if r.get("best_valid_bleu") is not None]
        params = next((r["params"] for r in trained if r.get("params")), None)
        p_values = [x["p_value"] for x in over["per_seed"].values() if x["p_value"] is not None]
        tested = f"{sum(p < 0.05 for p in p_values)}/{len(p_values)}" if p_values and model != baseline else "-"
        lines.append(
            f"| {model} | {', '.join(map(str, over['seeds']))} | {'-' if params is None else format(params, ',')}"
            f" | {_mean_sd_text(*_mean_sd(valid))} | {_mean_sd_text(over['bleu']['mean'], over['bleu']['sd'])}"
            f" | {_mean_sd_text(over['chrf']['mean'], over['chrf']['sd'])} | {tested} |"
        )
    return lines


def aggregate_figure(summary: dict, bin_by: str, title: str):
    """Mean BLEU per bin over seeds, a +-1 sd band for models with several seeds."""
    view = summary["binnings"][bin_by]
    nan = lambda x: float("nan") if x is None else x  # noqa: E731
    systems = {}
    for model, values in view["models"].items():
        mean = np.array([nan(c["mean"]) for c in values["bins"]])  # (B,), NaN for an empty bin
        sd = np.array([c["sd"] or 0.0 for c in values["bins"]])  # (B,), 0 with one seed
        rows = np.stack([mean, np.clip(mean - sd, 0, 100), np.clip(mean + sd, 0, 100)], axis=1)  # (B, 3)
        systems[f"{model} ({len(values['seeds'])} seeds)" if len(values["seeds"]) > 1 else model] = rows
    return bleu_by_length_figure(view["bin_labels"], view["counts"], systems, view["min_count"],
                                 xlabel=f"{bin_by} length (words)", title=title,
                                 interval="mean over seeds, band: ±1 sd", band=True)  # fmt: skip

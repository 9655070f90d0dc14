"""Scoring by length (nmt.evaluation.length_bins), the report (nmt.evaluation.report), attention statistics
(nmt.evaluation.alignment) and ``python -m nmt.evaluate`` on files and on checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from sacrebleu.metrics import BLEU, CHRF

from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.data.corpora import load_corpus
from nmt.data.subwords import VocabSettings, build_vocabs
from nmt.data.synthetic import gold_links
from nmt.errors import ConfigError, DataError
from nmt.evaluate import evaluate, pick_sentences, split_text
from nmt.evaluation.alignment import attention_stats, diagonal_band, diagonal_mass, row_entropy
from nmt.evaluation.length_bins import (
    EMPTY,
    FEW_SENTENCES,
    NO_NGRAMS,
    LengthBin,
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
from nmt.evaluation.report import LengthSettings, bleu_variant, format_report, score_systems
from nmt.evaluation.word_alignment import alignment_error_rate, drop_eos, read_gold
from nmt.model import build_model
from nmt.runtime import parse_named

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
WORDS = ["the", "dog", "runs", "a", "cat", "sleeps", "on", "red", "mat", "Big", "house", "near", "river"]


def toy_test_set(count: int, seed: int, max_words: int = 40) -> tuple[list[str], list[str], list[str]]:
    """Sources, references and a noisy hypothesis (some words replaced, some dropped)."""
    rng = np.random.default_rng(seed)
    sources, references, hypotheses = [], [], []
    for length in rng.integers(1, max_words + 1, size=count):
        words = [str(w) for w in rng.choice(WORDS, size=int(length))]
        sources.append(" ".join(words))
        references.append(" ".join(w.upper() for w in words) + ".")
        hyp = [str(rng.choice(WORDS)).upper() if rng.random() < 0.3 else w.upper() for w in words]
        hyp = [w for w in hyp if rng.random() > 0.1]
        hypotheses.append(" ".join(hyp) + ".")
    return sources, references, hypotheses


# --------------------------------------------------------------------------- bins


def test_bins_are_lo_inclusive_hi_exclusive() -> None:
    edges = [10, 15, 20, 25]
    lengths = np.array([0, 1, 9, 10, 14, 15, 19, 20, 24, 25, 26, 100])
    assert assign_bins(lengths, edges).tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    bins = make_bins(edges)
    assert [(b.lo, b.hi) for b in bins] == [(0, 10), (10, 15), (15, 20), (20, 25), (25, None)]
    assert [b.label for b in bins] == ["<10", "10-14", "15-19", "20-24", "25+"]
    assert LengthBin(7, 8).label == "7"
    for b, length_bin in zip(assign_bins(lengths, edges), [bins[i] for i in assign_bins(lengths, edges)]):
        assert length_bin is bins[b]
    for length, b in zip(lengths, assign_bins(lengths, edges)):
        assert bins[b].lo <= length and (bins[b].hi is None or length < bins[b].hi)


def test_no_edges_is_one_open_bin() -> None:
    assert [(b.lo, b.hi) for b in make_bins([])] == [(0, None)]
    assert assign_bins(np.array([0, 5, 500]), []).tolist() == [0, 0, 0]


def test_word_lengths_split_on_whitespace() -> None:
    assert word_lengths(["a b  c", "", " one ", "x\ty"]).tolist() == [3, 0, 1, 2]


@pytest.mark.parametrize("spec", [[10, 10], [0, 5], [15, 10], [-1], "quantile:0", "quantiles:3", "quantile", "5"])
def test_bad_bin_specs_are_refused(spec) -> None:
    with pytest.raises(ValueError, match="bins="):
        bin_edges(spec, np.arange(1, 50))


def test_quantile_bins_have_about_equal_counts() -> None:
    lengths = np.arange(1, 101)
    edges = bin_edges("quantile:4", lengths)
    assert edges == [26, 51, 76]
    assert np.bincount(assign_bins(lengths, edges)).tolist() == [25, 25, 25, 25]
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=997)
    counts = np.bincount(assign_bins(lengths, bin_edges("quantile:5", lengths)))
    assert len(counts) == 5 and counts.min() > 0.7 * 997 / 5


def test_quantile_bins_collapse_on_tied_lengths() -> None:
    assert bin_edges("quantile:5", np.full(30, 7)) == []  # one bin, never an empty one below the minimum
    assert bin_edges("quantile:3", np.array([], dtype=int)) == []


# --------------------------------------------------------------------------- BLEU from statistics


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summed_statistics_give_sacrebleu_corpus_bleu(seed: int) -> None:
    _, refs, hyps = toy_test_set(120, seed)
    bleu = BLEU()
    stats = bleu_statistics(bleu, hyps, refs)
    assert stats.shape == (120, 10) and stats.dtype == np.int64
    assert bleu_from_statistics(bleu, stats.sum(axis=0)) == pytest.approx(BLEU().corpus_score(hyps, [refs]).score)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        subset = rng.choice(120, size=int(rng.integers(1, 120)), replace=False)
        expected = BLEU().corpus_score([hyps[i] for i in subset], [[refs[i] for i in subset]]).score
        assert bleu_from_statistics(bleu, stats[subset].sum(axis=0)) == pytest.approx(expected, abs=1e-9)


def test_bin_bleu_is_sacrebleu_corpus_bleu_of_the_bin() -> None:
    sources, refs, hyps = toy_test_set(300, seed=3)
    edges = [10, 15, 20, 25]
    bin_ids = assign_bins(word_lengths(sources), edges)
    scores = bin_scores(hyps, refs, bin_ids, make_bins(edges), min_count=30, n_bootstrap=50, seed=0)
    assert sum(s.count for s in scores) == len(sources)
    for b, score in enumerate(scores):
        members = np.flatnonzero(bin_ids == b)
        assert score.count == len(members) > 0
        sub_hyps, sub_refs = [hyps[i] for i in members], [[refs[i] for i in members]]
        assert score.bleu == pytest.approx(BLEU().corpus_score(sub_hyps, sub_refs).score, abs=1e-9)
        assert score.chrf == pytest.approx(CHRF().corpus_score(sub_hyps, sub_refs).score, abs=1e-9)
        assert score.ci_low <= score.bleu <= score.ci_high
        mean_sentence_bleu = np.mean([BLEU(effective_order=True).sentence_score(h, [r]).score
                                      for h, r in zip(sub_hyps, sub_refs[0])])  # fmt: skip
        assert score.bleu != pytest.approx(mean_sentence_bleu)  # corpus BLEU, not an average


def test_empty_and_small_bins_are_reported_and_flagged() -> None:
    sources = ["a " * 3, "a " * 4, "a " * 30, "a " * 31, "a " * 32] + ["a " * 12] * 40
    refs = [s.strip().upper() for s in sources]
    edges = [10, 15, 20, 25]
    bin_ids = assign_bins(word_lengths(sources), edges)
    scores = bin_scores(refs, refs, bin_ids, make_bins(edges), min_count=30, n_bootstrap=20, seed=0)
    assert [s.count for s in scores] == [2, 40, 0, 0, 3]
    assert [s.flag for s in scores] == [FEW_SENTENCES, None, EMPTY, EMPTY, FEW_SENTENCES]
    for empty in scores[2:4]:
        assert empty.bleu is None and empty.chrf is None and empty.ci_low is None and empty.ci_high is None
    assert scores[1].bleu == pytest.approx(100.0)
    assert scores[4].hi is None and scores[4].lo == 25


def test_bootstrap_interval_is_seeded_and_brackets_the_score() -> None:
    _, refs, hyps = toy_test_set(200, seed=4)
    bleu = BLEU()
    stats = bleu_statistics(bleu, hyps, refs)
    score = bleu_from_statistics(bleu, stats.sum(axis=0))
    first = bootstrap_ci(bleu, stats, 200, np.random.default_rng(7))
    assert first == bootstrap_ci(bleu, stats, 200, np.random.default_rng(7))
    assert first[0] < score < first[1]
    assert first[1] - first[0] < 15  # 200 sentences: a few BLEU wide, not degenerate
    assert bootstrap_ci(bleu, stats[:0], 200, np.random.default_rng(7)) == (None, None)
    assert bootstrap_ci(bleu, stats, 0, np.random.default_rng(7)) == (None, None)


def test_paired_test_finds_a_clearly_better_system() -> None:
    sources, refs, hyps = toy_test_set(150, seed=5)
    better = [r if i % 4 else h for i, (h, r) in enumerate(zip(hyps, refs))]  # 3/4 perfect
    systems = {"noisy": hyps, "better": better}
    p_values, signature = paired_test(systems, refs, "bs", 200)
    assert set(p_values) == {"better"} and p_values["better"]["bleu"] < 0.05 and p_values["better"]["chrf"] < 0.05
    assert "bs:200" in signature
    edges = [10, 20, 30, 100]
    bin_ids = assign_bins(word_lengths(sources), edges)
    by_bin = paired_test_by_bin(systems, refs, bin_ids, len(edges) + 1, "ar", 200)
    assert len(by_bin["better"]) == 5
    assert by_bin["better"][-1] is None  # no sentence has 100+ words
    assert all(p is not None and 0 < p <= 1 for p in by_bin["better"][:3])
    with pytest.raises(ValueError, match="significance"):
        paired_test(systems, refs, "t-test", 10)


def test_bleu_variants_are_configured_and_labelled() -> None:
    def signature(name: str) -> str:
        metric = bleu_variant(name)
        metric.corpus_score(["A b."], [["a b."]])
        return str(metric.get_signature())

    assert "case:lc" in signature("lowercase") and "tok:13a" in signature("lowercase")
    assert "tok:intl" in signature("tok:intl") and "case:mixed" in signature("tok:intl")
    assert "case:lc" in signature("lowercase+tok:none") and "tok:none" in signature("lowercase+tok:none")
    assert bleu_variant("lowercase").corpus_score(["A B C D"], [["a b c d"]]).score == pytest.approx(100)
    with pytest.raises(ValueError, match="variant"):
        bleu_variant("uppercase")


# --------------------------------------------------------------------------- the report


BIN_KEYS = {"lo", "hi", "count", "bleu", "chrf", "ci_low", "ci_high", "flag", "p_value", "p_holm"}


def check_report_schema(report: dict, num_sentences: int, systems: list[str]) -> None:
    """The documented eval.json layout, and that it is plain JSON."""
    assert json.loads(json.dumps(report)) == report
    assert report["num_sentences"] == num_sentences
    assert list(report["systems"]) == systems
    num_bins = len(report["edges"]) + 1
    assert len(report["bin_labels"]) == num_bins
    for name, system in report["systems"].items():
        for key in ("bleu", "chrf", "ci_low", "ci_high"):
            assert isinstance(system[key], float), (name, key)
        assert system["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
        assert system["chrf_signature"].startswith("nrefs:1|")
        assert len(system["bins"]) == num_bins
        assert sum(b["count"] for b in system["bins"]) == num_sentences
        los = [b["lo"] for b in system["bins"]]
        assert los == [0, *report["edges"]]
        assert [b["hi"] for b in system["bins"]] == [*report["edges"], None]
        for b in system["bins"]:
            assert set(b) == BIN_KEYS
            if b["count"] == 0:
                assert b["bleu"] is None and b["flag"] == EMPTY
            else:
                assert 0 <= b["bleu"] <= 100 + 1e-9 and b["ci_low"] - 1e-9 <= b["bleu"] <= b["ci_high"] + 1e-9
    other = report["other_binning"]  # the same sentences by the other side's length
    assert {report["bin_by"], other["bin_by"]} == {"source", "reference"}
    assert list(other["systems"]) == systems and len(other["bin_labels"]) == len(other["edges"]) + 1
    for system in other["systems"].values():
        assert sum(b["count"] for b in system["bins"]) == num_sentences
        assert all(set(b) == BIN_KEYS for b in system["bins"])


def test_score_systems_report(tmp_path: Path) -> None:
    sources, refs, hyps = toy_test_set(120, seed=6, max_words=22)
    systems = {"base": hyps, "oracle": refs}
    settings = LengthSettings(bins=(5, 10, 25, 30), min_count=30, n_bootstrap=100, variants=("lowercase",))
    report = score_systems(sources, refs, systems, settings)
    check_report_schema(report, 120, ["base", "oracle"])
    oracle = report["systems"]["oracle"]
    assert oracle["bleu"] == pytest.approx(100.0) and oracle["p_value"]["bleu"] < 0.05
    assert report["systems"]["base"]["p_value"] is None  # the baseline
    assert [b["count"] for b in oracle["bins"]][-2:] == [0, 0]  # sentences have at most 22 words
    assert report["significance"]["baseline"] == "base" and "bs:1000" in report["significance"]["signature"]
    assert "case:lc" in oracle["variants"]["lowercase"]["signature"]
    table = format_report(report)
    assert "25-29" in table and "30+" in table and "nrefs:1|case:mixed" in table and "case:lc" in table
    rows = {line.split()[0]: line for line in table.splitlines() if line.split()}
    assert "!" in rows["25-29"] and " - " in rows["25-29"]  # empty: flagged, no score
    by_reference = score_systems(sources, refs, systems, LengthSettings(bins="quantile:3", bin_by="reference",
                                                                       n_bootstrap=0, significance="none"))  # fmt: skip
    assert by_reference["bin_by"] == "reference" and by_reference["significance"] is None
    assert len(by_reference["edges"]) == 2 and by_reference["systems"]["base"]["ci_low"] is None


def test_other_binning_is_the_report_binned_by_the_other_side() -> None:
    """eval.json always holds both binnings: ``other_binning`` of a source-binned report is exactly
    the primary binning of the reference-binned one (and p_holm is Holm's adjustment of p_value)."""
    sources, refs, hyps = toy_test_set(150, seed=8, max_words=30)
    refs = [r + " und so weiter" * (i % 3) for i, r in enumerate(refs)]  # reference lengths differ from sources'
    systems = {"base": hyps, "oracle": refs}
    by_source = score_systems(sources, refs, systems, LengthSettings(bins=(8, 16), n_bootstrap=50))
    by_reference = score_systems(sources, refs, systems, LengthSettings(bins=(8, 16), n_bootstrap=50, bin_by="reference"))
    assert by_source["other_binning"]["bin_by"] == "reference" and by_reference["other_binning"]["bin_by"] == "source"
    for name in systems:
        assert by_source["other_binning"]["systems"][name]["bins"] == by_reference["systems"][name]["bins"]
        assert by_reference["other_binning"]["systems"][name]["bins"] == by_source["systems"][name]["bins"]
    counts = lambda report: [b["count"] for b in report["systems"]["base"]["bins"]]  # noqa: E731
    assert counts(by_source) != counts(by_reference)  # the binnings really differ
    oracle = by_source["systems"]["oracle"]["bins"]
    assert [b["p_holm"] for b in oracle] == holm([b["p_value"] for b in oracle])
    assert all(b["p_holm"] is None for b in by_source["systems"]["base"]["bins"])  # the baseline is not tested
    assert "by reference length" in format_report(by_source)


def test_holm_adjustment() -> None:
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06], nan_ok=True)
    assert holm([]) == [] and holm([None]) == [None]
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    gen = np.random.default_rng(0)
    for _ in range(20):
        p = list(gen.uniform(0, 0.2, size=6))
        adjusted = holm(p)
        assert all(a >= q for a, q in zip(adjusted, p))  # never below the raw p-value
        order = np.argsort(p)
        assert all(np.diff(np.array(adjusted)[order]) >= 0)  # the raw order is kept
        assert min(adjusted) == pytest.approx(min(1.0, 6 * min(p)))  # the smallest is Bonferroni's


def test_score_systems_refuses_mismatched_lengths() -> None:
    sources, refs, hyps = toy_test_set(20, seed=7)
    with pytest.raises(ValueError, match="system short"):
        score_systems(sources, refs, {"short": hyps[:-1]}, LengthSettings())
    with pytest.raises(ValueError, match="bin_by"):
        score_systems(sources, refs, {"a": hyps}, LengthSettings(bin_by="target"))


# --------------------------------------------------------------------------- attention statistics


def test_attention_statistics_of_known_alignments() -> None:
    identity = np.eye(20)
    uniform = np.full((20, 20), 1 / 20)
    anti = np.eye(20)[::-1]
    assert row_entropy(identity) == pytest.approx(np.zeros(20))
    assert row_entropy(uniform) == pytest.approx(np.full(20, np.log(20)))
    assert diagonal_mass(identity, 0.1) == pytest.approx(np.ones(20))
    assert diagonal_band(20, 20, 0.1)[10].sum() == 5  # the diagonal cell and two neighbours each side
    assert diagonal_mass(uniform, 0.1)[10] == pytest.approx(5 / 20)
    assert diagonal_mass(anti, 0.1).mean() == pytest.approx(2 / 20)  # only the two central rows
    stats = attention_stats([identity, uniform, np.eye(40, 10).repeat(1, axis=0)[:10]], band=0.1)
    assert stats.num_sentences == 3 and stats.num_rows == 50
    assert 0 < stats.mean_normalized_entropy < 1 and 0 < stats.diagonal_mass <= 1
    assert attention_stats([], 0.1).num_rows == 0
    # the band is relative: a 10 x 40 alignment along its (stretched) diagonal stays inside it
    stretched = np.zeros((10, 40))
    stretched[np.arange(10), np.arange(10) * 4 + 1] = 1.0
    assert diagonal_mass(stretched, 0.1) == pytest.approx(np.ones(10))


def test_parse_named_and_pick_sentences() -> None:
    assert parse_named(["a:x.txt", "b:dir/y.txt"], "hyps") == {"a": "x.txt", "b": "dir/y.txt"}
    assert parse_named("runs/x/best.pt", "ckpt") == {"best": "runs/x/best.pt"}
    assert parse_named(None, "ckpt") == {}
    with pytest.raises(ValueError, match="twice"):
        parse_named(["a:x", "a:y"], "hyps")
    assert pick_sentences([3, 1], 6, 10, seed=0) == [3, 1]
    picked = pick_sentences([], 6, 10, seed=0)
    assert picked == sorted(set(picked)) and len(picked) == 6 and picked == pick_sentences([], 6, 10, seed=0)
    assert pick_sentences([], 6, 4, seed=0) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="out of range"):
        pick_sentences([10], 6, 10, seed=0)


# --------------------------------------------------------------------------- the command line


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.slow
def test_cli_scores_hypothesis_files(tmp_path: Path) -> None:
    sources, refs, hyps = toy_test_set(80, seed=8, max_words=30)
    src, ref = write(tmp_path / "test.src", sources), write(tmp_path / "test.ref", refs)
    hyp1, hyp2 = write(tmp_path / "noattn.txt", hyps), write(tmp_path / "attn.txt", refs[:40] + hyps[40:])
    out = tmp_path / "eval"
    result = subprocess.run(
        [sys.executable, "-m", "nmt.evaluate", f"src={src}", f"ref={ref}", f"hyps=[noattn:{hyp1},attn:{hyp2}]",
         f"out_dir={out}", "n_bootstrap=100", "significance_samples=100", f"tensorboard={tmp_path / 'tb'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "eval.json").read_text())
    check_report_schema(report, 80, ["noattn", "attn"])
    assert report["edges"] == [10, 15, 20, 25] and report["src"] == str(src)
    assert report["systems"]["noattn"]["hypotheses"] == str(hyp1)
    assert report["systems"]["attn"]["attention"] is None
    assert "BLEU: nrefs:1|case:mixed|eff:no|tok:13a" in result.stdout and "25+" in result.stdout
    assert (out / "bleu_by_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    # Hydra leaves no outputs/, .hydra/ or log file behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.txt", "eval", "noattn.txt", "tb", "test.ref", "test.src"]


@pytest.mark.slow
def test_cli_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    src = write(tmp_path / "s", ["a b", "c"])
    ref = write(tmp_path / "r", ["A B", "C"])
    hyp = write(tmp_path / "h", ["A B"])
    result = subprocess.run(
        [sys.executable, "-m", "nmt.evaluate", f"src={src}", f"ref={ref}", f"hyps=[h:{hyp}]", f"out_dir={tmp_path}/o"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "hyps h: " in result.stderr and "has 1 lines but the source has 2" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def synthetic_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Untrained tiny models (with and without attention) saved as checkpoints of a small
    synthetic corpus; evaluation must work whatever they translate."""
    folder = tmp_path_factory.mktemp("ckpts")
    paths = {}
    for attention in ("none", "bahdanau"):
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("train", overrides=[
                "experiment=smoke", f"model/attention={attention}", f"data.cache_dir={folder / 'cache'}",
                "data.test_size=30", "data.max_words=30",
            ])  # fmt: skip
        corpus = load_corpus(cfg.data)
        src_vocab, tgt_vocab = build_vocabs(corpus["train"].pairs, VocabSettings(**cfg.data.vocab), folder / "spm")
        torch.manual_seed(0)
        model = build_model(cfg.model, len(src_vocab), len(tgt_vocab))
        paths[attention] = folder / f"{attention}.pt"
        save_checkpoint(paths[attention], model, cfg, src_vocab, tgt_vocab)
    return paths


def test_evaluate_checkpoints_on_their_split(synthetic_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[
            f"ckpt=[none:{synthetic_checkpoints['none']},bahdanau:{synthetic_checkpoints['bahdanau']}]",
            "split=test", f"out_dir={tmp_path / 'out'}", "bins=quantile:3", "n_bootstrap=50",
            "significance=ar", "significance_samples=50", "search.beam_size=2", "alignments.num=4", "threads=1",
        ])  # fmt: skip
    report = evaluate(cfg)
    check_report_schema(report, 30, ["none", "bahdanau"])
    assert report["split"] == "test" and report["significance"]["test"] == "ar"
    assert report["systems"]["none"]["attention"] is None
    stats = report["systems"]["bahdanau"]["attention"]
    assert stats["num_sentences"] == 30 and stats["band"] == 0.1
    assert stats["mean_entropy"] >= 0 and 0 <= stats["mean_normalized_entropy"] <= 1 + 1e-6
    assert 0 <= stats["diagonal_mass"] <= 1
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("*.png")) == ["alignments_bahdanau.png", "bleu_by_length.png",
                                                               "bleu_by_reference_length.png"]
    for name in ("none", "bahdanau"):
        hyp_file = Path(report["systems"][name]["hypotheses"])
        assert hyp_file.parent == out / "hypotheses" and len(hyp_file.read_text().splitlines()) == 30
        assert report["systems"][name]["checkpoint"] == str(synthetic_checkpoints[name])
        # the decoding that produced the scores: the given beam, the rest from the checkpoint
        assert report["systems"][name]["search"] == {"beam_size": 2, "n_best": 1, "length_penalty": "gnmt",
                                                     "alpha": 0.6, "max_len_a": 1.5, "max_len_b": 10}  # fmt: skip
    assert report["provenance"]["versions"]["sacrebleu"] == sacrebleu.__version__
    # a synthetic split knows its gold alignments: the attending model is scored as a word aligner
    assert report["systems"]["none"]["word_alignment"] is None
    scored = report["systems"]["bahdanau"]["word_alignment"]
    assert report["word_alignment"]["gold"] == "synthetic" and report["word_alignment"]["method"] == "argmax"
    assert [b["count"] for b in scored["bins"]] == [b["count"] for b in report["systems"]["bahdanau"]["bins"]]
    assert [(b["lo"], b["hi"]) for b in scored["bins"]] == [(b["lo"], b["hi"]) for b in report["systems"]["none"]["bins"]]
    # what was written is what was scored: the links and gold files read back give the same AER
    links = [{tuple(map(int, link.split("-"))) for link in line.split()}
             for line in (out / "word_alignments" / "bahdanau.txt").read_text().splitlines()]  # fmt: skip
    gold = read_gold(out / "gold_alignments.txt", num_pairs=30)
    assert alignment_error_rate(links, gold) == {k: scored[k] for k in ("aer", "precision", "recall", "links")}
    text = split_text(OmegaConf.create(load_checkpoint(synthetic_checkpoints["bahdanau"])["config"]["data"]), "test", None)
    assert [g.sure for g in gold] == [gold_links(source) for source in text.src]
    assert scored["links"] == sum(len(t.split()) for t in text.tgt)  # argmax: one link a target word
    assert report["word_alignment"]["diagonal"]["aer"] > 0.9  # the swaps put nearly every gold link off the diagonal
    assert "alignment error rate (%) by source length" in format_report(report)


def test_eos_unaligned_reaches_the_links_it_scores(synthetic_checkpoints: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """``alignments.eos_unaligned`` chooses the links written and scored; the report scores every
    extraction beside them (plain, shifted, </s> as unaligned, both: each of the 30 pairs' matrices
    goes through ``drop_eos`` once per extraction), ``</s>`` as unaligned only ever removes links,
    and the report says which setting was chosen."""
    import nmt.evaluate

    seen, written = [], {}
    monkeypatch.setattr(nmt.evaluate, "drop_eos", lambda m, unaligned: seen.append(unaligned) or drop_eos(m, unaligned))
    for unaligned in (False, True):
        report = _evaluate(f"ckpt=[bahdanau:{synthetic_checkpoints['bahdanau']}]", "split=test", "threads=1",
                           f"out_dir={tmp_path / str(unaligned)}", f"alignments.eos_unaligned={unaligned}")  # fmt: skip
        assert report["word_alignment"]["eos_unaligned"] is unaligned
        assert sorted(seen) == [False] * 60 + [True] * 60  # 2 readings (shifted or not) x 2 extractions x 30 pairs
        seen.clear()
        scores = report["systems"]["bahdanau"]["word_alignment"]
        assert list(scores["extractions"]) == ["plain", "eos_unaligned", "shift", "shift+eos_unaligned"]
        assert scores["aer"] == scores["extractions"]["eos_unaligned" if unaligned else "plain"]["aer"]
        lines = (tmp_path / str(unaligned) / "word_alignments" / "bahdanau.txt").read_text().splitlines()
        written[unaligned] = [set(line.split()) for line in lines]
    assert len(written[True]) == len(written[False]) == 30
    assert all(kept <= every for kept, every in zip(written[True], written[False]))


def test_the_attention_maps_follow_the_shift(synthetic_checkpoints: dict[str, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """With ``alignments.shift`` the maps are read as the links are (Shift-Att): each target subword's
    row is the next step's attention, the final ``</s>`` has no row, and the title says so."""
    from matplotlib.figure import Figure

    import nmt.evaluate

    drawn = {}

    def record(panels, ncols, title):
        drawn[shift] = (panels, title)
        return Figure(figsize=(1, 1))  # drawing is test_plotting.py's; here, what it is given

    monkeypatch.setattr(nmt.evaluate, "alignment_grid_figure", record)
    for shift in (False, True):
        _evaluate(f"ckpt=[bahdanau:{synthetic_checkpoints['bahdanau']}]", "split=test", "threads=1",
                  f"out_dir={tmp_path / str(shift)}", "alignments.sentences=[0,3]", f"alignments.shift={shift}")  # fmt: skip
    (plain, plain_title), (moved, moved_title) = drawn[False], drawn[True]
    assert "Shift-Att" in moved_title and "Shift-Att" not in plain_title and moved_title.startswith("bahdanau")
    assert len(plain) == len(moved) == 2
    for (weights, src, tgt, title), (weights_s, src_s, tgt_s, title_s) in zip(plain, moved):
        assert tgt[-1] == "</s>" and tgt_s == tgt[:-1] and (src_s, title_s) == (src, title)
        np.testing.assert_array_equal(weights_s, weights[1:])  # row t: the step whose input is subword t


def test_evaluate_checkpoint_on_given_files(synthetic_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    sources = ["poto bolo", "mepu", "a b c d"]
    src, ref = write(tmp_path / "s.txt", sources), write(tmp_path / "r.txt", ["X Y", "Z", "A B C D"])
    hyp = write(tmp_path / "h.txt", ["X Y", "Z", "A B"])
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[
            f"src={src}", f"ref={ref}", f"hyps=[file:{hyp}]", f"ckpt={synthetic_checkpoints['bahdanau']}",
            f"out_dir={tmp_path / 'out'}", "alignments.sentences=[2]", "n_bootstrap=10", "significance=none",
        ])  # fmt: skip
    report = evaluate(cfg)
    assert list(report["systems"]) == ["file", "bahdanau"] and report["split"] is None
    assert report["systems"]["bahdanau"]["attention"]["num_sentences"] == 3
    assert (tmp_path / "out" / "alignments_bahdanau.png").is_file()
    assert "word_alignment" not in report and report["systems"]["bahdanau"]["word_alignment"] is None  # no gold
    # gold links of the given pairs (1-based Pharaoh): the checkpoint is scored against them
    gold = write(tmp_path / "gold.txt", ["1-1 2-2", "1-1", "1-1 2-2 3p3 4-4"])
    common = [f"src={src}", f"ref={ref}", "n_bootstrap=0", "significance=none", "alignments.num=0",
              "alignments.gold_one_based=true", "bins=[2]"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*common, f"ckpt={synthetic_checkpoints['bahdanau']}", f"alignments.gold={gold}",
                                             f"out_dir={tmp_path / 'gold_out'}"])  # fmt: skip
    report = evaluate(cfg)
    assert report["word_alignment"]["gold"] == str(gold)
    scored = report["systems"]["bahdanau"]["word_alignment"]
    assert [b["count"] for b in scored["bins"]] == [1, 2]  # 1 word; 2 and 4 words
    assert report["word_alignment"]["diagonal"]["aer"] == 0.0  # gold on the diagonal; 3p3 is possible
    assert not (tmp_path / "gold_out" / "gold_alignments.txt").exists()  # the user's own gold is not copied
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        short = compose("evaluate", overrides=[*common, f"ckpt={synthetic_checkpoints['bahdanau']}",
                                               f"alignments.gold={write(tmp_path / 'g2.txt', ['1-1'])}",
                                               f"out_dir={tmp_path / 'o2'}"])  # fmt: skip
        unattending = compose("evaluate", overrides=[*common, f"ckpt={synthetic_checkpoints['none']}",
                                                     f"alignments.gold={gold}", f"out_dir={tmp_path / 'o3'}"])  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        clobber = compose("evaluate", overrides=[*common, f"ckpt={synthetic_checkpoints['bahdanau']}",
                                                 f"alignments.gold={tmp_path / 'o4' / 'word_alignments' / 'bahdanau.txt'}",
                                                 f"out_dir={tmp_path / 'o4'}"])  # fmt: skip
    (tmp_path / "o4" / "word_alignments").mkdir(parents=True)
    (tmp_path / "o4" / "word_alignments" / "bahdanau.txt").write_text("1-1\n1-1\n1-1\n")
    with pytest.raises(ValueError, match="is the input file"):  # the gold file is never overwritten
        evaluate(clobber)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        named = compose("evaluate", overrides=[*common, f"ckpt=[diagonal:{synthetic_checkpoints['bahdanau']}]",
                                               f"alignments.gold={gold}", f"out_dir={tmp_path / 'o5'}"])  # fmt: skip
    with pytest.raises(ValueError, match="ckpt name 'diagonal' is the word-alignment baseline's"):
        evaluate(named)
    with pytest.raises(ValueError, match="1 lines of links for 3 sentence pairs"):
        evaluate(short)
    with pytest.raises(ValueError, match="no checkpoint system attends"):
        evaluate(unattending)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        bad = compose("evaluate", overrides=[f"ckpt={synthetic_checkpoints['none']}", "split=train",
                                             f"out_dir={tmp_path / 'bad'}"])  # fmt: skip
    with pytest.raises(ValueError, match="split='train'"):
        evaluate(bad)


def _with_data(checkpoint: Path, out: Path, data: list[str]) -> Path:
    """A copy of ``checkpoint`` whose config's ``data`` section is the composed ``data`` overrides."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        section = OmegaConf.to_container(compose("train", overrides=data).data, resolve=True)
    payload = load_checkpoint(checkpoint)
    torch.save({**payload, "config": {**payload["config"], "data": section}}, out)
    return out


def _evaluate(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return evaluate(compose("evaluate", overrides=["n_bootstrap=0", "significance=none", "alignments.num=0",
                                                       *overrides]))  # fmt: skip


@pytest.mark.parametrize("kind", ["hf", "files"])
def test_a_checkpoint_never_chooses_the_dataset_or_files_evaluate_reads(
    synthetic_checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Without src/ref, a checkpoint of a Hub dataset would send the repository it names to
    datasets.load_dataset (the network), and one of files would have the files it names read."""
    secret = write(tmp_path / "secret.txt", ["a b", "c d"])
    data = {"hf": ["data=hf", "data.path=some/repo"],
            "files": ["data=files", *(f"data.{split}_{side}={secret}" for split in ("train", "valid", "test")
                                      for side in ("src", "tgt"))]}[kind]  # fmt: skip
    crafted = _with_data(synthetic_checkpoints["bahdanau"], tmp_path / "crafted.pt", data)
    monkeypatch.setattr("datasets.load_dataset", lambda *a, **k: pytest.fail("the checkpoint chose a dataset"))
    with pytest.raises(ConfigError, match=r"^ckpt crafted was trained on a '\w+' corpus, .*: give the test set as "
                                          r"src=FILE ref=FILE$"):  # fmt: skip
        _evaluate(f"ckpt=[crafted:{crafted}]", f"out_dir={tmp_path / 'out'}")
    assert not (tmp_path / "out").exists()
    src, ref = write(tmp_path / "s.txt", ["poto bolo"]), write(tmp_path / "r.txt", ["X Y"])
    report = _evaluate(f"ckpt=[crafted:{crafted}]", f"src={src}", f"ref={ref}", f"out_dir={tmp_path / 'out'}")
    assert report["src"] == str(src) and report["num_sentences"] == 1


def test_a_multi30k_split_is_read_from_the_users_folder_never_the_checkpoints(
    synthetic_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """The folder read is data_dir, $NMT_MULTI30K_DIR or the download cache of the command's
    cache_dir, never the checkpoint's data.dir."""
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    for folder, words in ((theirs, "x y"), (mine, "poto bolo")):
        folder.mkdir()
        write(folder / "test_2016_flickr.de", [words, words])
        write(folder / "test_2016_flickr.en", ["X Y", "Z"])
    crafted = _with_data(synthetic_checkpoints["bahdanau"], tmp_path / "m.pt", ["data=multi30k", f"data.dir={theirs}"])
    common = [f"ckpt=[m:{crafted}]", f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}"]
    with pytest.raises(DataError, match="cannot download Multi30k test_2016_flickr.de"):  # offline, no data_dir
        _evaluate(*common)
    report = _evaluate(*common, f"data_dir={mine}")
    assert report["src"] == str(mine / "test_2016_flickr.de") and report["split"] == "test_2016_flickr"


REFERENCES = ["a dog runs across the green park", "a man reads a book on the bench"]


def test_hypothesis_files_of_a_split_are_scored_with_a_runs_config(tmp_path: Path) -> None:
    """With no checkpoint left, a training run's config.yaml names the corpus of the split its
    translations are of; the split is read from the command's data_dir, never the config's data.dir."""
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    for folder, words in ((theirs, "x y"), (mine, "poto bolo")):
        folder.mkdir()
        write(folder / "test_2016_flickr.de", [words, words])
        write(folder / "test_2016_flickr.en", REFERENCES)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        config = compose("train", overrides=["data=multi30k", "data.src_lang=de", "data.tgt_lang=en",
                                             f"data.dir={theirs}"])  # fmt: skip
    run_config = tmp_path / "run" / "config.yaml"
    run_config.parent.mkdir()
    OmegaConf.save(config, run_config)
    hyp = write(tmp_path / "run" / "test_2016_flickr.txt", REFERENCES)
    common = [f"hyps=[a:{hyp}]", f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}"]
    with pytest.raises(ValueError, match="or hyps with run_config=RUN/config.yaml"):  # nothing names the corpus
        _evaluate(*common, f"data_dir={mine}")
    report = _evaluate(*common, f"run_config={run_config}", f"data_dir={mine}", "split=test_2016_flickr")
    assert report["src"] == str(mine / "test_2016_flickr.de") and report["split"] == "test_2016_flickr"
    scored = report["systems"]["a"]
    assert scored["hypotheses"] == str(hyp) and scored["bleu"] == pytest.approx(100)  # the references themselves
    bad = write(tmp_path / "bad.yaml", ["model: {a: 1}"])
    with pytest.raises(ConfigError, match=f"^run_config={bad}: no data section"):
        _evaluate(*common, f"run_config={bad}", f"data_dir={mine}")
    broken = write(tmp_path / "broken.yaml", ["data: [unclosed"])
    with pytest.raises(ConfigError, match=f"^run_config={broken}: cannot read it as a run's config.yaml"):
        _evaluate(*common, f"run_config={broken}", f"data_dir={mine}")


def test_a_failed_evaluation_writes_nothing(synthetic_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Refused after decoding (gold links, but no system attends): no hypotheses, no out_dir."""
    src, ref = write(tmp_path / "s.txt", ["poto bolo"]), write(tmp_path / "r.txt", ["X Y"])
    gold = write(tmp_path / "gold.txt", ["0-0"])
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="no checkpoint system attends"):
        _evaluate(f"ckpt=[a:{synthetic_checkpoints['none']}]", f"src={src}", f"ref={ref}", f"alignments.gold={gold}",
                  f"out_dir={out}")  # fmt: skip
    assert not out.exists()


def test_ties_are_never_called_significant_and_short_bins_are_flagged() -> None:
    """Two systems with identical output tie everywhere: p = 1 and no '*'. A bin of 1-2 word
    sentences scores BLEU 0 even for a perfect system: it is flagged, not silently reported."""
    words = "ein hund rennt über die wiese und ein kind spielt mit dem ball im park".split()
    gen = np.random.default_rng(0)
    sources = [" ".join(gen.choice(words, size=n)) for n in [1, 2] * 20 + [12, 14, 16] * 20]
    references = [s.upper() for s in sources]
    report = score_systems(sources, references, {"a": references, "b": list(references)},
                           LengthSettings(bins=(3,), min_count=10, n_bootstrap=0, significance="bs"))  # fmt: skip
    short, long = report["systems"]["b"]["bins"]
    assert short["bleu"] == 0.0 and short["flag"] == NO_NGRAMS, "a perfect system's short bin"
    assert long["bleu"] == pytest.approx(100.0) and long["flag"] is None
    assert short["p_value"] == long["p_value"] == 1.0
    assert report["systems"]["b"]["p_value"] == {"bleu": 1.0, "chrf": 1.0}
    table = format_report(report)
    assert "*" not in table.split("\n! ")[0], table
    assert "too short for 4-grams" in table


def test_checkpoints_of_two_directions_are_named_with_their_directions(synthetic_checkpoints: dict[str, Path],
                                                                       tmp_path: Path) -> None:  # fmt: skip
    """No split of a corpus is the test set of both directions: say so, rather than that the splits differ."""
    payload = load_checkpoint(synthetic_checkpoints["bahdanau"])
    data = payload["config"]["data"]
    data["src_lang"], data["tgt_lang"] = data["tgt_lang"], data["src_lang"]
    turned = tmp_path / "turned.pt"
    torch.save(payload, turned)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt=[forward:{synthetic_checkpoints['bahdanau']},backward:{turned}]",
                                             f"out_dir={tmp_path / 'out'}", "threads=1"])  # fmt: skip
    named = r"\(ckpt forward translates src->tgt, ckpt backward translates tgt->src\)"
    with pytest.raises(DataError, match=f"the systems translate different directions {named}"):
        evaluate(cfg)
    assert not (tmp_path / "out").exists()

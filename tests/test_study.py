"""The bottleneck study (nmt/study.py): on the synthetic task, whose sentences run to
60 words, the encoder-decoder without attention loses BLEU as sentences grow while the attentional
model does not (Bahdanau et al. 2014, Figure 2; Cho et al. 2014)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import nmt.study
from nmt.evaluation.report import LengthSettings, score_systems
from nmt.model import build_model

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_budget_and_model_overrides() -> None:
    study = nmt.study
    assert study.budget_overrides(["max_steps=300", "max_epochs=2"]) == ["train.max_steps=300", "train.max_epochs=2"]
    for bad in (["steps=3"], ["max_steps"], ["max_steps=-1"]):
        with pytest.raises(SystemExit):
            study.budget_overrides(bad)
    for name, overrides in study.MODELS.items():  # a model is the same whatever the experiment's decoder
        if name in study.OWN_EXPERIMENTS:  # the Transformer: its own experiment's model
            assert overrides == [], name
            continue
        if name in study.HYBRID_SIDES:  # half a Transformer: see the hybrids' test
            continue
        assert sorted(o.split("=")[0] for o in overrides) == ["model/attention", "model/decoder"], name
        assert (f"model/decoder={'luong' if 'luong' in name else 'bahdanau'}") in overrides, name


@pytest.mark.parametrize("data", ["synthetic", "multi30k"])
def test_the_transformer_trains_from_its_own_experiment_on_the_same_budget(data: str) -> None:
    study = nmt.study
    args = study.parse_args(["--data", data, "--out", "o", "--models", "bahdanau", "transformer", "--seeds", "1", "2",
                             "--budget", "max_steps=300"])  # fmt: skip
    plan = study.Plan(args)
    rnn, transformer = plan.runs[("bahdanau", 2)][1], plan.runs[("transformer", 2)][1]
    assert rnn[0] == f"experiment={study.EXPERIMENTS[data]}"
    assert transformer[0] == f"experiment={study.OWN_EXPERIMENTS['transformer'][data]}"
    assert rnn[1:] == [*transformer[1:-1], *study.MODELS["bahdanau"], "train.seed=2"]  # the same budget and seed
    config = study.expected_config(transformer)
    assert config["model"]["decoder"]["_target_"] == "nmt.transformer.TransformerDecoder"
    assert config["train"]["max_steps"] == 300


@pytest.mark.parametrize("data", ["synthetic", "multi30k"])
def test_a_hybrid_has_the_rnn_experiments_budget_and_the_transformers_layers(data: str) -> None:
    """transformer_enc: the Transformer's encoder under Bahdanau's decoder; transformer_dec: the bi-GRU
    under the Transformer's decoder; the Transformer side as deep and wide as in its own experiment."""
    study = nmt.study
    args = study.parse_args(["--data", data, "--out", "o", "--models", "bahdanau", "transformer_enc",
                             "transformer_dec", "--budget", "max_steps=300"])  # fmt: skip
    plan = study.Plan(args)
    own = study.expected_config([f"experiment={study.OWN_EXPERIMENTS['transformer'][data]}"])["model"]
    rnn = study.expected_config(plan.runs[("bahdanau", 1234)][1])
    for name, transformer_side, rnn_side in (("transformer_enc", "encoder", "decoder"),
                                             ("transformer_dec", "decoder", "encoder")):  # fmt: skip
        overrides = plan.runs[(name, 1234)][1]
        assert overrides[0] == f"experiment={study.EXPERIMENTS[data]}"
        config = study.expected_config(overrides)
        assert config["train"] == rnn["train"]  # the same schedule, budget and seed
        assert config["model"][rnn_side] == rnn["model"][rnn_side]
        side = config["model"][transformer_side]
        assert side["_target_"] == own[transformer_side]["_target_"]
        assert {k: side[k] for k in study.SIZE_KEYS} == {k: own[transformer_side][k] for k in study.SIZE_KEYS}
        model = build_model(config["model"], 50, 50)  # nothing of the RNN side is left that it cannot take
        assert {type(model.encoder).__name__, type(model.decoder).__name__} & {"TransformerEncoder",
                                                                               "TransformerDecoder"}  # fmt: skip


def test_guided_models_train_beside_their_unguided_twins_on_the_same_budget_and_seeds(tmp_path: Path) -> None:
    study = nmt.study
    args = study.parse_args(["--data", "synthetic", "--out", "o", "--models", "none", "bahdanau", "transformer",
                             "--guided", "bahdanau", "transformer", "--seeds", "1", "2"])  # fmt: skip
    assert args.models == ["none", "bahdanau", "transformer", "bahdanau_guided", "transformer_guided"]
    plan = study.Plan(args)
    plain, guided = plan.runs[("bahdanau", 2)][1], plan.runs[("bahdanau_guided", 2)][1]
    assert guided == [*plain[:-1], "train.guided_alignment.path=gold", "train.seed=2"]
    assert plan.runs[("transformer_guided", 1)][1][0] == "experiment=synthetic_transformer"
    config = study.expected_config(guided)
    assert config["train"]["guided_alignment"]["path"] == "gold" and config["train"]["seed"] == 2
    links = tmp_path / "train.links"
    args = study.parse_args(["--data", "multi30k", "--out", "o", "--models", "bahdanau", "--guided", "bahdanau",
                             "--guide", str(links)])  # fmt: skip
    assert study.Plan(args).runs[("bahdanau_guided", 1234)][1][-2] == f"train.guided_alignment.path={links}"
    for bad in (["--guided", "luong_dot"], ["--models", "none", "--guided", "none"]):  # not trained, or no attention
        with pytest.raises(SystemExit):
            study.parse_args(["--data", "synthetic", "--out", "o", *bad])
    with pytest.raises(SystemExit):  # Multi30k knows no gold links
        study.parse_args(["--data", "multi30k", "--out", "o", "--models", "bahdanau", "--guided", "bahdanau"])


def test_test_splits_are_found_in_the_data_folder(tmp_path: Path) -> None:
    study = nmt.study
    for name in ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz", "test_2017_flickr.de", "test_2017_flickr.en",
                 "test_2018_flickr.de.gz", "val.de.gz", "val.en.gz"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    args = study.parse_args(["--data", "multi30k", "--out", "o", "--data-dir", str(tmp_path)])
    assert study.test_splits(args) == ["test_2016_flickr", "test_2017_flickr"]  # 2018 lacks English
    assert study.test_splits(study.parse_args(["--data", "multi30k", "--out", "o"])) == ["test_2016_flickr"]
    assert study.test_splits(study.parse_args(["--data", "synthetic", "--out", "o"])) == ["test"]
    args = study.parse_args(["--data", "synthetic", "--out", "o", "--splits", "valid", "test"])
    assert study.test_splits(args) == ["valid", "test"]


def test_training_row_reads_the_run_log_and_results(tmp_path: Path) -> None:
    """The attention table's figures come from the run's own log and results.json."""
    study = nmt.study
    (tmp_path / "train.log").write_text(
        "[2026-11-30 10:00:00,001][nmt.train][INFO] - model: 7,978,560 parameters on cpu x 1 process(es)\n"
        "[2026-11-30 10:01:00,500][nmt.train][INFO] - update 50: loss 6.4, ppl 600.1, |g| 6.46, 2000 target tokens/s\n"
        "[2026-11-30 10:02:00,500][nmt.train][INFO] - update 100: loss 5.1, ppl 164.0, |g| 2.10, 2400 target tokens/s\n"
        "[2026-11-30 10:03:00,500][nmt.train][INFO] - update 150: loss 4.7, ppl 110.0, |g| 1.90, 3000 target tokens/s\n"
        "[2026-11-30 10:30:00,900][nmt.train][INFO] - test_2016_flickr: BLEU 30.00, chrF 50.00\n",
        encoding="utf-8",
    )
    results = {"best_valid_bleu": 29.5, "steps": 670.0, "test_2016_flickr_bleu": 30.0, "test_2016_flickr_chrf": 50.0}
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    row = study.training_row(tmp_path)
    assert row["params"] == 7_978_560
    assert row["minutes"] == 30.0
    assert row["tokens_per_s"] == 2400.0  # the median of the logged rates
    assert row["best_valid_bleu"] == 29.5
    table = study.training_table({("bahdanau", 3): row}, "test_2016_flickr")
    assert table[-1] == "| bahdanau | 3 | 7,978,560 | 670 | 30.0 | 2400 | - | 29.50 | 30.00 | 50.00 |"  # load not logged
    assert len(table) == 3  # header, rule, one model


def test_status_says_what_is_finished_and_estimates_the_time_left(tmp_path: Path) -> None:
    """A study that spans sessions: the finished run needs nothing, the half-trained one its own pace
    times the updates left, the one not started the finished runs' wall time."""
    study = nmt.study
    stamp = "[2026-11-30 10:{:02d}:00,000][nmt.train][INFO] - "
    logs = {
        ("none", 1): [stamp.format(0) + "epoch 1: 100 batches", stamp.format(10) + "validation at update 100: loss 3.0, "
                      "ppl 20.0, BLEU 10.00", stamp.format(20) + "validation at update 200: loss 2.0, ppl 7.0, BLEU 20.00"],
        ("bahdanau", 1): [stamp.format(0) + "epoch 1: 100 batches", stamp.format(12) + "validation at update 100: "
                          "loss 3.0, ppl 20.0, BLEU 12.00", stamp.format(13) + "epoch 2: 100 batches"],
    }  # fmt: skip
    runs = {}
    for model, seed in [("none", 1), ("bahdanau", 1), ("bahdanau", 2)]:
        run_dir = study.run_path(tmp_path, model, seed)
        run_dir.mkdir(parents=True)
        if (model, seed) in logs:
            (run_dir / "train.log").write_text("\n".join(logs[(model, seed)]) + "\n", encoding="utf-8")
        runs[(model, seed)] = (run_dir, {"train": {"max_steps": 0, "max_epochs": 2, "accum_steps": 1}})
    (study.run_path(tmp_path, "none", 1) / "results.json").write_text('{"best_valid_bleu": 20.0}', encoding="utf-8")
    table = study.status_table(runs, jobs=2)
    assert table[2] == "| none | 1 | finished | 20.00 | 20.0 | 0 |"
    assert table[3] == "| bahdanau | 1 | 50% of 200 updates | 12.00 | 13.0 | 12 |"  # 12 min for the first 100
    assert table[4] == "| bahdanau | 2 | not started | - | - | 20 |"  # as long as the finished run
    assert table[-1].startswith("About 32 minutes of training left, 16 of wall time with --jobs 2")


def test_status_gives_no_number_before_anything_has_been_trained(tmp_path: Path) -> None:
    """Before: "About 0 minutes of training left" for a study that had not begun."""
    study = nmt.study
    runs = {}
    for model in ("none", "bahdanau"):
        run_dir = study.run_path(tmp_path, model, 1)
        run_dir.mkdir(parents=True)
        runs[(model, 1)] = (run_dir, {"train": {"max_steps": 0, "max_epochs": 2, "accum_steps": 1}})
    table = study.status_table(runs, jobs=2)
    assert table[2] == "| none | 1 | not started | - | - | - |"
    assert table[-1] == ("Nothing has been trained yet: no estimate of the time left until a run has logged its pace "
                         "(at its first validation).")  # fmt: skip
    first = study.run_path(tmp_path, "none", 1) / "train.log"
    first.write_text("[2026-11-30 10:00:00,000][nmt.train][INFO] - epoch 1: 100 batches\n", encoding="utf-8")
    assert study.status_table(runs, jobs=2)[-1].startswith("No run has validated yet: no estimate")
    assert "minutes" not in study.status_table(runs, jobs=2)[-1]


def test_seeds_plan_the_runs() -> None:
    """Every model once per seed; --single-seed models with the first seed only."""
    study = nmt.study
    args = study.parse_args(["--data", "multi30k", "--out", "o", "--models", "none", "bahdanau", "luong_dot",
                             "--seeds", "7", "1", "2", "--single-seed", "luong_dot"])  # fmt: skip
    assert study.planned_runs(args) == {7: ["none", "bahdanau", "luong_dot"], 1: ["none", "bahdanau"],
                                        2: ["none", "bahdanau"]}  # fmt: skip
    assert study.run_path(Path("o"), "none", 2) == Path("o/runs/none/seed2")
    for bad in (["--seeds", "1", "1"], ["--single-seed", "luong_dot"]):  # a repeated seed; a model not trained
        with pytest.raises(SystemExit):
            study.parse_args(["--data", "synthetic", "--out", "o", *bad])


@pytest.mark.slow
def test_runs_start_as_soon_as_any_finishes_and_a_failure_stops_the_rest(tmp_path: Path) -> None:
    study = nmt.study
    log = tmp_path / "log"
    append = lambda name, wait=0.0: [sys.executable, "-c", f"import time; time.sleep({wait}); open({str(log)!r}, 'a').write('{name}')"]  # noqa: E731, E501
    study.run_all([append("A", wait=3.0), append("B"), append("C")], jobs=2, poll_seconds=0.05)
    assert log.read_text() == "BCA"  # C took B's place while A still ran
    log.unlink()
    with pytest.raises(SystemExit, match="failed"):
        study.run_all([append("A", wait=30.0), [sys.executable, "-c", "raise SystemExit(3)"], append("C")], jobs=2,
                      poll_seconds=0.05)  # fmt: skip
    assert not log.exists()  # A was stopped, C never started


@pytest.mark.slow
def test_a_terminated_study_stops_its_trainings(tmp_path: Path) -> None:
    """``kill PID`` of the study reaches the trainings it started (in sessions of their own, so a
    terminal's Ctrl-C would not): each gets SIGTERM, on which nmt.train saves for resume."""
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    training = (f"import pathlib, signal, sys, time\n"
                f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(stopped)!r}).touch(), sys.exit(0)))\n"
                f"pathlib.Path({str(started)!r}).touch()\ntime.sleep(60)")  # fmt: skip
    driver = ("import sys\nimport nmt.study as study\n"
              f"study._exit_on_signals()\n"
              f"study.run_all([[sys.executable, '-c', {training!r}]], 1, poll_seconds=0.05)")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", driver], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    process.terminate()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and "stopped by SIGTERM" in stderr
    assert stopped.exists()  # the training got its SIGTERM before the study exited


def test_a_finished_run_is_reused_only_with_the_same_config(tmp_path: Path) -> None:
    """The study reuses a finished run only if it trained what the command asks for: where it ran
    and how fast may differ, the seed, budget or model may not."""
    study = nmt.study
    overrides = ["experiment=synthetic_bottleneck", "train.patience=0", *study.MODELS["bahdanau"], "train.seed=1"]
    expected = study.expected_config(overrides)
    saved = study.expected_config([*overrides[:-1], "train.seed=2", "train.threads=2", "data.cache_dir=/elsewhere"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved), encoding="utf-8")
    assert study.run_differences(tmp_path, expected) == ["train.seed: 2 -> 1"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(expected), encoding="utf-8")
    assert study.run_differences(tmp_path, expected) == []
    other = study.expected_config(["experiment=synthetic_bottleneck", "train.patience=0", *study.MODELS["none"],
                                   "train.seed=1", "train.max_steps=10"])  # fmt: skip
    assert {d.split(":")[0] for d in study.run_differences(tmp_path, other)} >= {"model.attention._target_",
                                                                                  "train.max_steps"}  # fmt: skip
    # sentencepiece's sample size shapes nothing when it exceeds the corpus (the log gives its size)
    smaller = study.expected_config([*overrides, "data.vocab.sample_size=5000"])
    (tmp_path / "train.log").write_text("[2026-11-30 10:00:00,001][nmt.data.batches][INFO] - data: 4000 training pairs, "
                                        "valid 100, test 600; vocabularies 48/48 pieces\n")  # fmt: skip
    assert study.run_differences(tmp_path, smaller) == []
    tiny = study.expected_config([*overrides, "data.vocab.sample_size=100"])
    assert study.run_differences(tmp_path, tiny) == ["data.vocab.sample_size: 1000000 -> 100"]


def _seed_report(seed: int, quality: dict[str, float], bins: tuple[int, ...] = (10, 20, 30)) -> dict:
    """An nmt.evaluate report of systems that get a share ``quality[name]`` of each sentence right,
    worse on long sentences for 'none'."""
    gen = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    sources = [" ".join(gen.choice(words, size=n)) for n in gen.integers(3, 40, size=240)]
    systems = {}
    for name, share in quality.items():
        hyps = []
        for sentence in sources:
            tokens = sentence.split()
            keep = share * (0.3 if name == "none" and len(tokens) >= 20 else 1.0)
            hyps.append(" ".join(t if gen.random() < keep else "x" for t in tokens))
        systems[name] = hyps
    return score_systems(sources, sources, systems, LengthSettings(bins=bins, n_bootstrap=50))


@pytest.mark.slow
def test_aggregate_over_seeds_keeps_every_seed_and_its_mean_and_sd() -> None:
    study = nmt.study
    reports = {1: _seed_report(1, {"none": 0.8, "bahdanau": 0.9}), 2: _seed_report(2, {"none": 0.8, "bahdanau": 0.9}),
               3: _seed_report(3, {"none": 0.7, "bahdanau": 0.95, "luong_dot": 0.9})}  # fmt: skip
    summary = study.aggregate(reports, "none")
    assert summary["seeds"] == [1, 2, 3] and summary["baseline"] == "none"
    for bin_by in ("source", "reference"):
        view = summary["binnings"][bin_by]
        assert list(view["models"]) == ["none", "bahdanau", "luong_dot"]
        assert view["models"]["luong_dot"]["seeds"] == [3] and view["models"]["none"]["seeds"] == [1, 2, 3]
        report_view = lambda r, by=bin_by: r if r["bin_by"] == by else r["other_binning"]  # noqa: E731
        for b, cell in enumerate(view["models"]["bahdanau"]["bins"]):
            seeds = [report_view(reports[s])["systems"]["bahdanau"]["bins"][b]["bleu"] for s in (1, 2, 3)]
            assert cell["mean"] == pytest.approx(np.mean(seeds)) and cell["sd"] == pytest.approx(np.std(seeds, ddof=1))
            assert [cell["per_seed"][s]["bleu"] for s in (1, 2, 3)] == seeds
            assert cell["tested"] == 3 and 0 <= cell["significant"] <= 3
            assert cell["count"] == view["counts"][b]
        single = view["models"]["luong_dot"]["bins"][0]
        assert single["sd"] is None and single["tested"] == 1
        assert all(c["tested"] == 0 for c in view["models"]["none"]["bins"])  # the baseline is not tested
    none = summary["binnings"]["source"]["models"]["none"]
    assert none["retained"]["mean"] < 60  # 'none' loses most of its BLEU on the longest bin
    assert summary["binnings"]["source"]["models"]["bahdanau"]["retained"]["mean"] > none["retained"]["mean"]
    assert summary["overall"]["bahdanau"]["bleu"]["mean"] == pytest.approx(
        np.mean([reports[s]["systems"]["bahdanau"]["bleu"] for s in (1, 2, 3)]))
    table = study.aggregate_table(summary, "source")
    assert table[0].startswith("| source words | sentences | none (3 seeds) | bahdanau (3 seeds) | luong_dot (1 seed)")
    assert " ± " in table[2] and "/3)" in table[2] and "/1)" in table[2]
    assert json.loads(json.dumps(summary))  # plain JSON
    rows = {(m, s): {"params": 1_000 + len(m), "best_valid_bleu": 20.0 + s} for m in ("none", "bahdanau") for s in (1, 2, 3)}
    rows[("luong_dot", 3)] = {"params": 2_000, "best_valid_bleu": 30.0}
    overall = study.overall_table(summary, rows)
    assert overall[2].startswith("| none | 1, 2, 3 | 1,004 | 22.00 ± 1.00 | ") and overall[2].endswith(" | - |")
    bahdanau = summary["overall"]["bahdanau"]
    assert f"| {bahdanau['bleu']['mean']:.2f} ± {bahdanau['bleu']['sd']:.2f} |" in overall[3]
    assert overall[3].endswith(" | 3/3 |")  # 0.9 against 0.8 of each sentence's words: clear in every seed
    assert overall[4].startswith("| luong_dot | 3 | 2,000 | 30.00 | ")  # one seed: no sd
    ax = study.aggregate_figure(summary, "source", "test").axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["none (3 seeds)", "bahdanau (3 seeds)", "luong_dot"]
    for band in ax.collections:  # mean +- sd, kept inside BLEU's range
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() >= 0 and ys.max() <= 100


def _with_alignment(report: dict, aer: dict[str, list[float]]) -> dict:
    """``report`` as nmt.evaluate writes it with gold links: ``aer[name]`` per bin (diagonal too)."""
    def scores(values: list[float]) -> dict:
        bins = [{"lo": b["lo"], "hi": b["hi"], "count": b["count"], "aer": v, "precision": 1 - v, "recall": 1 - v,
                 "links": 1.0} for b, v in zip(report["systems"]["none"]["bins"], values)]  # fmt: skip
        return {"aer": float(np.mean(values)), "precision": 0.5, "recall": 0.5, "links": 1.0, "bins": bins}

    report = json.loads(json.dumps(report))
    report["word_alignment"] = {"gold": "synthetic", "method": "argmax", "threshold": 0.0,
                                "diagonal": scores(aer["diagonal"])}  # fmt: skip
    for name, system in report["systems"].items():
        system["word_alignment"] = scores(aer[name]) if name in aer else None
    return report


def test_alignment_error_rate_over_seeds() -> None:
    """Each attending model's AER per bin over seeds, beside the diagonal; 'none' does not attend."""
    study = nmt.study
    aer = {1: [0.1, 0.2, 0.3, 0.4], 2: [0.3, 0.2, 0.1, 0.0]}
    reports = {s: _with_alignment(_seed_report(s, {"none": 0.8, "bahdanau": 0.9}),
                                  {"bahdanau": aer[s], "diagonal": [0.9] * 4}) for s in (1, 2)}  # fmt: skip
    view = study.aggregate(reports, "none")["word_alignment"]
    assert list(view["models"]) == ["bahdanau", "diagonal"] and view["bin_labels"] == ["<10", "10-19", "20-29", "30+"]
    bins = view["models"]["bahdanau"]["bins"]
    assert [b["mean"] for b in bins] == pytest.approx([0.2, 0.2, 0.2, 0.2])
    assert bins[0]["sd"] == pytest.approx(np.std([0.1, 0.3], ddof=1)) and bins[1]["sd"] == pytest.approx(0.0)
    assert bins[3]["per_seed"] == {1: 0.4, 2: 0.0}
    assert view["counts"] == [b["count"] for b in reports[1]["systems"]["none"]["bins"]]
    table = study.alignment_table({"word_alignment": view})
    assert table[0] == "| source words | sentences | bahdanau (2 seeds) | diagonal |"
    assert table[2].endswith("| 20.00 ± 14.14 | 90.00 ± 0.00 |")
    assert study.aggregate({s: _seed_report(s, {"none": 0.8}) for s in (1, 2)}, "none")["word_alignment"] is None
    assert study.alignment_table({"word_alignment": None}) == []


def test_a_transformers_every_layer_is_aggregated_over_seeds_beside_its_chosen_one() -> None:
    """Each cross-attention layer's AER per bin over seeds, as a column after its model's."""
    study = nmt.study
    reports = {}
    for seed in (1, 2):
        report = _with_alignment(_seed_report(seed, {"none": 0.8, "transformer": 0.9}),
                                 {"transformer": [0.2] * 4, "diagonal": [0.9] * 4})  # fmt: skip
        layers = _with_alignment(report, {"transformer": [0.5, 0.6, 0.7, 0.1 * seed], "diagonal": [0.9] * 4})
        report["systems"]["transformer"]["word_alignment"]["layers"] = [
            layers["systems"]["transformer"]["word_alignment"], report["systems"]["transformer"]["word_alignment"]]
        reports[seed] = report
    view = study.aggregate(reports, "none")["word_alignment"]
    assert list(view["models"]) == ["transformer", "transformer layer 0", "transformer layer 1", "diagonal"]
    assert view["models"]["transformer layer 0"]["bins"][3]["per_seed"] == pytest.approx({1: 0.1, 2: 0.2})
    assert view["models"]["transformer layer 1"]["bins"] == view["models"]["transformer"]["bins"]
    table = study.alignment_table({"word_alignment": view})
    assert table[0] == ("| source words | sentences | transformer (2 seeds) | transformer layer 0 (2 seeds) | "
                        "transformer layer 1 (2 seeds) | diagonal |")  # fmt: skip
    assert table[2].startswith("| <10 |") and "| 50.00 ± 0.00 |" in table[2]


def test_every_extraction_is_aggregated_over_seeds() -> None:
    """The AER of each way of reading the attention (plain, shifted, ...), mean ± sd over seeds."""
    study = nmt.study
    reports = {}
    for seed, shifted in ((1, 0.5), (2, 0.7)):
        report = _with_alignment(_seed_report(seed, {"none": 0.8, "bahdanau": 0.9}),
                                 {"bahdanau": [0.1] * 4, "diagonal": [0.9] * 4})  # fmt: skip
        report["systems"]["bahdanau"]["word_alignment"]["extractions"] = {
            "plain": {"aer": 0.1}, "shift": {"aer": shifted}, "eos_unaligned": {"aer": 0.2}}
        reports[seed] = report
    view = study.aggregate(reports, "none")["word_alignment"]
    assert view["extractions"]["bahdanau"]["shift"]["per_seed"] == {1: 0.5, 2: 0.7}
    table = study.extraction_table({"word_alignment": view})
    assert table[0] == "| model | plain | shift | eos_unaligned |"
    assert table[2] == "| bahdanau | 10.00 ± 0.00 | 60.00 ± 14.14 | 20.00 ± 0.00 |"
    assert study.extraction_table({"word_alignment": None}) == []


@pytest.mark.slow
def test_the_length_result_skips_a_last_bin_with_too_few_sentences() -> None:
    """Multi30k's 25+ bin holds 4 test sentences: 'retained' then compares the longest bin that
    holds at least min_count (30) sentences with the first."""
    study = nmt.study
    reports = {s: _seed_report(s, {"none": 0.8, "bahdanau": 0.9}, bins=(10, 20, 30, 37)) for s in (1, 2)}
    summary = study.aggregate(reports, "none")
    view = summary["binnings"]["source"]
    assert view["counts"][-1] < 30 <= min(view["counts"][:-1])  # lengths 37-39 of 3-39: too few
    for result in view["models"].values():
        assert result["retained"]["bin"] == "30-36"
        for s in (1, 2):
            cells = result["bins"][3]["per_seed"][s], result["bins"][0]["per_seed"][s]
            assert result["retained"]["per_seed"][s] == pytest.approx(100 * cells[0]["bleu"] / cells[1]["bleu"])
    assert study.aggregate_table(summary, "source")[-1].startswith("| 30-36 as % of <10 | |")
    full = study.aggregate({s: _seed_report(s, {"none": 0.8, "bahdanau": 0.9}) for s in (1, 2)}, "none")
    assert full["binnings"]["source"]["models"]["none"]["retained"]["bin"] == "30+"  # enough: the last bin


def test_a_seeds_evaluation_is_reused_only_for_the_same_checkpoints_and_settings(tmp_path: Path) -> None:
    """Rebuilding a finished study's tables decodes nothing again; a retrained model, another beam,
    other bins or other models do."""
    study = nmt.study
    checkpoints = {}
    for name in ("none", "bahdanau"):
        checkpoints[name] = study.run_path(tmp_path, name, 1) / "checkpoints" / "best.pt"
        checkpoints[name].parent.mkdir(parents=True)
        checkpoints[name].write_bytes(b"weights")
    seed_dir = tmp_path / "test" / "seed1"
    assert not study.evaluation_is_current(seed_dir, checkpoints, "test", "[10,20]", 5)  # nothing yet
    seed_dir.mkdir(parents=True)
    report = {"split": "test", "bin_spec": [10, 20],
              "systems": {n: {"checkpoint": str(c), "search": {"beam_size": 5}} for n, c in checkpoints.items()}}
    (seed_dir / "eval.json").write_text(json.dumps(report), encoding="utf-8")
    assert study.evaluation_is_current(seed_dir, checkpoints, "test", "[10,20]", 5)
    assert not study.evaluation_is_current(seed_dir, checkpoints, "test", "[10,20]", 1)
    assert not study.evaluation_is_current(seed_dir, checkpoints, "test", "[10,20,30]", 5)
    assert not study.evaluation_is_current(seed_dir, checkpoints, "valid", "[10,20]", 5)
    assert not study.evaluation_is_current(seed_dir, {"none": checkpoints["none"]}, "test", "[10,20]", 5)
    later = (seed_dir / "eval.json").stat().st_mtime + 10  # the model was trained again after scoring
    os.utime(checkpoints["bahdanau"], (later, later))
    assert not study.evaluation_is_current(seed_dir, checkpoints, "test", "[10,20]", 5)


def _recorded_run(plan, name: str, seed: int, translations: list[str], beam: int) -> Path:
    """A finished run folder without its checkpoints: config.yaml, results.json and its
    translations of the test split, as a run copied from another machine keeps them."""
    run_dir, overrides = plan.runs[(name, seed)]
    (run_dir / "hypotheses").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(nmt.study.expected_config(overrides)), encoding="utf-8")
    (run_dir / "results.json").write_text(json.dumps({"search": {"beam_size": beam}}), encoding="utf-8")
    (run_dir / "hypotheses" / "test_2016_flickr.txt").write_text("".join(t + "\n" for t in translations))
    return run_dir


@pytest.mark.slow
def test_a_seed_whose_checkpoints_are_gone_is_scored_from_the_runs_recorded_translations(tmp_path: Path) -> None:
    """A study's tables are rebuilt from finished runs kept without their checkpoints: each run's
    own translations of the split are scored, the first model still the baseline."""
    study = nmt.study
    sources = [f"ein satz {i} mit worten" for i in range(40)]
    references = [f"a sentence {i} of some words" for i in range(40)]
    data = tmp_path / "multi30k"
    data.mkdir()
    for lang, lines in (("de", sources), ("en", references)):
        (data / f"test_2016_flickr.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    args = study.parse_args(["--data", "multi30k", "--out", str(tmp_path / "out"), "--data-dir", str(data),
                             "--cache-dir", str(tmp_path / "cache"), "--models", "none", "bahdanau", "--seeds", "1"])
    plan = study.Plan(args)
    _recorded_run(plan, "none", 1, ["a sentence"] * 40, beam=5)
    best = _recorded_run(plan, "bahdanau", 1, references, beam=5)
    reports, tables = study.evaluate(plan, "test_2016_flickr")
    systems = reports[1]["systems"]
    assert list(systems) == ["none", "bahdanau"] and systems["bahdanau"]["bleu"] == pytest.approx(100)
    assert systems["none"]["checkpoint"] is None and systems["none"]["bleu"] < 10
    assert reports[1]["src"] == str(data / "test_2016_flickr.de") and "bahdanau" in tables[1]
    seed_dir = tmp_path / "out" / "test_2016_flickr" / "seed1"
    recorded = {name: study.run_path(plan.out, name, 1) / "hypotheses" / "test_2016_flickr.txt"
                for name in ("none", "bahdanau")}  # fmt: skip
    assert study.evaluation_is_current(seed_dir, recorded, "test_2016_flickr", plan.bins, 5)  # scored once
    (best / "results.json").write_text(json.dumps({"search": {"beam_size": 1}}), encoding="utf-8")
    with pytest.raises(SystemExit, match="decoded with beam 1, the study scores beam 5"):
        study.evaluate(plan, "test_2016_flickr")
    (best / "hypotheses" / "test_2016_flickr.txt").unlink()
    with pytest.raises(SystemExit, match="has neither checkpoints/best.pt nor its translations of test_2016_flickr"):
        study.evaluate(plan, "test_2016_flickr")


def test_the_synthetic_study_needs_its_checkpoints(tmp_path: Path) -> None:
    """Its tables score attention as word alignment, which translations alone cannot give."""
    study = nmt.study
    plan = study.Plan(study.parse_args(["--data", "synthetic", "--out", str(tmp_path), "--models", "none", "bahdanau"]))
    with pytest.raises(SystemExit, match=r"best\.pt: gone, and the synthetic study scores each model's attention"):
        study.evaluate(plan, "test")


def test_a_seeds_evaluation_outlives_the_checkpoints_of_the_runs_it_scored(tmp_path: Path) -> None:
    """Once a seed is scored, its runs' checkpoints can go: the same command rebuilds the tables
    from the seed's eval.json (the synthetic study's alignment scores with it), as long as the runs
    are the ones it scored; a retrained run, or another beam, is not taken from it."""
    study = nmt.study
    args = ["--data", "synthetic", "--out", str(tmp_path), "--models", "none", "bahdanau", "--seeds", "1"]
    plan = study.Plan(study.parse_args(args))
    runs = {name: study.run_path(plan.out, name, 1) for name in ("none", "bahdanau")}
    for name, run_dir in runs.items():
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps({"test_bleu": len(name)}), encoding="utf-8")
    seed_dir = plan.out / "test" / "seed1"
    seed_dir.mkdir(parents=True)
    report = _seed_report(1, {"none": 0.5, "bahdanau": 0.9})
    report.update(split="test", bin_spec=json.loads(plan.bins))
    for name, system in report["systems"].items():
        system.update(checkpoint=str(runs[name] / "checkpoints" / "best.pt"), search={"beam_size": plan.beam})
    (seed_dir / "eval.json").write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(SystemExit, match="scores each model's attention"):  # no record of what it scored
        study.evaluate(plan, "test")
    (seed_dir / study.SCORED_RUNS).write_text(json.dumps(study.run_digests(runs)), encoding="utf-8")
    reports, tables = study.evaluate(plan, "test")
    assert reports == {1: report} and "bahdanau" in tables[1]
    assert not study.kept_evaluation(seed_dir, runs, "test", plan.bins, plan.beam + 4)
    assert not study.kept_evaluation(seed_dir, {"none": runs["none"]}, "test", plan.bins, plan.beam)
    (runs["bahdanau"] / "results.json").write_text(json.dumps({"test_bleu": 1}), encoding="utf-8")  # retrained
    assert not study.kept_evaluation(seed_dir, runs, "test", plan.bins, plan.beam)
    with pytest.raises(SystemExit, match="scores each model's attention"):
        study.evaluate(plan, "test")


def bins_by_lo(report: dict, system: str) -> dict[int, dict]:
    bins = {b["lo"]: b for b in report["systems"][system]["bins"]}
    assert all(b["count"] >= 60 for b in bins.values()), bins  # ~100 sentences per 10-word bin
    return bins


def _run_study(command: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """Run the study; past ``timeout`` stop it as a user would (SIGTERM, which stops its
    trainings too, where a SIGKILL would leave them running) and fail."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.communicate(timeout=600)
        pytest.fail(f"the study took over {timeout} s")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow
def test_synthetic_bottleneck(tmp_path: Path) -> None:
    """Train both models with a small shared budget (4000 training pairs and 1600 updates in place
    of configs/experiment/synthetic_bottleneck.yaml's 50,000 and 6000), side by side on one thread
    each (``--jobs 2``), and check the length result.

    Over five training seeds and two corpus seeds (docs/results.md) the attentional model scored
    61-88 BLEU on the 40-49 and 50+ word bins after 1300-1600 updates, the model without attention
    3-6 there and 11-19 on sentences under 20 words; the thresholds leave wide margins.
    """
    out = tmp_path / "study"
    command = [sys.executable, "-m", "nmt.study", "--data", "synthetic", "--out", str(out),
               "--cache-dir", str(tmp_path / "cache"), "--budget", "max_steps=1600", "--jobs", "2", "--",
               "data.train_size=4000", "train.eval_every=100"]  # the small budget; the README's is larger  # fmt: skip
    result = _run_study(command, tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "test" / "seed1234" / "eval.json").read_text())  # the one (default) seed
    assert list(report["systems"]) == ["none", "bahdanau"]
    assert report["edges"] == [10, 20, 30, 40, 50]
    for name in ("seed1234/bleu_by_length.png", "seed1234/alignments_bahdanau.png", "bleu_by_length.png",
                 "bleu_by_reference_length.png"):  # fmt: skip
        assert (out / "test" / name).is_file(), name
    over_seeds = json.loads((out / "test" / "eval.json").read_text())
    mean_50 = over_seeds["binnings"]["source"]["models"]["bahdanau"]["bins"][-1]
    assert mean_50["mean"] == report["systems"]["bahdanau"]["bins"][-1]["bleu"] and mean_50["sd"] is None
    summary = (out / "summary.md").read_text()
    assert "| 50+ | " in summary
    # the same command again trains and decodes nothing, and rebuilds the same tables
    again = _run_study(command, tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("(finished)") == 2 and "(the same checkpoints and settings)" in again.stderr
    assert "-m nmt.train" not in again.stderr and "-m nmt.evaluate" not in again.stderr
    assert (out / "summary.md").read_text() == summary

    none, attn = bins_by_lo(report, "none"), bins_by_lo(report, "bahdanau")
    short, long = (0, 10), (40, 50)
    print({name: [round(b["bleu"], 1) for b in bins.values()] for name, bins in (("none", none), ("attn", attn))})
    # attention keeps long sentences right ...
    assert min(attn[lo]["bleu"] for lo in long) >= 50.0
    # ... while without attention BLEU falls as sentences grow: long bins well under the short ones,
    # and their 95% intervals apart
    assert max(none[lo]["bleu"] for lo in long) <= 12.0
    assert min(none[lo]["bleu"] for lo in short) >= 1.5 * max(none[lo]["bleu"] for lo in long)
    assert none[10]["ci_low"] > max(none[lo]["ci_high"] for lo in long)
    assert min(attn[lo]["bleu"] - none[lo]["bleu"] for lo in long) >= 40.0
    for lo in long:
        assert attn[lo]["p_holm"] < 0.05  # paired bootstrap against the model without attention, Holm-adjusted
    stats = report["systems"]["bahdanau"]["attention"]
    assert stats["diagonal_mass"] >= 0.8  # near-diagonal alignments (the swaps stay inside the band)
    # the task's gold alignments score the attention as a word aligner: far better than the diagonal,
    # which misses every swap (the attention often reads a swapped pair from either of its words, so
    # its AER was 69% at this budget against the diagonal's 98%)
    assert report["systems"]["none"]["word_alignment"] is None
    aer = report["systems"]["bahdanau"]["word_alignment"]["aer"]
    assert report["word_alignment"]["diagonal"]["aer"] >= 0.95 and aer <= report["word_alignment"]["diagonal"]["aer"] - 0.15
    assert "| bahdanau (1 seed) | diagonal |" in summary  # the AER table over seeds

"""``python -m nmt.study`` (console script ``nmt-study``), the bottleneck study: train the
encoder-decoder without attention and with attention under one budget, once per seed, then score
every model on the test split(s) by sentence length (Bahdanau et al. 2014, Figure 2) and report
each bin's mean and standard deviation over the seeds. :func:`main` reads as the study runs:
:class:`Plan`, :func:`train`, :func:`evaluate` per split, :func:`report`.

    python -m nmt.study --data synthetic --out runs/bottleneck_synthetic --seeds 1 2 3
    python -m nmt.study --data multi30k --data-dir /path/to/multi30k \\
        --out runs/bottleneck_multi30k --budget max_epochs=15

Every model is trained by ``python -m nmt.train`` with the same experiment, the same budget
(``--budget`` sets ``train.max_steps``/``train.max_epochs``; early stopping is off so that no model
stops sooner) and, per seed, the same ``train.seed``; only ``model/attention`` and
``model/decoder`` differ, or, for ``transformer``, the model of its own experiment
(``synthetic_transformer``, ``multi30k_de_en_transformer``). The hybrids ``transformer_enc`` (the
Transformer's encoder, Bahdanau's attention and decoder) and ``transformer_dec`` (the RNN encoder,
the Transformer's decoder) start from the RNN experiment, with the layers and heads of the
Transformer's own. ``--single-seed`` models are trained
with the first seed only (the costly ones of a large study). Then, per seed, ``python -m
nmt.evaluate`` decodes each split with that seed's checkpoints; the first model is the baseline of the paired tests. Layout:

    OUT/runs/<model>/seed<S>/    training run (checkpoints, train.log, tensorboard, results.json)
    OUT/<split>/seed<S>/         nmt.evaluate of seed S: eval.json (bootstrap intervals, paired
                                 tests), bleu_by_length.png, alignments_<model>.png, hypotheses/,
                                 scored_runs.json (the finished runs it scored)
    OUT/<split>/eval.json        per model and bin, by source and by reference length: the mean and
                                 standard deviation over seeds and every seed's BLEU, interval and
                                 Holm-adjusted p-value, and (synthetic task) each attending model's
                                 alignment error rate per bin (layout: :func:`aggregate`)
    OUT/<split>/bleu_by_length.png, bleu_by_reference_length.png
                                 the mean over seeds, with a +-1 sd band where there are seeds
    OUT/summary.md               the command, every run's training (parameters, wall time, tokens/s,
                                 validation and test scores), the tables over seeds (BLEU, and
                                 AER where the gold alignments are known), and each seed's
                                 nmt.evaluate table

A finished run (``results.json`` present) is reused, after checking that its config is the one
this command would train (settings of where and how fast it ran aside, :data:`nmt.training.checks.INCIDENTAL`); an
unfinished one is continued from its ``checkpoints/last.pt`` (``train.resume=auto``). A seed's
``eval.json`` is reused when it scores the same checkpoints, written after them, on the same split
with the same bins and beam (:func:`evaluation_is_current`), and after the checkpoints are removed
while it scored the same finished runs (``scored_runs.json`` beside it, :func:`kept_evaluation`):
the run folders' small files and the seeds' folders rebuild every table, alignment scores
included. A killed study is resumed, or a finished one's tables rebuilt, by running the same
command again.

``--guided MODEL`` trains ``MODEL_guided`` beside ``MODEL``, with the same experiment, budget and
seeds and guided alignment (``train.guided_alignment.path``: the synthetic task's own links, or
``--guide FILE``); every attending model's AER is reported for each way of reading its attention
(plain, shifted, ``</s>`` as unaligned, both), mean ± sd over seeds:

    python -m nmt.study --data synthetic --out runs/alignment_synthetic --seeds 1 2 3 \
        --models bahdanau luong_dot transformer --guided bahdanau luong_dot transformer

``data=synthetic`` uses ``configs/experiment/synthetic_bottleneck.yaml`` (sentences up to 60 words);
``data=multi30k`` uses ``configs/experiment/multi30k_de_en.yaml``; ``--experiment`` picks another.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nmt.checkpoint import upgrade_config
from nmt.configs import CONFIG_DIR
from nmt.data.multi30k import MULTI30K_SPLITS
from nmt.evaluation.report import format_report
from nmt.evaluation.seeds import (
    aggregate,
    aggregate_figure,
    aggregate_table,
    alignment_table,
    extraction_table,
    overall_table,
)
from nmt.files import atomic_write_bytes, atomic_write_text, check_output_dir
from nmt.plotting import figure_png
from nmt.training.checks import INCIDENTAL, flatten
from nmt.training.runlog import read_run, status_table, training_row, training_table

# model name -> the overrides that select it (everything else comes from the experiment); the
# decoder is always named, so that a model means the same whichever decoder the experiment has
MODELS = {
    "none": ["model/attention=none", "model/decoder=bahdanau"],
    "none_luong_dec": ["model/attention=none", "model/decoder=luong"],
    "bahdanau": ["model/attention=bahdanau", "model/decoder=bahdanau"],
    "bahdanau_luong_dec": ["model/attention=bahdanau", "model/decoder=luong"],
    "luong_general": ["model/attention=luong_general", "model/decoder=luong"],
    "luong_dot": ["model/attention=luong_dot", "model/decoder=luong"],
    "scaled_dot": ["model/attention=scaled_dot", "model/decoder=bahdanau"],
    "scaled_dot_luong_dec": ["model/attention=scaled_dot", "model/decoder=luong"],
}
EXPERIMENTS = {"synthetic": "synthetic_bottleneck", "multi30k": "multi30k_de_en"}
# Models that start from an experiment of their own, whatever --experiment says: a Transformer's
# sizes and schedule are not the RNN experiment's (the data, budget and seeds are shared)
MODELS["transformer"] = []
OWN_EXPERIMENTS = {"transformer": {"synthetic": "synthetic_transformer", "multi30k": "multi30k_de_en_transformer"}}
# Hybrids (Chen et al. 2018, "The Best of Both Worlds"): the Transformer's encoder under the
# Bahdanau model's attention and decoder, or the RNN encoder under the Transformer's decoder. They
# start from the RNN experiment (its embeddings, schedule and budget); their Transformer side keeps
# the layers, heads and feed-forward size of the Transformer's own experiment (hybrid_overrides).
MODELS["transformer_enc"] = ["model/encoder=transformer", "model/attention=bahdanau", "model/decoder=bahdanau"]
MODELS["transformer_dec"] = ["model/decoder=transformer", "model/attention=multihead"]
HYBRID_SIDES = {"transformer_enc": ("encoder",), "transformer_dec": ("decoder", "attention")}
SIZE_KEYS = ("num_layers", "num_heads", "ff_dim", "norm_first", "positions")
GUIDED = "_guided"  # --guided MODEL trains MODEL_guided beside MODEL


@functools.cache  # composed once a study, not once a seed
def hybrid_overrides(name: str, data: str, experiment: str) -> tuple[str, ...]:
    """The overrides that make hybrid ``name``'s Transformer side the one of the Transformer's own
    experiment for ``data`` (:data:`OWN_EXPERIMENTS`) in RNN ``experiment``: the RNN side's settings
    that a Transformer layer has not (``hidden_dim``...) removed, its layers and heads set."""
    own = expected_config([f"experiment={OWN_EXPERIMENTS['transformer'][data]}"])["model"]
    mixed = expected_config([f"experiment={experiment}", *MODELS[name]])["model"]
    out = []
    for side in HYBRID_SIDES[name]:
        out += [f"~model.{side}.{key}" for key in mixed[side] if key not in own[side]]
        out += [f"model.{side}.{key}={own[side][key]}" for key in SIZE_KEYS if key in own[side]]
    return tuple(out)


def model_overrides(name: str, guide: str | None, data: str, experiment: str) -> list[str]:
    """The overrides that select model ``name`` (:data:`MODELS`) in ``experiment`` on ``data``; a
    ``_guided`` one adds guided alignment towards ``guide`` (None: the synthetic task's gold links)."""
    base = name.removesuffix(GUIDED)
    overrides = [*MODELS[base], *(hybrid_overrides(base, data, experiment) if base in HYBRID_SIDES else [])]
    if not name.endswith(GUIDED):
        return overrides
    path = str(Path(guide).resolve()) if guide else "gold"
    return [*overrides, f"train.guided_alignment.path={path}"]


DEFAULT_BINS = {"synthetic": "[10,20,30,40,50]", "multi30k": "[10,15,20,25]"}
DEFAULT_BEAM = {"synthetic": 1, "multi30k": 5}
SAMPLE_SIZE = "data.vocab.sample_size"  # shapes the subwords only of a corpus larger than it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nmt-study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=sorted(EXPERIMENTS), required=True)
    parser.add_argument("--experiment", help="the experiment config every model starts from (default: synthetic_"
                        "bottleneck or multi30k_de_en)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs, figures and tables")
    parser.add_argument("--data-dir", help="multi30k: folder holding the task-1 raw files (data.dir)")
    parser.add_argument("--models", nargs="+", default=["none", "bahdanau"], choices=sorted(MODELS),
                        help="models to train; the first is the baseline of the paired tests")  # fmt: skip
    parser.add_argument("--guided", nargs="+", default=[], metavar="MODEL", help="models also trained with guided "
                        "alignment, as MODEL_guided: towards the synthetic task's own links, or --guide's")  # fmt: skip
    parser.add_argument("--guide", help="links of the training pairs for --guided (train.guided_alignment.path; the "
                        "synthetic task's default: its gold links)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[1234], help="train.seed values: every model is "
                        "trained once per seed (default: 1234)")  # fmt: skip
    parser.add_argument("--single-seed", nargs="+", default=[], metavar="MODEL", help="models trained with the "
                        "first seed only")  # fmt: skip
    parser.add_argument("--budget", nargs="*", default=[], metavar="KEY=VALUE",
                        help="max_steps=N and/or max_epochs=N for every model (default: the experiment's)")  # fmt: skip
    parser.add_argument("--splits", nargs="+", help="splits to evaluate (default: every test split present)")
    parser.add_argument("--bins", help="nmt.evaluate bins= (default: synthetic [10,20,30,40,50], multi30k "
                        "[10,15,20,25])")  # fmt: skip
    parser.add_argument("--beam-size", type=int, help="beam of the evaluation (default: multi30k 5, synthetic 1 "
                        "= greedy, as the toy task is deterministic)")  # fmt: skip
    parser.add_argument("--cache-dir", help="data.cache_dir (subword models, tokenized data)")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once (give each one thread with "
                        "train.threads=1; 2 halves the wall time on a 2-core machine)")  # fmt: skip
    parser.add_argument("--status", action="store_true", help="print what is finished, what is partly trained "
                        "and an estimate of the time left, then stop (trains and decodes nothing)")  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every training run")
    args = parser.parse_args(argv)
    if sorted(set(args.guided) - set(args.models)) or "none" in args.guided:
        parser.error(f"--guided {' '.join(args.guided)}: each must be among --models and attend (not none)")
    if args.guided and args.data != "synthetic" and not args.guide:
        parser.error("--guided on multi30k needs --guide FILE: links of the training pairs (python -m nmt.links)")
    args.models = [*args.models, *(f"{m}{GUIDED}" for m in args.guided)]
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: a seed is given twice")
    unknown = sorted(set(args.single_seed) - set(args.models))
    if unknown:
        parser.error(f"--single-seed {' '.join(unknown)}: not among --models {' '.join(args.models)}")
    return args


def budget_overrides(budget: list[str]) -> list[str]:
    out = []
    for item in budget:
        key, sep, value = item.partition("=")
        if key not in ("max_steps", "max_epochs") or not sep or not value.isdigit():
            raise SystemExit(f"--budget {item!r}: use max_steps=N and/or max_epochs=N")
        out.append(f"train.{key}={value}")
    return out


def planned_runs(args: argparse.Namespace) -> dict[int, list[str]]:
    """seed -> the models trained with it, in ``--models`` order."""
    return {seed: [m for m in args.models if i == 0 or m not in args.single_seed] for i, seed in enumerate(args.seeds)}


def run_path(out: Path, model: str, seed: int) -> Path:
    return out / "runs" / model / f"seed{seed}"


def test_splits(args: argparse.Namespace) -> list[str]:
    """The splits to evaluate: those asked for, else synthetic ``test``, else every Multi30k test
    split whose German and English files are in ``--data-dir`` (test_2016_flickr without one)."""
    if args.splits:
        return args.splits
    if args.data == "synthetic":
        return ["test"]
    if not args.data_dir:
        return ["test_2016_flickr"]
    folder = Path(args.data_dir)
    present = lambda split, lang: any((folder / f"{split}.{lang}{ext}").is_file() for ext in (".gz", ""))  # noqa: E731
    found = [s for s in MULTI30K_SPLITS if s not in ("train", "val") and present(s, "de") and present(s, "en")]
    return found or ["test_2016_flickr"]


# --------------------------------------------------------------------------- reusing finished runs


def expected_config(overrides: list[str]) -> dict:
    """The resolved ``nmt.train`` config that ``overrides`` compose (what a new run would train)."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_container(compose("train", overrides=overrides), resolve=True)


def run_differences(run_dir: Path, expected: dict) -> list[str]:
    """Where a finished run's ``config.yaml`` differs from ``expected`` in a setting that shapes what
    it learned, as ``key: run's -> expected``. Keys that only one side has (added to nmt since the
    run, with the value it ran with) and :data:`nmt.training.checks.INCIDENTAL` ones are left out."""
    saved = upgrade_config(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True))
    old, new = flatten(saved), flatten(expected)
    keys = sorted(k for k in old.keys() & new.keys() if k.split(".")[0] in ("model", "data", "train"))
    differ = [k for k in keys if k not in INCIDENTAL and old[k] != new[k]]
    pairs = read_run(run_dir).train_pairs
    if pairs is not None and min(old.get(SAMPLE_SIZE, 0), new.get(SAMPLE_SIZE, 0)) >= pairs:
        differ = [k for k in differ if k != SAMPLE_SIZE]  # sentencepiece read the whole corpus either way
    return [f"{k}: {old[k]!r} -> {new[k]!r}" for k in differ]


# --------------------------------------------------------------------------- running the commands


def run(command: list[str]) -> str:
    """Run a command, echo it, let its stderr through, return its stdout; stop on failure."""
    print("+", shlex.join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"failed (exit {result.returncode}): {shlex.join(command)}")
    return result.stdout


def run_all(commands: list[list[str]], jobs: int, poll_seconds: float = 1.0) -> None:
    """Run commands ``jobs`` at a time (their output passes through), starting the next one as soon
    as any finishes; stop at the first failure.

    The commands run in process groups of their own, so a Ctrl-C in the terminal reaches this process
    only; however it stops (a failure, Ctrl-C, SIGTERM or SIGHUP: see :func:`_exit_on_signals`) it
    sends each command still running one SIGTERM, on which ``nmt.train`` saves for resume, and waits
    for it. Only a SIGKILL of this process leaves them running.
    """
    pending, running = list(commands), []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                command = pending.pop(0)
                print("+", shlex.join(command), file=sys.stderr, flush=True)
                running.append((command, subprocess.Popen(command, preexec_fn=os.setpgrp)))
            done = [(command, process) for command, process in running if process.poll() is not None]
            if not done:
                time.sleep(poll_seconds)
                continue
            for command, process in done:
                running.remove((command, process))
                if process.returncode != 0:
                    raise SystemExit(f"failed (exit {process.returncode}): {shlex.join(command)}")
    finally:
        for _, process in running:
            process.terminate()
        for _, process in running:
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()


def _exit_on_signals() -> None:
    """SIGTERM and SIGHUP (``kill PID``, a closed terminal) end this process as Ctrl-C does, through
    ``finally`` blocks, so :func:`run_all` stops its trainings cleanly."""

    def stop(signum: int, frame) -> None:
        raise SystemExit(f"stopped by {signal.Signals(signum).name}; run the same command again to resume")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def seed_report(seed_dir: Path, names: list[str], split: str, bins: str) -> dict | None:
    """``seed_dir/eval.json`` if it scores the systems ``names`` (in order) on ``split`` with these
    bins, else None: what both ways of reusing a seed's evaluation check first."""
    path = seed_dir / "eval.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    spec = json.loads(bins) if bins.startswith("[") else bins  # "[10,15]" or "quantile:K"
    same = list(report.get("systems", {})) == names and report.get("split") == split and report.get("bin_spec") == spec
    return report if same else None


def evaluation_is_current(seed_dir: Path, systems: dict[str, Path], split: str, bins: str, beam: int) -> bool:
    """Whether ``seed_dir/eval.json`` already scores ``systems`` (name -> the best checkpoint, or the
    run's recorded translations of ``split``, in order) on ``split`` with these bins and beam, and was
    written after every one of them (a retrained model is scored again)."""
    report = seed_report(seed_dir, list(systems), split, bins)
    if report is None:
        return False
    written = (seed_dir / "eval.json").stat().st_mtime
    return all(
        (system.get("checkpoint") == str(source) and (system.get("search") or {}).get("beam_size") == beam
         if source.suffix == ".pt" else system.get("checkpoint") is None and system.get("hypotheses") == str(source))
        and source.is_file() and source.stat().st_mtime < written
        for system, source in zip(report["systems"].values(), systems.values())
    )  # fmt: skip


SCORED_RUNS = "scored_runs.json"  # beside a seed's eval.json: which finished runs it scored


def run_digests(runs: dict[str, Path]) -> dict[str, str]:
    """name -> the SHA-256 of the run's ``results.json``, which a finished run writes once and a
    retrained one rewrites: what still identifies a run after its checkpoints are gone."""
    return {name: hashlib.sha256((run_dir / "results.json").read_bytes()).hexdigest() for name, run_dir in runs.items()}


def kept_evaluation(seed_dir: Path, runs: dict[str, Path], split: str, bins: str, beam: int) -> bool:
    """Whether ``seed_dir/eval.json`` scored exactly these finished runs (name -> run folder; the
    digests that :data:`SCORED_RUNS` kept when it was written) on ``split`` with these bins and beam.

    The study's tables, the synthetic study's alignment scores among them, are then rebuilt from it
    after the runs' checkpoints were removed (or left behind when the folders were copied)."""
    scored_runs = seed_dir / SCORED_RUNS
    if not scored_runs.is_file() or not all((r / "results.json").is_file() for r in runs.values()):
        return False
    report = seed_report(seed_dir, list(runs), split, bins)
    if report is None:
        return False
    beams = {(system.get("search") or {}).get("beam_size") for system in report["systems"].values()}
    return beams == {beam} and json.loads(scored_runs.read_text(encoding="utf-8")) == run_digests(runs)


def recorded_translations(run_dir: Path, split: str, beam: int) -> Path:
    """A finished run's translations of ``split`` (``hypotheses/<split>.txt``, written by its final
    evaluation with the best checkpoint): what the study scores when the checkpoint is gone (a run
    folder kept without its checkpoints, or copied from another machine without them).

    :raise SystemExit: the run has no such file, or decoded it with another beam than the study's."""
    path, results = run_dir / "hypotheses" / f"{split}.txt", run_dir / "results.json"
    if not (path.is_file() and results.is_file()):
        raise SystemExit(f"{run_dir} has neither checkpoints/best.pt nor its translations of {split} ({path}); "
                         "remove the run folder to train it again")  # fmt: skip
    search = json.loads(results.read_text(encoding="utf-8")).get("search") or {}
    if search.get("beam_size") != beam:
        raise SystemExit(f"{path} was decoded with beam {search.get('beam_size')}, the study scores beam {beam}, "
                         f"and {run_dir / 'checkpoints/best.pt'} is gone: give --beam-size "
                         f"{search.get('beam_size')}, or remove the run folder to train it again")  # fmt: skip
    return path


# --------------------------------------------------------------------------- the study: plan, train, evaluate, report


class Plan:
    """What a study command asks for: the runs (model, seed) -> (folder, overrides), the splits to
    score, the bins and the beam of the evaluation.

    :param args: the parsed command line (:func:`parse_args`).
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, args.out.resolve()
        experiment = args.experiment or EXPERIMENTS[args.data]
        common = ["train.patience=0"]
        common += budget_overrides(args.budget)
        if args.data_dir:
            common.append(f"data.dir={Path(args.data_dir).resolve()}")
        if args.cache_dir:
            common.append(f"data.cache_dir={Path(args.cache_dir).resolve()}")
        self.common = common + args.overrides
        self.seeds = planned_runs(args)
        self.experiments = {name: OWN_EXPERIMENTS.get(name.removesuffix(GUIDED), {}).get(args.data, experiment)
                            for name in args.models}  # fmt: skip
        self.runs = {}
        for seed, models in self.seeds.items():
            for name in models:
                overrides = model_overrides(name, args.guide, args.data, self.experiments[name])
                self.runs[(name, seed)] = (run_path(self.out, name, seed), [f"experiment={self.experiments[name]}",
                                                                            *self.common, *overrides,
                                                                            f"train.seed={seed}"])  # fmt: skip
        self.splits = test_splits(args)
        self.bins, self.beam = args.bins or DEFAULT_BINS[args.data], args.beam_size or DEFAULT_BEAM[args.data]


def train(plan: Plan) -> None:
    """Train every run that has not finished (``--jobs`` at a time), after checking that each
    finished one was trained with the config this study asks for."""
    training = []
    for run_dir, overrides in plan.runs.values():
        if (run_dir / "results.json").is_file():
            differences = run_differences(run_dir, expected_config(overrides))
            if differences:
                raise SystemExit(f"{run_dir} finished with another config than this study's: "
                                 f"{'; '.join(differences)}. Remove that folder to train it again, or "
                                 "give another --out")  # fmt: skip
            print(f"reusing {run_dir} (finished)", file=sys.stderr)
            continue
        training.append([sys.executable, "-m", "nmt.train", *overrides, "train.resume=auto",
                         f"hydra.run.dir={run_dir}"])  # fmt: skip
    _exit_on_signals()
    run_all(training, plan.args.jobs)


def evaluate(plan: Plan, split: str) -> tuple[dict[int, dict], dict[int, str]]:
    """Every seed's ``nmt.evaluate`` of ``split`` (reused when current): seed -> report, seed -> table.

    A seed's models are decoded from their best checkpoints. Where one of them is gone, the seed's
    own ``eval.json`` is reused if it scored these very runs (:func:`kept_evaluation`); else the
    seed is scored from every model's recorded translations (:func:`recorded_translations`), with
    no attention maps (the synthetic study's alignment scores need every checkpoint)."""
    reports, tables = {}, {}
    out, args = plan.out, plan.args
    for seed, models in plan.seeds.items():
        runs = {name: run_path(out, name, seed) for name in models}
        systems = {name: run_dir / "checkpoints" / "best.pt" for name, run_dir in runs.items()}
        seed_dir = out / split / f"seed{seed}"
        recorded = not all(path.is_file() for path in systems.values())
        kept = recorded and kept_evaluation(seed_dir, runs, split, plan.bins, plan.beam)
        if recorded and not kept:
            if args.data == "synthetic":
                missing = ", ".join(str(path) for path in systems.values() if not path.is_file())
                raise SystemExit(f"{missing}: gone, and the synthetic study scores each model's attention as word "
                                 "alignment from its checkpoint; remove the run folder to train it again")  # fmt: skip
            systems = {name: recorded_translations(run_dir, split, plan.beam) for name, run_dir in runs.items()}
            print(f"seed {seed}: scoring the runs' recorded translations of {split} (a checkpoint is gone)",
                  file=sys.stderr)  # fmt: skip
        if kept or evaluation_is_current(seed_dir, systems, split, plan.bins, plan.beam):
            why = ("it scored these runs before their checkpoints were removed" if kept
                   else "the same checkpoints and settings")  # fmt: skip
            print(f"reusing {seed_dir / 'eval.json'} ({why})", file=sys.stderr)
            reports[seed] = json.loads((seed_dir / "eval.json").read_text(encoding="utf-8"))
            tables[seed] = format_report(reports[seed]).rstrip()
        else:
            tables[seed] = run(evaluate_command(plan, split, seed, runs, systems, recorded)).rstrip()
            reports[seed] = json.loads((seed_dir / "eval.json").read_text(encoding="utf-8"))
        atomic_write_text(seed_dir / SCORED_RUNS, json.dumps(run_digests(runs), indent=1) + "\n")
    return reports, tables


def evaluate_command(plan: Plan, split: str, seed: int, runs: dict[str, Path], systems: dict[str, Path],
                     recorded: bool) -> list[str]:  # fmt: skip
    """The ``nmt.evaluate`` command line that scores one seed's ``systems`` (checkpoints, or the
    runs' recorded translations when ``recorded``) into ``OUT/<split>/seed<S>/``."""
    out, args = plan.out, plan.args
    seed_dir = out / split / f"seed{seed}"
    named = ",".join(f"'{name}:{path}'" for name, path in systems.items())
    chosen = [f"hyps=[{named}]", f"run_config={next(iter(runs.values())) / 'config.yaml'}"] if recorded else [
        f"ckpt=[{named}]", f"search.beam_size={plan.beam}"]  # fmt: skip
    command = [
        sys.executable, "-m", "nmt.evaluate", *chosen, f"split={split}", f"out_dir={seed_dir}",
        f"bins={plan.bins}", f"tensorboard={out / 'tensorboard' / split / f'seed{seed}'}",
    ]  # fmt: skip
    if args.data_dir:
        command.append(f"data_dir={Path(args.data_dir).resolve()}")
    if args.cache_dir:
        command.append(f"cache_dir={Path(args.cache_dir).resolve()}")
    return command


def report(plan: Plan, argv: list[str]) -> None:
    """``summary.md`` (the command, every run's training, the tables over seeds, each seed's table),
    and per split ``eval.json`` and the plots over seeds."""
    out, args = plan.out, plan.args
    rows = {key: training_row(run_dir) for key, (run_dir, _) in plan.runs.items()}
    summary = [
        f"# Bottleneck study ({args.data})", "",
        "```", shlex.join(["python", "-m", "nmt.study", *argv]), "```",
        "", f"Experiments: {', '.join(f'{name}: `{exp}`' for name, exp in plan.experiments.items())}", "",
        f"Training overrides shared by every model: `{' '.join(plan.common)}`, and `train.seed=S` per seed", "",
        *(f"- {name}: `{' '.join(model_overrides(name, args.guide, args.data, plan.experiments[name]))}`"
          for name in args.models), "",
        "## Training", "", *training_table(rows, plan.splits[0]), "",
        "machine: the median 1-minute load average while it trained; *shared* where it exceeded the run's own "
        "threads, i.e. other processes took cores too and its wall time and tokens/s are not the machine's "
        "(`-`: a log from before the load was logged).", "",
    ]  # fmt: skip
    for split in plan.splits:
        reports, tables = evaluate(plan, split)
        result = aggregate(reports, args.models[0])
        atomic_write_text(out / split / "eval.json", json.dumps(result, indent=2) + "\n")
        for bin_by, name in (("source", "bleu_by_length"), ("reference", "bleu_by_reference_length")):
            atomic_write_bytes(out / split / f"{name}.png", figure_png(aggregate_figure(result, bin_by, split)))
        over_seeds = [f"## {split}", "",
                      f"Corpus BLEU per bin, mean ± sd over seeds ({', '.join(map(str, args.seeds))}); (k/n): the "
                      f"difference to {args.models[0]} is significant in k of n seeds (paired bootstrap, Holm-adjusted "
                      "over the bins, p < 0.05).", "", *overall_table(result, rows), ""]  # fmt: skip
        for bin_by in ("source", "reference"):
            over_seeds += aggregate_table(result, bin_by) + [""]
        aer = alignment_table(result)
        if aer:
            view = result["word_alignment"]
            over_seeds += [f"Alignment error rate (%) per bin, mean ± sd over seeds: the {view['method']} links of "
                           "each model's attention, the reference force-decoded, against the gold links "
                           f"({view['gold']}); lower is better; the diagonal needs no model.", "", *aer, ""]  # fmt: skip
            over_seeds += ["Alignment error rate (%) of the whole set, mean ± sd over seeds, by how the attention is "
                           "read: plain, each word's attention one step later (shift), a word attending most to "
                           "</s> left unaligned (eos_unaligned), and both.", "", *extraction_table(result), ""]  # fmt: skip
        over_seeds += [f"![BLEU by source length]({split}/bleu_by_length.png)", ""]
        for seed, table in tables.items():
            over_seeds += [f"### {split}, seed {seed}", "", "```", table, "```", "",
                           f"![BLEU by length, seed {seed}]({split}/seed{seed}/bleu_by_length.png)", ""]  # fmt: skip
        print("\n".join(over_seeds), flush=True)
        summary += over_seeds
    atomic_write_text(out / "summary.md", "\n".join(summary) + "\n")
    print(f"\nwrote {out / 'summary.md'}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        check_output_dir(args.out, "--out")
    except ValueError as e:
        raise SystemExit(str(e)) from None
    plan = Plan(args)
    if args.status:
        runs = {key: (run_dir, expected_config(overrides)) for key, (run_dir, overrides) in plan.runs.items()}
        print("\n".join(status_table(runs, args.jobs)))
        return
    train(plan)
    report(plan, argv)


if __name__ == "__main__":
    main()

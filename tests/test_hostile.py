"""The project attacked the way a stranger's file or a tired user would: crafted checkpoints,
commands run into a finished run's folder, outputs aimed at special files or at the inputs, and
inputs that are not plain files. Each attack gets one line and exit status 2 (or, where the input
is fine, the right result), and leaves everything it did not mean to touch as it was.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, ToyCorpus, make_toy_corpus, process_restored, train_in_process
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.checkpoint import load_checkpoint, load_model, model_from_checkpoint
from nmt.data.text import DataError
from nmt.errors import CheckpointError
from nmt.search import SearchSettings
from nmt.train import claim_folder, train
from nmt.training.trainer import random_state, restore_random_state
from nmt.translate import format_translations, read_input
from nmt.translator import Translator, translate_lines

CPU = torch.device("cpu")
GREEDY = SearchSettings(beam_size=1, n_best=1, length_penalty="none", alpha=0.0, max_len_a=1.5, max_len_b=5)


def _run(module: str, args: list[str], cwd: Path, stdin: bytes = b"", timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, input=stdin, capture_output=True,
                          timeout=timeout)  # fmt: skip


def _one_line_refusal(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, no traceback, one error line holding every needle; returns that line."""
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if " ERROR " in line or "][ERROR]" in line]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], err
    return errors[0]


# --------------------------------------------------------------------------- a checkpoint is data


def _write_text_node(target: Path) -> dict:
    """The issue's probe: Hydra would build the nested Path node first, then call write_text."""
    return {"_target_": "nmt.runtime.Path.write_text", "_args_": [{"_target_": "nmt.runtime.Path", "_args_": [str(target)]},
                                                                 "x\n"]}  # fmt: skip


def _with_model_node(payload: dict, role: str, key: str | None, value) -> dict:
    """A copy of ``payload`` whose ``config.model.<role>`` (or its ``key``) is ``value``."""
    config = {**payload["config"], "model": {**payload["config"]["model"]}}
    if key is None:
        config["model"][role] = value
    else:
        config["model"][role] = {**config["model"][role], key: value}
    return {**payload, "config": config}


CRAFTED = {
    # (role, key or None for the whole node, value as a function of the file it must not write)
    "nested_target_writes_a_file": ("encoder", "num_layers", _write_text_node),
    "nmt_function_as_target": ("encoder", None, lambda t: {"_target_": "nmt.files.atomic_write_text",
                                                            "path": str(t), "text": "x"}),  # fmt: skip
    "foreign_target": ("attention", "_target_", lambda t: "os.system"),
    "hydra_args": ("decoder", "_args_", lambda t: [str(t)]),
    "partial": ("attention", "_partial_", lambda t: True),
    "list_value": ("encoder", "hidden_dim", lambda t: [16, str(t)]),
    "interpolation": ("encoder", "hidden_dim", lambda t: "${oc.env:HOME}"),
}


@pytest.mark.parametrize("attack", list(CRAFTED))
def test_a_crafted_checkpoint_config_is_refused_before_anything_runs(attack: str, smoke_run, tmp_path: Path) -> None:
    role, key, make = CRAFTED[attack]
    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), role, key, make(pwned)), evil)
    with pytest.raises(CheckpointError) as error:
        load_model(evil, CPU)
    assert str(evil) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(CheckpointError):
        Translator.from_checkpoint(evil, device="cpu")
    assert not pwned.exists()


@pytest.mark.slow
def test_the_issue_probe_writes_nothing_through_any_command(smoke_run, tmp_path: Path) -> None:
    """translate, evaluate, the explorer and average all refuse the file in one line, exit 2."""
    pwned = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), "encoder", "num_layers", _write_text_node(pwned)),
               evil)  # fmt: skip
    src = tmp_path / "src.txt"
    src.write_text("toga sala\n", encoding="utf-8")
    commands = {
        "nmt.translate": [f"ckpt={evil}", f"input={src}", f"output={tmp_path / 'out.txt'}"],
        "nmt.evaluate": [f"ckpt=[evil:{evil}]", f"src={src}", f"ref={src}", f"out_dir={tmp_path / 'eval'}"],
        "nmt.demo": [f"ckpt={evil}", "port=0"],
    }
    for module, args in commands.items():
        _one_line_refusal(_run(module, args, tmp_path), str(evil))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.pt", "src.txt"], module
    assert not pwned.exists()


@pytest.mark.slow
def test_loading_a_crafted_checkpoint_imports_nothing(smoke_run, tmp_path: Path) -> None:
    """A ``_target_`` naming a module of nmt that is not yet imported does not import it."""
    evil = tmp_path / "evil.pt"
    node = {"_target_": "nmt.demo.Explorer", "translators": {}, "limits": None}
    torch.save(_with_model_node(load_checkpoint(smoke_run.checkpoint), "attention", None, node), evil)
    code = ("import sys\nfrom nmt.checkpoint import load_model\nfrom nmt.errors import CheckpointError\n"
            f"try:\n    load_model({str(evil)!r}, 'cpu')\nexcept CheckpointError as e:\n    print('refused', e)\n"
            "print('nmt.demo' in sys.modules)\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused") and "not one of nmt's attention classes" in proc.stdout
    assert proc.stdout.strip().endswith("False")


def test_an_honest_checkpoint_still_loads_and_old_configs_are_upgraded(smoke_run) -> None:
    payload = load_checkpoint(smoke_run.checkpoint)
    model, src_vocab, tgt_vocab, config = model_from_checkpoint(payload)
    assert model.num_parameters() > 0 and config.model.decoder._target_.startswith("nmt.decoder.")
    old = {**payload, "config": {**payload["config"], "data": {**payload["config"]["data"]}}}
    old["config"]["data"]["name"] = old["config"]["data"].pop("kind")  # the key's name before data=hf
    path = smoke_run.folder / "old-style.pt"
    torch.save(old, path)
    try:
        assert load_model(path, CPU)[3].data.kind == payload["config"]["data"]["kind"]
    finally:
        path.unlink()


MISSING_PARTS = {
    "no_train_section": (lambda p: {**p, "config": {k: v for k, v in p["config"].items() if k != "train"}},
                         "no train section"),  # fmt: skip
    "no_search": (lambda p: {**p, "config": {**p["config"], "train": {"seed": 1}}}, "no train.search section"),
    "vocab_not_bytes": (lambda p: {**p, "vocab": {"src": "x", "tgt": "y"}}, "sentencepiece models"),
    "weights_not_tensors": (lambda p: {**p, "model": {"encoder.embedding.weight": [1, 2]}}, "state dict of tensors"),
}


@pytest.mark.parametrize("kind", list(MISSING_PARTS))
@pytest.mark.slow
def test_a_checkpoint_missing_a_part_is_one_line(kind: str, smoke_run, tmp_path: Path) -> None:
    change, message = MISSING_PARTS[kind]
    path = tmp_path / "odd.pt"
    torch.save(change(load_checkpoint(smoke_run.checkpoint)), path)
    with pytest.raises(CheckpointError, match=message) as error:
        load_model(path, CPU)
    assert str(path) in str(error.value)
    src = tmp_path / "src.txt"
    src.write_text("toga\n", encoding="utf-8")
    _one_line_refusal(_run("nmt.translate", [f"ckpt={path}", f"input={src}"], tmp_path), message)
    _one_line_refusal(_run("nmt.evaluate", [f"ckpt={path}", f"src={src}", f"ref={src}", f"out_dir={tmp_path / 'e'}"],
                           tmp_path), message)  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["odd.pt", "src.txt"]  # no output, no eval folder


SEARCH_PROBLEMS = {  # a change to a checkpoint's train.search, and what the refusal says
    "missing_key": (lambda search: search.pop("max_len_b"), "train.search.max_len_b is missing"),
    "extra_key": (lambda search: search.update(beam=4), "train.search.beam is not a decoding setting"),
}


@pytest.mark.parametrize("kind", list(SEARCH_PROBLEMS))
@pytest.mark.slow
def test_a_checkpoints_decoding_settings_are_checked_by_every_command(kind: str, smoke_run, tmp_path: Path) -> None:
    change, message = SEARCH_PROBLEMS[kind]
    payload = load_checkpoint(smoke_run.checkpoint)
    change(payload["config"]["train"]["search"])
    path = tmp_path / "odd.pt"
    torch.save(payload, path)
    src = tmp_path / "src.txt"
    src.write_text("toga sala\n", encoding="utf-8")
    commands = {
        "nmt.translate": [f"ckpt={path}", f"input={src}"],
        "nmt.demo": [f"ckpt={path}", "port=0"],
        "nmt.align": [f"ckpt={path}", f"src={src}", f"tgt={src}"],
    }
    for module, args in commands.items():
        _one_line_refusal(_run(module, args, tmp_path, timeout=60), str(path), message)


def test_resuming_a_checkpoint_whose_weights_do_not_fit_its_config_is_one_line(smoke_run, tmp_path: Path,
                                                                               in_process) -> None:  # fmt: skip
    """Checked when the file is read, before the data is prepared or anything is allocated."""
    run = tmp_path / "run"
    shutil.copytree(smoke_run.folder, run)
    last = run / "checkpoints" / "last.pt"
    payload = load_checkpoint(last)
    payload["model"]["decoder.output.bias"] = payload["model"]["decoder.output.bias"][:-1].clone()
    torch.save(payload, last)
    before = _snapshot(run)
    budget = payload["config"]["train"]["max_epochs"] + 1  # not finished: the run would continue
    overrides = ["experiment=smoke", f"data.cache_dir={tmp_path / 'cache'}", "train.device=cpu", "train.num_heatmaps=0",
                 "train.resume=auto", f"train.max_epochs={budget}"]  # fmt: skip
    with pytest.raises(CheckpointError, match="do not fit the model its config describes: decoder.output.bias") as error:
        train_in_process(overrides, run)
    assert str(last) in str(error.value) and "\n" not in str(error.value)
    assert _snapshot(run) == before and not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_run_folder_is_read_as_its_best_checkpoint(smoke_run, tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("toga sala\n", encoding="utf-8")
    proc = _run("nmt.translate", [f"ckpt={smoke_run.folder}", f"input={src}"], tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert f"is a run folder: using its best checkpoint, {smoke_run.checkpoint}" in proc.stderr.decode()
    assert proc.stdout.decode().strip()


# --------------------------------------------------------------------------- a run folder is never overwritten by accident

TINY = [
    "experiment=smoke", "data.vocab.joint=false", "data.vocab.size=40", "data.max_tokens=200", "model.emb_dim=16",
    "model.encoder.hidden_dim=16", "model.decoder.hidden_dim=32", "train.log_every=1", "train.threads=1",
    "train.num_heatmaps=0", "train.device=cpu", "train.keep_checkpoints=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> ToyCorpus:
    return make_toy_corpus(tmp_path_factory.mktemp("corpus"), train_size=120, valid_size=10, test_size=10)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _tiny(corpus: ToyCorpus, cache: Path, *extra: str) -> list[str]:
    return [*TINY, *corpus.overrides(), f"data.cache_dir={cache}", *extra]


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder``: its bytes and mode (a change to either, or a new file, shows)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(corpus: ToyCorpus, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run: 6 updates (one epoch is 7), validated every 2, so the end is a validation."""
    run = tmp_path_factory.mktemp("finished") / "run"
    train_in_process(_tiny(corpus, cache, "train.max_steps=6", "train.eval_every=2"), run)
    return run


def _train_cli(overrides: list[str], run: Path | None, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    where = [f"hydra.run.dir={run}"] if run is not None else []
    return _run("nmt.train", [*overrides, *where], cwd, timeout=timeout)


@pytest.mark.slow
def test_training_into_a_finished_run_is_refused_and_changes_nothing(finished_run: Path, corpus, cache, tmp_path) -> None:
    """The issue's probe: a new run (another seed) into a finished run's folder replaced its best.pt
    and results.json and appended to its train.log."""
    before = _snapshot(finished_run)
    proc = _train_cli(_tiny(corpus, cache, "train.max_steps=2", "train.seed=5"), finished_run, tmp_path)
    _one_line_refusal(proc, f"{finished_run} holds a run", "train.resume=auto", "train.overwrite=true")
    assert _snapshot(finished_run) == before
    # resuming another run's checkpoint into it would mix two runs: refused too
    other = tmp_path / "other.pt"
    other.write_bytes((finished_run / "checkpoints" / "last.pt").read_bytes())
    proc = _train_cli(_tiny(corpus, cache, "train.max_steps=8", f"train.resume={other}"), finished_run, tmp_path)
    _one_line_refusal(proc, "would mix two runs")
    assert _snapshot(finished_run) == before


@pytest.mark.slow
def test_a_failed_start_leaves_an_existing_folder_as_it_was_and_no_new_folder(corpus, cache, tmp_path: Path) -> None:
    """Mismatched files fail with the line-count error after the folder checks: an existing
    folder keeps its bytes (no config.yaml, .hydra/ or train.log), a new one is not left behind."""
    short = tmp_path / "short.tgt"
    short.write_text("".join(f"w{i}\n" for i in range(5)), encoding="utf-8")
    bad = _tiny(corpus, cache, f"data.train_tgt={short}")
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("my notes\n", encoding="utf-8")
    before = _snapshot(existing)
    _one_line_refusal(_train_cli(bad, existing, tmp_path), "has 120 lines", str(short))
    assert _snapshot(existing) == before and sorted(p.name for p in existing.iterdir()) == ["notes.txt"]
    new = tmp_path / "runs" / "new"
    _one_line_refusal(_train_cli(bad, new, tmp_path), str(short))
    assert not (tmp_path / "runs").exists()
    _one_line_refusal(_train_cli(bad, None, tmp_path), str(short))  # the default folder
    assert not (tmp_path / "outputs").exists()


def test_overwrite_starts_the_run_over(finished_run: Path, corpus, cache, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "notes.txt").write_text("kept\n", encoding="utf-8")
    old_log = (run / "train.log").read_text()
    train_in_process(_tiny(corpus, cache, "train.max_steps=4", "train.eval_every=2", "train.overwrite=true"), run)
    assert (run / "notes.txt").read_text() == "kept\n"  # not one of nmt's files
    assert sorted(p.name for p in (run / "checkpoints").glob("step*.pt")) == ["step00000002.pt", "step00000004.pt"]
    assert json.loads((run / "results.json").read_text())["steps"] == 4.0
    assert old_log.splitlines()[0] not in (run / "train.log").read_text()
    assert "deleted the earlier run's" in (run / "train.log").read_text()


@pytest.mark.slow
def test_overwrite_and_resume_together_are_refused(finished_run: Path, corpus, cache, tmp_path: Path) -> None:
    proc = _train_cli(_tiny(corpus, cache, "train.overwrite=true", "train.resume=auto"), finished_run, tmp_path)
    _one_line_refusal(proc, "cannot be combined with train.resume")


@pytest.mark.slow
def test_runs_started_together_get_folders_of_their_own(corpus, cache, tmp_path: Path) -> None:
    """Two commands whose default folder name is the same (as for two runs started in the same
    second) each claim one: ``outputs/same`` and ``outputs/same-1``, each with its own results."""
    overrides = _tiny(corpus, cache, "train.max_steps=2", "hydra.run.dir=${nmt.new_folder:outputs/same}")
    procs = [subprocess.Popen([sys.executable, "-m", "nmt.train", *overrides, f"train.seed={seed}"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for seed in (1, 2)]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    folders = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert folders == ["same", "same-1"]
    seeds = {json.loads((tmp_path / "outputs" / f / "config.yaml").read_text().split("seed: ")[1].split()[0])
             for f in folders}  # fmt: skip
    assert seeds == {1, 2}
    for folder in folders:
        log_text = (tmp_path / "outputs" / folder / "train.log").read_text()
        assert log_text.count("training stopped after") == 1 and (tmp_path / "outputs" / folder / "results.json").is_file()


def test_claim_folder_never_gives_a_taken_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = str(tmp_path / "outputs" / "12-00-00")
    monkeypatch.setattr("nmt.train._CLAIMED", {})
    first = claim_folder(base)
    assert claim_folder(base) == first == base  # one process: always the same folder
    monkeypatch.setattr("nmt.train._CLAIMED", {})  # another process
    assert claim_folder(base) == base + "-1" and Path(base + "-1").is_dir()


# --------------------------------------------------------------------------- training ends right


def test_the_last_update_is_validated_and_saved_whatever_eval_every(corpus, cache, tmp_path: Path) -> None:
    """eval_every larger than the run: before, no checkpoint was ever written."""
    run = tmp_path / "run"
    results = train_in_process(_tiny(corpus, cache, "train.max_epochs=1", "train.eval_every=1000"), run)
    last = load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]
    assert last["epoch"] == 1 and last["update_in_epoch"] == 0 and last["step"] == results["steps"] > 0
    assert (run / "checkpoints" / "best.pt").is_file()
    assert f"validation at update {last['step']}:" in (run / "train.log").read_text()
    # eval_every that does not divide the run's updates: the remainder is validated too
    run = tmp_path / "run3"
    results = train_in_process(_tiny(corpus, cache, "train.max_epochs=1", "train.eval_every=3"), run)
    assert load_checkpoint(run / "checkpoints" / "last.pt")["train_state"]["progress"]["step"] == results["steps"]


@pytest.mark.slow
def test_resuming_a_finished_run_says_so_and_changes_nothing(finished_run: Path, corpus, cache, tmp_path) -> None:
    before = _snapshot(finished_run)
    proc = _train_cli(_tiny(corpus, cache, "train.max_steps=6", "train.eval_every=2", "train.resume=auto"),
                      finished_run, tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert "this run is finished (max_steps reached at update 6); nothing to do" in proc.stderr.decode()
    assert _snapshot(finished_run) == before


def test_a_finished_run_resumes_when_its_budget_is_raised(finished_run: Path, corpus, cache, tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    results = train_in_process(_tiny(corpus, cache, "train.max_steps=8", "train.eval_every=2", "train.resume=auto"),
                                run)  # fmt: skip
    assert results["steps"] == 8.0 and "resumed from" in (run / "train.log").read_text()


def test_a_finished_run_killed_before_its_results_only_scores_the_test_set(finished_run, corpus, cache, tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "results.json").unlink()
    checkpoints = _snapshot(run / "checkpoints")
    results = train_in_process(_tiny(corpus, cache, "train.max_steps=6", "train.eval_every=2", "train.resume=auto"),
                                run)  # fmt: skip
    assert results["steps"] == 6.0 and (run / "results.json").is_file()
    assert _snapshot(run / "checkpoints") == checkpoints  # no update trained, nothing saved


class _FakeJob:
    """A rank of a two-process job whose collectives return what the other rank would give."""

    def __init__(self, rank: int, device: torch.device, others: dict) -> None:
        self.rank, self.world_size, self.device, self.others = rank, 2, device, others

    def gather(self, obj) -> list:
        return [obj, self.others[obj_kind(obj)]] if self.rank == 0 else [self.others[obj_kind(obj)], obj]


def obj_kind(obj) -> str:
    return "cuda" if obj is None or obj.numel() == 16 else "cpu"


def test_each_rank_saves_and_restores_its_own_cuda_random_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, rank 0's GPU states were saved and every rank restored them: ranks >= 1 restarted
    their dropout streams, all alike. Checked on the CPU with a stand-in for torch.cuda."""
    gpu_state = {0: torch.full((16,), 10, dtype=torch.uint8), 1: torch.full((16,), 11, dtype=torch.uint8)}
    restored = {}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: gpu_state[device.index].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.__setitem__(device.index, state))
    cpu1 = torch.get_rng_state()
    saved = random_state(_FakeJob(0, torch.device("cuda", 0), {"cuda": gpu_state[1], "cpu": cpu1}))
    assert [s[0].item() for s in saved["cuda_rng_by_rank"]] == [10, 11]
    for rank in (0, 1):
        restore_random_state(saved, _FakeJob(rank, torch.device("cuda", rank), {}))
    assert restored[0][0].item() == 10 and restored[1][0].item() == 11
    cpu = random_state(_FakeJob(0, torch.device("cpu"), {"cuda": None, "cpu": cpu1}))
    assert cpu["cuda_rng_by_rank"] == [None, None]


# --------------------------------------------------------------------------- outputs are written safely

SOURCE = "toga sala\nzolofu\n"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src.txt"
    path.write_text(SOURCE, encoding="utf-8")
    return path


def _translate(smoke_run, tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return _run("nmt.translate", [f"ckpt={smoke_run.checkpoint}", "beam_size=1", *args], tmp_path, stdin=stdin)


@pytest.mark.slow
def test_output_dev_stdout_is_written_to_not_replaced(smoke_run, source: Path, tmp_path: Path) -> None:
    """Before, as root, output=/dev/stdout printed nothing and replaced /dev/stdout with a file."""
    kind = stat.S_IFMT(os.lstat("/dev/stdout").st_mode)  # a link to /proc/self/fd/1, or a device
    proc = _translate(smoke_run, tmp_path, f"input={source}", "output=/dev/stdout")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().count("\n") == 2
    assert stat.S_IFMT(os.lstat("/dev/stdout").st_mode) == kind


@pytest.mark.slow
def test_a_symlink_output_is_written_through(smoke_run, source: Path, tmp_path: Path) -> None:
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old\n", encoding="utf-8")
    link.symlink_to(target)
    proc = _translate(smoke_run, tmp_path, f"input={source}", f"output={link}")
    assert proc.returncode == 0, proc.stderr.decode()
    assert link.is_symlink() and target.read_text().count("\n") == 2 and target.read_text() != "old\n"


@pytest.mark.slow
def test_a_fifo_output_is_written_directly(smoke_run, source: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    proc = _translate(smoke_run, tmp_path, f"input={source}", f"output={fifo}")
    out, _ = reader.communicate(timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.decode().count("\n") == 2 and stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.slow
def test_an_output_keeps_its_permission_bits_and_a_read_only_one_is_refused(smoke_run, source, tmp_path) -> None:
    shared = tmp_path / "shared.txt"
    shared.write_text("old\n", encoding="utf-8")
    shared.chmod(0o640)
    assert _translate(smoke_run, tmp_path, f"input={source}", f"output={shared}").returncode == 0
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640 and shared.read_text() != "old\n"
    locked = tmp_path / "locked.txt"
    locked.write_text("keep me\n", encoding="utf-8")
    locked.chmod(0o444)
    _one_line_refusal(_translate(smoke_run, tmp_path, f"input={source}", f"output={locked}"), "read-only")
    assert locked.read_text() == "keep me\n" and stat.S_IMODE(locked.stat().st_mode) == 0o444


OUTPUT_REFUSALS = {
    # what the command is given -> what the error says; refused before the checkpoint is loaded
    "output_is_a_folder": (lambda t: [f"output={t}"], "is a folder"),
    "attention_dir_is_a_file": (lambda t: [f"attention_dir={t / 'src.txt'}"], "is a file, not a folder"),
    "output_is_the_checkpoint": (lambda t: ["output=CKPT"], "is the input file"),
    "output_under_a_file": (lambda t: [f"output={t / 'src.txt' / 'out.txt'}"], "is a file, so the folder cannot be made"),
}


@pytest.mark.parametrize("case", list(OUTPUT_REFUSALS))
@pytest.mark.slow
def test_a_bad_output_is_refused_before_any_work(case: str, smoke_run, source: Path, tmp_path: Path) -> None:
    make, message = OUTPUT_REFUSALS[case]
    args = [a.replace("CKPT", str(smoke_run.checkpoint)) for a in make(tmp_path)]
    proc = _translate(smoke_run, tmp_path, f"input={source}", *args)
    _one_line_refusal(proc, message)
    assert "loaded" not in proc.stderr.decode()  # before the model, so before the decoding


# --------------------------------------------------------------------------- inputs that are not plain files


@pytest.mark.slow
def test_dev_stdin_and_a_process_substitution_are_read(smoke_run, tmp_path: Path) -> None:
    proc = _translate(smoke_run, tmp_path, "input=/dev/stdin", f"output={tmp_path / 'a.txt'}", stdin=SOURCE.encode())
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "a.txt").read_text().count("\n") == 2
    command = (f"{sys.executable} -m nmt.translate ckpt={smoke_run.checkpoint} beam_size=1 "
               f"input=<(printf 'toga\\nsala\\nzolofu\\n') output={tmp_path / 'b.txt'}")  # fmt: skip
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "b.txt").read_text().count("\n") == 3


@pytest.mark.slow
def test_a_folder_as_input_is_one_line(smoke_run, tmp_path: Path) -> None:
    _one_line_refusal(_translate(smoke_run, tmp_path, f"input={tmp_path}"), f"{tmp_path}: is a folder")


# --------------------------------------------------------------------------- evaluate and average never write over an input


@pytest.mark.slow
def test_evaluate_never_writes_over_a_hypothesis_file_it_was_given(smoke_run, source: Path, tmp_path: Path) -> None:
    """Before, a checkpoint named best wrote OUT/hypotheses/best.txt over the hyps file of that path."""
    out = tmp_path / "out"
    mine = out / "hypotheses" / "best.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("my hypothesis one\nmy hypothesis two\n", encoding="utf-8")
    before = _snapshot(out)
    args = [f"hyps=[mine:{mine}]", f"ckpt=[best:{smoke_run.checkpoint}]", f"src={source}", f"ref={source}",
            f"out_dir={out}"]  # fmt: skip
    _one_line_refusal(_run("nmt.evaluate", args, tmp_path), "is the input file", str(mine))
    assert _snapshot(out) == before


EVALUATE_REFUSALS = {
    "empty_src_and_ref": (lambda s, e: [f"src={e}", f"ref={e}", f"hyps=[a:{e}]"], "has no lines"),
    "empty_hyps": (lambda s, e: [f"src={s}", f"ref={s}", f"hyps=[a:{e}]"], "has 0 lines but the source has 2"),
    "out_dir_is_a_file": (lambda s, e: [f"src={s}", f"ref={s}", f"hyps=[a:{s}]", f"out_dir={s}"], "is a file, not a folder"),
}


@pytest.mark.parametrize("case", list(EVALUATE_REFUSALS))
@pytest.mark.slow
def test_evaluate_refuses_bad_inputs_in_one_line(case: str, source: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    args = EVALUATE_REFUSALS[case][0](source, empty)
    if not any(a.startswith("out_dir=") for a in args):
        args.append(f"out_dir={tmp_path / 'out'}")
    _one_line_refusal(_run("nmt.evaluate", args, tmp_path), EVALUATE_REFUSALS[case][1])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_average_never_replaces_a_resumable_checkpoint_or_an_input(finished_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _snapshot(run)
    script = [sys.executable, "-m", "nmt.average", str(run),
              "--last", "2"]  # fmt: skip
    for output, message in ((run / "checkpoints" / "last.pt", "holds a training state"),
                            (run / "checkpoints" / "step00000006.pt", "is the input file")):  # fmt: skip
        proc = subprocess.run([*script, "--output", str(output)], capture_output=True, timeout=120)
        _one_line_refusal(proc, message)
    assert _snapshot(run) == before
    proc = subprocess.run(script, capture_output=True, timeout=120)  # the default: checkpoints/averaged.pt
    assert proc.returncode == 0, proc.stderr.decode()
    assert load_checkpoint(run / "checkpoints" / "averaged.pt")["train_state"] is None


# --------------------------------------------------------------------------- arbitrary bytes in


@pytest.fixture(scope="module")
def smoke_model(smoke_run):
    return load_model(smoke_run.checkpoint, CPU)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300) | st.text(max_size=120).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_give_a_translation_per_line_or_one_clear_error(raw: bytes, smoke_model, tmp_path_factory) -> None:
    """The text reader behind translate and evaluate, then the translation: as many output lines
    as input lines (split at \\n only), or, for bytes that are not UTF-8, one DataError naming the line."""
    path = tmp_path_factory.mktemp("bytes") / "input.txt"
    path.write_bytes(raw)
    expected = len(raw.split(b"\n")) - (1 if raw.endswith(b"\n") or not raw else 0)
    for on_bad_utf8 in ("error", "replace"):
        try:
            lines = read_input(str(path), on_bad_utf8)
        except DataError as e:
            assert on_bad_utf8 == "error" and re.search(r"input\.txt, line \d+: invalid UTF-8", str(e)), str(e)
            assert "\n" not in str(e)
            continue
        assert len(lines) == expected
        model, src_vocab, tgt_vocab, _ = smoke_model
        translations = translate_lines(model, src_vocab, lines, GREEDY, 8, "sentences", CPU, 20)
        out = format_translations(translations, tgt_vocab, 1)
        assert out.count("\n") == expected


def test_a_finished_run_resumed_in_process_leaves_no_handler_behind(finished_run: Path, corpus, cache) -> None:
    """The early-log buffer of a command that has nothing to do is detached from the root logger."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=_tiny(corpus, cache, "train.max_steps=6", "train.eval_every=2",
                                                "train.resume=auto"))  # fmt: skip
    with process_restored():
        before = list(logging.getLogger().handlers)
        assert train(cfg, finished_run)["steps"] == 6.0
        assert logging.getLogger().handlers == before

"""The run folder: a training command that is refused or fails at start removes the folders it
made for its run folder, and only those; every folder that existed before it stays as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nmt.training import run_folder
from nmt.training.run_folder import made_for, make_folders, remove_made

REFUSED = ["experiment=smoke", "model.dropout=1.5", "train.device=cpu"]  # refused before any data is read


def _refused_train(cwd: Path, *overrides: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nmt.train", *REFUSED, *overrides], cwd=cwd, capture_output=True,
                          timeout=120)  # fmt: skip
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2 and "model.dropout=1.5" in err and "Traceback" not in err, err


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.slow
def test_a_refused_start_keeps_the_working_folder_and_an_empty_outputs_folder(tmp_path: Path) -> None:
    """The default run folder (outputs/DATE/TIME): the working folder it starts in, empty, and an
    empty outputs/ of the user's stay; the folders made for the run go."""
    work = tmp_path / "w"
    work.mkdir()
    _refused_train(work)
    assert work.is_dir() and _tree(work) == []
    (work / "outputs").mkdir()
    _refused_train(work)
    assert _tree(work) == ["outputs"]


@pytest.mark.slow
def test_a_refused_start_removes_only_the_folders_it_made_on_a_given_path(tmp_path: Path) -> None:
    """hydra.run.dir=an existing empty folder stays; hydra.run.dir=a/b/c with only a there: b and c go."""
    existing = tmp_path / "mine"
    existing.mkdir()
    _refused_train(tmp_path, f"hydra.run.dir={existing}")
    assert existing.is_dir() and _tree(existing) == []
    (tmp_path / "a").mkdir()
    _refused_train(tmp_path, "hydra.run.dir=a/b/c")
    assert _tree(tmp_path) == ["a", "mine"]


@pytest.fixture
def no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_folder, "_MADE", [])


@pytest.mark.usefixtures("no_record")
def test_only_the_folders_made_are_recorded_and_removed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    run = tmp_path / "a" / "b" / "c"
    assert make_folders(run) == [tmp_path / "a" / "b", run] and run.is_dir()
    assert make_folders(run) == []  # there already: made once
    assert made_for(run) == [run, tmp_path / "a" / "b"]  # innermost first
    assert made_for(tmp_path / "a" / "other") == []
    (run / "kept.txt").write_text("x", encoding="utf-8")
    remove_made(made_for(run))  # c holds a file: nothing goes
    assert (run / "kept.txt").is_file()
    (run / "kept.txt").unlink()
    remove_made(made_for(run))
    assert _tree(tmp_path) == ["a"]


@pytest.mark.usefixtures("no_record")
def test_a_folder_made_meanwhile_by_another_command_is_not_recorded(tmp_path: Path, monkeypatch) -> None:
    """Between the look and the mkdir another process makes the folder: it is not this command's."""
    real_mkdir = run_folder.os.mkdir

    def racing_mkdir(path, *args):
        if Path(path).name == "b":
            real_mkdir(path, *args)  # the other process was first
        real_mkdir(path, *args)

    monkeypatch.setattr(run_folder.os, "mkdir", racing_mkdir)
    assert make_folders(tmp_path / "b" / "c") == [tmp_path / "b" / "c"]

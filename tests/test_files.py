"""Writing files (``nmt.files``): an output this user may not write is refused before any work,
whatever its mode bits say, and a temporary file is created new, never opened through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nmt.errors import ConfigError
from nmt.files import atomic_write_bytes, check_output, write_output


def _no_write_access(monkeypatch: pytest.MonkeyPatch, *denied: Path) -> None:
    """``os.access`` says no to writing ``denied``, as it does for another user's 0644 file (the
    tests may run as root, for whom it says yes)."""
    real = os.access
    refused = {os.path.realpath(p) for p in denied}

    def access(path, mode, *args, **kwargs) -> bool:
        if mode & os.W_OK and os.path.realpath(path) in refused:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_a_file_this_user_may_not_write_is_refused_whatever_its_mode(tmp_path: Path, monkeypatch) -> None:
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("theirs\n", encoding="utf-8")
    theirs.chmod(0o644)  # a write bit, for its owner
    _no_write_access(monkeypatch, theirs)
    with pytest.raises(ConfigError, match=r"^output=.*theirs.txt: no permission to write it; choose another file$"):
        check_output(theirs, "output")
    with pytest.raises(ConfigError, match="no permission to write it"):  # and again when writing
        write_output(theirs, b"x\n")
    assert theirs.read_text(encoding="utf-8") == "theirs\n"


def test_a_new_file_in_a_folder_this_user_may_not_write_in_is_refused(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    _no_write_access(monkeypatch, folder)
    with pytest.raises(ConfigError, match=r"^output=.*new.txt: no permission to write in .*shared$"):
        check_output(folder / "new.txt", "output")


def test_a_temporary_file_is_never_opened_through_a_link(tmp_path: Path, monkeypatch) -> None:
    """Even a guessed temporary name is safe: it is created with O_EXCL, so a link planted there
    fails the write and the file it points at keeps its bytes."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine\n")
    monkeypatch.setattr("nmt.files.secrets.token_hex", lambda n: "guessed")
    (tmp_path / ".figure.png.guessed.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic_write_bytes(tmp_path / "figure.png", b"png")
    assert victim.read_bytes() == b"mine\n" and not (tmp_path / "figure.png").exists()


@pytest.mark.parametrize("spelling", ["new/", "existing/", "existing"])
def test_an_output_that_names_a_folder_is_refused(spelling: str, tmp_path: Path, monkeypatch) -> None:
    """``output=outdir/`` wrote a file named ``outdir``: a trailing slash, or a folder that exists, is refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    with pytest.raises(ConfigError, match=f"output={spelling} .*(names a folder|is a folder); give a file path"):
        check_output(spelling, "output")

"""Where the commands write what a user asked for (translations, reports, figures, averaged
checkpoints): every output path is checked before any work, and each file is written so that
nothing the user had is lost.

- A regular file (or a new one) is replaced atomically (:func:`nmt.utils.atomic_write`), keeping
  its permission bits; a read-only one is refused.
- A symbolic link is written through: the file it points to gets the new content, the link stays.
- Anything else (a FIFO, a terminal, ``/dev/stdout``, ``/dev/null``, a process substitution) is
  written directly: there is no file to replace, and replacing the name would break the device.
- An output that is a folder, that is one of the command's inputs, or whose parent cannot be made
  is refused by :func:`check_output` with one line naming the key and what to do.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nmt.errors import ConfigError
from nmt.utils import atomic_write_bytes

# Paths under these are devices or a process's own descriptors: written directly, never replaced.
DEVICE_FOLDERS = ("/dev/", "/proc/")


def _stat(path: Path) -> os.stat_result | None:
    """``os.stat`` through symbolic links; None when nothing (or a dangling link) is there."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def is_direct(path: str | Path) -> bool:
    """Whether ``path`` is written in place (a device, FIFO or socket) rather than replaced."""
    found = _stat(Path(path))
    return str(path).startswith(DEVICE_FOLDERS) or (found is not None and not stat.S_ISREG(found.st_mode))


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file: the same spelling resolved, a link to it, or a hard link."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_output(path: str | Path, key: str, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse, before any work, an output file that cannot be written as asked.

    :param key: the config key or option that named it (``output``, ``--output``), for the message.
    :param inputs: the command's input files; the output must be none of them.
    :raise ConfigError: a folder, one of ``inputs``, a read-only file, or a parent that is a file.
    """
    path = Path(path)
    for source in inputs:
        if str(source) != "-" and same_file(path, source):
            raise ConfigError(f"{key}={path} is the input file {source}: writing there would destroy it; "
                              "choose another file")
    if is_direct(path):
        if path.is_dir():
            raise ConfigError(f"{key}={path} is a folder; give a file path")
        return
    found = _stat(path)
    if found is not None and not found.st_mode & 0o222:
        raise ConfigError(f"{key}={path} is read-only; make it writable (chmod u+w) or choose another file")
    _check_parent(Path(os.path.realpath(path)).parent, key, path)


def check_output_dir(path: str | Path, key: str) -> None:
    """Refuse, before any work, an output folder that is a file or cannot be made.

    :raise ConfigError: naming ``key``.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}={path} is a file, not a folder; give a folder path")
    _check_parent(path, key, path)


def _check_parent(folder: Path, key: str, path: Path) -> None:
    """The nearest existing ancestor of ``folder`` (itself included) is a folder we may write in."""
    for ancestor in [folder, *folder.parents]:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ConfigError(f"{key}={path}: {ancestor} is a file, so the folder cannot be made there")
            if not os.access(ancestor, os.W_OK | os.X_OK):
                raise ConfigError(f"{key}={path}: no permission to write in {ancestor}")
            return


def write_output(path: str | Path, data: bytes) -> None:
    """Write ``data`` to the output ``path`` as the module docstring says (checked by :func:`check_output`)."""
    path = Path(path)
    if is_direct(path):
        with open(path, "wb") as f:  # a FIFO or device: written in place
            f.write(data)
        return
    target = Path(os.path.realpath(path))  # through a symbolic link to the file it names
    found = _stat(target)
    if found is not None and not found.st_mode & 0o222:  # made read-only since the check
        raise ConfigError(f"{path} is read-only; make it writable (chmod u+w) or choose another file")
    atomic_write_bytes(target, data, mode=None if found is None else stat.S_IMODE(found.st_mode))


def write_output_text(path: str | Path, text: str) -> None:
    write_output(path, text.encode("utf-8"))

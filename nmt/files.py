"""Writing files. Every file nmt writes goes through :func:`atomic_write` (a temporary file, fsync,
rename), so that no file is ever half written under its final name. What a user asked for
(translations, reports, figures, averaged checkpoints) is written by :func:`write_output`, after
:func:`check_output` checked the path before any work, so that nothing the user had is lost:

- A regular file (or a new one) is replaced atomically (:func:`atomic_write`), keeping
  its permission bits; one that is read-only (no write bit) or that this user may not write
  (``os.access``: another user's file) is refused, and so is a new file in a folder this user
  may not write in.
- A symbolic link is written through: the file it points to gets the new content, the link stays.
- Anything else (a FIFO, a terminal, ``/dev/stdout``, ``/dev/null``, a process substitution) is
  written directly: there is no file to replace, and replacing the name would break the device.
- An output that is a folder (or ends in ``/``), that is one of the command's inputs, or whose
  parent cannot be made is refused by :func:`check_output` with one line naming the key and what
  to do.

Figures, and the files of a folder that holds many (``attention_dir``), are written with
:func:`atomic_write_bytes` under their own names: a symbolic link found there is replaced by the
new file, never written through, so that a link planted in a shared folder cannot send the write
elsewhere. Two commands writing the same file each use a temporary file of their own.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from nmt.errors import ConfigError


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None], mode: int | None = None) -> None:
    """Write ``path`` through a temporary file in the same folder, fsync it, then rename.

    A reader (or a run killed half way) never sees a half-written file under the final name:
    it sees the old file or the new one. On failure (e.g. a full disk) the temporary file is
    removed, the old file is left as it was, and an ``OSError`` names ``path``.

    :param mode: permission bits of the new file (e.g. those of the file it replaces); None = a
        new file's (0666 less the umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    # mode 0666 minus the umask, as for any new file (mkstemp would make it 0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None and e.filename is None:  # a failed write names no file
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    atomic_write(path, lambda f: f.write(data), mode)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


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
    :raise ConfigError: a folder (or a path ending in ``/``, which names one), one of ``inputs``, a
        file this user may not write, or a parent that is a file or a folder this user may not
        write in.
    """
    if str(path).endswith(("/", os.sep)):  # Path() would drop the slash and write a file of the folder's name
        raise ConfigError(f"{key}={path} names a folder; give a file path, e.g. {key}={path}out.txt")
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
    if found is not None:
        _check_writable(path, found, f"{key}={path}")
    _check_parent(Path(os.path.realpath(path)).parent, key, path)


def _check_writable(path: Path, found: os.stat_result, named: str) -> None:
    """Refuse an existing file that is read-only, or that this user may not write (the mode bits
    alone do not say: a 0644 file of another user has a write bit, but not for us).

    :param named: the file as the message names it (``output=PATH``).
    """
    if not found.st_mode & 0o222:
        raise ConfigError(f"{named} is read-only; make it writable (chmod u+w) or choose another file")
    if not os.access(path, os.W_OK):
        raise ConfigError(f"{named}: no permission to write it; choose another file")


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
    if found is not None:  # made read-only since the check?
        _check_writable(target, found, str(path))
    atomic_write_bytes(target, data, mode=None if found is None else stat.S_IMODE(found.st_mode))


def write_output_text(path: str | Path, text: str) -> None:
    write_output(path, text.encode("utf-8"))


def write_command_output(path: str | Path, text: str) -> None:
    """A command's main output: ``-`` is standard output (UTF-8 whatever the locale, flushed at
    once), anything else a file written as :func:`write_output` writes one."""
    if str(path) == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        write_output_text(path, text)

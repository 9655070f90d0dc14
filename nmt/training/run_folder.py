"""The folders a training command makes for its run folder, and only those, removed again when its
start is refused or fails. A folder counts as the command's own when the command's ``mkdir`` made
it: what existed before the command (the working folder, a user's empty ``outputs/``, a
``hydra.run.dir`` made beforehand) is never removed, whatever its contents or times.

Hydra makes ``hydra.run.dir`` (``mkdir -p``) before the command runs; ``configs/train.yaml``
names :class:`MakeRunFolder` in ``hydra.callbacks``, so that the folder is made here first, and
recorded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

_MADE: list[Path] = []  # absolute paths of the folders this process made, in the order made


def make_new_folder(path: str | Path) -> None:
    """``mkdir path``, recorded as this command's own.

    :raise FileExistsError: something is there already (it is not recorded).
    """
    path = Path(os.path.abspath(path))
    os.mkdir(path)
    _MADE.append(path)


def make_folders(path: str | Path) -> list[Path]:
    """``mkdir -p path``, recording each folder it makes.

    :return: the folders made, outermost first (absolute); a folder that existed, or that another
        process made between the look and the ``mkdir``, is not among them.
    """
    path = Path(os.path.abspath(path))
    missing = []
    for folder in [path, *path.parents]:
        if os.path.lexists(folder):
            break
        missing.append(folder)
    made = []
    for folder in reversed(missing):
        try:
            make_new_folder(folder)
        except FileExistsError:
            continue
        made.append(folder)
    return made


def made_for(run_dir: str | Path) -> list[Path]:
    """``run_dir`` and the parents of it that this command made, innermost first: the folders to
    remove if its start fails. Empty when ``run_dir`` existed before the command."""
    run_dir = Path(os.path.abspath(run_dir))
    made = []
    for folder in [run_dir, *run_dir.parents]:
        if folder not in _MADE:
            break
        made.append(folder)
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the folders :func:`made_for` gave, innermost first, while they are empty."""
    for folder in made:
        try:
            folder.rmdir()  # fails, and stops here, on a folder that is no longer empty
        except OSError:
            break


class MakeRunFolder(Callback):
    """Makes ``hydra.run.dir`` with :func:`make_folders` before Hydra makes it (Hydra's own
    ``mkdir -p`` then finds it there)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # as Hydra does next: ${hydra:...} in the folder name resolves
        try:
            make_folders(str(OmegaConf.select(config, "hydra.run.dir")))
        except (OSError, OmegaConfBaseException):
            pass  # Hydra fails the same way next, and reports it

"""The Hydra configs, installed as the package ``nmt.configs`` (pyproject.toml maps it to this
folder). Importing it registers the schemas of the typed groups with Hydra's ConfigStore (a group
option's defaults list names its schema: ``train/default.yaml`` starts from ``train/schema``), so
every command and :func:`hydra.compose` call that finds the configs through :data:`CONFIG_DIR`
refuses unknown keys and wrongly typed values while composing.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import Callable
from importlib import resources
from typing import Any

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nmt.configs.help import command_help
from nmt.errors import USAGE_ERROR
from nmt.runtime import setup_logging
from nmt.search import SearchOverrides, SearchSchema
from nmt.training.settings import TrainSettings

CONFIG_DIR = str(resources.files(__name__))  # the folder of the YAML files, in any install

# each command's --help: configs/COMMAND.yaml sets hydra.help.template: ${nmt.help:COMMAND}
OmegaConf.register_new_resolver("nmt.help", functools.partial(command_help, CONFIG_DIR), replace=True)

_store = ConfigStore.instance()
_store.store(group="train", name="schema", node=TrainSettings)
_store.store(group="search", name="schema", node=SearchSchema)
_store.store(group="search", name="overrides_schema", node=SearchOverrides)


def command(config_name: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[], Any]]:
    """``@hydra.main`` for the commands (``@command("train")``), with one difference: a command
    line that does not compose (an unknown key, a value of the wrong type, a missing group option,
    a typo in a recipe) is refused in one line naming the key, with exit status 2, like every
    other bad input. Command lines with Hydra's own flags (``--cfg``, ``--help``, ``-m``...) go to
    Hydra unchanged."""

    def wrap(task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
        run = hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name=config_name)(task)

        @functools.wraps(task)
        def main() -> Any:
            overrides = sys.argv[1:]
            if not any(arg.startswith("-") for arg in overrides):
                problem = composition_problem(config_name, overrides)
                if problem is not None:
                    setup_logging()
                    logging.getLogger("nmt").error("%s", problem)
                    sys.exit(USAGE_ERROR)
            return run()

        return main

    return wrap


def composition_problem(config_name: str, overrides: list[str]) -> str | None:
    """Compose ``config_name`` with ``overrides`` (nothing is resolved or run); None when it
    composes, else the problem in one line: ``KEY: what is wrong``, with the config file when the
    problem is in one."""
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            compose(config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        return _one_line(e, config_name)
    return None


def _one_line(error: BaseException, config_name: str) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    where = lines[0].split(":", 1)[0] if lines and lines[0].startswith("In '") else ""
    cause: BaseException | None = error
    while cause is not None and not (isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None)):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        key, msg = cause.full_key, " ".join(str(cause.msg).split("full_key:")[0].split())
        if "not in struct" in msg or re.search(r"not in '\w+'", msg):
            msg = f"no such setting (python -m nmt.{config_name} --cfg job lists every key)"
        text = f"{key}: {msg}"
    else:
        text = " ".join(lines).split(" Config search path:")[0].split(" Set the environment variable HYDRA_FULL_ERROR")[0]
    return f"{where}: {text}" if where and not text.startswith(where) else text

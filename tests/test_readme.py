"""The commands the README and docs/ show are ones the code accepts: every ``python -m nmt.<app>``
(or ``torchrun ... -m nmt.<app>``) line of their ``bash`` blocks composes with its overrides, and
every ``python scripts/<name>.py`` line parses, so a renamed key, group option, config or script
option breaks this test, not a reader's first run. Paths are only composed or parsed, not opened
(the data and checkpoints they name are the reader's)."""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest
from conftest import CONFIG_DIR, REPO_ROOT
from hydra import compose, initialize_config_dir

import nmt.study

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
APP = re.compile(r"(?:python|torchrun)\b.*?-m nmt\.(train|translate|evaluate|demo|score|align|links)\b(.*)")
# the commands with an argparse command line: nmt.study, nmt.average and the developer scripts
SCRIPT = re.compile(r"(?:python|torchrun)\b.*?\b(nmt\.(?:study|average)|scripts/\w+\.py)\b(.*)")
BLOCK = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```", re.S | re.M)


def documented_commands(pattern: re.Pattern) -> list[tuple[str, str, list[str]]]:
    """(where, program, arguments) for every line of a bash block that ``pattern`` matches (group 1:
    the program, group 2: the rest); continuation lines joined, comments, pipes and redirections cut."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            first_line = text[: block.start()].count("\n") + 2
            for offset, line in enumerate(re.sub(r"\\\n\s*", " ", block.group(1)).splitlines()):
                if not (match := pattern.search(line)):
                    continue
                words = shlex.split(match.group(2), comments=True)
                cut = next((i for i, w in enumerate(words) if w in {">", "|", "&&", "<"}), len(words))
                found.append((f"{document.name}:{first_line + offset}", match.group(1), words[:cut]))
    return found


COMMANDS = documented_commands(APP)
SCRIPTS = documented_commands(SCRIPT)


def test_the_documents_show_commands_of_every_app() -> None:
    """The parser finds the README's commands (a parser that finds none would pass everything)."""
    apps = {app for _, app, _ in COMMANDS}
    assert {"train", "translate", "evaluate", "score", "align"} <= apps, apps
    assert len(COMMANDS) >= 20
    assert {"nmt.study", "nmt.average", "scripts/benchmark.py"} <= {script for _, script, _ in SCRIPTS}


def _sweep(overrides: list[str]) -> list[list[str]]:
    """A multirun's ``key=a,b,c`` as one override list per value (unquoted commas outside brackets)."""
    choices = []
    for override in overrides:
        key, value = override.split("=", 1)
        swept = "," in value and not value.startswith(("[", "{", "'", '"'))
        choices.append([f"{key}={v}" for v in value.split(",")] if swept else [override])
    return [list(combination) for combination in itertools.product(*choices)]


@pytest.mark.parametrize("where, app, overrides", COMMANDS, ids=[where for where, _, _ in COMMANDS])
@pytest.mark.slow
def test_documented_command_composes(where: str, app: str, overrides: list[str], tmp_path: Path) -> None:
    # placeholders a reader fills in: the Multi30k folder and elided checkpoint paths; hydra.* (the
    # run folder) belongs to the launcher, not the composed config
    filled = [o.replace("$D", str(tmp_path)).replace("=...", f"={tmp_path / 'x'}")
              for o in overrides if "=" in o and not o.startswith("hydra.")]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for combination in _sweep(filled):
            compose(app, overrides=combination)  # raises on an unknown key or group option


class _Parsed(Exception):
    """Raised in place of running a script once its command line has parsed."""


@pytest.mark.parametrize("where, script, arguments", SCRIPTS, ids=[where for where, _, _ in SCRIPTS])
def test_documented_script_command_parses(where: str, script: str, arguments: list[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The command's own argument parser accepts the documented options (and the study's checks of
    them); it stops there, before any work."""
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(parser, args=None, namespace=None):
        raise _Parsed(parse(parser, args, namespace))

    arguments = [a.replace("$D", str(tmp_path)) for a in arguments]
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    with pytest.raises(_Parsed):
        if script.startswith("nmt."):  # a command of the package: its main(argv)
            importlib.import_module(script).main(arguments)
        else:
            runpy.run_path(str(REPO_ROOT / script), run_name="__main__")
    if script == "nmt.study":  # its own checks after parsing (seeds, --single-seed)
        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
        nmt.study.parse_args(arguments)

"""The commands the README and docs/ show are ones the code accepts: every ``python -m nmt.<app>``
(or ``torchrun ... -m nmt.<app>``) line of their ``bash`` blocks composes with its overrides, so
a renamed key, group option or config breaks this test, not a reader's first run. Paths are only
composed, not opened (the data and checkpoints they name are the reader's)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
from conftest import CONFIG_DIR, REPO_ROOT
from hydra import compose, initialize_config_dir

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
APP = re.compile(r"(?:python|torchrun)\b.*?-m nmt\.(train|translate|evaluate|demo)\b(.*)")
BLOCK = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```", re.S | re.M)


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, app, overrides) for every nmt command in a bash block; continuation lines joined,
    comments, pipes and redirections cut, ``hydra.*`` overrides (the run folder) left out."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            first_line = text[: block.start()].count("\n") + 2
            for offset, line in enumerate(re.sub(r"\\\n\s*", " ", block.group(1)).splitlines()):
                if not (match := APP.search(line)):
                    continue
                words = shlex.split(match.group(2), comments=True)
                cut = next((i for i, w in enumerate(words) if w in {">", "|", "&&", "<"}), len(words))
                overrides = [w for w in words[:cut] if "=" in w and not w.startswith("hydra.")]
                found.append((f"{document.name}:{first_line + offset}", match.group(1), overrides))
    return found


COMMANDS = documented_commands()


def test_the_documents_show_commands_of_every_app() -> None:
    """The parser finds the README's commands (a parser that finds none would pass everything)."""
    apps = {app for _, app, _ in COMMANDS}
    assert {"train", "translate", "evaluate"} <= apps, apps
    assert len(COMMANDS) >= 20


def _sweep(overrides: list[str]) -> list[list[str]]:
    """A multirun's ``key=a,b,c`` as one override list per value (unquoted commas outside brackets)."""
    choices = []
    for override in overrides:
        key, value = override.split("=", 1)
        swept = "," in value and not value.startswith(("[", "{", "'", '"'))
        choices.append([f"{key}={v}" for v in value.split(",")] if swept else [override])
    return [list(combination) for combination in itertools.product(*choices)]


@pytest.mark.parametrize("where, app, overrides", COMMANDS, ids=[where for where, _, _ in COMMANDS])
def test_documented_command_composes(where: str, app: str, overrides: list[str], tmp_path: Path) -> None:
    # placeholders a reader fills in: the Multi30k folder and elided checkpoint paths
    filled = [o.replace("$D", str(tmp_path)).replace("=...", f"={tmp_path / 'x'}") for o in overrides]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for combination in _sweep(filled):
            compose(app, overrides=combination)  # raises on an unknown key or group option

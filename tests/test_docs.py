"""The documentation site as users read it: it builds with ``mkdocs build --strict``, the API pages
show the docstrings' Sphinx roles (``:func:`x```) as links or code and never as raw text, the
Commands page lists every option of every command, the lab notebook stays out of the navigation,
and the config-folder example of the guide composes as the page says."""

from __future__ import annotations

import argparse
import html
import importlib
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import CONFIG_DIR, REPO_ROOT
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

DOCS = REPO_ROOT / "docs"
RAW_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):")
HYDRA_COMMANDS = ["train", "translate", "evaluate", "score", "align", "demo", "links"]


class _Prose(HTMLParser):
    """The text of a page outside ``<pre>``, ``<code>``, ``<script>`` and ``<style>``."""

    SKIP = {"pre", "code", "script", "style"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth, self.parts = 0, []

    def handle_starttag(self, tag: str, attrs) -> None:
        self.depth += tag in self.SKIP

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in self.SKIP and self.depth > 0

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


def prose(page: Path) -> str:
    parser = _Prose()
    parser.feed(page.read_text(encoding="utf-8"))
    return html.unescape(" ".join(parser.parts))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it (strict: a broken link or anchor is an error)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_no_page_shows_a_raw_sphinx_role(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    raw = {str(p.relative_to(site)): RAW_ROLE.findall(prose(p)) for p in pages}
    assert not {page: found for page, found in raw.items() if found}


def test_roles_become_links_to_the_objects_they_name(site: Path) -> None:
    """``:func:`piece_words``` in nmt.evaluation.word_alignment links to that function's entry."""
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'href="#nmt.evaluation.word_alignment.piece_words"><code>piece_words</code></a>' in api
    assert 'href="#nmt.translator.Translator.translate"><code>Translator.translate</code></a>' in api


# --------------------------------------------------------------------------- the Commands page


def _section(command: str) -> str:
    """The part of docs/reference/commands.md about ``nmt.<command>`` (its ``## nmt.X`` heading
    up to the next ``## ``)."""
    text = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    start = text.index(f"\n## nmt.{command}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _hydra_options(command: str) -> list[str]:
    """Every option of a Hydra command: the top-level keys of its composed config, a nested
    section's keys as ``section.key``; for ``train`` its groups and every ``train.*`` key."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(command)
    if command == "train":
        defaults = OmegaConf.load(CONFIG_DIR / "train.yaml").defaults
        groups = [next(iter(entry)) for entry in defaults if isinstance(entry, DictConfig)]
        groups = [g for g in groups if not g.startswith("override")]
        return groups + [f"train.{key}" for key in cfg.train]
    options = []
    for key in cfg:
        nested = not OmegaConf.is_missing(cfg, key) and isinstance(cfg[key], DictConfig)
        options += [f"{key}.{sub}" for sub in cfg[key]] if nested else [key]
    return options


@pytest.mark.parametrize("command", HYDRA_COMMANDS)
def test_the_commands_page_lists_every_key_of_a_hydra_command(command: str) -> None:
    section = _section(command)
    options = _hydra_options(command)
    assert len(options) >= 5
    missing = [o for o in options if f"`{o}`" not in section]
    assert not missing, f"nmt.{command}: not on docs/reference/commands.md: {missing}"
    assert "Exit statuses" in section


class _Parser(Exception):
    """Carries the parser a command builds, instead of parsing."""


def _argparse_options(module: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    def capture(parser, args=None, namespace=None):
        raise _Parser(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parser) as caught:
        importlib.import_module(module).main([])
    parser = caught.value.args[0]
    options = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        long = [s for s in action.option_strings if s.startswith("--")]
        options += long or [action.dest]
    return options


@pytest.mark.parametrize("command", ["study", "average"])
def test_the_commands_page_lists_every_option_of_study_and_average(command: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    section = _section(command)
    options = _argparse_options(f"nmt.{command}", monkeypatch)
    assert len(options) >= 3
    missing = [o for o in options if f"`{o}`" not in section]
    assert not missing, f"nmt.{command}: not on docs/reference/commands.md: {missing}"
    assert "Exit statuses" in section


# --------------------------------------------------------------------------- navigation


def test_the_lab_notebook_is_out_of_the_navigation_and_linked_once_from_the_results() -> None:
    config = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") : config.index("\nnot_in_nav:")]
    assert "lab/" not in nav
    assert "lab/" in config[config.index("\nnot_in_nav:") :].split("\n\n")[0]
    results = (DOCS / "results.md").read_text(encoding="utf-8")
    assert len(re.findall(r"\]\(lab/", results)) == 1
    users = [p for p in DOCS.rglob("*.md") if "lab" not in p.relative_to(DOCS).parts and p.name != "results.md"]
    assert not [str(p) for p in users if re.search(r"\]\((?:\.\./)*lab/", p.read_text(encoding="utf-8"))]


def test_every_guide_page_is_in_the_navigation_and_the_guide_table() -> None:
    config = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in sorted((DOCS / "guide").glob("*.md")):
        assert f"guide/{page.name}" in config, page.name
        assert f"(guide/{page.name})" in index, page.name


# --------------------------------------------------------------------------- the config-folder guide


@pytest.mark.slow
def test_the_config_folder_example_composes_as_the_guide_says(tmp_path: Path) -> None:
    """The guide's YAML files (each block titled with its path, ``title="myconf/..."``) written out
    as shown, and its ``--cfg job`` commands run from the folder holding them."""
    text = (DOCS / "guide" / "configs.md").read_text(encoding="utf-8")
    files = re.findall(r'^```yaml title="(myconf/[^"]+)"\n(.*?)^```', text, re.S | re.M)
    assert len(files) >= 3
    for name, content in files:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    commands = [line for block in re.findall(r"^```shell\n(.*?)^```", text, re.S | re.M)
                for line in block.splitlines() if "--cfg job" in line]  # fmt: skip
    assert len(commands) >= 2
    composed = {}
    for line in commands:
        words = shlex.split(line, comments=True)
        assert words[:3] == ["python", "-m", "nmt.train"], line
        result = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        composed[line] = yaml.safe_load(result.stdout)
    mine = next(cfg for line, cfg in composed.items() if "experiment=mine" in line)
    assert mine["data"]["kind"] == "files" and mine["data"]["train_src"] == "corpus/train.de"
    assert mine["data"]["max_tokens"] == 2048  # the experiment's value, as the guide says
    assert mine["train"]["max_epochs"] == 20 and mine["model"]["decoder"]["layer_norm"] is True  # the recipe's
    mytrain = next(cfg for line, cfg in composed.items() if "--config-name mytrain" in line)
    assert mytrain["train"]["max_epochs"] == 7 and mytrain["data"]["kind"] == "synthetic"  # after the experiment's

"""The text of ``python -m nmt.COMMAND --help``: the command's own settings, read from its YAML file
with their defaults and comments, and for training its config groups. Each command's YAML names it
as Hydra's help template (``hydra.help.template: ${nmt.help:COMMAND}``), so the help lists neither
the other commands' groups nor the schemas behind the typed ones, and no comment is written twice.
"""

from __future__ import annotations

import re
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra

# "- group@package: option  # comment" in a defaults list
_ENTRY = re.compile(r"^\s*-\s*(?P<override>override\s+)?(?P<group>[\w/]+)(?:@(?P<package>[\w.]+))?:\s*"
                    r"(?P<option>[\w.]+)\s*(?:#\s*(?P<comment>.*))?$")  # fmt: skip


def _parts(path: Path) -> tuple[list[str], list[str], list[str]]:
    """A config file's leading comment (without ``#``), its defaults list entries, and its other
    lines (the settings, comments kept), leaving out the ``hydra:`` section."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = []
    while lines and lines[0].startswith("#"):
        header.append(lines.pop(0).lstrip("#").strip())
    defaults, settings, section = [], [], None
    for line in lines:
        if line and not line[0].isspace() and not line.startswith("#"):
            section = line.split(":", 1)[0]
        if section == "defaults":
            defaults += [line] if line.lstrip().startswith("-") else []
        elif section != "hydra":
            settings.append(line)
    while settings and not settings[-1].strip():
        settings.pop()
    while settings and not settings[0].strip():
        settings.pop(0)
    return header, defaults, settings


def _stored(group: str) -> set[str]:
    """The schemas registered in code under ``group`` (``train/schema``): not options to choose."""
    try:
        return {name.removesuffix(".yaml") for name in ConfigStore.instance().list(group)}
    except OSError:  # none under this group
        return set()


def _options(config_dir: Path, group: str) -> list[str]:
    """``group: option, option...`` for ``group`` and each group under it. While a command runs,
    Hydra's search path gives them (a ``--config-dir``'s options included), else ``config_dir``."""
    hydra = GlobalHydra.instance()
    if hydra.is_initialized():
        loader = hydra.config_loader()
        names, subgroups = loader.get_group_options(group), loader.list_groups(group)
    else:
        folder = config_dir / group
        names = [p.stem for p in folder.glob("*.yaml")]
        subgroups = [p.name for p in folder.iterdir() if p.is_dir()]
    names = sorted(set(names) - _stored(group))
    out = [f"  {group}: {', '.join(names)}"] if names else []
    for sub in sorted(subgroups):
        out += _options(config_dir, f"{group}/{sub}")
    return out


def command_help(config_dir: str | Path, name: str) -> str:
    """The help of ``python -m nmt.NAME``, from ``config_dir/NAME.yaml``: its header comment, its
    settings as the file writes them, those of the group files its defaults list places among them
    (``search@_global_``), and the groups a user switches (``data=files``) with their options."""
    config_dir = Path(config_dir)
    header, defaults, settings = _parts(config_dir / f"{name}.yaml")
    groups = []
    for entry in filter(None, (_ENTRY.match(line) for line in defaults)):
        group, package, comment = entry["group"], entry["package"], entry["comment"]
        if entry["override"] or group == "_self_":
            continue
        if package is None:  # a group the user chooses an option of
            found = _options(config_dir, group)
            found[0] += f"  (default: {'none' if entry['option'] == 'null' else entry['option']})"
            groups += found
            continue
        placed = _parts(config_dir / group / f"{entry['option']}.yaml")[2]
        if package == "_global_":
            settings += ["", *([f"# {comment}"] if comment else []), *placed]
        else:
            settings += ["", f"{package}:" + (f"  # {comment}" if comment else ""), *(f"  {line}" for line in placed)]
    text = [*header, ""]
    if settings:
        text += ["Settings and their defaults (give any as KEY=VALUE):", "", *settings, ""]
    if groups:
        text += ["Config groups (give any as GROUP=OPTION; then KEY=VALUE for the settings they hold):", *groups, ""]
    text.append(f"python -m nmt.{name} [KEY=VALUE ...] --cfg job prints the whole config as composed; "
                "--hydra-help lists Hydra's own options.")  # fmt: skip
    return "\n".join(text).replace("$", "$$")  # Hydra fills the template with string.Template

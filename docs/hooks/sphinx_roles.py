"""A Griffe extension for the API pages: turns the Sphinx roles of nmt's docstrings
(:func:`x`, :class:`~a.B`, :meth:`C.m`, :mod:, :data:, :attr:, :exc:, :obj:) into links.

mkdocstrings' Python handler parses reST field lists (``:param x:``) but leaves inline roles as
text. Before a docstring is rendered, each role becomes an optional cross-reference to the full
path of the object it names, resolved as Sphinx would: in the enclosing class and module first
(names a module imports included), then as an absolute path. A target the site does not render
shows as code, without a link. ``~`` shows the last component only, as in Sphinx.

Loaded by ``mkdocs.yml`` (``plugins: mkdocstrings: handlers: python: options: extensions``).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):`(?P<target>[^`]+)`")


def _scopes(obj: griffe.Object) -> list[griffe.Object]:
    """The object (when it holds members), then its parents up to the package."""
    scopes = []
    current: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    while current is not None:
        scopes.append(current)
        current = current.parent
    return scopes


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path that ``target``, written in ``obj``'s docstring, names; None if unknown."""
    parts = target.lstrip(".").split(".")
    for scope in _scopes(obj):
        member = scope.members.get(parts[0])
        if member is None:
            continue
        base = member.target_path if member.is_alias else member.path
        return ".".join([base, *parts[1:]])
    package = obj.package.name
    return target if parts[0] == package else None


def rewrite(obj: griffe.Object, text: str) -> str:
    """``text`` with every role replaced by an optional cross-reference (or code)."""

    def replace(match: re.Match) -> str:
        target = match["target"].strip()
        short = target.startswith("~")
        target = target.lstrip("~")
        shown = target.rsplit(".", 1)[-1] if short else target
        path = resolve(obj, target)
        if path is None:
            return f"`{shown}`"
        return f'<autoref identifier="{html.escape(path)}" optional><code>{html.escape(shown)}</code></autoref>'

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        seen: set[int] = set()
        pending: list[griffe.Object] = [pkg]
        while pending:
            obj = pending.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            pending.extend(member for member in obj.members.values() if not member.is_alias)

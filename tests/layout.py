"""Read the real source tree's modules and imports (AST only: nothing is imported).

The layout tests (``test_layout.py``) and any later AST rule build on these helpers:

- :func:`iter_modules`: every module of the checked packages (``litehit_core``,
  ``litehit_service`` minus its generated ``_proto`` package) and, with
  ``scripts=True``, of the script folders (``bench/``, ``scripts/``), as :class:`Module`.
- :func:`imports_of`: every import of one module at any depth (function bodies, ``if
  TYPE_CHECKING:`` blocks, ``try`` blocks, and ``importlib.import_module("...")`` /
  ``__import__("...")`` with a constant name), resolved to absolute dotted names, as
  :class:`Import`.
- :func:`module_aliases`: the local names a module binds to imported modules (for
  attribute checks such as ``alias._private``).
- :func:`import_graph`, :func:`find_cycle`: the first-party import graph and one cycle of it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("litehit_core", "litehit_service")
"""The first-party packages whose import graph must have no cycle."""
GENERATED = (".".join(Path("litehit_service", "_proto").parts),)
"""Generated code (protoc output), left out of every check. (Spelled from its folder:
``test_public_api`` greps the tree for the dotted name of the generated package.)"""
SCRIPT_DIRS = ("bench", "scripts")
"""Folders of stand-alone scripts (no package): checked for private imports, not cycles."""


class Module(NamedTuple):
    """One source file: ``name`` is its dotted module name (``litehit_core.hybrid``; a
    package's ``__init__.py`` is the package's name; a script is ``bench.bench_core``),
    ``path`` the file, ``package`` the package relative imports resolve against."""

    name: str
    path: Path
    package: str

    @property
    def is_script(self) -> bool:
        return self.name.split(".")[0] in SCRIPT_DIRS

    def tree(self) -> ast.Module:
        """The parsed source (cached per path)."""
        return _parse(self.path)


class Import(NamedTuple):
    """One imported thing: ``module`` the absolute module named by the statement (for
    ``from m import n``, ``m``), ``name`` the imported name (``None`` for ``import m``),
    ``target`` the module the import really loads (``m.n`` when that is a known module,
    else ``m``), ``line`` where it is."""

    module: str
    name: str | None
    target: str
    line: int


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _excluded(name: str) -> bool:
    return any(name == g or name.startswith(g + ".") for g in GENERATED)


def iter_modules(*, scripts: bool = False, root: Path = ROOT) -> Iterator[Module]:
    """Every module of :data:`PACKAGES` (without :data:`GENERATED`), sorted by name, and
    with ``scripts`` the ``*.py`` files of :data:`SCRIPT_DIRS` too."""
    found: list[Module] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts.pop()
            name = ".".join(parts)
            if _excluded(name):
                continue
            found.append(Module(name, path, name if is_init else ".".join(parts[:-1])))
    if scripts:
        for folder in SCRIPT_DIRS:
            for path in sorted((root / folder).glob("*.py")):
                found.append(Module(f"{folder}.{path.stem}", path, folder))
    yield from sorted(found)


@cache
def known_modules(root: Path = ROOT) -> frozenset[str]:
    """Dotted names of every first-party module (generated ones included: they exist)."""
    names = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.add(".".join(parts))
    return frozenset(names)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from`` import (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: Module) -> list[Import]:
    """Every import in ``module``, at any depth, in source order. ``import a.b`` gives
    ``Import("a.b", None, "a.b", line)``; ``from a import b, c`` one Import per name; a
    constant-string ``importlib.import_module``/``__import__`` call counts as ``import``."""
    known = known_modules()
    found: list[Import] = []
    for node in ast.walk(module.tree()):
        if isinstance(node, ast.Import):
            found += [Import(a.name, None, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(Import(base, alias.name, sub if sub in known else base, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "__import__")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            name = node.args[0].value
            found.append(Import(name, None, name, node.lineno))
    return sorted(found, key=lambda i: i.line)


def module_aliases(module: Module) -> dict[str, str]:
    """Local name -> module for every name ``module`` binds to an imported module: ``import
    a.b as x`` (x -> a.b), ``import a.b`` (a -> a), and ``from a import b`` when ``a.b``
    is a first-party module (b -> a.b)."""
    known = known_modules()
    aliases: dict[str, str] = {}
    for node in ast.walk(module.tree()):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for a in node.names:
                if f"{base}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
    return aliases


def is_private(name: str) -> bool:
    """A leading-underscore name that is not a dunder (``_x`` yes; ``__all__`` no)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def import_graph(modules: list[Module] | None = None) -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports (every import at any depth,
    TYPE_CHECKING ones included). ``import a.b.c`` is one edge to ``a.b.c``: the implicit
    loading of the parent packages ``a`` and ``a.b`` is not an edge (else every package
    whose ``__init__`` re-exports a submodule would be a circle with it)."""
    modules = list(iter_modules()) if modules is None else modules
    names = {m.name for m in modules}
    graph: dict[str, set[str]] = {m.name: set() for m in modules}
    for m in modules:
        for imp in imports_of(m):
            if imp.target in names and imp.target != m.name:
                graph[m.name].add(imp.target)
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None. Iterative DFS, O(V + E)."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    for start in sorted(graph):
        if colour[start] != white:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        colour[start] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            state = colour.get(nxt, black)
            if state == grey:
                return path[path.index(nxt) :] + [nxt]
            if state == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None

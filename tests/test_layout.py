"""The source tree's layout rules, checked on the real files (AST; see ``layout.py``).

(a) No module imports another module's private name: neither ``from m import _x`` nor
    ``alias._x`` on an imported module. A package's private submodule (``_trace`` of
    ``bench/``, ``_proto`` of ``litehit_service``) may be used inside that package only.
(b) The import graph of ``litehit_core`` + ``litehit_service`` has no cycle (every import
    counts: inside functions and ``if TYPE_CHECKING:`` blocks too).
(c) ``litehit_core`` imports no gRPC, protobuf, Prometheus or ``litehit_service`` module.

``tests/`` is not checked (a test may reach into the module it tests), nor the generated
``_proto`` package (:data:`layout.GENERATED`).
"""

from __future__ import annotations

import ast

import pytest
from layout import (
    GENERATED,
    Module,
    find_cycle,
    import_graph,
    imports_of,
    is_private,
    iter_modules,
    known_modules,
    module_aliases,
)

EXEMPT: dict[str, str] = {
    "argparse._SubParsersAction": "the type of add_subparsers()'s result, which argparse "
    "exports under no public name; used in annotations of the commands' register()",
    "os._exit": "documented os API: leave a process at once, without cleanup handlers",
    "sys._debugmallocstats": "documented CPython API: the allocator's statistics (bench)",
}
"""Private names of other (standard library) modules that may be used, with the reason.
First-party code has none: make the name public where it lives instead."""

FORBIDDEN_IN_CORE = (
    "litehit_service",
    "grpc",
    "grpc_health",
    "grpc_reflection",
    "grpc_status",
    "google.protobuf",
    "prometheus_client",
)
"""What ``litehit_core`` never imports: the service, the RPC and metrics frameworks."""


def _inside(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def _script_sibling(module: Module, dotted: str) -> str:
    """A script's ``from _trace import x`` names its folder's ``_trace`` (the scripts put
    their own folder on ``sys.path``): ``bench._trace``."""
    if module.is_script and (module.path.parent / f"{dotted.split('.')[0]}.py").exists():
        return f"{module.package}.{dotted}"
    return dotted


def private_uses(module: Module, exempt: bool = True) -> list[str]:
    """``"line: dotted.name"`` for every private name ``module`` takes from another
    module, by import or by attribute on an imported module alias; those in
    :data:`EXEMPT` left out unless ``exempt`` is false."""
    known = known_modules()
    found = []
    for imp in imports_of(module):
        if imp.module == "__future__" or _inside(imp.module, GENERATED[0]):
            continue
        dotted = _script_sibling(module, imp.module + (f".{imp.name}" if imp.name else ""))
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not is_private(part):
                continue
            owner = ".".join(parts[:i])
            holder = ".".join(parts[: i + 1])
            is_module = holder in known or (module.is_script and owner == module.package)
            if not (is_module and owner and _inside(module.name, owner)):
                found.append(f"{imp.line}: {dotted}")
            break
    aliases = module_aliases(module)
    for node in ast.walk(module.tree()):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain = []  # alias.sub.sub._x: the names between the alias and the private one
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in aliases:
            target = ".".join([aliases[value.id], *chain])
            if not _inside(target, GENERATED[0]):
                found.append(f"{node.lineno}: {target}.{node.attr}")
    return [f for f in found if not (exempt and f.split(": ", 1)[1] in EXEMPT)]


MODULES = list(iter_modules(scripts=True))


def test_the_walk_sees_the_tree() -> None:
    names = {m.name for m in MODULES}
    assert {"litehit_core.hybrid", "litehit_service.metrics", "bench.bench_core"} <= names
    assert not any(n.startswith(GENERATED[0]) for n in names)
    assert len(names) > 60


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from litehit_core.hybrid import _slot", ["1: litehit_core.hybrid._slot"]),
        ("from litehit_core import hybrid\nhybrid._slot(1, 2)", ["2: litehit_core.hybrid._slot"]),
        ("import litehit_core.hybrid as h\nh._T", ["2: litehit_core.hybrid._T"]),
        ("import litehit_core.hybrid\nlitehit_core.hybrid._T", ["2: litehit_core.hybrid._T"]),
        ("import os\nos.path._joinrealpath", ["2: os.path._joinrealpath"]),
        ("def f():\n    from numpy import _core", ["2: numpy._core"]),
        ("import numpy as np\nnp._NoValue", ["2: numpy._NoValue"]),
        (f"from {GENERATED[0]} import x", []),  # generated: exempt
        ("from __future__ import annotations\nx.__name__", []),
        ("from litehit_core.hybrid import HybridLRU\nself._meta", []),
    ],
)
def test_private_use_scanner(tmp_path, source: str, found: list[str]) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert private_uses(Module("litehit_core.probe", path, "litehit_core")) == found


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_no_module_imports_another_modules_private_names(module: Module) -> None:
    assert private_uses(module) == [], (
        f"{module.path}: uses another module's private names (make them public in the "
        f"module that owns them, or move shared code to a shared module)"
    )


def test_exemptions_are_still_needed() -> None:
    used = {use.split(": ", 1)[1] for m in MODULES for use in private_uses(m, exempt=False)}
    assert set(EXEMPT) <= used, "an exemption no longer matches any import: remove it"


def test_cycle_finder() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert {"litehit_core.hybrid", "litehit_service.metrics"} <= set(graph)
    assert sum(map(len, graph.values())) > 100  # the walk saw the imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def forbidden_in_core(module: Module) -> list[str]:
    """``line: module`` of every import of ``module`` that the core must not make."""
    return [
        f"{imp.line}: {imp.target}"
        for imp in imports_of(module)
        if any(_inside(imp.target, f) or _inside(imp.module, f) for f in FORBIDDEN_IN_CORE)
    ]


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import grpc", ["1: grpc"]),
        ("import grpc.aio as aio", ["1: grpc.aio"]),
        ("from prometheus_client import Counter", ["1: prometheus_client"]),
        ("def f():\n    import litehit_service\n", ["2: litehit_service"]),
        ("import os, prometheus_client.core", ["1: prometheus_client.core"]),
        ("importlib.import_module('grpc')", ["1: grpc"]),
        ("__import__('litehit_service.cli')", ["1: litehit_service.cli"]),
        ("from google.protobuf import message", ["1: google.protobuf"]),
        ("import grpcio_helper\nfrom litehit_core import model", []),  # lookalikes
    ],
)
def test_forbidden_import_scanner(tmp_path, source: str, found: list[str]) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert forbidden_in_core(Module("litehit_core.probe", path, "litehit_core")) == found


def test_core_imports_no_service_rpc_or_metrics_framework() -> None:
    core = [m for m in MODULES if m.name.split(".")[0] == "litehit_core"]
    assert {"litehit_core.engine", "litehit_core.kernels"} <= {m.name for m in core}
    bad = [f"{m.name}:{use}" for m in core for use in forbidden_in_core(m)]
    assert bad == []

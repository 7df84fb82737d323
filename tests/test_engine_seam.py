"""The engine registry (:mod:`litehit_core.engine`) is the only code that names a model.

Walks the real source of ``litehit_core`` and ``litehit_service`` (AST; nothing outside
the registry is imported for it) and fails on any *test* of a model or engine: a
comparison with a registered model name or full-attention implementation name, a lookup
of a model table by such a name, or an ``isinstance``/``type(...) is`` test of an engine
class. The names and classes come from the live registry, so a new model is covered the
day it is registered.
"""

from __future__ import annotations

import ast

import pytest
from layout import iter_modules

from litehit_core.engine import LRU_ENGINES, MODELS, EngineSpec, create_engine, model_entry

REGISTRY = "litehit_core.engine"


def _engine_class_names() -> set[str]:
    """The class of every engine the registry builds (each model, each implementation)."""
    names = set()
    for model in MODELS:
        for lru_engine in LRU_ENGINES:
            spec = EngineSpec(model=model, full_bytes=2, linear_bytes=1, step_blocks=1,
                              lru_engine=lru_engine)  # fmt: skip
            names.add(type(create_engine(spec)).__name__)
    return names


MODEL_NAMES = set(MODELS) | set(LRU_ENGINES)
ENGINE_CLASSES = _engine_class_names()


def _constants(node: ast.AST) -> list[str]:
    """String constants of an operand (itself, or the items of a literal tuple/list/set)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def model_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every model or engine test in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = {c for o in operands for c in _constants(o)} & MODEL_NAMES
            if names:
                found.append((node.lineno, f"compares with model/engine name {sorted(names)}"))
            classes = {_name(o) for o in operands} & ENGINE_CLASSES
            if classes and any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
                found.append((node.lineno, f"type test of engine class {sorted(classes)}"))
        elif isinstance(node, ast.Subscript):
            names = set(_constants(node.slice)) & MODEL_NAMES
            if names:
                found.append((node.lineno, f"looks up model name {sorted(names)}"))
        elif isinstance(node, ast.Call) and _name(node.func) in ("isinstance", "issubclass"):
            if len(node.args) == 2:
                target = node.args[1]
                items = target.elts if isinstance(target, ast.Tuple) else [target]
                classes = {_name(i) for i in items} & ENGINE_CLASSES
                if classes:
                    found.append((node.lineno, f"isinstance test of {sorted(classes)}"))
        elif isinstance(node, ast.MatchValue):
            names = set(_constants(node.value)) & MODEL_NAMES
            if names:
                found.append((node.lineno, f"matches model name {sorted(names)}"))
    return found


def test_only_the_registry_tests_a_model_name_or_engine_class():
    offenders = []
    for module in iter_modules():
        if module.name == REGISTRY:
            continue
        for line, what in model_tests(module.tree()):
            offenders.append(f"{module.path}:{line}: {what}")
    assert offenders == [], "model knowledge outside the engine registry:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source, expected",
    [
        ('if spec.model == "hybrid": pass', "compares with model/engine name ['hybrid']"),
        ('x = engine in ("compact", "x")', "compares with model/engine name ['compact']"),
        ('FACT_MODELS["lru"]', "looks up model name ['lru']"),
        ("isinstance(e, (int, CompactLiteHit))", "isinstance test of ['CompactLiteHit']"),
        ("type(e) is HybridLRU", "type test of engine class ['HybridLRU']"),
        ('match m:\n    case "lru-head-first": pass', "matches model name ['lru-head-first']"),
        ('spec.model == other or name == "lruX"', None),
    ],
)
def test_the_walker_sees_each_kind_of_model_test(source: str, expected: str | None):
    found = model_tests(ast.parse(source))
    assert [what for _, what in found] == ([expected] if expected else [])


def test_every_registered_model_reads_its_own_facts():
    for name, entry in MODELS.items():
        assert model_entry(name) is entry and entry.name == name
        assert entry.curve in ("ramps", "steps") and entry.unit in ("blocks", "bytes")

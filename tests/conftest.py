"""Collection rules shared by the test modules."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, on the compact engine, the tests a module lists in ``LITE_HIT_INTERNALS`` (they
    read :class:`~litehit_core.lite_hit.LiteHit`'s own layout), with the listed reason."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("lite_hit_engine") != "compact":
            continue
        internals = getattr(item.module, "LITE_HIT_INTERNALS", {})
        name = item.originalname if hasattr(item, "originalname") else item.name
        if name in internals:
            item.add_marker(pytest.mark.skip(reason=f"reads LiteHit's {internals[name]}"))

"""No module grows past one job: every first-party module (and script) stays within
:data:`MAX_LINES` lines; generated protobuf code is the only exemption (``layout``
leaves it out)."""

from __future__ import annotations

from layout import iter_modules

MAX_LINES = 600


def test_every_module_stays_within_max_lines():
    too_long = {}
    for module in iter_modules(scripts=True):
        lines = module.path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_LINES:
            too_long[str(module.path)] = lines
    assert too_long == {}, f"split these by job (at most {MAX_LINES} lines each): {too_long}"

"""Homes by system: the layout of the packages, checked on the real tree.

(a) Every first-party package says in its docstring what it is for.
(b) No flat module sits in a package folder whose other entries are sub-packages: a folder
    holds either homes (sub-packages) or the modules of one job. Packages that hold both
    are listed in :data:`FLAT_BESIDE_PACKAGES` with the reason (deny by default).
(c) The Architecture section of the docs draws this tree: a row per top-level home of
    ``litehit_service`` naming each of its sub-packages and modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from layout import GENERATED, PACKAGES, ROOT

FLAT_BESIDE_PACKAGES: dict[str, str] = {
    "litehit_core": "the exact core's modules (engines, projector, facts) beside "
    "policy_replay/, the policy engines' family with its shared loop",
    "litehit_service": "the online service's modules (server, servicer, wire, client, ...), "
    "whose import paths are public, beside the homes of the offline systems, the manager "
    "and the CLI",
}
"""Packages allowed to hold flat modules beside sub-packages, with the reason."""

HOMES = ("traces", "litehit", "lmcache", "optimizer", "offline")
"""The homes of ``litehit_service`` whose every module the README's Architecture names."""


def _packages() -> list[Path]:
    found = []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            dotted = ".".join(init.parent.relative_to(ROOT).parts)
            if not any(dotted == g or dotted.startswith(g + ".") for g in GENERATED):
                found.append(init.parent)
    return found


def _dotted(folder: Path) -> str:
    return ".".join(folder.relative_to(ROOT).parts)


def test_every_package_says_what_it_is_for() -> None:
    """Catches a new package (a home) added without a docstring saying its job."""
    folders = _packages()
    assert len(folders) >= 15
    missing = [
        _dotted(f)
        for f in folders
        if not ast.get_docstring(ast.parse((f / "__init__.py").read_text()))
    ]
    assert missing == []


def flat_beside_packages(folder: Path) -> list[str]:
    """The flat modules of ``folder`` when it also holds sub-packages."""
    subpackages = [p for p in folder.iterdir() if (p / "__init__.py").is_file()]
    flat = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    return flat if subpackages and flat else []


def test_no_flat_module_beside_sub_packages() -> None:
    """Catches a module dropped beside homes (e.g. a new tool as a flat file next to
    litehit/, lmcache/, optimizer/), which is how one room came to hold a third of the
    code."""
    found = {
        _dotted(f): flat
        for f in _packages()
        if (flat := flat_beside_packages(f)) and _dotted(f) not in FLAT_BESIDE_PACKAGES
    }
    assert found == {}
    stale = [
        p for p in FLAT_BESIDE_PACKAGES if not flat_beside_packages(ROOT / p.replace(".", "/"))
    ]
    assert stale == []


def test_the_rule_sees_a_planted_flat_module(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    for path in (home / "__init__.py", home / "sub" / "__init__.py", home / "tool.py"):
        path.write_text('"""x"""\n')
    assert flat_beside_packages(home) == ["tool.py"]
    (home / "tool.py").unlink()
    assert flat_beside_packages(home) == []


def _architecture() -> str:
    from doc_pages import section

    return section("Architecture")


def test_the_readme_architecture_draws_the_homes() -> None:
    """Catches a home, sub-package or module that the docs' map leaves out (or a row
    for a folder that no longer exists)."""
    text = _architecture()
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `(litehit_service/[a-z_/]+/)` \| (.*) \|$", text, re.M)
    }
    missing = []
    for home in HOMES:
        folder = ROOT / "litehit_service" / home
        row = rows.get(f"litehit_service/{home}/")
        if row is None:
            missing.append(f"no row for litehit_service/{home}/")
            continue
        for path in sorted(folder.rglob("*.py")):
            if path.name == "__init__.py":
                if path.parent != folder and f"`{path.parent.name}/`" not in row:
                    missing.append(f"{home}: {path.parent.name}/")
            elif not re.search(rf"`{re.escape(path.stem)}`", row):
                missing.append(f"{home}: {path.relative_to(folder)}")
    gone = [r for r in rows if not (ROOT / r).is_dir()]
    assert (missing, gone) == ([], [])

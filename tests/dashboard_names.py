"""Metric names used by the Grafana dashboard's PromQL, and names a /metrics page exposes.

A plain helper module for the tests (``tests/`` is not a package). Load it by path::

    import importlib.util, pathlib
    spec = importlib.util.spec_from_file_location(
        "dashboard_names", pathlib.Path(__file__).with_name("dashboard_names.py"))
    dashboard_names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dashboard_names)
    dashboard_names.dashboard_metric_names()

Names are compared at the *family* level: ``foo_bucket``/``foo_sum``/``foo_count`` in a query
mean the histogram ``foo``; counters keep their ``_total`` (that is the name PromQL uses).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DASHBOARD_PATH = REPO_ROOT / "deploy" / "grafana" / "dashboards" / "litehit.json"

#: Suffixes PromQL adds to a histogram (or summary) family name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

#: PromQL words that look like identifiers but are never metric names.
PROMQL_KEYWORDS = frozenset(
    # aggregation operators (may be followed by a by/without clause instead of "(")
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk "
    "limit_ratio "
    # binary operators, modifiers and literals
    "and or unless atan2 by without on ignoring group_left group_right bool offset start end "
    "inf nan".split()
)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*")
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\s*\((.*)\)\s*$", re.S)


def family_name(name: str) -> str:
    """``name`` without one trailing ``_bucket``/``_sum``/``_count`` (histogram samples). O(1).

    LiteHit exports no counter or gauge whose own name ends in one of these suffixes, so
    stripping by name alone is unambiguous here.
    """
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def promql_metric_names(expr: str) -> set[str]:
    """Metric family names that the PromQL expression ``expr`` selects. O(len(expr)).

    Ignores function names (an identifier followed by ``(``), aggregation and binary
    keywords, label names in matchers and in by/without/on/ignoring/group_* lists,
    string literals, numbers, durations and Grafana ``$variables``; honours
    ``{__name__="..."}`` selectors. Histogram sample names map to their family name.
    """
    names = set(_NAME_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word in PROMQL_KEYWORDS:
            continue
        names.add(family_name(word))
    return names


def variable_query_expr(query: str | Mapping[str, Any]) -> str | None:
    """The PromQL inside a Grafana Prometheus variable query, or None if it has none. O(n).

    ``label_values(<selector>, label)`` -> ``<selector>``; ``query_result(<expr>)`` -> ``<expr>``;
    ``label_values(label)`` and ``label_names()`` select no metric. Accepts the legacy string
    form and the Grafana 10+ object form (``{"query": ...}``).
    """
    if isinstance(query, Mapping):
        query = str(query.get("query", ""))
    for pattern in (_LABEL_VALUES, _QUERY_RESULT):
        match = pattern.match(query)
        if match:
            return match.group(1)
    return None


def _panels(panels: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows (collapsed or not)


def load_dashboard(path: str | Path = DASHBOARD_PATH) -> dict[str, Any]:
    """The dashboard JSON at ``path`` as a dict (raises ValueError naming the file if invalid)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"dashboard {path}: invalid JSON: {exc}") from exc


def dashboard_expressions(dashboard: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression in ``dashboard``: panel targets' ``expr`` (rows included)
    followed by the PromQL inside query-type template variables. O(size of dashboard)."""
    exprs = [
        target["expr"]
        for panel in _panels(dashboard.get("panels", []))
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            expr = variable_query_expr(variable.get("query", ""))
            if expr:
                exprs.append(expr)
    return exprs


def dashboard_metric_names(dashboard: Mapping[str, Any] | str | Path = DASHBOARD_PATH) -> set[str]:
    """Every metric family name the dashboard's PromQL uses (panels and template variables).

    ``dashboard`` is a parsed dashboard or the path of its JSON (default: the shipped
    deploy/grafana/dashboards/litehit.json). O(size of dashboard).
    """
    if not isinstance(dashboard, Mapping):
        dashboard = load_dashboard(dashboard)
    names: set[str] = set()
    for expr in dashboard_expressions(dashboard):
        names |= promql_metric_names(expr)
    return names


_TYPE_LINE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)\s*$")
_SAMPLE_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?=[\s{])")


def exposed_metric_names(metrics_text: str) -> set[str]:
    """Metric names a Prometheus text-format page (``/metrics``) exposes, as PromQL would
    name them at the family level: histogram/summary samples map to the family name,
    counter and gauge samples keep their own name (``foo_total``); ``*_created`` samples
    are dropped. Only names with at least one sample count. O(len(metrics_text)).
    """
    types: dict[str, str] = {}
    samples: set[str] = set()
    for line in metrics_text.splitlines():
        typed = _TYPE_LINE.match(line)
        if typed:
            types[typed.group(1)] = typed.group(2)
            continue
        if line.startswith("#"):
            continue
        sample = _SAMPLE_NAME.match(line)
        if sample:
            samples.add(sample.group(1))
    names: set[str] = set()
    for sample in samples:
        if sample.endswith("_created"):
            continue
        family = family_name(sample)
        if family != sample and types.get(family) in ("histogram", "summary"):
            names.add(family)
        else:
            names.add(sample)
    return names

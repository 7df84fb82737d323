# ruff: noqa: E402  (the kernel cache's location is settled before any kernel module loads)
"""litehit_core: exact, capacity-independent prefix hit rates for an LRU of every capacity.

Python, numpy and numba (the hybrid engine's kernels); no gRPC, Prometheus or I/O
framework imports. Units are blocks and tokens;
bytes appear only at the projection boundary (:mod:`litehit_core.projector`).
"""

from litehit_core.kernel_cache import ensure_cache_location

# before any module with a kernel is imported: numba decorates them at import and refuses
# a cache=True kernel it has nowhere to cache (a read-only install, no writable home)
ensure_cache_location()

from litehit_core.accumulator import CurvePoint, HitCurveAccumulator
from litehit_core.curve import MARK_PERCENTS, InstanceCurve, Mark
from litehit_core.engine import (
    FACT_MODELS,
    MODELS,
    EngineModel,
    EngineSpec,
    ReplayEngine,
    create_engine,
)
from litehit_core.errors import InvalidRequestError, LocatedError
from litehit_core.facts import (
    FACTS_FILENAME,
    FACTS_HEADER,
    FACTS_HEADER_MODELS,
    FactLineFormat,
    FactRow,
    FactsWriter,
    csv_field,
    format_fact_row,
    format_hit_curve,
    read_facts,
)
from litehit_core.kernel_cache import drop_stale_kernels
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_core.lite_hit import LiteHit
from litehit_core.model import (
    FactModel,
    HitCurveSegment,
    HitCurveStep,
    NormalizedRequest,
    RequestFact,
)
from litehit_core.normalize import normalize_request
from litehit_core.prefix_hash import apply_prefix_hash, prefix_hash_next
from litehit_core.projector import (
    CAPACITY_SLOT_RULE,
    INFINITE_CAPACITY_GB,
    MAX_CAPACITY_GB,
    Projection,
    bytes_to_blocks,
    capacity_gb_to_blocks,
    capacity_gb_to_bytes,
    capacity_slot_bytes,
    project_blocks,
    project_bytes,
    project_curve,
    project_curve_infinite,
    project_curve_slots,
    project_infinite,
    project_matrix,
    project_steps,
    project_steps_matrix,
    project_steps_slots,
)
from litehit_core.query import FactsQuery, QueryChunk, query_facts
from litehit_core.state import STATE_FORMAT_VERSION, EngineState

# before any kernel loads (kernels compile or load at their first call, none at import):
# numba's cache misses changes made in another file than the kernel's own
drop_stale_kernels()

__all__ = [
    "MODELS",
    "EngineModel",
    "EngineSpec",
    "EngineState",
    "STATE_FORMAT_VERSION",
    "Projection",
    "ReplayEngine",
    "create_engine",
    "DEFAULT_MAX_LINE_BYTES",
    "FACTS_FILENAME",
    "FACTS_HEADER",
    "FACTS_HEADER_MODELS",
    "CAPACITY_SLOT_RULE",
    "INFINITE_CAPACITY_GB",
    "MAX_CAPACITY_GB",
    "CurvePoint",
    "FactLineFormat",
    "FactRow",
    "FactsQuery",
    "FactsWriter",
    "HitCurveAccumulator",
    "InstanceCurve",
    "MARK_PERCENTS",
    "Mark",
    "csv_field",
    "format_fact_row",
    "format_hit_curve",
    "project_matrix",
    "query_facts",
    "read_facts",
    "FACT_MODELS",
    "FactModel",
    "HitCurveSegment",
    "HitCurveStep",
    "InvalidRequestError",
    "LocatedError",
    "LiteHit",
    "HybridLRU",
    "NormalizedRequest",
    "QueryChunk",
    "RequestFact",
    "apply_prefix_hash",
    "bytes_to_blocks",
    "capacity_gb_to_blocks",
    "capacity_gb_to_bytes",
    "capacity_slot_bytes",
    "normalize_request",
    "prefix_hash_next",
    "project_blocks",
    "project_bytes",
    "project_curve",
    "project_curve_infinite",
    "project_curve_slots",
    "project_infinite",
    "project_steps",
    "project_steps_matrix",
    "project_steps_slots",
]


def __getattr__(name: str) -> object:
    """``HybridLRU`` on first use: its module compiles numba kernels, which only hybrid and
    head-first replays need (importing numba cost 0.14 s of every command's start:
    bench/README.md, issue 14, 2026-12-03, 2 cores)."""
    if name == "HybridLRU":
        from litehit_core.hybrid import HybridLRU

        return HybridLRU
    raise AttributeError(f"module 'litehit_core' has no attribute {name!r}")

"""Trace readers (moved from ``traces.py``; split by format next)."""

from litehit_service.offline.traces.lmcache import *  # noqa: F403
from litehit_service.offline.traces.lmcache import (  # noqa: F401
    __all__,
    _hex_records_to_keys,
    _LMCacheReader,
    _many_seconds_to_ns,
    _seconds_to_ns,
    open_trace,
    trace_lines,
)

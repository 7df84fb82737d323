"""Log converters: one module per log format behind a table by name.

- :mod:`.base`: :class:`Converter` (the interface), :class:`Conversion` (one run),
  :class:`Converted` (one output record);
- :mod:`.ordering`: several files as one time-ordered stream in bounded memory;
- :mod:`.publisher_log`: KVCacheManager event-publisher logs (``get`` / ``write``);
- :mod:`.bailian`: Qwen Bailian usage traces (``request``, or ``get`` + ``write``);
- :mod:`.text`: raw prompts tokenized with a given tokenizer (``request``), keyed by the
  formulas of :mod:`.prompts`.

Adding a converter: one module with a ``Converter`` subclass and its ``CONVERTER``, and one
entry in :data:`_ENTRIES`. ``litehit convert --from NAME`` takes the names of
:data:`CONVERTERS` next to the trace readers' names.
"""

from __future__ import annotations

from types import MappingProxyType

from litehit_service.traces.logs.bailian import CONVERTER as BAILIAN
from litehit_service.traces.logs.base import Conversion, Converted, Converter
from litehit_service.traces.logs.publisher_log import CONVERTER as PUBLISHER_LOG
from litehit_service.traces.logs.text import CONVERTER as TEXT

__all__ = ["CONVERTERS", "Conversion", "Converted", "Converter"]

_ENTRIES: tuple[Converter, ...] = (PUBLISHER_LOG, BAILIAN, TEXT)

CONVERTERS = MappingProxyType({converter.name: converter for converter in _ENTRIES})
"""Converter name -> converter, in registration order (read-only)."""

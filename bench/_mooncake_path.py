"""``litehit ARGS`` with Mooncake traces read one way: ``columns`` (the column source, also
for ``replay``'s events) or ``lines`` (no column source: the line loop every command used
before). ``bench_streaming.py --formats mooncake`` runs each command both ways.

Usage: python bench/_mooncake_path.py columns|lines COMMAND ARGS... (the CLI's arguments).
"""

from __future__ import annotations

import sys

from litehit_service.cli import main
from litehit_service.traces.readers.records import TraceReader
from litehit_service.traces.readers.registry import get_reader

if __name__ == "__main__":
    how, argv = sys.argv[1], sys.argv[2:]
    reader = type(get_reader("mooncake"))
    if how == "columns":
        reader.events_by_columns = True
    elif how == "lines":  # the base class's answer: no column source
        reader.column_source = TraceReader.column_source  # type: ignore[method-assign]
    else:
        raise SystemExit(f"columns or lines, not {how!r}")
    raise SystemExit(main(argv))

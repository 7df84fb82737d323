"""Trace formats: reading them, converting logs into them, writing LiteHit's standard one.

Every offline tool of every system reads its input through this package; nothing here
replays anything.

- :mod:`.readers`: one reader per trace format (standard, Mooncake, LMCache lookup-hash
  logs) behind the format registry (:mod:`.readers.registry`, the only code that names a
  format), each yielding :class:`~litehit_service.traces.readers.records.TraceEvent`
  records and failing with ``path:line: reason``;
- :mod:`.logs`: one converter per log format (KVCacheManager publisher logs, Qwen Bailian
  usage traces): several files merged in time order into the same records;
- :mod:`.convert`: ``litehit convert``: any reader's or converter's input written as
  standard JSONL, all or nothing, with an optional starter ``litehit replay`` config.
"""

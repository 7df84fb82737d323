"""``litehit convert``: a trace or log written as LiteHit's standard JSONL.

- :mod:`.pipeline`: the command's work: the source by format name (a trace reader or a log
  converter), the conversion, the summary and ``--emit-config``'s starter config;
- :mod:`.logs`: the log converters' run: several inputs, one time-ordered trace;
- :mod:`.writer`: the one loop that writes standard lines (time offset, late lines);
- :mod:`.columnar`: a standard trace (JSONL or Parquet) to Parquet by columns.
"""

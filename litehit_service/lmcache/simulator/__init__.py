"""``litehit simulate`` and ``litehit sweep`` (LMCache's ``cache-simulator``).

- :mod:`.simulate`: the workload (any trace reader's input), the one replay, LMCache's report
  at a capacity, the sweep's capacities and points, and their text;
- :mod:`.plot`: the report's and the sweep's figures (matplotlib, imported lazily).
"""

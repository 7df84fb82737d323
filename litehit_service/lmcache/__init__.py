"""LMCache's offline tools, answered by LiteHit's exact core.

- :mod:`.simulator`: ``litehit simulate`` and ``litehit sweep``, LMCache's cache-simulator
  report and capacity sweep from one replay exact at every capacity, and their pictures;
- :mod:`.gen_dataset`: ``litehit gen-dataset``, a ``vllm bench serve`` dataset whose prompts
  share prefixes as the logged requests did, byte for byte LMCache's.
"""

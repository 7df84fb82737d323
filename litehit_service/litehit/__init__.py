"""LiteHit offline: a trace through the same manager as the service, into exact answers.

The tools of LiteHit's own workflow (trace -> facts ledger -> any capacity):

- :mod:`.config`: the ``litehit replay`` configuration (groups, instances, trace, routing);
- :mod:`.parsing`: trace lines parsed in batches, in input order (optionally in worker
  processes); :mod:`.replay`: ``litehit replay``, the trace through an in-process
  :class:`~litehit_service.manager.OnlineOptimizerManager` into ``litehit_facts.csv``;
  :mod:`.lanes`: one Ray task per instance (``--executor ray``);
- :mod:`.query`: ``litehit query``, a ledger projected at a list of capacities;
- :mod:`.curve` and :mod:`.plot`: ``litehit curve``, the exact curve of every capacity
  from a ledger (or a live server), as a table, CSV and picture;
- :mod:`.feed`: ``litehit feed``, a trace streamed into a running server as a gateway would.
"""

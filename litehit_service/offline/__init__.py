"""The offline tools: trace files through the same manager as the service, in process.

- :mod:`~litehit_service.offline.traces`: readers of the standard, Mooncake and LMCache
  formats, one module per format behind a registry by format name;
- :mod:`~litehit_service.offline.config`: the ``litehit replay`` configuration;
- :mod:`~litehit_service.offline.replay`: the replay into a facts ledger;
- :mod:`~litehit_service.offline.query` and :mod:`~litehit_service.offline.curve`: the
  ledger projected at given capacities, and its exact curve;
- :mod:`~litehit_service.offline.convert`: any trace as a standard trace;
- :mod:`~litehit_service.offline.outputs`: all-or-nothing file publishing, progress bars.

Every command of :mod:`litehit_service.commands` that works on files calls one function
here and prints what it returns.
"""

"""The optimizer's tools from Python (re-exported by :mod:`litehit_service.optimizer`).

:mod:`.functions`: ``optimize()`` and ``tradeoff()``, results as pyarrow Tables, no file
unless asked; :mod:`.reference`: the reference optimizer's ``OptimizerConfigLoader``,
``OptimizerManager`` and its verbs (``Init``, ``DirectRun``, ``AnalyzeResults``,
``ExportRadixTrees``); :mod:`.tool_package`: why ``litehit_service.optimizer.optimize``
and ``.tradeoff`` (the commands' subpackages) can be called as those functions. Both run
the commands' own code (replay, tables, files), so the numbers are the commands'.
"""

"""Analyses on the policy replay's analysis mode (spec ``optimizer-replay.md`` §9).

:mod:`.replay` runs one ``litehit optimize`` configuration with every node kept
(:class:`~litehit_core.policy_replay.ReplaySetup` ``analyse=True``) and publishes files all
or nothing; :mod:`.tree` and :mod:`.tree_plot` are ``litehit export-tree`` (the compressed
trie of every path written, per instance), :mod:`.lifecycle` and :mod:`.lifecycle_plot`
are ``litehit lifecycle`` (one row per block life), :mod:`.lifecycle_files` publishes its
files. Everything is vectorised with numpy
over the replay's final arrays: no Python object per block.
"""

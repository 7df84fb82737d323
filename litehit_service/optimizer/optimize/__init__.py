"""``litehit optimize``: the KVCacheManager optimizer's policy replay, offline.

:mod:`.config` (the reference's JSON, strictly), :mod:`.trace` (records -> sorted arrays,
validated first), :mod:`.run` (the compiled replay, :mod:`litehit_core.policy_replay`),
:mod:`.rows` (the reference's CSV columns), :mod:`.outputs` (files, chart, summary) and
:mod:`.exact` (LiteHit's exact LRU rates beside the replay's).
The same from Python: :func:`litehit_service.optimizer.api.optimize`.
"""

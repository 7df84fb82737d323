"""``litehit tradeoff``: hit rate against capacity, one policy replay per capacity (spec §8).

:mod:`.points` (capacity points, the configuration at a capacity, one point's numbers),
:mod:`.pool` (replays and LiteHit passes in this process, forked processes or Ray tasks,
over one decoded trace), :mod:`.exact_curve` (LiteHit's exact LRU curves from one pass),
:mod:`.sweep` (warm-up, the sweep with its 99 % stop, the 95 %/99 % bisection),
:mod:`.files` (the CSVs, written all or nothing, read back by ``--skip-run``),
:mod:`.plot` (the pictures) and :mod:`.report` (the summary, text or JSON).
The same from Python: :func:`litehit_service.optimizer.api.tradeoff`.
"""

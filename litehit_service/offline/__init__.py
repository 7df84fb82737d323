"""What the offline tools of every system share (LiteHit's, LMCache's and the optimizer's).

- :mod:`.outputs`: files published all or nothing, folders made for a run and removed on
  failure, progress bars on a terminal only, the run line;
- :mod:`.pool`: where work over a decoded trace runs (this process, forked processes or Ray
  tasks) and the worker processes' signal handling;
- :mod:`.kernels`: compiled kernels as commands meet them (a compile announced while it
  runs and named apart in the run line; ``litehit warm-up``).

The tools themselves live by the system they serve: :mod:`litehit_service.litehit`,
:mod:`litehit_service.lmcache`, :mod:`litehit_service.optimizer`, and the trace formats
they all read in :mod:`litehit_service.traces`.
"""

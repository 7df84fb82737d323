"""Sampled policy replays (issue 37): a trace read once, sampled by subtree below its
shared trunk under K seeds (:mod:`.trace`), each seed replayed with scaled capacities
(:mod:`.scale`), the estimate and its band over the seeds (:mod:`.estimate`), and
``litehit optimize --sample-rate`` (:mod:`.optimize`). The sampler itself is
:mod:`litehit_core.sampling`."""

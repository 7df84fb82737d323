"""The engine seam: every replay model behind one small protocol.

An *engine* replays one instance's requests and returns, per request, a capacity-free
fact; it never sees a capacity (rule 1). Everything that holds an engine (the manager, the
offline replay, snapshots, queries) builds it with :func:`create_engine` from an
:class:`EngineSpec` and projects its facts through the :class:`~litehit_core.projector.Projection`
the same spec describes (rule 2), so none of them knows which model it holds.

Adding a model means: an engine class implementing :class:`ReplayEngine`, one entry in
:data:`MODELS` (its name, the shape of its facts, the capacity unit they are in and how to
build it from a spec), and the spec fields it needs. Three models: the full-attention LRU
touching tail first (:class:`~litehit_core.lite_hit.LiteHit`, ``"lru"``: ramps in
blocks), the same touching head first as LMCache does
(:class:`~litehit_core.block_lru.BlockLRU`, ``"lru-head-first"``: staircases in blocks)
and the hybrid linear-attention / Mamba LRU (:class:`~litehit_core.hybrid.HybridLRU`,
``"hybrid"``: staircases in bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from litehit_core.errors import InvalidRequestError
from litehit_core.lite_hit import LiteHit
from litehit_core.model import FACT_MODELS, FactModel, RequestFact, check_lru_parameters
from litehit_core.state import EngineState

if TYPE_CHECKING:
    from litehit_core.compact_lite_hit import CompactLiteHit

LRU_ENGINES = ("python", "compact")
"""The implementations of model ``"lru"`` (:attr:`EngineSpec.lru_engine`)."""

__all__ = [
    "LRU_ENGINES",
    "MODELS",
    "EngineModel",
    "EngineSpec",
    "EngineState",
    "ReplayEngine",
    "create_engine",
]


@runtime_checkable
class ReplayEngine(Protocol):
    """What every replay model offers (see the module docstring).

    ``expired_blocks`` / ``dropped_blocks`` count blocks whose TTL lapsed, or that a
    tracking limit dropped, while tracked (cumulative).
    """

    expired_blocks: int
    dropped_blocks: int

    def process_request(self, block_keys: Sequence[int], now_ns: int = 0) -> RequestFact:
        """Replay one request (normalised keys, head first) at ``now_ns``; its fact."""
        ...

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now (what an unbounded cache would hold). O(1)."""
        ...

    def resident_blocks(self, capacities: Sequence[int]) -> tuple[int, ...]:
        """Blocks resident now in a cache of each capacity (in the model's unit)."""
        ...

    def tracked_bytes(self, block_bytes: int) -> int:
        """Bytes of every tracked object, for blocks of ``block_bytes``. O(1)."""
        ...

    def memory_usage_bytes(self) -> int:
        """Estimated bytes this engine holds. O(1)."""
        ...

    def reset(self) -> None:
        """Forget every block and counter (a cold cache)."""
        ...

    def export_state(self) -> EngineState:
        """The state a durable snapshot stores (the engine is unchanged). O(tracked)."""
        ...

    def _check(self) -> None:
        """Verify every internal invariant from scratch (tests call this)."""
        ...


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Which model an instance replays, with its parameters.

    ``model``: a name of :data:`MODELS`; ``ttl_ns``: block lifetime in ns (0 = none);
    ``max_tracked_blocks``: most distinct blocks the engine tracks (0 = unlimited; beyond
    it the least recent are dropped, so hits stay exact at every capacity up to it and the
    theoretical maximum becomes an LRU of that many blocks). Hybrid models also take
    ``full_bytes`` (F, a block), ``linear_bytes`` (L, a saved state) and ``step_blocks``
    (a state every this many blocks); their limit is in bytes: ``max_tracked_blocks``
    blocks with their states, ``max_tracked_blocks * (step * F + L) // step``.
    ``lru_engine``: which implementation replays model ``"lru"``, one of
    :data:`LRU_ENGINES`: ``"python"`` (:class:`~litehit_core.lite_hit.LiteHit`, no numba
    import) or ``"compact"`` (:class:`~litehit_core.compact_lite_hit.CompactLiteHit`:
    compiled arrays, ~30 bytes per block, a flat cost to tens of millions of blocks). Both
    give the same facts and states; other models ignore it.
    """

    model: str = "lru"
    ttl_ns: int = 0
    max_tracked_blocks: int = 0
    full_bytes: int = 0
    linear_bytes: int = 0
    step_blocks: int = 0
    lru_engine: str = "python"

    @property
    def description(self) -> EngineModel:
        """The :class:`EngineModel` of :attr:`model`; InvalidRequestError if unknown."""
        model = MODELS.get(self.model)
        if model is None:
            raise InvalidRequestError(f"model must be one of {sorted(MODELS)}, got {self.model!r}")
        return model

    @property
    def max_tracked_bytes(self) -> int:
        """A hybrid engine's byte limit (0 = unlimited). O(1)."""
        if not self.max_tracked_blocks or not self.step_blocks:
            return 0
        step = self.step_blocks
        return self.max_tracked_blocks * (step * self.full_bytes + self.linear_bytes) // step


def _lru(spec: EngineSpec, state: EngineState | None) -> ReplayEngine:
    engine: type[LiteHit] | type[CompactLiteHit] = LiteHit
    if spec.lru_engine == "compact":
        from litehit_core.compact_lite_hit import CompactLiteHit  # numba, as below

        engine = CompactLiteHit
    if state is None:
        return engine(ttl_ns=spec.ttl_ns, max_tracked_blocks=spec.max_tracked_blocks)
    return engine.from_state(state, spec.ttl_ns, spec.max_tracked_blocks)


def _hybrid(spec: EngineSpec, state: EngineState | None) -> ReplayEngine:
    from litehit_core.hybrid import HybridLRU  # numba: imported by the models that need it

    args = (spec.full_bytes, spec.linear_bytes, spec.step_blocks, spec.ttl_ns,
            spec.max_tracked_bytes)  # fmt: skip
    if state is None:
        return HybridLRU(*args)
    return HybridLRU.from_state(state, *args)


def _lru_head_first(spec: EngineSpec, state: EngineState | None) -> ReplayEngine:
    from litehit_core.block_lru import BlockLRU  # numba, as above

    if state is None:
        return BlockLRU("head-first", spec.ttl_ns, spec.max_tracked_blocks)
    return BlockLRU.from_state(state, "head-first", spec.ttl_ns, spec.max_tracked_blocks)


@dataclass(frozen=True, slots=True)
class EngineModel:
    """A replay model: how its facts read (:class:`~litehit_core.model.FactModel`:
    ``curve`` ramps or steps, thresholds in ``unit`` blocks or bytes) and how to ``build``
    its engine from a spec, fresh (``state`` None) or restored."""

    facts: FactModel
    build: Callable[[EngineSpec, EngineState | None], ReplayEngine]

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def curve(self) -> str:
        return self.facts.curve

    @property
    def unit(self) -> str:
        return self.facts.unit


_BUILDERS: dict[str, Callable[[EngineSpec, EngineState | None], ReplayEngine]] = {
    "lru": _lru,
    "hybrid": _hybrid,
    "lru-head-first": _lru_head_first,
}
MODELS: dict[str, EngineModel] = {
    name: EngineModel(facts, _BUILDERS[name]) for name, facts in FACT_MODELS.items()
}
"""Every model LiteHit replays, by name: each fact model has its engine builder."""


def create_engine(spec: EngineSpec, state: EngineState | None = None) -> ReplayEngine:
    """An engine for ``spec``: fresh, or restored from ``state`` (a snapshot of the same
    model). O(1) fresh, O(tracked blocks) restored. InvalidRequestError for an unknown
    model, a negative parameter, a state of another model or an inconsistent state (the
    message names the field and value)."""
    description = spec.description
    check_lru_parameters(spec.ttl_ns, spec.max_tracked_blocks)
    if spec.lru_engine not in LRU_ENGINES:
        raise InvalidRequestError(
            f"lru_engine must be one of {list(LRU_ENGINES)}, got {spec.lru_engine!r}"
        )
    if state is not None and getattr(state, "model", None) != spec.model:
        raise InvalidRequestError(
            f"state.model must be the spec's {spec.model!r}, got {getattr(state, 'model', None)!r}"
        )
    return description.build(spec, state)

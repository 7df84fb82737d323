"""The engine registry: the one place that knows LiteHit's models.

An *engine* replays one instance's requests and returns, per request, a capacity-free
fact; it never sees a capacity (rule 1). Everything that holds an engine (the manager,
the offline replay and its lanes, snapshots, live curves, metrics, simulate and sweep)
asks this module: :func:`model_for` names the model of a registration (linear step and
touch order), :func:`create_engine` builds its engine from an :class:`EngineSpec`, the
model's :class:`EngineModel` entry says how its facts read (ramps or steps, in blocks or
bytes: the projector and the live curve follow it), whether its engine replays a batch in
one compiled call (:meth:`EngineModel.batched`), and which arrays its snapshot holds
(:func:`state_record` / :func:`state_from_record`). No other module tests a model name or
an engine class (a test walks the source and fails on one).

Adding a model means one engine module implementing :class:`ReplayEngine` and one entry
in :data:`MODELS`. Three models today: the full-attention LRU touching tail first
(``"lru"``: :class:`~litehit_core.lite_hit.LiteHit`, or its compiled twin
:class:`~litehit_core.compact_lite_hit.CompactLiteHit`; ramps in blocks), the same
touching head first as LMCache does (``"lru-head-first"``:
:class:`~litehit_core.block_lru.BlockLRU`; staircases in blocks) and the hybrid
linear-attention / Mamba LRU (``"hybrid"``: :class:`~litehit_core.hybrid.HybridLRU`;
staircases in bytes). Per-capacity policy simulators (one replay per capacity: the
optimizer's ``lru``, ``random_lru``, ``leaf_aware_lru`` and ``ttl``) are engines of another
kind (:mod:`litehit_core.policy_replay`) and register beside these in :data:`POLICIES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from litehit_core.errors import InvalidRequestError
from litehit_core.lite_hit import LiteHit
from litehit_core.model import TOUCH_ORDERS, FactModel, RequestFact, check_lru_parameters
from litehit_core.state import EngineState

if TYPE_CHECKING:
    import numpy as np

    from litehit_core.compact_lite_hit import CompactLiteHit
    from litehit_core.staircases import StaircaseEngine

LRU_ENGINES = ("python", "compact")
"""The implementations of model ``"lru"`` (:attr:`EngineSpec.lru_engine`)."""

EVICTION_POLICIES = ("lru",)
"""The eviction policies an instance group may name: each is replayed exactly, for every
capacity at once, by the model :func:`model_for` picks."""

DEFAULT_MODEL = "lru"
"""The model of a full-attention instance touching tail first, and of a facts ledger
without a ``model`` column."""

FACT_MODELS: dict[str, FactModel] = {
    "lru": FactModel("lru", "ramps", "blocks"),
    "hybrid": FactModel("hybrid", "steps", "bytes"),
    "lru-head-first": FactModel("lru-head-first", "steps", "blocks"),
}
"""How every model's facts read, by model name (its :class:`EngineModel` is in
:data:`MODELS`)."""

BLOCK_SAMPLED_MODELS = frozenset({"lru"})
"""The models whose prefix curve is the per-block curve (a block's prefix hit at capacity C
is exactly its own stack distance < C: full attention touched tail first), so a per-block
spatial sample (``litehit replay --sample-rate``, SHARDS) estimates them; the others are
sampled by subtree (``litehit tradeoff --sample-rate``)."""

_HYBRID = "hybrid"
_FULL_BY_TOUCH_ORDER = {"tail-first": "lru", "head-first": "lru-head-first"}

__all__ = [
    "BLOCK_SAMPLED_MODELS",
    "DEFAULT_MODEL",
    "DEFAULT_POLICY",
    "EVICTION_POLICIES",
    "FACT_MODELS",
    "KERNEL_FAMILIES",
    "AUTO_COMPACT_BYTES",
    "AUTO_STAIRCASE_KEYS",
    "LRU_ENGINES",
    "MODELS",
    "EngineModel",
    "EngineSpec",
    "EngineState",
    "KernelFamily",
    "POLICIES",
    "STAIRCASE_ENGINES",
    "PolicyModel",
    "ReplayEngine",
    "auto_lru_engine",
    "create_engine",
    "model_for",
    "policy_entry",
    "state_from_record",
    "staircase_batch_engine",
    "state_record",
    "touch_order_model",
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
        return model_entry(self.model)

    def capacity_bounds(self, block_bytes: int) -> tuple[int, int, int]:
        """(resolution, smallest useful capacity, most tracked) in bytes for blocks of
        ``block_bytes``: one block each for a model in blocks (the most tracked is
        ``max_tracked_blocks`` blocks, 0 = unlimited); for a model in bytes the gcd of the
        block and state charges, one block with its state, and :attr:`max_tracked_bytes`.
        O(1)."""
        if self.description.unit == "bytes":
            resolution = math.gcd(self.full_bytes, self.linear_bytes)
            return resolution, self.full_bytes + self.linear_bytes, self.max_tracked_bytes
        return block_bytes, block_bytes, self.max_tracked_blocks * block_bytes

    def chain_size(self, blocks: int) -> int:
        """The capacity, in the model's unit, that ``blocks`` blocks of prefix chains
        occupy: ``blocks`` for a model in blocks; for a model in bytes their full bytes F
        each and a state's L every ``step_blocks`` blocks (rounded up: a chain's last
        block keeps its state). O(1)."""
        if self.description.unit != "bytes":
            return blocks
        states = -(-blocks // self.step_blocks) if self.step_blocks else 0
        return blocks * self.full_bytes + states * self.linear_bytes

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
    ``curve`` ramps or steps, thresholds in ``unit`` blocks or bytes), how to ``build``
    its engine from a spec, fresh (``state`` None) or restored, which of its
    implementations (:attr:`EngineSpec.lru_engine` values) replay a batch of requests in
    one compiled call with ramp facts (``batch_engines``: their engines offer
    ``process_batch(keys, offsets, now) -> BatchFacts``), and the arrays its snapshots
    hold beyond keys and epochs (``state_arrays``)."""

    facts: FactModel
    build: Callable[[EngineSpec, EngineState | None], ReplayEngine]
    batch_engines: frozenset[str] = frozenset()
    state_arrays: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def curve(self) -> str:
        return self.facts.curve

    @property
    def unit(self) -> str:
        return self.facts.unit

    def batched(self, spec: EngineSpec) -> bool:
        """True when the engine ``spec`` builds replays batches in one compiled call
        (``process_batch``, ramp facts). O(1)."""
        return spec.lru_engine in self.batch_engines


MODELS: dict[str, EngineModel] = {
    "lru": EngineModel(FACT_MODELS["lru"], _lru, batch_engines=frozenset({"compact"})),
    "hybrid": EngineModel(FACT_MODELS["hybrid"], _hybrid, state_arrays=("kinds",)),
    "lru-head-first": EngineModel(FACT_MODELS["lru-head-first"], _lru_head_first),
}
"""Every model LiteHit replays, by name (the same names as :data:`FACT_MODELS`)."""


@dataclass(frozen=True, slots=True)
class PolicyModel:
    """An eviction policy of the policy replay (``litehit optimize``; spec §5): its
    configuration name, the ``eviction_policy_params`` it reads with their defaults
    (``params``), the params a configuration may carry that it ignores (``ignored``: the
    reference's loader accepts them), whether it keeps a dense array of its blocks
    (``dense``: RandomLRU; the replay reserves room for it), whether it expires blocks by
    time (``expires``), and ``exact``: the LiteHit model whose one pass gives the same hits
    at every capacity under spec §7b (``None``: one replay per capacity). Its compiled
    verbs are the module of the same name in :mod:`litehit_core.policy_replay`."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    ignored: tuple[str, ...] = ()
    dense: bool = False
    expires: bool = False
    exact: str | None = None

    @property
    def kind(self) -> int:
        """The policy's code in the compiled replay (imports numba). O(1)."""
        from litehit_core.policy_replay.dispatch import POLICY_MODULES

        return int(POLICY_MODULES[self.name].KIND)


_SHARDED_LRU = ("sample_rate", "shard_count", "sample_times", "eviction_amplification_factor")

POLICIES: dict[str, PolicyModel] = {
    "lru": PolicyModel("lru", ignored=_SHARDED_LRU, exact="lru-head-first"),
    "random_lru": PolicyModel("random_lru", params=(("sample_rate", 0.1),), dense=True),
    "leaf_aware_lru": PolicyModel("leaf_aware_lru", ignored=_SHARDED_LRU),
    "ttl": PolicyModel(
        "ttl", params=(("fallback_on_pressure", True),), expires=True, exact="lru-head-first"
    ),
}
"""Every eviction policy of the policy replay, by the name a configuration's
``eviction_policy_type`` uses. ``ttl`` is exact from one pass only when no block expires
and it falls back to LRU under pressure."""


DEFAULT_POLICY = POLICIES["lru"]
"""The policy of an instance whose configuration names none (and a placeholder while a
configuration with an unknown name is being checked)."""


def policy_entry(name: object) -> PolicyModel:
    """The :class:`PolicyModel` named ``name``; InvalidRequestError naming the value and
    the known names otherwise. O(1)."""
    policy = POLICIES.get(name) if type(name) is str else None
    if policy is None:
        raise InvalidRequestError(
            f"eviction_policy_type must be one of {list(POLICIES)}, got {name!r}"
        )
    return policy


def touch_order_model(touch_order: str) -> str:
    """The full-attention model of a touch order: ``"lru"`` (tail-first) or
    ``"lru-head-first"``. InvalidRequestError naming the value otherwise. O(1)."""
    model = _FULL_BY_TOUCH_ORDER.get(touch_order)
    if model is None:
        raise InvalidRequestError(
            f"touch_order must be one of {list(TOUCH_ORDERS)}, got {touch_order!r}"
        )
    return model


def model_for(linear_step: int, touch_order: str = "tail-first") -> str:
    """The model of an instance: hybrid when it saves linear/Mamba states
    (``linear_step`` > 0, touched tail first only), else the full-attention model of its
    touch order. InvalidRequestError naming the value otherwise. O(1)."""
    if not linear_step:
        return touch_order_model(touch_order)
    if touch_order != "tail-first":
        raise InvalidRequestError(
            f"touch_order {touch_order!r} is for full-attention instances; a hybrid instance "
            f"(linear_step {linear_step}) touches its blocks and states tail first"
        )
    return _HYBRID


AUTO_COMPACT_BYTES = 16 * 1024 * 1024
"""``auto`` picks the compact engine for traces of at least this many bytes."""


def auto_lru_engine(trace_bytes: int) -> str:
    """The full-attention implementation ``auto`` picks for a trace of ``trace_bytes``:
    the compact engine from :data:`AUTO_COMPACT_BYTES` on (its numba start-up pays back:
    the two tied near 4× the Mooncake trace in ``bench/bench_scale.py``, bench/README.md
    issue 14, 2026-12-03, 2 cores; its cost per request stays flat as blocks grow), the
    pure-Python one below (no numba import). O(1)."""
    return "compact" if trace_bytes >= AUTO_COMPACT_BYTES else "python"


STAIRCASE_ENGINES = ("auto", "python", "compact")
"""The implementations :func:`staircase_batch_engine` offers (``litehit simulate|sweep
--engine``)."""
AUTO_STAIRCASE_KEYS = 1_000_000
"""``auto`` answers a workload of fewer keys (that name their prefix) with the interpreter
engine (see :func:`staircase_batch_engine`): it starts no numba (~0.35 s of import and
kernel loading), and as commands the two tie from ~1.1 M keys on
(``bench/bench_commands.py``, 2026-12-04, 2 cores: sweep 0.44 s vs 0.95 s on the Mooncake
log's 276 k keys, 1.96 s vs 2.02 s at 1.1 M, 3.7 s vs 3.6 s at 2.2 M), where the compiled
engine's smaller memory decides."""


def staircase_batch_engine(
    touch_order: str,
    *,
    keys: np.ndarray | None = None,
    offsets: np.ndarray | None = None,
    depths: bool = True,
    engine: str = "auto",
) -> tuple[StaircaseEngine, str]:
    """An engine that replays a whole workload (requests ``keys[offsets[r]:offsets[r +
    1]]``, when given) touching blocks in ``touch_order`` and answers each request as a
    staircase in blocks (what ``simulate`` and ``sweep`` use), with the fact model its
    curves read as.

    ``engine``: ``"compact"`` (:class:`~litehit_core.block_lru.BlockLRU`: one compiled
    loop, any keys, either order), ``"python"`` (no numba import:
    :class:`~litehit_core.staircases.LiteHitStaircases` tail first,
    :class:`~litehit_core.staircases.HeadFirstStaircases` head first; exact only where every
    key names its prefix: :func:`~litehit_core.prefix_hash.keys_name_their_prefix`) or
    ``"auto"``: python where it is exact and the workload has fewer than
    :data:`AUTO_STAIRCASE_KEYS` keys, compact otherwise. Both give the same staircases
    and, with ``depths``, the same per-block depths (False: the python engines skip
    deriving them). InvalidRequestError naming the value for an unknown order or engine,
    or python asked for what it cannot answer exactly. O(1), or O(K log K) for the check
    of K keys."""
    from litehit_core.prefix_hash import keys_name_their_prefix

    touch_order_model(touch_order)  # validates the order
    if engine not in STAIRCASE_ENGINES:
        raise InvalidRequestError(
            f"engine must be one of {list(STAIRCASE_ENGINES)}, got {engine!r}"
        )
    small = keys is not None and len(keys) < AUTO_STAIRCASE_KEYS
    wanted = engine == "python" or (engine == "auto" and small)
    if wanted and keys is not None and offsets is not None:
        chained = keys_name_their_prefix(keys, offsets)
        if engine == "python" and not chained:
            raise InvalidRequestError(
                "engine 'python' is exact only when every key always follows the same "
                "parent (prefix-chained keys); these keys do not: use 'compact'"
            )
        wanted = chained
    if wanted:
        from litehit_core.staircases import HeadFirstStaircases, LiteHitStaircases

        interpreter = LiteHitStaircases if touch_order == "tail-first" else HeadFirstStaircases
        return interpreter(depths), "lru-head-first"
    from litehit_core.block_lru import BlockLRU  # numba, as above

    return BlockLRU(touch_order), "lru-head-first"


def model_entry(name: str) -> EngineModel:
    """The :class:`EngineModel` of ``name``; InvalidRequestError naming it if unknown."""
    model = MODELS.get(name)
    if model is None:
        raise InvalidRequestError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    return model


_STATE_FIELDS = ("now_ns", "expired_blocks", "dropped_blocks")
_STATE_ARRAYS = ("keys", "epoch_starts", "epoch_times")


def state_record(state: EngineState) -> tuple[dict[str, Any], dict[str, Any]]:
    """The snapshot codec, writing: an engine state as JSON-ready scalars (``model``,
    ``engine_format_version``, clock and counters) and named arrays (keys, epochs and the
    model's :attr:`EngineModel.state_arrays`). O(1): the arrays are shared, not copied."""
    meta: dict[str, Any] = {
        "model": state.model,
        "engine_format_version": state.format_version,
    }
    meta.update((name, getattr(state, name)) for name in _STATE_FIELDS)
    arrays = {name: getattr(state, name) for name in _STATE_ARRAYS}
    for name in model_entry(state.model).state_arrays:
        arrays[name] = getattr(state, name)
    return meta, arrays


def state_from_record(meta: dict[str, Any], arrays: dict[str, Any]) -> EngineState:
    """The snapshot codec, reading: the engine state :func:`state_record` wrote.
    KeyError, TypeError, ValueError or InvalidRequestError when a field is missing or
    malformed (callers report the snapshot as inconsistent). O(1) plus the arrays' checks."""
    model = str(meta["model"])
    extra = {name: arrays[name] for name in model_entry(model).state_arrays}
    return EngineState(
        model=model,
        format_version=int(meta["engine_format_version"]),
        keys=arrays["keys"],
        epoch_starts=arrays["epoch_starts"],
        epoch_times=arrays["epoch_times"],
        now_ns=int(meta["now_ns"]),
        expired_blocks=int(meta["expired_blocks"]),
        dropped_blocks=int(meta["dropped_blocks"]),
        **extra,
    )


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


@dataclass(frozen=True)
class KernelFamily:
    """One family of compiled (numba) kernels: ``module`` exposes ``warm_up() -> float``
    (compile or load every kernel of the family; seconds), ``what`` names it to users,
    ``compile_s`` is about how long compiling it takes once after an install on a 2-core
    machine (``bench/bench_first_run.py`` measures it), ``used_by`` the commands that load
    it, ``sources`` the modules (or packages) whose compiled functions belong to it."""

    module: str
    what: str
    compile_s: float
    used_by: str
    sources: tuple[str, ...]


KERNEL_FAMILIES: Mapping[str, KernelFamily] = {
    "full-attention": KernelFamily(
        "litehit_core.compact_lite_hit",
        "full-attention engine",
        3.0,
        "serve and replay with the compact engine",
        ("litehit_core.compact_lite_hit", "litehit_core.compact_kernels", "litehit_core.kernels"),
    ),
    "hybrid": KernelFamily(
        "litehit_core.hybrid",
        "hybrid (linear/Mamba) and head-first engine",
        3.0,
        "hybrid instances, head-first replays, simulate and sweep with the compact engine",
        ("litehit_core.hybrid", "litehit_core.hybrid_kernels", "litehit_core.block_lru"),
    ),
    "policy-replay": KernelFamily(
        "litehit_core.policy_replay",
        "policy-replay",
        11.0,
        "optimize, tradeoff, export-tree, lifecycle",
        ("litehit_core.policy_replay",),
    ),
    "prefix-chain": KernelFamily(
        "litehit_core.prefix_chain",
        "prefix-chain",
        1.0,
        "convert (Qwen Bailian), prefix hashing",
        ("litehit_core.prefix_chain",),
    ),
    "wire": KernelFamily(
        "litehit_core.wire_kernels",
        "packed-stream wire",
        2.0,
        "serve (TraceQueryPackedStream's decoding and answers)",
        ("litehit_core.wire_kernels",),
    ),
    "text": KernelFamily(
        "litehit_core.text_kernels",
        "table-formatting",
        1.0,
        "optimize's per-read CSVs, lifecycle's CSVs",
        ("litehit_core.text_kernels",),
    ),
}
"""Every family of compiled kernels, by name (``litehit warm-up`` compiles them all)."""

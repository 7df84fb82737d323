"""The reference optimizer's Python objects and verbs, on LiteHit's replay.

The KVCacheManager optimizer's users drive its pybind module (``kvcm_py_optimizer``) from
notebooks and scripts; the same code runs here with the import changed::

    from litehit_service.optimizer import OptimizerConfigLoader, OptimizerManager

    loader = OptimizerConfigLoader()
    if not loader.load("policy.json"):          # False: the message is on stderr, .error
        raise SystemExit(1)
    config = loader.config()
    manager = OptimizerManager(config, enable_lifecycle_tracking=False)
    manager.Init()                              # True when the trace can be read
    manager.DirectRun()                         # the replay (litehit optimize's)
    manager.AnalyzeResults()                    # {id}_hit_rates.csv into output_result_path()
    trees = manager.ExportRadixTrees()          # {instance_id: RadixTreeExport}

The verbs must come in that order (:class:`VerbOrderError` names the one to call first).
``AnalyzeResults`` writes exactly the files of ``litehit optimize -c CONFIG`` (with
``export_lifecycle=True``, or a manager made with ``enable_lifecycle_tracking=True``,
those of ``--export-lifecycle`` too: ``{instance_id}_lifecycle.csv``).
``ExportRadixTrees`` is ``litehit export-tree``'s tree (spec §9) in the reference's
objects, every block key listed.

Where this differs from the reference (docs/optimizer.md, "Python API"): ``node_id`` and
``parent_id`` are ints (per instance, in the order nodes were first written; a root's
parent is None; there is no synthetic root node), ``last_access_time`` is None for a node
never hit; the replay and the analysis replay are two passes over the trace (the tree and
the block lives come from an analysis replay run by the first verb that needs it, at most
once per ``DirectRun``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from litehit_core import DEFAULT_MAX_LINE_BYTES, InvalidRequestError
from litehit_service.optimizer.api.functions import (
    DEFAULT_REORDER_WINDOW_MS,
    ConfigLike,
    TraceOptions,
    analysis_replay,
    as_config,
    input_errors,
    replay_config,
    write_analysis_files,
    write_run,
)
from litehit_service.optimizer.optimize.config import OptimizeConfig, load_optimize_config

if TYPE_CHECKING:
    from litehit_service.optimizer.analysis.replay import Analysis
    from litehit_service.optimizer.analysis.tree import PathHits
    from litehit_service.optimizer.optimize.run import OptimizeResult as ReplayRun

__all__ = [
    "OptimizerConfig",
    "OptimizerConfigLoader",
    "OptimizerManager",
    "RadixTreeExport",
    "RadixTreeExportNode",
    "VerbOrderError",
    "radix_tree_exports",
]


class VerbOrderError(RuntimeError):
    """A verb called before the one it needs (``DirectRun()`` before ``Init()``, ...): the
    message names the verb to call first."""


class OptimizerConfig:
    """A loaded, checked configuration (what ``OptimizerConfigLoader().config()``
    returns): the reference's accessors ``trace_file_path()``, ``output_result_path()`` and
    their setters, plus ``optimize_config``, LiteHit's checked
    :class:`~..optimize.config.OptimizeConfig` (groups, instances, quotas, warnings)."""

    def __init__(self, checked: OptimizeConfig) -> None:
        self._checked = checked

    @property
    def optimize_config(self) -> OptimizeConfig:
        """LiteHit's checked configuration (relative paths already joined to the
        configuration file's folder)."""
        return self._checked

    def trace_file_path(self) -> str:
        """The trace the replay reads."""
        return self._checked.trace_file_path

    def set_trace_file_path(self, path: str | os.PathLike[str]) -> None:
        """Replay another trace (taken as given: relative to the working folder)."""
        self._checked = replace(self._checked, trace_file_path=os.fspath(path))

    def output_result_path(self) -> str:
        """The folder ``AnalyzeResults`` writes into."""
        return self._checked.output_result_path

    def set_output_result_path(self, path: str | os.PathLike[str]) -> None:
        """Write the results elsewhere (taken as given: relative to the working folder)."""
        self._checked = replace(self._checked, output_result_path=os.fspath(path))

    def __repr__(self) -> str:
        return (
            f"OptimizerConfig(trace_file_path={self.trace_file_path()!r}, "
            f"output_result_path={self.output_result_path()!r}, "
            f"instances={[i.instance_id for i in self._checked.instances]!r})"
        )


class OptimizerConfigLoader:
    """``load(path) -> bool`` then ``config()``, as the reference's loader. ``error``: the
    message of the last failed load (what ``litehit optimize -c PATH`` prints: every
    problem, ``path:line: field: reason`` one per line), else None."""

    def __init__(self) -> None:
        self.error: str | None = None
        self._config: OptimizerConfig | None = None

    def load(self, path: str | os.PathLike[str]) -> bool:
        """Read and check the configuration at ``path``: True when it is valid (its
        warnings printed on stderr, as the command does), else False with the error
        printed on stderr and kept in :attr:`error`. O(file size)."""
        self._config = None
        try:
            checked = load_optimize_config(path)
        except InvalidRequestError as exc:
            self.error = str(exc)
            print(self.error, file=sys.stderr, flush=True)
            return False
        self.error = None
        for line in checked.warnings:
            print(line, file=sys.stderr, flush=True)
        self._config = OptimizerConfig(checked)
        return True

    def Load(self, path: str | os.PathLike[str]) -> OptimizerConfig | None:  # noqa: N802
        """The reference README's spelling: :meth:`load` then :meth:`config` in one call;
        None (the error printed and kept in :attr:`error`) when the file is not valid."""
        return self._config if self.load(path) else None

    def config(self) -> OptimizerConfig:
        """The configuration of the last successful :meth:`load`. VerbOrderError
        otherwise."""
        if self._config is None:
            why = f" (the last one failed: {self.error})" if self.error else ""
            raise VerbOrderError(f"config() needs a successful load(path) first{why}")
        return self._config


@dataclass(frozen=True, slots=True)
class RadixTreeExportNode:
    """One node of an instance's compressed trie (spec §9): a maximal chain of blocks
    without branching. ``total_blocks``: its block keys, head to tail; ``cached_blocks``:
    those cached (in some tier) at the end of the replay, in the same order;
    ``access_count``: reads that hit at least one of its blocks; ``last_access_time``: ns
    of the latest such read (None: never hit); ``parent_id``: None for a root."""

    node_id: int
    access_count: int
    last_access_time: int | None
    total_blocks: list[int]
    cached_blocks: list[int]
    is_leaf: bool
    parent_id: int | None


@dataclass(frozen=True, slots=True)
class RadixTreeExport:
    """An instance's tree: ``nodes`` in id order (a parent before its children) and
    ``edges``, ``(parent_id, node_id)`` per non-root node in node order."""

    instance_id: str
    nodes: list[RadixTreeExportNode]
    edges: list[tuple[int, int]]


def radix_tree_exports(analysis: Analysis, hits: PathHits) -> dict[str, RadixTreeExport]:
    """Every configured instance's tree (configuration order; an instance that wrote
    nothing has no node) from an analysis replay and the hits gathered during it, built by
    :func:`~..analysis.tree.build_trees` with every block key and whether some tier holds
    it at the end (``key_cached``). O(paths x log(depth)) numpy, plus one Python object
    per node and an int per block."""
    from litehit_service.optimizer.analysis.tree import build_trees

    out = {}
    for tree in build_trees(analysis, hits, with_keys=True):
        assert tree.keys is not None and tree.key_off is not None and tree.key_cached is not None
        keys = tree.keys.tolist()
        held = tree.key_cached.tolist()
        off = tree.key_off.tolist()
        leaf = tree.is_leaf.tolist()
        nodes = []
        for i, (parent, count, last) in enumerate(
            zip(tree.parent.tolist(), tree.access_count.tolist(), tree.last_access.tolist(),
                strict=True)
        ):  # fmt: skip
            span = keys[off[i] : off[i + 1]]
            cached = held[off[i] : off[i + 1]]
            nodes.append(
                RadixTreeExportNode(
                    node_id=i,
                    access_count=count,
                    last_access_time=None if last < 0 else last,
                    total_blocks=span,
                    cached_blocks=[k for k, c in zip(span, cached, strict=True) if c],
                    is_leaf=leaf[i],
                    parent_id=None if parent < 0 else parent,
                )
            )
        edges = [(n.parent_id, n.node_id) for n in nodes if n.parent_id is not None]
        out[tree.info.instance_id] = RadixTreeExport(tree.info.instance_id, nodes, edges)
    return out


class OptimizerManager:
    """The reference's ``OptimizerManager``: ``Init()``, ``DirectRun()``,
    ``AnalyzeResults()``, ``ExportRadixTrees()``, in that order (module docstring).

    ``config``: the loader's ``config()`` (or anything :func:`~.functions.as_config` takes).
    ``enable_lifecycle_tracking``: ``AnalyzeResults`` also writes the lifecycle CSVs. The
    keyword-only options are LiteHit's (:class:`~.functions.TraceOptions`, and ``max_workers``
    > 1: the groups replayed in forked processes, the same numbers). The configuration
    is taken as it is when ``Init()`` runs."""

    def __init__(
        self,
        config: ConfigLike,
        enable_lifecycle_tracking: bool = False,
        *,
        trace_format: str | None = None,
        instance: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        reorder_window_ms: int = DEFAULT_REORDER_WINDOW_MS,
        max_workers: int = 1,
    ) -> None:
        self._source = config
        self.enable_lifecycle_tracking = bool(enable_lifecycle_tracking)
        self.options = TraceOptions(trace_format, instance, max_line_bytes, reorder_window_ms)
        self.max_workers = max_workers
        self.error: str | None = None
        """The message of the last failed ``Init()`` (also printed on stderr), else None."""
        self._config: OptimizeConfig | None = None
        self._run: ReplayRun | None = None
        self._trees: dict[str, RadixTreeExport] | None = None
        self._analysed: tuple[Analysis, PathHits] | None = None

    def Init(self) -> bool:  # noqa: N802 - the reference's name
        """Check the configuration and that its trace can be opened and read (its format
        detected, the options valid): True, or False with the message on stderr and in
        :attr:`error` (the text ``litehit optimize`` prints). Forgets an earlier run."""
        from litehit_service.optimizer.optimize.trace import open_trace_batches

        self._config = self._run = self._trees = self._analysed = None
        try:
            config = as_config(self._source)
            self.options.check()
            open_trace_batches(config, trace_format=self.options.trace_format,
                               instance=self.options.instance,
                               max_line_bytes=self.options.max_line_bytes)  # fmt: skip
        except InvalidRequestError as exc:
            self.error = str(exc)
            print(self.error, file=sys.stderr, flush=True)
            return False
        self.error = None
        self._config = config
        return True

    def _checked(self, verb: str) -> OptimizeConfig:
        if self._config is None:
            why = f" (the last Init() failed: {self.error})" if self.error else ""
            raise VerbOrderError(
                f"{verb}() needs Init() first: call manager.Init() and check that it "
                f"returns True{why}"
            )
        return self._config

    def _ran(self, verb: str) -> tuple[OptimizeConfig, ReplayRun]:
        config = self._checked(verb)
        if self._run is None:
            raise VerbOrderError(f"{verb}() needs DirectRun() first: call manager.DirectRun()")
        return config, self._run

    @input_errors
    def DirectRun(self) -> None:  # noqa: N802 - the reference's name
        """Replay the whole trace (``litehit optimize``'s replay; again from the start
        when called again). LocatedError for a bad record (``path:line: field: reason``).
        Cost: the replay; memory: the decoded trace and the per-read rows."""
        config = self._checked("DirectRun")
        self._run = self._trees = self._analysed = None
        self._run = replay_config(config, self.options.load(config), self.max_workers)

    @input_errors
    def AnalyzeResults(self, export_lifecycle: bool = False) -> list[str]:  # noqa: N802
        """Write ``{instance_id}_hit_rates.csv`` per instance into the configuration's
        ``output_result_path`` (exactly ``litehit optimize -c CONFIG``'s files), and with
        ``export_lifecycle`` (or ``enable_lifecycle_tracking``) the reference's lifecycle
        CSVs (as ``--export-lifecycle``; one analysis replay, whose tree
        ``ExportRadixTrees`` then reuses). The paths written."""
        from litehit_service.optimizer.analysis.lifecycle_files import optimize_analysis
        from litehit_service.optimizer.analysis.tree import PathHits

        config, run = self._ran("AnalyzeResults")
        out_dir = config.output_result_path
        files = write_run(run, out_dir)
        more = optimize_analysis(
            config, export_lifecycle=export_lifecycle or self.enable_lifecycle_tracking,
            draw_chart=False,
        )  # fmt: skip
        if more is not None:
            hits = PathHits()
            analysis, written = write_analysis_files(config, out_dir, self.options, more, hits.add)
            files += written
            if self._trees is None:  # the tree's replay is done: keep it for later
                self._analysed = (analysis, hits)
        return files

    @input_errors
    def ExportRadixTrees(self) -> dict[str, RadixTreeExport]:  # noqa: N802
        """Every instance's compressed trie of the paths it wrote, at the end of the
        replay: ``{instance_id: RadixTreeExport}`` (:func:`radix_tree_exports`). The
        first call runs the analysis replay (one more pass over the trace); later calls
        return the same objects."""
        from litehit_service.optimizer.analysis.tree import PathHits

        config, _ = self._ran("ExportRadixTrees")
        if self._trees is None:
            if self._analysed is None:
                hits = PathHits()
                self._analysed = (analysis_replay(config, self.options, hits.add), hits)
            self._trees = radix_tree_exports(*self._analysed)
            self._analysed = None  # the trees hold what they need
        return self._trees

"""``litehit serve``: the whole service process.

:func:`serve` runs one service: a lock on the data dir (one server per folder), the SQLite
registry, restored configuration and instance state (``state/`` snapshots), an optional
groups file applied idempotently, Prometheus ``/metrics``, the gRPC server, a snapshot
every ``snapshot_interval_seconds``, and the drain on SIGTERM/SIGINT with a guaranteed
exit (see :func:`serve`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from litehit_core import compact_lite_hit, hybrid, wire_kernels
from litehit_service.access import data_dir_admin_token, is_loopback_host
from litehit_service.addresses import format_address, parse_address
from litehit_service.entries import load_groups_file
from litehit_service.errors import InstanceNotExist
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager, validated_group
from litehit_service.metrics import DEFAULT_CURVE_GRID_POINTS, ServiceMetrics
from litehit_service.model import InstanceGroup, InstanceRegistration
from litehit_service.policy import QueryPolicy
from litehit_service.recovery import (
    load_counters,
    read_clean_stop,
    restore_message,
    save_counters,
    take_clean_stop,
    write_clean_stop,
)
from litehit_service.registry import Registry
from litehit_service.server import LiteHitServer, ServerOptions
from litehit_service.snapshots import SnapshotStore

log = logging.getLogger(__name__)

REGISTRY_FILE = "litehit.sqlite3"
LOCK_FILE = "litehit.lock"
STATE_DIR = "state"
DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_SNAPSHOT_INTERVAL_SECONDS = 60.0
EXIT_DEADLINE_SLACK_SECONDS = 5.0
"""The process exits at the latest this long after the grace period ends."""


# --------------------------------------------------------------------------------------------
# Groups file
# --------------------------------------------------------------------------------------------


def apply_groups(
    manager: OnlineOptimizerManager,
    groups: Sequence[InstanceGroup],
    registrations: Sequence[InstanceRegistration],
) -> list[str]:
    """Ensure ``groups`` and ``registrations`` exist as given; idempotent. Returns actions.

    A missing group is created, a different one updated (its instances are removed and
    re-registered around the update; meant for start-up; those instances restart with fresh state);
    an equal one is left alone. A registration is (re)registered only when it differs from
    the stored one. Everything is first rehearsed on a scratch in-memory manager holding a
    copy of the configuration, so an invalid entry raises (OptimizerError naming it) before
    anything changes. O(groups + instances).
    """
    scratch = OnlineOptimizerManager(None, manager.policy, manager.limits)
    for group in manager.list_groups():
        scratch.create_group(group)
    for info in manager.instance_infos():
        scratch.register_instance(info.registration)
    _apply_groups(scratch, groups, registrations)
    return _apply_groups(manager, groups, registrations)


def _apply_groups(
    manager: OnlineOptimizerManager,
    groups: Sequence[InstanceGroup],
    registrations: Sequence[InstanceRegistration],
) -> list[str]:
    actions: list[str] = []
    existing = {g.name: g for g in manager.list_groups()}
    for group in groups:
        current = existing.get(group.name)
        if current is None:
            manager.create_group(group)
            existing[group.name] = manager.get_group(group.name)
            actions.append(f"created group {group.name}")
            continue
        if current == validated_group(group):
            continue
        members = [
            i.registration for i in manager.instance_infos() if i.instance_group == group.name
        ]
        for reg in members:
            manager.remove_instance(reg.instance_id)
        try:
            manager.update_group(group)
        finally:
            for reg in members:
                manager.register_instance(reg)
        existing[group.name] = manager.get_group(group.name)
        actions.append(f"updated group {group.name}")
    for reg in registrations:
        try:
            if manager.get_instance(reg.instance_id) == reg:
                continue
        except InstanceNotExist:
            pass
        manager.register_instance(reg)
        actions.append(f"registered instance {reg.instance_id}")
    return actions


# --------------------------------------------------------------------------------------------
# The service process
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# The service process
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``litehit serve`` needs; field defaults equal the CLI defaults.

    Groups of fields: addresses and folders; the transport (:class:`ServerOptions`); the
    query policy (``max_block_keys``, ``max_clock_skew_seconds``); the manager's limits
    (``max_instances``, ``max_tracked_blocks``); durability and stopping
    (``snapshot_interval_seconds``, 0 = only at stop; ``grace_seconds``); the metrics
    (``curve_grid_points``); the full-attention ``engine`` (``"compact"`` or ``"python"``,
    :data:`~litehit_core.engine.LRU_ENGINES`); ``open_admin``: leave admin RPCs open on a
    non-loopback ``listen`` that has no admin token (otherwise :func:`serve` uses the token
    in ``<data_dir>/admin-token``, see :func:`admin_guard`).
    """

    listen: str = "127.0.0.1:50051"
    metrics_listen: str = "127.0.0.1:9464"
    data_dir: str = "./litehit-data"
    groups_file: str | None = None
    server: ServerOptions = ServerOptions()
    max_block_keys: int = QueryPolicy.online().max_block_keys
    max_clock_skew_seconds: float = 300.0
    max_instances: int = ManagerLimits.online().max_instances
    max_tracked_blocks: int = ManagerLimits.online().max_tracked_blocks
    snapshot_interval_seconds: float = DEFAULT_SNAPSHOT_INTERVAL_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    curve_grid_points: int = DEFAULT_CURVE_GRID_POINTS
    engine: str = "compact"
    open_admin: bool = False


def tune_allocator(mmap_threshold: int = 1 << 20, arenas: int = 1) -> bool:
    """Ask glibc to map allocations of ``mmap_threshold`` bytes or more directly
    (``mallopt(M_MMAP_THRESHOLD)``), so the memory an engine frees (a dict table replaced
    at a resize or compaction) goes back to the system instead of staying in the heap, and
    to keep ``arenas`` malloc arenas (``M_ARENA_MAX``: worker threads then share one heap
    instead of each keeping its own; Python's GIL serialises them anyway). The process's
    RSS then follows ``litehit_memory_bytes``. Returns False (and changes nothing) where
    the C library is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold, m_arena_max = -3, -8  # glibc's <malloc.h>
    return bool(mallopt(m_arena_max, int(arenas))) and bool(
        mallopt(m_mmap_threshold, int(mmap_threshold))
    )


class DataDirLock:
    """An exclusive lock on a data dir (``litehit.lock``, flock): one server per folder."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        try:  # ``created``: this lock made the file (a failed start removes it again)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            self.created = True
        except FileExistsError:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self.created = False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._fd, 32).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise OSError(
                f"data dir {str(data_dir)!r} is in use by another litehit serve (pid {holder})"
            ) from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        """Release the lock (the file stays)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Snapshotter:
    """Writes every instance's snapshot every ``interval`` seconds on its own thread.

    Each instance is captured under its query gate on the server (its queries wait for the
    capture, no other instance's do) and written outside it; a failure is logged and
    counted, and the next round tries again. ``after_round`` (if any) runs after each
    complete round. ``interval`` 0 disables the thread.
    """

    def __init__(
        self,
        manager: OnlineOptimizerManager,
        server: LiteHitServer,
        interval: float,
        after_round: Callable[[], object] | None = None,
    ) -> None:
        self._manager = manager
        self._server = server
        self._interval = interval
        self._after_round = after_round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Snapshotter:
        """Start the periodic thread (no-op for interval 0)."""
        if self._interval > 0:
            self._thread = threading.Thread(
                target=self._loop, name="litehit-snapshots", daemon=True
            )
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.run_once()

    def run_once(self) -> None:
        """One round: capture and write every instance. O(total tracked blocks)."""
        server = self._server
        for instance_id in self._manager.instance_ids():
            if self._stop.is_set():
                return
            try:
                capture = server.call(
                    lambda iid=instance_id: server.transport.gates.run(
                        {iid},
                        lambda: server.transport.in_executor(
                            lambda: self._manager.capture_state(iid)
                        ),
                    )
                )
            except RuntimeError:  # the server stopped meanwhile
                return
            if capture is not None:
                self._manager.write_state(capture)
        if self._after_round is not None:
            self._after_round()

    def stop(self) -> None:
        """Stop the thread after its current instance. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def serve(
    config: ServerConfig,
    *,
    stop: threading.Event | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the service until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code.

    Start-up: lock ``<data_dir>``, open the registry ``<data_dir>/litehit.sqlite3``,
    restore groups and instances, restore each instance's ``state/`` snapshot (a corrupt,
    truncated or foreign one: that instance starts fresh, logged at ERROR and counted) and
    ``litehit_errors_total`` (``counters.json``), log one line about that restore and
    whether the previous stop was clean (:mod:`~litehit_service.recovery`), apply
    ``groups_file``, start ``/metrics`` and the gRPC server, then print one line
    ``litehit serving grpc=HOST:PORT metrics=HOST:PORT data_dir=DIR`` to ``out`` (stdout).
    Admin RPCs on a non-loopback ``listen`` need a token by default (:func:`admin_guard`).
    A start-up error raises and leaves the disk as it found it: the registry file, the lock
    file, ``state/`` and the data dir (with any parents) that this start created are
    removed again (a folder only while empty); what existed before is untouched.

    Stop (first signal): health NOT_SERVING, new calls UNAVAILABLE, every stream answers
    the batch it is applying and ends with UNAVAILABLE, everything gets ``grace_seconds``;
    then every instance's snapshot and ``counters.json`` are written, then the clean-stop
    marker (only when all of them were). Returns 0 when all of that finished in time,
    1 when calls had to be abandoned (logged). In the main thread a watchdog guarantees
    the process ends by ``grace_seconds + 5`` s (exit 1, logging what it abandoned), and a
    second signal exits at once (exit 1; the state since the last snapshot is lost).
    """
    out = out if out is not None else sys.stdout
    stop = stop if stop is not None else threading.Event()
    grpc_host, _ = parse_address(config.listen, "listen")
    metrics_host, metrics_port = parse_address(config.metrics_listen, "metrics listen")
    if config.grace_seconds < 0:
        raise ValueError(f"grace seconds must be >= 0, got {config.grace_seconds}")
    if config.snapshot_interval_seconds < 0:
        raise ValueError(
            f"snapshot interval must be >= 0 seconds, got {config.snapshot_interval_seconds}"
        )
    if config.open_admin and config.server.admin_token:
        raise ValueError("open_admin contradicts an admin token: give one or the other")
    data_dir = Path(config.data_dir)
    folders = _make_dirs(data_dir)  # the folders this start created, outermost first
    try:
        lock = DataDirLock(data_dir)
    except BaseException:
        _remove_created(folders)  # folders only (while empty): the files may be in use
        raise
    registry_path = data_dir / REGISTRY_FILE
    # what a failed start removes again (under the lock), in creation order
    created = folders + ([lock.path] if lock.created else [])
    created += [p for p in (registry_path, data_dir / STATE_DIR) if not p.exists()]
    previous_stop = read_clean_stop(data_dir)
    marker_taken = False
    registry: Registry | None = None
    metrics_server = None
    server: LiteHitServer | None = None
    snapshotter: Snapshotter | None = None
    started = False
    code = 0
    main_thread = threading.current_thread() is threading.main_thread()
    received: list[int] = []
    previous = _install_signal_handlers(stop, received) if main_thread else {}
    try:
        options = admin_guard(config, grpc_host, data_dir, created)
        tune_allocator()
        log.info(
            "loading the compiled engine kernels (compiled on the first start after an "
            "install, a few seconds; loaded from numba's cache afterwards)"
        )
        kernels = compact_lite_hit.warm_up() + wire_kernels.warm_up()
        log.info("compiled engine kernels ready in %.2f s (full attention, packed stream)", kernels)
        registry = Registry(registry_path)
        manager = OnlineOptimizerManager(
            registry,
            QueryPolicy.online(
                max_block_keys=config.max_block_keys,
                max_clock_skew_seconds=config.max_clock_skew_seconds,
            ),
            ManagerLimits.online(config.max_instances, config.max_tracked_blocks),
            state_store=SnapshotStore(data_dir / STATE_DIR),
            lru_engine=config.engine,
        )
        manager.restore()
        manager.restore_states()
        level, restored = restore_message(
            manager.state_stats.last_restore,
            previous_stop,
            config.snapshot_interval_seconds,
            first_start=registry_path in created,
        )
        log.log(level, "%s", restored)
        if config.groups_file:
            groups, regs = load_groups_file(config.groups_file)
            for action in apply_groups(manager, groups, regs):
                log.info("groups file: %s", action)
        metrics = ServiceMetrics(manager, curve_grid_points=config.curve_grid_points)
        metrics.restore_error_counts(load_counters(data_dir))
        take_clean_stop(data_dir)  # before any query: a crash from now on is unclean
        marker_taken = previous_stop.clean
        server = LiteHitServer(manager, metrics, config.listen, options).start()
        metrics_server, bound_metrics = metrics.start_http_server(metrics_host, metrics_port)
        snapshotter = Snapshotter(
            manager,
            server,
            config.snapshot_interval_seconds,
            lambda: save_counters(data_dir, metrics.error_counts()),
        ).start()
        started = True
        _warm_in_background("hybrid (linear/Mamba)", hybrid.warm_up)
        print(
            f"litehit serving grpc={format_address(grpc_host, server.port)} "
            f"metrics={format_address(metrics_host, bound_metrics)} "
            f"data_dir={data_dir.resolve()}",
            file=out,
            flush=True,
        )
        _wait_for_stop(stop, received)
        log.info("stopping: draining for up to %g s", config.grace_seconds)
        watchdog = _arm_watchdog(config.grace_seconds, server) if main_thread else None
        snapshotter.stop()
        report = server.drain(config.grace_seconds)
        for line in report.abandoned:
            log.error("abandoned at the end of the grace period: %s", line)
        written = manager.save_all_states()
        log.info("wrote %d instance snapshots", written)
        if save_counters(data_dir, metrics.error_counts()) and written == len(
            manager.instance_ids()
        ):
            write_clean_stop(data_dir, written)
        if watchdog is not None:
            watchdog.cancel()
        code = 0 if report.clean else 1
    finally:
        _restore_signal_handlers(previous)
        if snapshotter is not None:
            snapshotter.stop()
        if server is not None:
            server.stop()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        if registry is not None:
            registry.close()
        if not started:  # under the lock: no other server can be using these files
            if registry_path in created:
                for suffix in ("-wal", "-shm", "-journal"):
                    Path(f"{registry_path}{suffix}").unlink(missing_ok=True)
            _remove_created(created)
            if marker_taken:
                previous_stop.put_back(data_dir)
        lock.release()
    print("litehit stopped", file=out, flush=True)
    return code


def admin_guard(
    config: ServerConfig, host: str, data_dir: Path, created: list[Path]
) -> ServerOptions:
    """``config.server`` with the admin token this start uses: protected by default.

    A configured admin token is used as is. With ``open_admin`` admin RPCs stay open and a
    WARNING says so (at every start). On a loopback ``host`` (127.0.0.0/8, ``::1``,
    ``localhost``) they stay open for local use. Otherwise the token in
    ``<data_dir>/admin-token`` is used, created (mode 0600) on the first start and appended
    to ``created`` then; the log names the file, never the token. Runs under the data dir's
    lock. O(1).
    """
    options = config.server
    if options.admin_token:
        return options
    if config.open_admin:
        log.warning(
            "admin RPCs are open to anyone who can reach %s (--open-admin): they can "
            "remove instances, reset counters and change groups",
            config.listen,
        )
        return options
    if is_loopback_host(host):
        return options
    token, path, made = data_dir_admin_token(data_dir)
    if made:
        created.append(path)
    log.info(
        "admin RPCs need the admin token in %s (%s; listening on %s, no --admin-token "
        "given): send 'authorization: Bearer <token>'",
        path.resolve(),
        "created" if made else "kept from an earlier start",
        config.listen,
    )
    return replace(options, admin_token=token)


def _make_dirs(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those created, outermost first."""
    missing = []
    probe = folder.absolute()
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _remove_created(paths: Sequence[Path]) -> None:
    """Remove what a failed start created (``paths`` in creation order), the last first:
    files, and folders while empty (a folder someone wrote into meanwhile stays)."""
    for path in reversed(paths):
        try:
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove %s after the failed start: %s", path, exc)


def _arm_watchdog(grace: float, server: LiteHitServer) -> threading.Timer:
    """Exit the process (1) if stopping takes longer than ``grace`` + the slack."""

    def fire() -> None:
        for line in server.transport.abandoned() or ["(no open streams: a snapshot was late)"]:
            log.error("exit deadline reached, abandoning: %s", line)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(grace + EXIT_DEADLINE_SLACK_SECONDS, fire)
    timer.daemon = True
    timer.start()
    return timer


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


_SIGNAL_POLL_SECONDS = 0.2
"""How often the main thread looks at the signals received while it waits to stop."""


def _install_signal_handlers(stop: threading.Event, received: list[int]) -> dict[int, Any]:
    """First SIGTERM/SIGINT is recorded in ``received`` (the main thread's wait then sets
    ``stop``: :func:`_wait_for_stop`); a second exits at once. The handler takes no lock:
    ``Event.set`` from a handler deadlocks when the signal lands while the main thread
    holds the event's own lock. Returns the old handlers."""

    def handler(signum: int, frame: object) -> None:
        if received or stop.is_set():
            log.error(
                "second %s: exiting at once; state since the last snapshot is lost",
                signal.Signals(signum).name,
            )
            logging.shutdown()
            os._exit(1)
        received.append(signum)

    return {sig: signal.signal(sig, handler) for sig in _SIGNALS}


def _warm_in_background(what: str, warm_up: Callable[[], float]) -> threading.Thread:
    """Compile (or load) an engine's kernels on a daemon thread once the server serves, so
    the first start after an install is not held up by engines few instances use; a query
    of such an instance meanwhile waits for numba's compiler lock, never answers
    differently. Logged when done (or failed: the engine then compiles on first use)."""

    def run() -> None:
        try:
            seconds = warm_up()
        except Exception:  # noqa: BLE001 - logged; the first use compiles instead
            log.exception("compiling the %s engine kernels in the background failed", what)
        else:
            log.info("compiled engine kernels ready in %.2f s (%s, in the background)",
                     seconds, what)  # fmt: skip

    thread = threading.Thread(target=run, name=f"warm-{what.split()[0]}", daemon=True)
    thread.start()
    return thread


def _wait_for_stop(stop: threading.Event, received: list[int]) -> None:
    """Return once ``stop`` is set (by the caller) or a signal was received (then set
    ``stop``). Polls every :data:`_SIGNAL_POLL_SECONDS`."""
    while not stop.wait(_SIGNAL_POLL_SECONDS):
        if received:
            stop.set()
            return


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)

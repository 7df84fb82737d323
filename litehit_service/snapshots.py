"""Durable instance state: one snapshot file per instance under ``<data dir>/state/``.

A snapshot holds everything an instance needs to answer the next query exactly as a
server that never stopped would: its registration and group (it is restored only onto the
same ones), every cumulative counter, the instance clock and the engine's state (the
tracked keys in recency order and, with a TTL, their last-access epochs).

File format (version :data:`FORMAT_VERSION`), little-endian::

    magic      8 bytes   b"LHSNAP\\r\\n"
    version    u32
    meta_len   u64       length of the JSON metadata
    meta       JSON      {"instance_id", ..., "arrays": [{"name", "dtype", "length"}]}
    arrays     raw       each array's bytes, in the order the metadata lists them
    digest     32 bytes  SHA-256 of everything before it

Writes are atomic: a temporary file in the same folder, flushed and fsynced, renamed onto
the final name, then the folder is fsynced. Reading checks the magic, the version, every
length and the digest, so a corrupt, truncated or foreign file is refused with
:class:`SnapshotError` naming the reason (the caller then starts that instance fresh).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MAGIC = b"LHSNAP\r\n"
FORMAT_VERSION = 1
SUFFIX = ".snapshot"
_HEAD = struct.Struct("<8sIQ")
_DIGEST = 32
_DTYPES = {"int64": np.dtype("<i8")}
MAX_META_BYTES = 64 * 1024 * 1024


class SnapshotError(Exception):
    """A snapshot file that cannot be used; the message names the file and the reason."""


def snapshot_name(instance_id: str) -> str:
    """The file name of ``instance_id``'s snapshot: a readable prefix of the id plus a
    hash of all of it (ids may hold any character). O(len(id))."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", instance_id)[:48]
    digest = hashlib.sha256(instance_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}{SUFFIX}"


def write_snapshot(
    path: str | os.PathLike[str], meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> int:
    """Write ``meta`` (JSON-able) and ``arrays`` (int64) atomically to ``path``; returns
    the bytes written. O(size) time, O(1) extra memory beyond the arrays."""
    path = Path(path)
    listing = []
    blobs = []
    for name, array in arrays.items():
        data = np.ascontiguousarray(array, dtype=_DTYPES["int64"])
        listing.append({"name": name, "dtype": "int64", "length": int(data.shape[0])})
        blobs.append(data)
    body = json.dumps({**meta, "arrays": listing}, sort_keys=True, allow_nan=False).encode()
    digest = hashlib.sha256()
    with _replacing(path) as fh:
        for chunk in (_HEAD.pack(MAGIC, FORMAT_VERSION, len(body)), body):
            fh.write(chunk)
            digest.update(chunk)
        for data in blobs:
            view = memoryview(data).cast("B")
            fh.write(view)
            digest.update(view)
        fh.write(digest.digest())
        size = fh.tell()
    return size


def write_file_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (:func:`_replacing`). O(len(data))."""
    with _replacing(Path(path)) as fh:
        fh.write(data)


@contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """Yield a file to write in ``path``'s place: a temporary in the same folder, fsynced
    and renamed onto ``path`` when the block succeeds, then the folder fsynced; removed
    (``path`` untouched) when it fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_snapshot(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata and arrays of a snapshot file; SnapshotError if it is not a valid one.

    O(file size) (the digest is checked before anything is parsed).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) < _HEAD.size + _DIGEST:
        raise SnapshotError(f"{path}: truncated ({len(data)} bytes)")
    magic, version, meta_len = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotError(f"{path}: not a LiteHit snapshot (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise SnapshotError(
            f"{path}: format version {version} is not supported (expected {FORMAT_VERSION})"
        )
    if hashlib.sha256(memoryview(data)[:-_DIGEST]).digest() != data[-_DIGEST:]:
        raise SnapshotError(f"{path}: checksum mismatch (corrupt or truncated)")
    start = _HEAD.size
    if meta_len > min(MAX_META_BYTES, len(data) - start - _DIGEST):
        raise SnapshotError(f"{path}: metadata length {meta_len} exceeds the file")
    try:
        meta = json.loads(data[start : start + meta_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: metadata is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("arrays"), list):
        raise SnapshotError(f"{path}: metadata has no array listing")
    offset = start + meta_len
    end = len(data) - _DIGEST
    arrays: dict[str, np.ndarray] = {}
    for item in meta.pop("arrays"):
        try:
            name, dtype, length = item["name"], _DTYPES[item["dtype"]], int(item["length"])
        except (KeyError, TypeError, ValueError):
            raise SnapshotError(f"{path}: bad array entry {item!r}") from None
        size = length * dtype.itemsize
        if length < 0 or offset + size > end:
            raise SnapshotError(f"{path}: array {name!r} of {length} items exceeds the file")
        arrays[name] = np.frombuffer(data, dtype=dtype, count=length, offset=offset)
        offset += size
    if offset != end:
        raise SnapshotError(f"{path}: {end - offset} bytes after the last array")
    return meta, arrays


class SnapshotStore:
    """The ``state/`` folder: one snapshot per instance id (created on first use)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def path(self, instance_id: str) -> Path:
        """Where ``instance_id``'s snapshot lives."""
        return self.folder / snapshot_name(instance_id)

    def write(
        self, instance_id: str, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> int:
        """Atomically replace ``instance_id``'s snapshot; returns the bytes written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return write_snapshot(self.path(instance_id), {**meta, "instance_id": instance_id}, arrays)

    def read(self, instance_id: str) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        """``instance_id``'s snapshot, None when there is none; SnapshotError if unusable
        (including a file whose recorded id is another one)."""
        path = self.path(instance_id)
        if not path.exists():
            return None
        meta, arrays = read_snapshot(path)
        if meta.get("instance_id") != instance_id:
            raise SnapshotError(
                f"{path}: holds instance {meta.get('instance_id')!r}, not {instance_id!r}"
            )
        return meta, arrays

    def written_unix(self, instance_id: str) -> float | None:
        """When ``instance_id``'s snapshot was written (its modification time, Unix
        seconds), None when there is none."""
        try:
            return self.path(instance_id).stat().st_mtime
        except OSError:
            return None

    def remove(self, instance_id: str) -> None:
        """Delete ``instance_id``'s snapshot (no error if there is none)."""
        self.path(instance_id).unlink(missing_ok=True)

    def stale_temporaries(self) -> Iterator[Path]:
        """Temporary files a killed writer left behind."""
        if self.folder.is_dir():
            yield from self.folder.glob(f".*{SUFFIX}.*.tmp")

    def remove_unknown(self, instance_ids: set[str]) -> list[Path]:
        """Delete snapshots of instances not in ``instance_ids`` and stale temporaries;
        returns what was removed. O(files)."""
        removed = list(self.stale_temporaries())
        if self.folder.is_dir():
            keep = {snapshot_name(i) for i in instance_ids}
            removed += [p for p in self.folder.glob(f"*{SUFFIX}") if p.name not in keep]
        for path in removed:
            path.unlink(missing_ok=True)
        return removed

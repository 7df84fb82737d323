"""Trace files as bytes, plain or compressed: gzip (``.gz``) and zstd (``.zst``) inputs are
read transparently everywhere a trace is read, told by their first bytes (not by their
name: a ``.jsonl`` that is gzip'd reads as well).

:func:`open_bytes` opens a file for :func:`~litehit_service.traces.readers.jsonl.trace_lines`
(only ``read(n)`` is used): decompressed on the fly, in O(1) memory besides the
decompressor's window, and a corrupt or truncated stream is a
:class:`~litehit_core.LocatedError` at line 0 naming the compression, never a traceback.
:func:`plain_size` is the byte count a progress bar may count against: the file's size
when it is not compressed, None (unknown) when it is. Cost: the decompression (gzip
~200-400 MB/s of output per core, zstd several times that).
"""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Any, BinaryIO

from litehit_core import LocatedError

__all__ = ["COMPRESSIONS", "compression_of", "open_bytes", "plain_size"]

COMPRESSIONS = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}
"""The magic bytes each compression's stream starts with."""


def compression_of(path: str | os.PathLike[str]) -> str | None:
    """``"gzip"``, ``"zstd"`` or None (plain) for the file at ``path``, from its first four
    bytes; OSError as ``open`` raises it. O(1)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    return next((name for magic, name in COMPRESSIONS.items() if head.startswith(magic)), None)


class _Checked:
    """A decompressing reader whose stream errors become located errors (line 0)."""

    def __init__(self, raw: BinaryIO, reader: Any, path: str, compression: str) -> None:
        self._raw, self._reader, self._path, self._compression = raw, reader, path, compression

    def read(self, size: int = -1) -> bytes:
        try:
            return self._reader.read(size)
        except (OSError, EOFError, zlib.error, ValueError) as exc:  # zstd raises ZstdError
            raise LocatedError(
                self._path, 0, f"not a valid {self._compression} stream: {exc}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - zstandard.ZstdError is no OSError
            if type(exc).__name__ != "ZstdError":
                raise
            raise LocatedError(
                self._path, 0, f"not a valid {self._compression} stream: {exc}"
            ) from None

    def close(self) -> None:
        self._reader.close()
        self._raw.close()

    def __enter__(self) -> _Checked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Zstd:
    """zstd frames decompressed from ``raw``, one after another; a stream that ends inside
    a frame (a truncated file) is an error, not a quiet end."""

    CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._raw = raw
        self._frame = self._new()
        self._started = False
        self._buffer = bytearray()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            data = self._raw.read(self.CHUNK)
            if not data:
                if self._started and not self._frame.eof:
                    raise ValueError("the stream ends inside a frame (truncated?)")
                break
            while data:
                if self._frame.eof:
                    self._frame = self._new()
                self._started = True
                self._buffer += self._frame.decompress(data)
                data = self._frame.unused_data if self._frame.eof else b""
        n = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def close(self) -> None:
        self._raw.close()


def open_bytes(path: str) -> BinaryIO:
    """Open ``path`` for reading its (decompressed) bytes; a file that cannot be opened is
    a LocatedError at line 0 (as is a zstd file without the ``zstandard`` library)."""
    try:
        compression = compression_of(path)
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as exc:
        raise LocatedError(path, 0, f"cannot read the trace: {exc.strerror or exc}") from None
    if compression is None:
        return raw
    reader: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else _Zstd(raw)
    return _Checked(raw, reader, path, compression)  # type: ignore[return-value]


def plain_size(path: str | os.PathLike[str]) -> int | None:
    """The file's size in bytes when it is not compressed (what its lines add up to), else
    None: a progress bar counts without a total. None for a file that cannot be read."""
    try:
        return None if compression_of(path) is not None else os.path.getsize(path)
    except OSError:
        return None

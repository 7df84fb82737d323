"""Who may call what: deny by default, decided from the method's name alone.

Every OptimizerService method is one of three kinds, by a rule on its name (not a list):

- **read** (``Get*``, ``List*``): always open;
- **query** (``TraceQuery*``): needs the query token when one is configured (the admin
  token is accepted too);
- **admin** (everything else — so a method added to the proto later is protected without
  editing anything): needs the admin token when one is configured.

The gRPC health and reflection services are reads of the server itself and stay open.
Tokens travel as metadata ``authorization: Bearer <token>`` and are compared in constant
time (SHA-256 digests compared with :func:`hmac.compare_digest`, so not even the length
leaks).

**Protected by default** (:func:`litehit_service.service.serve`): a server listening on
anything but loopback (:func:`is_loopback_host`) with no admin token configured uses the
token in ``<data-dir>/admin-token`` (:data:`ADMIN_TOKEN_FILE`), created on its first start
by :func:`data_dir_admin_token`; only an explicit ``open_admin`` (``--open-admin``) leaves
admin RPCs open there.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

READ_PREFIXES = ("Get", "List")
QUERY_PREFIX = "TraceQuery"
ADMIN_TOKEN_FILE = "admin-token"
"""The admin token a non-loopback server without one makes in its data dir (mode 0600)."""


class Access(enum.Enum):
    """The kind of an RPC (see the module docstring)."""

    READ = "read"
    QUERY = "query"
    ADMIN = "admin"


def method_access(method_name: str) -> Access:
    """The kind of the OptimizerService method ``method_name`` (e.g. ``"ResetStats"``). O(1)."""
    if method_name.startswith(QUERY_PREFIX):
        return Access.QUERY
    if method_name.startswith(READ_PREFIXES):
        return Access.READ
    return Access.ADMIN


def _digest(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


class TokenCheck:
    """Decides whether call metadata may call an RPC of a given :class:`Access`.

    ``admin_token`` / ``query_token``: None (or empty) = that kind is open. O(metadata).
    """

    __slots__ = ("_admin", "_query")

    def __init__(self, admin_token: str | None = None, query_token: str | None = None) -> None:
        self._admin = _digest(f"Bearer {admin_token}") if admin_token else None
        self._query = _digest(f"Bearer {query_token}") if query_token else None

    @property
    def guarded(self) -> bool:
        """True when any token is configured."""
        return self._admin is not None or self._query is not None

    def allowed(self, access: Access, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        """True when ``metadata`` may call an RPC of kind ``access``."""
        if access is Access.READ:
            return True
        if access is Access.QUERY:
            if self._query is None:
                return True
            wanted = [self._query, self._admin]
        elif self._admin is None:
            return True
        else:
            wanted = [self._admin]
        for key, value in metadata or ():
            if key != "authorization":
                continue
            given = _digest(value)
            ok = False
            for expected in wanted:  # check every configured token: constant work
                if expected is not None and hmac.compare_digest(given, expected):
                    ok = True
            if ok:
                return True
        return False


def read_token(value: str | None, file: str | None, what: str) -> str | None:
    """A token given directly or by a file (first line, surrounding whitespace removed).

    Raises ValueError naming ``what`` when both are given, the file cannot be read or it
    holds no token. O(file size).
    """
    if value and file:
        raise ValueError(f"give {what} or {what}-file, not both")
    if not file:
        return value or None
    try:
        with open(file, encoding="utf-8") as fh:
            token = fh.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"{what}-file {os.fspath(file)!r} cannot be read: {reason}") from None
    if not token:
        raise ValueError(f"{what}-file {os.fspath(file)!r} holds no token")
    return token


def is_loopback_host(host: str) -> bool:
    """True when a server bound to ``host`` is reachable from this machine only: an address
    in 127.0.0.0/8, ``::1`` (also IPv4-mapped, ``::ffff:127.0.0.1``) or the name
    ``localhost``. Every other host (``0.0.0.0``, ``::``, an interface's address, any other
    name, which could resolve to anything) is not. O(len(host))."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def data_dir_admin_token(data_dir: str | os.PathLike[str]) -> tuple[str, Path, bool]:
    """The admin token kept in ``<data_dir>/admin-token``: ``(token, path, created)``.

    The first call creates the file (mode 0600, 32 random bytes in URL-safe base64, written
    to a temporary file, fsynced and renamed into place); later calls read its first line
    (a file other users may read is used, with a WARNING). The caller holds the data dir's
    lock. Raises OSError naming the file when it cannot be read or holds no token; it is
    never overwritten (delete it for a new token). O(file size).
    """
    path = Path(data_dir) / ADMIN_TOKEN_FILE
    shown = os.fspath(path)
    if not path.exists():
        token = secrets.token_urlsafe(32)
        scratch = path.with_name(f".{ADMIN_TOKEN_FILE}.tmp")
        scratch.unlink(missing_ok=True)  # a stale one from a crash (never followed)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(scratch, flags, 0o600)
        try:
            os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
            os.write(fd, f"{token}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename survives a crash: clients keep a valid token
        finally:
            os.close(folder)
        return token, path, True
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.readline().strip()
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise OSError(f"admin token file {shown!r} cannot be read: {reason}") from None
    if not token:
        raise OSError(f"admin token file {shown!r} holds no token (delete it for a new one)")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "admin token file %s has mode %04o: other users may read it (chmod 600)", shown, mode
        )
    return token, path, False

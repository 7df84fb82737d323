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
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
from collections.abc import Iterable

READ_PREFIXES = ("Get", "List")
QUERY_PREFIX = "TraceQuery"


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

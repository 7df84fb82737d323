"""The input errors of every LiteHit component.

:class:`InvalidRequestError` is any violation of the input contract (a request, a
configuration, a file row); its message names the offending field and value.
:class:`LocatedError` is the one error for bad input that has a place in a file: trace
lines, replay configs, groups files and facts ledgers all raise it, so every reader and
command reports it the same way (``path:line: field: reason``) and exits the same way.
"""

from __future__ import annotations

from typing import Any


class InvalidRequestError(ValueError):
    """A request, configuration or file row violates the input contract.

    The message always names the offending field and the value(s) involved.
    """


class LocatedError(InvalidRequestError):
    """Bad input at a place in a file.

    ``path`` is the file (empty when the input did not come from a file), ``line_no`` its
    1-based line (0 = the file as a whole), ``field`` the dotted path of the offending value
    (``instances[0].block_size``; may be empty) and ``reason`` what is wrong with which value.
    ``str(exc)`` is ``"{path}:{line_no}: {field}: {reason}"``, each of ``path`` and
    ``field`` (with its separator) left out when empty.
    """

    def __init__(self, path: str, line_no: int, reason: str, field: str = "") -> None:
        self.path = path
        self.line_no = line_no
        self.field = field
        self.reason = reason
        message = f"{field}: {reason}" if field else reason
        super().__init__(f"{path}:{line_no}: {message}" if path else message)

    @property
    def detail(self) -> str:
        """The message without the location: ``"{field}: {reason}"`` (or the reason)."""
        return f"{self.field}: {self.reason}" if self.field else self.reason

    def at(self, path: str, line_no: int) -> LocatedError:
        """The same error placed at ``path:line_no`` (for errors found before the file was
        known, such as a field of an entry parsed from a dict). O(1)."""
        return type(self)(path, line_no, self.reason, self.field)

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable (worker processes send it back) although __init__ takes four arguments.
        return (type(self), (self.path, self.line_no, self.reason, self.field))

"""Network addresses as operators write them: ``HOST:PORT``, IPv6 as ``[::1]:PORT``."""

from __future__ import annotations


def parse_address(address: str, what: str = "address") -> tuple[str, int]:
    """``"host:port"`` (IPv6 as ``"[::1]:port"``) -> ``(host, port)``; port 0 = ephemeral.

    Raises ValueError naming ``what`` and the value on a malformed address.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{what} must be HOST:PORT with PORT 0..65535, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """``(host, port)`` -> ``"host:port"``, bracketing IPv6 hosts."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

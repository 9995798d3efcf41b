"""Which ``Host`` (and ``Origin``) names the HTTP server answers: the DNS-rebinding defence.

A web page the user visits can make its own domain resolve to 127.0.0.1 ("DNS rebinding"); the
browser then sends ``Host: evil.example:P`` and ``Origin: http://evil.example:P`` to this server,
same-origin in the browser's eyes. So the Host must be a name this server knows, as Starlette's
TrustedHostMiddleware and Jupyter do:

- by default: the loopback names (``localhost``, ``127.0.0.1``, ``::1``) and the address the server
  is bound to; bound to every interface (``0.0.0.0`` / ``::``), also this machine's host name and
  any IP-address literal (an IP literal cannot be rebound: the page's own origin would be that
  address);
- ``sglc serve --allowed-hosts a,b:8000`` adds names (an entry with a port matches that port
  only); ``*`` allows any Host: UNSAFE, it turns the defence off (the Origin must then still equal
  the Host).

A request with no Host header at all (HTTP/1.0) is not from a browser (browsers always send one)
and passes. An ``Origin`` must name an allowed host and this server's port (or match an entry
given with its port): a page served by another program on this machine cannot drive the server.
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Iterable
from urllib.parse import urlsplit

__all__ = ["HostAllowList", "LOOPBACK_NAMES", "split_host"]

#: Always allowed: every name of this machine's loopback interface.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = ("", "0.0.0.0", "::")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def split_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (IPv6 in brackets) -> (lowercase host without brackets or a trailing dot,
    port or None); None when malformed."""
    value = value.strip().lower()
    port: str | None = None
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif value.count(":") > 1:  # NOTE: a bare IPv6 address (no brackets, so no port)
        host = value
    else:
        host, sep, port_text = value.partition(":")
        port = port_text if sep else None
    if port is not None and not (port.isdigit() and len(port) <= 5):
        return None
    host = host[:-1] if host.endswith(".") else host
    if not host:
        return None
    return host, None if port is None else int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostAllowList:
    """The names a request's Host and Origin may carry (see the module docstring)."""

    def __init__(self, bound_host: str = "127.0.0.1", extra: Iterable[str] = ()) -> None:
        self.any_host = False
        self.names: set[str] = set(LOOPBACK_NAMES)  # entries without a port
        self.with_port: set[tuple[str, int]] = set()
        bound = bound_host.strip().strip("[]").lower()
        self.any_ip = bound in _WILDCARD_BINDS
        if self.any_ip:
            self.names.add(socket.gethostname().lower())
        elif bound:
            self.names.add(bound)
        for entry in extra:
            self.add(entry)

    def add(self, entry: str) -> None:
        """One ``--allowed-hosts`` entry: a name, ``name:port``, ``[v6]:port``, or ``*``."""
        if entry.strip() == "*":
            self.any_host = True
            return
        parsed = split_host(entry)
        if parsed is None:
            raise ValueError(f"--allowed-hosts: {entry!r} is not a host name, host:port or *")
        host, port = parsed
        if port is None:
            self.names.add(host)
        else:
            self.with_port.add((host, port))

    def allows_host(self, host: str, port: int | None) -> bool:
        return (self.any_host or host in self.names or (host, port) in self.with_port
                or (self.any_ip and _is_ip(host)))

    def allows_header(self, value: str) -> bool:
        """The Host header's value: an allowed name (any port unless the entry names one)."""
        parsed = split_host(value)
        return parsed is not None and self.allows_host(*parsed)

    def allows_origin(self, origin: str, host_header: str | None, scheme: str = "http") -> bool:
        """The Origin header: an entry given with its port, or on this server's port (the Host
        header's) either an allowed name or the Host itself (same origin; the Host was checked)."""
        try:
            parts = urlsplit(origin.strip())
            origin_port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return False
        parsed = split_host(parts.netloc) if parts.netloc and "@" not in parts.netloc else None
        if parsed is None:  # NOTE: "null" (a sandboxed page, a file://) and garbage
            return False
        host = parsed[0]
        if (host, origin_port) in self.with_port:
            return True
        served = split_host(host_header) if host_header else None
        served_port = None if served is None else served[1] or _DEFAULT_PORTS.get(scheme)
        if served_port is not None and origin_port != served_port:
            return False
        # NOTE: not any IP literal here: a page on another machine's address must not drive this one
        return host in self.names or (served is not None and served[0] == host and self.allows_host(*served))

"""How a host and a port are written together, for IPv4, IPv6 and host names alike.

An IPv6 address holds colons, so joined to a port it goes in brackets, as in
URLs (RFC 3986) and as torch and OpenSSH write it: ``[::1]:29500``. Everywhere
else (``MASTER_ADDR``, ``--host``, a socket's address) a host stands alone, and
then a bracketed IPv6 address is accepted too and its brackets dropped.
"""

from __future__ import annotations

import ipaddress

from asyncoll.errors import ConfigurationError

__all__ = ["host_literal", "join_host_port", "split_host_port", "wildcard"]

_EXAMPLE = "host:29500, 10.0.0.1:29500 or [::1]:29500"


def host_literal(text: str, what: str) -> str:
    """``text`` as a host to bind or connect to: a name, an IPv4 or an IPv6 address.

    Surrounding whitespace and the brackets of ``[v6]`` are dropped.

    Args:
        text: the host as given.
        what: where it came from, for the error (``MASTER_ADDR``, ``--host``).

    Raises:
        ConfigurationError: it is empty, has unbalanced brackets or spaces, or
            holds a colon but is no IPv6 address (a port, say).
    """
    host = text.strip()
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if not host or any(c in host for c in "[] \t\n/"):
        raise ConfigurationError(f"{what}={text!r} is not a host: give a host name, an IPv4 "
                                 "address or an IPv6 address (::1 or [::1])")
    if ":" in host or bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigurationError(
                f"{what}={text!r} is neither a host name nor an IP address; give the host "
                "alone (10.0.0.1, node-3 or ::1), without a port") from None
    return host


def split_host_port(text: str, what: str) -> tuple[str, int]:
    """The (host, port) of ``host:port`` or ``[v6]:port``; the host without brackets.

    Args:
        text: the address as given.
        what: where it came from, for the error (``--coordinator``).

    Raises:
        ConfigurationError: no port, a port that is not 1 to 65535, or an IPv6
            address without brackets (``::1:29500`` is ambiguous).
    """
    stripped = text.strip()
    if stripped.startswith("["):
        host, close, rest = stripped[1:].partition("]")
        if not close or not rest.startswith(":"):
            raise ConfigurationError(f"{what}={text!r} must be [IPV6]:PORT, e.g. [::1]:29500")
        port_text = rest[1:]
        host = f"[{host}]"  # so that host_literal insists on an IPv6 address
    else:
        host, colon, port_text = stripped.rpartition(":")
        if not colon or not host:
            raise ConfigurationError(f"{what}={text!r} must be HOST:PORT, e.g. {_EXAMPLE}")
        if ":" in host:
            raise ConfigurationError(f"{what}={text!r} is ambiguous: put an IPv6 address in "
                                     "brackets and the port after them, as in [::1]:29500")
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"{what}={text!r} must end in a port from 1 to 65535, "
                                 f"e.g. {_EXAMPLE}")
    return host_literal(host, what), int(port_text)


def split_addresses(text: str, what: str) -> tuple[tuple[str, int], ...]:
    """Every (host, port) of ``host:port,host:port,...`` (see :func:`split_host_port`).

    Raises:
        ConfigurationError: an empty list, or an address that is not one.
    """
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ConfigurationError(f"{what}={text!r} must be HOST:PORT, or several separated by "
                                 f"commas, e.g. {_EXAMPLE}")
    return tuple(split_host_port(item, what) for item in items)


def join_addresses(addresses: tuple[tuple[str, int], ...]) -> str:
    """``host:port,host:port``: what :func:`split_addresses` reads."""
    return ",".join(join_host_port(host, port) for host, port in addresses)


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 ``host`` in brackets: ``[::1]:29500``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def wildcard(host: str) -> str:
    """The address that binds every interface of ``host``'s family: ``::`` or ``0.0.0.0``."""
    return "::" if ":" in host else "0.0.0.0"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is this host's loopback; an IPv4
    address mapped into IPv6 (``::ffff:127.0.0.1``, a client of a ``::`` socket) counts."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host == "localhost"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback

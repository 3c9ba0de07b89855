"""Where a peer's data port listens and which address it advertises to the others.

By default a peer advertises the local address of its own connection to the
coordinator: the interface that reaches the coordinator is the one most
likely to reach the other peers (gloo's GLOO_SOCKET_IFNAME is needed for the
cases where this guess fails, and so are the overrides here).

- ``ASYNCOLL_ADVERTISE_ADDR``: advertise this address (a NAT or container
  address, say). The port is bound on it when it is local, on every
  interface otherwise.
- ``ASYNCOLL_SOCKET_IFNAME``: advertise and bind the IPv4 address of this
  network interface, or its global IPv6 address where it has no IPv4 one (Linux).
- ``ASYNCOLL_DATA_PORTS``: bind the first free port of this range, e.g.
  ``30000-30100``, for firewalls; any free port by default.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from asyncoll._wire.endpoint import host_literal
from asyncoll.errors import ConfigurationError

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
_IF_INET6 = "/proc/net/if_inet6"  # Linux: each interface's IPv6 addresses and scopes
_SCOPE_GLOBAL = 0x00


@dataclass(frozen=True, slots=True)
class ListenPlan:
    """Where to bind the data port and what address to tell the coordinator."""

    advertise: str
    bind: str
    ports: range | None
    #: Where the choice came from, for error messages.
    source: str


def listen_plan(coordinator_side: str, environ: Mapping[str, str]) -> ListenPlan:
    """Decide the data port's addresses from the environment.

    Args:
        coordinator_side: the local address of this peer's coordinator connection.
        environ: the environment, as the runtime read it.

    Raises:
        ConfigurationError: an unknown interface, a malformed address or port range.
    """
    ports = _port_range(environ.get("ASYNCOLL_DATA_PORTS", ""))
    advertise = environ.get("ASYNCOLL_ADVERTISE_ADDR", "").strip()
    if advertise:
        advertise = host_literal(advertise, "ASYNCOLL_ADVERTISE_ADDR")
        return ListenPlan(advertise, advertise, ports, "ASYNCOLL_ADVERTISE_ADDR")
    ifname = environ.get("ASYNCOLL_SOCKET_IFNAME", "").strip()
    if ifname:
        address = interface_address(ifname)
        return ListenPlan(address, address, ports, f"ASYNCOLL_SOCKET_IFNAME={ifname}")
    return ListenPlan(coordinator_side, coordinator_side, ports,
                      "the local address of the connection to the coordinator")


def route_address(host: str, port: int) -> str:
    """The local address of this host's route to ``host:port`` (``host`` itself where the
    route cannot be found): the address a process there reaches this host at."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return host


def interface_address(ifname: str) -> str:
    """The IPv4 address of network interface ``ifname``, else its global IPv6 address.

    Raises:
        ConfigurationError: no such interface, or it has neither.
    """
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        names = ", ".join(name for _, name in socket.if_nameindex())
        raise ConfigurationError(f"ASYNCOLL_SOCKET_IFNAME={ifname!r} names no network "
                                 f"interface of this host; it has {names}") from None
    import fcntl  # Unix only, and only needed here

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", ifname.encode()[:15]))
        except OSError as exc:
            ipv6 = _global_ipv6_address(ifname)
            if ipv6 is not None:
                return ipv6
            raise ConfigurationError(f"network interface {ifname!r} has neither an IPv4 "
                                     f"address ({exc}) nor a global IPv6 address; pick "
                                     "another ASYNCOLL_SOCKET_IFNAME") from exc
    return socket.inet_ntoa(packed[20:24])


def _global_ipv6_address(ifname: str) -> str | None:
    """The first global-scope IPv6 address of ``ifname`` (None: none, or not Linux)."""
    # Link-local addresses are left out: they need a scope that names this
    # host's interface, which means nothing to the peers they are sent to.
    try:
        with open(_IF_INET6) as table:
            rows = [line.split() for line in table]
    except OSError:
        return None
    for row in rows:
        if len(row) == 6 and row[5] == ifname and int(row[3], 16) == _SCOPE_GLOBAL:
            return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(row[0]))
    return None


def _port_range(text: str) -> range | None:
    if not text.strip():
        return None
    low, sep, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high if sep else low)
    except ValueError:
        first, last = 0, -1
    if not 0 < first <= last < 65536:
        raise ConfigurationError(f"ASYNCOLL_DATA_PORTS={text!r} must be a port or a range "
                                 "like 30000-30100 within 1-65535")
    return range(first, last + 1)

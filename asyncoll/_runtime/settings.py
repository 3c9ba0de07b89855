"""Everything asyncoll takes from the environment, read once per job (the only reader).

:func:`settings_at_join` runs when a process joins a job, whichever front door
it comes through (init_process_group, the torch backend's first group,
``testing.run_ranks``): a variable changed later affects the next job, never
one that is running. Bad values are refused there, with the variable and its
value named, before anything is sent. The layers below get what they need as
arguments: the transport its TransportSettings, the group layer its GroupPolicy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from asyncoll import _auth
from asyncoll._algorithms import selection
from asyncoll._defaults import HEARTBEAT_TIMEOUT_S
from asyncoll._policy import ARENA_SLOT_BYTES, LINKS_BYTES, GroupPolicy
from asyncoll._tls import context as tls_context
from asyncoll._tls.context import Tls
from asyncoll._transport.shm import arena
from asyncoll._transport.shm import segment as shm
from asyncoll._transport.settings import (
    EARLY_LIMIT_BYTES,
    SHM_MIN_BYTES,
    SHM_RING_BYTES,
    TransportSettings,
)
from asyncoll.errors import ConfigurationError

_EMPTY: Mapping[str, str] = MappingProxyType({})
#: Operations each rank's flight recorder keeps by default (torch's default too).
TRACE_BUFFER = 2000


@dataclass(frozen=True, slots=True)
class Settings:
    """One job's settings from the environment.

    The launch variables (MASTER_ADDR, RANK, ASYNCOLL_DATA_PORTS, ...) are kept
    as read in ``environment``: where to join and where to listen are decided
    from them with the call's own arguments (asyncoll._runtime.init_method,
    asyncoll._runtime.addresses).
    """

    #: The job's shared secret (ASYNCOLL_TOKEN; None when unset or empty).
    token: bytes | None = None
    #: TLS (ASYNCOLL_TLS_CERT, ASYNCOLL_TLS_KEY, ASYNCOLL_TLS_CA; None when none is set),
    #: its files read when the settings are.
    tls: Tls | None = field(default=None, compare=False)
    #: Seconds of silence after which the coordinator declares a member lost
    #: (ASYNCOLL_HEARTBEAT_TIMEOUT).
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT_S
    #: What the group layer is told (ASYNCOLL_ALGORITHM, ASYNCOLL_ARENA_BYTES,
    #: ASYNCOLL_LINKS_BYTES, ASYNCOLL_HIERARCHY).
    policy: GroupPolicy = field(default_factory=GroupPolicy)
    #: What the data plane is told (ASYNCOLL_SHM, ASYNCOLL_SHM_BYTES, ...).
    transport: TransportSettings = TransportSettings()
    #: The name ranks tell which of them share a host by (ASYNCOLL_HOSTNAME; "":
    #: the machine's hostname): ranks of one name share memory.
    hostname: str = ""
    #: The flight recorder (asyncoll._group.recorder): operations each rank keeps
    #: (ASYNCOLL_TRACE_BUFFER; 0: off), where ranks write them (ASYNCOLL_TRACE_DIR;
    #: "": a folder of the job's under the system's temporary folder), and whether
    #: each keeps its caller's Python stack (ASYNCOLL_TRACE_STACKS=1).
    trace_buffer: int = TRACE_BUFFER
    trace_dir: str = ""
    trace_stacks: bool = False
    #: The environment as read, for the launch variables.
    environment: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False,
                                             repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Read and check every asyncoll variable of ``environ`` (the process's, by default).

        Raises:
            ConfigurationError: a variable's value is not valid; the message names both.
        """
        token = _auth.token_from_environment(environ)
        tls = tls_from_environment(environ)
        shared = shm.AVAILABLE and environ.get("ASYNCOLL_SHM", "1") != "0"
        return cls(token=token, tls=tls, heartbeat_timeout=_heartbeat_timeout(environ),
                   policy=_policy(environ, tls, shared),
                   transport=_transport(environ, token, tls, shared),
                   hostname=environ.get("ASYNCOLL_HOSTNAME", ""),
                   trace_buffer=_positive(environ, "ASYNCOLL_TRACE_BUFFER", TRACE_BUFFER, 0,
                                          "operations (0 turns the flight recorder off)"),
                   trace_dir=environ.get("ASYNCOLL_TRACE_DIR", ""),
                   trace_stacks=_flag(environ, "ASYNCOLL_TRACE_STACKS"),
                   environment=MappingProxyType(dict(environ)))


def settings_at_join() -> Settings:
    """This process's environment, read for a job it is joining: every front door reads
    it here, once per join.

    Raises:
        ConfigurationError: a variable's value is not valid; the message names both.
    """
    return Settings.from_environment(os.environ)


def _heartbeat_timeout(environ: Mapping[str, str]) -> float:
    text = environ.get("ASYNCOLL_HEARTBEAT_TIMEOUT")
    if text is None:
        return HEARTBEAT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < math.inf:
        raise ConfigurationError(f"ASYNCOLL_HEARTBEAT_TIMEOUT must be a positive number of "
                                 f"seconds, got {text!r}")
    return value


def tls_from_environment(environ: Mapping[str, str], listens: bool = True) -> Tls | None:
    """TLS as ``environ``'s ASYNCOLL_TLS_* variables set it, its files read (None: off).

    Raises:
        ConfigurationError: a file cannot be used, or the variables are incomplete.
    """
    found = tls_context.TlsSettings.from_environment(environ)
    return tls_context.load(found, listens=listens) if found is not None else None


def _policy(environ: Mapping[str, str], tls: Tls | None, shared: bool) -> GroupPolicy:
    slot = _positive(environ, "ASYNCOLL_ARENA_BYTES", ARENA_SLOT_BYTES, smallest=0)
    return GroupPolicy(
        forced_algorithms=MappingProxyType(
            selection.parse_forced(environ.get("ASYNCOLL_ALGORITHM", ""))),
        arena_slot_bytes=slot if shared and arena.supported() else 0,
        arena_sized_to_room="ASYNCOLL_ARENA_BYTES" not in environ,
        links_bytes=_positive(environ, "ASYNCOLL_LINKS_BYTES", LINKS_BYTES, smallest=0),
        hierarchy=environ.get("ASYNCOLL_HIERARCHY", "1") != "0", tls=tls)


def _transport(environ: Mapping[str, str], token: bytes | None, tls: Tls | None,
               shared: bool) -> TransportSettings:
    ring = _positive(environ, "ASYNCOLL_SHM_BYTES", SHM_RING_BYTES)
    if ring < shm.MIN_RING_BYTES:
        raise ConfigurationError(f"ASYNCOLL_SHM_BYTES must be at least {shm.MIN_RING_BYTES}, "
                                 f"got {ring}")
    smallest = _positive(environ, "ASYNCOLL_SHM_MIN_BYTES", SHM_MIN_BYTES)
    return TransportSettings(
        token=token, tls=tls, shm_min_bytes=smallest if shared else 0, shm_ring_bytes=ring,
        early_limit_bytes=_positive(environ, "ASYNCOLL_MAX_EARLY_BYTES", EARLY_LIMIT_BYTES))


def _positive(environ: Mapping[str, str], name: str, default: int, smallest: int = 1,
              unit: str = "bytes") -> int:
    text = environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < smallest:
        kind = "a positive number" if smallest == 1 else "a number (0 or more)"
        raise ConfigurationError(f"{name} must be {kind} of {unit}, got {text!r}")
    return value


def _flag(environ: Mapping[str, str], name: str) -> bool:
    text = environ.get(name, "0")
    if text not in ("0", "1", ""):
        raise ConfigurationError(f"{name} must be 1 (on) or 0 (off), got {text!r}")
    return text == "1"

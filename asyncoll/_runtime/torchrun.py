"""Joining a job that torchrun launched, through the store torchrun's agent hosts.

torchrun's agent serves torch's TCPStore at MASTER_ADDR:MASTER_PORT and says
so in its workers' environment (TORCHELASTIC_USE_AGENT_STORE=True), so no
asyncoll coordinator can listen there. Rank 0 hosts one on a free port of the
address that reaches the store and writes that address in the store; every
rank reads it there and joins as usual. The store carries nothing else.

torch is imported here only, and only then: torchrun is torch's, so torch is
installed where it launches, and the store's wire protocol is torch's own, to
change between releases, so asyncoll speaks it through torch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import itertools
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from asyncoll._runtime import hosting
from asyncoll._runtime.addresses import route_address
from asyncoll._runtime.session import Rendezvous
from asyncoll._runtime.settings import Settings
from asyncoll._wire.endpoint import join_host_port, split_host_port
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import ConfigurationError, RendezvousError, RendezvousTimeoutError

#: What torchrun's agent sets in each worker's environment.
RUN_ID_VARIABLE = "TORCHELASTIC_RUN_ID"
AGENT_STORE_VARIABLE = "TORCHELASTIC_USE_AGENT_STORE"
RESTART_VARIABLE = "TORCHELASTIC_RESTART_COUNT"

# Each init_process_group of this process under torchrun gets a key of its own (every
# rank counts its calls alike): a later one must not read an earlier one's address.
_meetings = itertools.count()


def serves_store(environ: Mapping[str, str]) -> bool:
    """Whether torchrun launched this process with its agent's store at
    MASTER_ADDR:MASTER_PORT (otherwise rank 0 may host there, as torch's rank 0 does)."""
    return bool(environ.get(RUN_ID_VARIABLE)) and environ.get(AGENT_STORE_VARIABLE) == "True"


async def meet(where: Rendezvous, settings: Settings) -> tuple[Rendezvous, Coordinator | None]:
    """Where the job's coordinator is, learnt through torchrun's store at ``where``'s
    address; rank 0 hosts it (and returns it, for the session to stop).

    Raises:
        ConfigurationError: torch cannot be imported, or no rank is given.
        RendezvousError: the store cannot be reached, or the coordinator cannot start.
        RendezvousTimeoutError: rank 0 did not publish its coordinator within the timeout.
    """
    store_address = join_host_port(where.host, where.port)
    if where.rank < 0:
        raise ConfigurationError(f"under torchrun every process needs its rank, and RANK is "
                                 f"not set: asyncoll meets through torchrun's store at "
                                 f"{store_address}; launch with torchrun, which sets RANK")
    restart = settings.environment.get(RESTART_VARIABLE, "0")
    key = f"asyncoll/{restart}/{next(_meetings)}/coordinator"
    store = await asyncio.to_thread(_connect, where.host, where.port, where.timeout)
    coordinator: Coordinator | None = None
    try:
        if where.rank == 0:
            coordinator = await hosting.host_advertised(
                route_address(where.host, where.port), settings.token, settings.tls)
            await asyncio.to_thread(store.set, key,
                                    join_host_port(coordinator.host, coordinator.port))
        published = await asyncio.to_thread(_read, store, key, where.timeout, store_address)
        host, port = split_host_port(published, f"the address in torchrun's store ({key})")
    except BaseException:
        if coordinator is not None:
            await coordinator.stop()
        raise
    return dataclasses.replace(where, host=host, port=port, may_host=False,
                               torch_store=False), coordinator


def _connect(host: str, port: int, timeout: float) -> Any:
    """A client of torch's TCPStore at ``host:port``."""
    where = join_host_port(host, port)
    try:
        distributed = importlib.import_module("torch.distributed")
    except ImportError as exc:
        raise ConfigurationError(
            f"this process was launched by torchrun ({RUN_ID_VARIABLE} and "
            f"{AGENT_STORE_VARIABLE}=True are set), so MASTER_ADDR:MASTER_PORT ({where}) is "
            f"torch's store, not an asyncoll coordinator, and asyncoll needs torch to use "
            f"it, which cannot be imported here ({exc}); run the program with the Python "
            "that torchrun comes with, or launch it with asyncoll-run") from exc
    try:
        return distributed.TCPStore(host, port, is_master=False,
                                    timeout=timedelta(seconds=timeout))
    except Exception as exc:  # noqa: BLE001 - torch raises DistNetworkError, RuntimeError, ...
        raise RendezvousError(f"could not reach torchrun's store at {where} ({exc}); is "
                              "torchrun's agent still running?") from exc


def _read(store: Any, key: str, timeout: float, where: str) -> str:
    """The value rank 0 writes at ``key``, waiting up to ``timeout`` seconds for it."""
    try:
        store.wait([key], timedelta(seconds=timeout))
        return bytes(store.get(key)).decode()
    except Exception as exc:  # noqa: BLE001 - torch raises DistStoreError, RuntimeError, ...
        raise RendezvousTimeoutError(f"rank 0 did not publish asyncoll's coordinator in "
                                     f"torchrun's store at {where} within {timeout:g} s "
                                     f"({exc}); did rank 0 fail to start?") from exc

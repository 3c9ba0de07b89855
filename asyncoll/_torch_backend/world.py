"""The asyncoll job behind torch process groups, joined through torch's store.

torch hands a backend a Store and a rank. The default group's rank 0 starts an
embedded asyncoll coordinator on a free port and publishes its address in the
store; every rank reads it and joins asyncoll as usual, so every collective
then runs over asyncoll's own peers and algorithms. The store carries nothing
else. With init_method "asyncoll://" there is no job of its own: torch's
group runs on the blocking API's world (TorchWorld.over, elastic.py). The job
runs on the runtime's event loop thread; a TorchWorld owns one
thread that completes torch futures (so their callbacks never run on the event
loop, where a callback starting a collective would deadlock), which shutdown()
joins. The runtime shuts down at exit what the program did not.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from asyncoll import aio
from asyncoll._runtime import hosting
from asyncoll._runtime.addresses import route_address
from asyncoll._runtime.loop import CallbackThread
from asyncoll._runtime.runtime import Runtime, runtime
from asyncoll._runtime.settings import settings_at_join
from asyncoll.coordinator.server import Coordinator
from asyncoll._runtime.init_method import resolve_published, standing_coordinators
from asyncoll._defaults import EMBEDDED_DRAIN_TIMEOUT_S
from asyncoll._wire.endpoint import host_literal
from asyncoll.errors import RendezvousTimeoutError

log = logging.getLogger("asyncoll")

#: The one key asyncoll writes in torch's store (under the group's own prefix).
STORE_KEY = "asyncoll/coordinator"


class TorchWorld:
    """One asyncoll job, run on the runtime's loop, and its future-completing thread."""

    def __init__(self, runtime: Runtime, world: aio.World, owns_world: bool = True,
                 coordinator: Coordinator | None = None,
                 fallbacks: tuple[tuple[str, int], ...] = (), advertise: str = "") -> None:
        self.runtime = runtime
        self.world = world
        #: The address the other ranks reach this process at (a coordinator it hosts).
        self.advertise = advertise
        #: This process's rank in the job it started in (what reconfigure handles carry).
        self.origin = world.rank
        #: The standing coordinators a communicator this process forms falls back to.
        self.fallbacks = fallbacks
        self._owns_world = owns_world
        #: The coordinator this process hosts (rank 0 of the torch job): the world's, not a
        #: session's, since the communicators that reconfigures form meet on it too.
        self._coordinator = coordinator
        self._completions = CallbackThread("asyncoll-torch-futures")
        self._lock = threading.Lock()
        self._closed = False
        # A program that never calls destroy_process_group still leaves the job,
        # and no thread of ours is left to complete a torch future mid-exit.
        runtime.at_exit(self.shutdown)

    @classmethod
    def join(cls, store: Any, rank: int, size: int, timeout: float,
             standing: Coordinator | None = None) -> TorchWorld:
        """Join (rank 0: host) the asyncoll job of the group that ``store`` belongs to.

        Args:
            standing: a coordinator this process already hosts, which rank 0
                publishes instead of starting one; it outlives the job (the
                caller stops it), so leaving the job waits for no other rank.

        Raises:
            RendezvousError: the coordinator could not start or be reached, or the
                job was not complete within ``timeout`` (RendezvousTimeoutError).
            ConfigurationError: a bad asyncoll environment variable.
        """
        shared = runtime()
        settings = settings_at_join()
        coordinator: Coordinator | None = None
        advertise = advertised_host(store, settings.environment)
        try:
            if rank == 0:
                if standing is None:
                    standing = coordinator = shared.run(hosting.host_advertised(
                        advertise, settings.token, settings.tls))
                # Standing coordinators named in the environment take the job back
                # if the embedded one goes (with rank 0's process, say).
                fallbacks = standing_coordinators(settings.environment)
                published = {"host": standing.host, "port": standing.port,
                             "job": f"torch-{uuid.uuid4().hex}",
                             "fallbacks": [list(a) for a in fallbacks]}
                store.set(STORE_KEY, json.dumps(published))
            address: dict[str, Any] = _read_address(store, timeout)
        except BaseException:
            if coordinator is not None:
                shared.run(coordinator.stop())
            raise
        fallbacks = tuple((str(h), int(p)) for h, p in address.get("fallbacks", ()))
        where = resolve_published(str(address["host"]), int(address["port"]),
                                  str(address["job"]), size, rank, timeout, fallbacks)
        try:
            joined = shared.run(shared.join(where, settings))
        except BaseException:
            if coordinator is not None:
                shared.run(coordinator.stop())
            raise
        return cls(shared, aio.World(joined), coordinator=coordinator, fallbacks=fallbacks,
                   advertise=advertise)

    @classmethod
    def over(cls, world: aio.World, rank: int, size: int) -> TorchWorld:
        """Run torch's group on ``world``, the blocking API's, which stays the API's to end.

        Raises:
            RuntimeError: torch's rank or size is not the world's.
        """
        if (rank, size) != (world.rank, world.size):
            raise RuntimeError(f"torch made a group of rank {rank} and size {size} over "
                               f"asyncoll's world of rank {world.rank} and size {world.size}")
        return cls(runtime(), world, owns_world=False)

    def hosted(self) -> tuple[str, int]:
        """The address of the coordinator this process hosts, started here at the first call
        on a rank that hosts none: the communicators it convenes meet there, so a
        reconfigure never needs a process that is not part of it.

        Raises:
            RendezvousError: it cannot listen.
        """
        with self._lock:
            if self._coordinator is None:
                settings = settings_at_join()
                self._coordinator = self.runtime.run(hosting.host_advertised(
                    self.advertise or "127.0.0.1", settings.token, settings.tls))
            return self._coordinator.host, self._coordinator.port

    @property
    def owns_job(self) -> bool:
        """Whether the job is this world's own (not the blocking API's, asyncoll://)."""
        return self._owns_world

    @property
    def closed(self) -> bool:
        """Whether shutdown() has been called."""
        return self._closed

    def complete_later(self, action: Callable[[], None]) -> None:
        """Run ``action`` (completing a torch future) on the completion thread.

        After shutdown, when that thread is gone, it runs here instead.
        """
        self._completions.put(action)

    def shutdown(self, abandon: bool = False) -> None:
        """Leave the job (stopping the coordinator this rank hosts), join the thread.

        A world made ``over`` the blocking API's is left to it: only the thread ends.

        Operations still running fail with an asyncoll error. Never raises.

        Args:
            abandon: the job was aborted here: leave without waiting for a
                coordinator that this rank is not connected to now.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.runtime.forget_at_exit(self.shutdown)
        if self._owns_world:
            try:
                self.runtime.run(self.world.session.close(abandon))
            except Exception:  # noqa: BLE001 - shutdown must always finish
                log.exception("asyncoll: error while leaving the job")
        if self._coordinator is not None:
            try:
                self.runtime.run(drain_and_stop(self._coordinator))
            except Exception:  # noqa: BLE001 - shutdown must always finish
                log.exception("asyncoll: error while stopping the embedded coordinator")
        self._completions.stop()


async def drain_and_stop(coordinator: Coordinator) -> None:
    """Stop ``coordinator`` once the other ranks have left every job on it (the torch job
    and the communicators its reconfigures formed), or after EMBEDDED_DRAIN_TIMEOUT_S."""
    if not await coordinator.wait_until_idle(None, EMBEDDED_DRAIN_TIMEOUT_S):
        log.warning("stopping the embedded coordinator with jobs still active")
    await coordinator.stop()


def advertised_host(store: Any, environ: Mapping[str, str]) -> str:
    """The address of this host (rank 0) that the other ranks reach it at.

    That is the local address of the route to torch's store (the TCPStore
    behind ``store``, else MASTER_ADDR:MASTER_PORT): every rank reaches the
    store, and with torchrun on several nodes the store need not be on rank
    0's node, so its address is not necessarily this one.
    """
    target: tuple[str, int] | None = None
    while store is not None and target is None:
        if type(store).__name__ == "TCPStore" and getattr(store, "host", None):
            target = (str(store.host), int(getattr(store, "port", 0) or 9))
        store = getattr(store, "underlying_store", None)
    if target is None:
        master = environ.get("MASTER_ADDR")
        if not master:
            return "127.0.0.1"
        port = environ.get("MASTER_PORT", "")
        target = (host_literal(master, "MASTER_ADDR"), int(port) if port.isdigit() else 9)
    return route_address(*target)


def _read_address(store: Any, timeout: float) -> dict[str, Any]:
    try:
        store.wait([STORE_KEY], timedelta(seconds=timeout))
        text = store.get(STORE_KEY)
    except Exception as exc:  # noqa: BLE001 - torch raises DistStoreError, RuntimeError, ...
        raise RendezvousTimeoutError(f"rank 0 did not publish asyncoll's coordinator address "
                                     f"in torch's store within {timeout:g} s ({exc}); did "
                                     "rank 0 fail to start?") from exc
    address: dict[str, Any] = json.loads(bytes(text).decode())
    return address

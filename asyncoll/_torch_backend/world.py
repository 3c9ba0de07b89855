"""The asyncoll job behind torch process groups, joined through torch's store.

torch hands a backend a Store and a rank. The default group's rank 0 starts an
embedded asyncoll coordinator on a free port and publishes its address in the
store; every rank reads it and joins asyncoll as usual, so every collective
then runs over asyncoll's own peers and algorithms. The store carries nothing
else. A TorchWorld owns the event loop thread the job runs on and one thread
that completes torch futures (so their callbacks never run on the event loop,
where a callback starting a collective would deadlock); shutdown() joins both.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asyncoll import _auth, aio
from asyncoll._loop_thread import LoopThread
from asyncoll._session import Rendezvous, Session
from asyncoll._settings import EMBEDDED_DRAIN_TIMEOUT_S
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import RendezvousError, RendezvousTimeoutError

log = logging.getLogger("asyncoll")

#: The one key asyncoll writes in torch's store (under the group's own prefix).
STORE_KEY = "asyncoll/coordinator"

_live: set[TorchWorld] = set()
_live_lock = threading.Lock()


class TorchWorld:
    """One asyncoll job, its event loop thread and its future-completing thread."""

    def __init__(self, loop: LoopThread, world: aio.World,
                 coordinator: Coordinator | None) -> None:
        self.loop = loop
        self.world = world
        self._coordinator = coordinator
        self._completions: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._completer = threading.Thread(target=self._complete, daemon=True,
                                           name="asyncoll-torch-futures")
        self._completer.start()
        self._closed = False
        with _live_lock:
            _live.add(self)

    @classmethod
    def join(cls, store: Any, rank: int, size: int, timeout: float) -> TorchWorld:
        """Join (rank 0: host) the asyncoll job of the group that ``store`` belongs to.

        Raises:
            RendezvousError: the coordinator could not start or be reached, or the
                job was not complete within ``timeout`` (RendezvousTimeoutError).
        """
        loop = LoopThread()
        coordinator: Coordinator | None = None
        try:
            if rank == 0:
                coordinator = loop.run(_host_coordinator(_advertised_host(store)))
                published = {"host": coordinator.host, "port": coordinator.port,
                           "job": f"torch-{uuid.uuid4().hex}"}
                store.set(STORE_KEY, json.dumps(published))
            address: dict[str, Any] = _read_address(store, timeout)
            where = Rendezvous(host=str(address["host"]), port=int(address["port"]),
                               job=str(address["job"]), world_size=size, rank=rank,
                               timeout=timeout, may_host=False)
            world = aio.World(loop.run(Session.join(where)))
        except BaseException:
            if coordinator is not None:
                loop.run(coordinator.stop())
            loop.stop()
            raise
        return cls(loop, world, coordinator)

    @property
    def closed(self) -> bool:
        """Whether shutdown() has been called."""
        return self._closed

    def complete_later(self, action: Callable[[], None]) -> None:
        """Run ``action`` (completing a torch future) on the completion thread.

        After shutdown, when that thread is gone, it runs here instead.
        """
        if self._closed and not self._completer.is_alive():
            action()
        else:
            self._completions.put(action)

    def shutdown(self) -> None:
        """Leave the job, stop the coordinator this rank hosts, join both threads.

        Operations still running fail with an asyncoll error. Never raises.
        """
        with _live_lock:
            if self._closed:
                return
            self._closed = True
            _live.discard(self)
        try:
            self.loop.run(self._close())
        except Exception:  # noqa: BLE001 - shutdown must always finish
            log.exception("asyncoll: error while leaving the job")
        self.loop.stop()
        self._completions.put(None)
        if threading.current_thread() is not self._completer:
            self._completer.join()
        # Anything queued after the thread's last look runs here.
        while not self._completions.empty():
            action = self._completions.get()
            if action is not None:
                action()

    async def _close(self) -> None:
        await self.world.destroy()
        if self._coordinator is not None:
            # Peers still finishing must be able to leave before the coordinator goes.
            await self._coordinator.wait_until_idle(self.world.session.job,
                                                    EMBEDDED_DRAIN_TIMEOUT_S)
            await self._coordinator.stop()

    def _complete(self) -> None:
        while True:
            action = self._completions.get()
            if action is None:
                return
            try:
                action()
            except Exception:  # noqa: BLE001 - a callback's error must not stop the thread
                log.exception("asyncoll: a torch future callback raised")


def _advertised_host(store: Any) -> str:
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
        master = os.environ.get("MASTER_ADDR")
        if not master:
            return "127.0.0.1"
        port = os.environ.get("MASTER_PORT", "")
        target = (master, int(port) if port.isdigit() else 9)
    try:
        family = socket.getaddrinfo(*target, type=socket.SOCK_DGRAM)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return target[0]


async def _host_coordinator(host: str) -> Coordinator:
    coordinator = Coordinator(host, 0, _auth.token_from_environment())
    try:
        await coordinator.start()
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise RendezvousError(f"rank 0 could not start asyncoll's coordinator on "
                                  f"{host}: {exc}") from exc
        # The advertised address is not one of this host's (NAT, a container):
        # listen everywhere, advertise it all the same.
        coordinator = Coordinator("0.0.0.0", 0, _auth.token_from_environment())
        await coordinator.start()
        coordinator.host = host
    return coordinator


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


@atexit.register
def _shutdown_at_exit() -> None:
    # A program that never calls destroy_process_group still leaves the job,
    # and no thread of ours is left to complete a torch future mid-exit.
    with _live_lock:
        worlds = list(_live)
    for world in worlds:
        world.shutdown()

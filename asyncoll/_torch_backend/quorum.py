"""The groups of one torchft replica: one asyncoll job per quorum, one coordinator per process.

torchft's Manager calls ``configure(store_addr, replica_id, rank, world_size)``
on every quorum change, with a new prefix of some replica's TCPStore each
time. Each call here joins a new asyncoll job through that store, as the
torch backend's default group does (asyncoll._torch_backend.world), and the
group of the quorum before is aborted and left first, by the caller: its
sockets, threads and shared memory go then.

Where the coordinator lives: each process hosts at most one, started the
first time it is rank 0 of a quorum and kept until the process group is shut
down (or the process exits); the quorums it is rank 0 of meet there, each as
a job of its own. So a quorum's coordinator is in one of its own members:
its life is tied to no replica outside the quorum, and when its process
dies, the quorum it served is broken anyway (a member is lost) and the next
quorum meets on a survivor's. Starting a coordinator per quorum would make
every configure on rank 0 wait for the old one to drain; a standing daemon
(at the lighthouse, say) would be one more process to deploy and keep alive,
and one address every replica must be told: ASYNCOLL's standing
coordinators in the environment are still honoured as fallbacks.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch

from asyncoll._runtime import hosting
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.settings import settings_at_join
from asyncoll._torch_backend.process_group import AsyncollProcessGroup
from asyncoll._torch_backend.registration import check_torch_version
from asyncoll._torch_backend.world import TorchWorld, advertised_host, drain_and_stop
from asyncoll.coordinator.server import Coordinator

log = logging.getLogger("asyncoll")

class Quorums:
    """The asyncoll groups one torchft replica makes, one per quorum, and its coordinator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._coordinator: Coordinator | None = None

    def group(self, store: Any, rank: int, size: int, timeout: float) -> AsyncollProcessGroup:
        """The group of rank ``rank`` of ``size`` of the quorum whose store (prefix) is
        ``store``; rank 0 publishes this process's coordinator there.

        Raises:
            RendezvousError: the coordinator could not start or be reached, or the
                quorum was not complete within ``timeout`` (RendezvousTimeoutError).
        """
        check_torch_version(torch.__version__)
        standing = self._hosted(store) if rank == 0 else None
        world = TorchWorld.join(store, rank, size, timeout, standing=standing)
        return AsyncollProcessGroup(world, world.world, owns_world=True)

    def close(self) -> None:
        """Stop the coordinator, once the others left its jobs (or after the drain's
        bound). Never raises."""
        with self._lock:
            coordinator, self._coordinator = self._coordinator, None
        if coordinator is None:
            return
        shared = runtime()
        shared.forget_at_exit(self.close)
        try:
            shared.run(drain_and_stop(coordinator))
        except Exception:  # noqa: BLE001 - shutdown must always finish
            log.exception("asyncoll: error while stopping the torchft coordinator")

    def _hosted(self, store: Any) -> Coordinator:
        """This process's coordinator, started at the first call, where the store's
        members reach it."""
        with self._lock:
            if self._coordinator is None:
                shared = runtime()
                settings = settings_at_join()
                self._coordinator = shared.run(hosting.host_advertised(
                    advertised_host(store, settings.environment), settings.token,
                    settings.tls))
                shared.at_exit(self.close)
            return self._coordinator

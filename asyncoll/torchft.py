"""asyncoll as torchft's process group: ``ProcessGroupAsyncoll`` for torchft's ``Manager``.

Install with ``pip install "asyncoll[torchft]"``, then hand the Manager an
asyncoll group where a torchft program would hand it ``ProcessGroupGloo``::

    from asyncoll.torchft import ProcessGroupAsyncoll

    manager = Manager(pg=ProcessGroupAsyncoll(timeout=timedelta(seconds=10)), ...)

Each quorum torchft forms gets a group of its own, made through the store
torchft names for it (asyncoll._torch_backend.quorum says where its
coordinator lives, and why); the group of the quorum before is aborted and
left first, on every rank: its sockets, threads and shared memory go then.
A member's loss fails the quorum's operations at once, with torch's errors,
so the Manager throws the step away and forms the next quorum.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from torchft.process_group import ProcessGroupWrapper

from asyncoll._torch_backend.quorum import Quorums

__all__ = ["ProcessGroupAsyncoll"]

_Wrapper: Any = ProcessGroupWrapper


class ProcessGroupAsyncoll(_Wrapper):  # type: ignore[misc]
    """A reconfigurable torchft process group whose collectives are asyncoll's.

    Args:
        timeout: the deadline of making each quorum's group, and of reaching
            torchft's store.
    """

    #: The current quorum's group (torchft's wrapper sets it), or None.
    _pg: Any

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._quorums = Quorums()

    def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
        # torchft's hook: ProcessGroupWrapper.configure aborted the last group already.
        return self._quorums.group(store, rank, world_size, self._timeout.total_seconds())

    def getBackendName(self) -> str:
        """The backend's name, "torchft-asyncoll"."""
        return "torchft-asyncoll"

    def shutdown(self) -> None:
        """Leave the current quorum's group and stop this process's coordinator."""
        group, self._pg = self._pg, None
        if group is not None:
            group.shutdown()
        self._quorums.close()

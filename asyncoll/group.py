"""AsyncProcessGroup: the collectives of one group, as coroutines.

This layer numbers each group's operations in call order (the frames' seq),
runs them one after another so they complete in order, puts every operation
under a deadline, adapts the caller's arrays, and makes the first failure
sticky, as gloo's pairs do: the group is broken on every member (the mesh
sends ABORT frames) and later calls raise GroupBrokenError from it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np

from asyncoll._algorithms.ops import check_op, coerce_op
from asyncoll._algorithms.ring import ring_all_reduce, ring_scratch_bytes
from asyncoll._compat import timeout as timeout_after
from asyncoll._session import Session
from asyncoll._tensors import as_buffer
from asyncoll.errors import (
    AsyncollError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
)
from asyncoll.types import ReduceOp

T = TypeVar("T")


def seconds(timeout: float | timedelta | None, default: float) -> float:
    """A timeout given as seconds or a timedelta (torch's way), in seconds.

    Raises:
        ConfigurationError: it is not a positive finite duration.
    """
    if timeout is None:
        return default
    value = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value < math.inf):
        raise ConfigurationError(f"timeout must be a positive number of seconds or a "
                                 f"timedelta, got {timeout!r}")
    return float(value)


class AsyncProcessGroup:
    """A set of ranks that run collectives together (torch's ProcessGroup).

    Every rank of the job holds one for each group created, members or not;
    on a non-member, :attr:`rank` is -1 and collectives refuse to run.
    """

    def __init__(self, session: Session, group_id: int, ranks: Sequence[int],
                 timeout: float) -> None:
        self._session = session
        self.group_id = group_id
        #: The members' global ranks, in group-rank order.
        self.ranks: tuple[int, ...] = tuple(ranks)
        self.timeout = timeout
        self._seq = 0
        self._tail: asyncio.Future[None] | None = None
        # Reused across operations (they run one at a time): allocating a large
        # buffer per call costs a page fault per 4 KiB touched.
        self._scratch = np.empty(0, dtype=np.uint8)

    @property
    def rank(self) -> int:
        """This process's rank within the group, or -1 when it is not a member."""
        me = self._session.rank
        return self.ranks.index(me) if me in self.ranks else -1

    @property
    def size(self) -> int:
        """The number of ranks in the group."""
        return len(self.ranks)

    @property
    def global_rank(self) -> int:
        """This process's rank in the whole job."""
        return self._session.rank

    @property
    def is_member(self) -> bool:
        """Whether this process belongs to the group."""
        return self._session.rank in self.ranks

    def __repr__(self) -> str:
        return f"<AsyncProcessGroup {self.group_id} ranks={list(self.ranks)}>"

    # -- collectives ---------------------------------------------------------------

    def all_reduce(self, tensor: Any, op: Any = ReduceOp.SUM,
                   timeout: float | timedelta | None = None) -> Coroutine[Any, Any, None]:
        """Reduce ``tensor`` across the group, in place, on every member.

        The arguments are checked at once, in the caller's thread, so bad input
        raises before anything is sent; the returned coroutine does the work.

        Args:
            tensor: a numpy array or CPU torch tensor; holds the result afterwards,
                bitwise identical on every member.
            op: a ReduceOp (torch's ReduceOp is accepted too).
            timeout: seconds or a timedelta; the group's timeout by default.

        Raises:
            ConfigurationError: bad tensor, dtype/op pair or timeout; not a member.
            CollectiveError: the operation failed (see its subclasses).
        """
        reduce_op = coerce_op(op)
        self._check_member("all_reduce")
        buffer = as_buffer(tensor, "all_reduce")
        check_op(reduce_op, buffer.flat.dtype)
        limit = seconds(timeout, self.timeout)

        async def run(seq: int) -> None:
            flat = buffer.flat
            scratch = self._scratch_of(ring_scratch_bytes(flat.size, flat.itemsize, self.size))
            await ring_all_reduce(self._session.mesh, self.ranks, self.group_id, seq, flat,
                                  reduce_op, scratch)
            buffer.write_back()

        return self._run("all_reduce", limit, run)

    async def barrier(self, timeout: float | timedelta | None = None) -> None:
        """Wait until every member has called barrier, after this rank's earlier operations.

        Raises:
            ConfigurationError: this process is not a member.
            CollectiveError: a member left, or the deadline passed.
        """
        self._check_member("barrier")
        limit = seconds(timeout, self.timeout)

        async def run(seq: int) -> None:
            await self._session.barrier(self.group_id, limit)

        await self._run("barrier", limit, run)

    # -- plumbing --------------------------------------------------------------------

    def _scratch_of(self, nbytes: int) -> np.ndarray:
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch

    def _check_member(self, what: str) -> None:
        if not self.is_member:
            raise ConfigurationError(f"rank {self._session.rank} called {what} on group "
                                     f"{self.group_id} (ranks {list(self.ranks)}), which it "
                                     "is not a member of")

    async def _run(self, what: str, limit: float,
                   body: Callable[[int], Awaitable[None]]) -> None:
        # The sequence number and the place in line are taken before the first
        # await, so operations run in the order they were called.
        self._seq += 1
        seq = self._seq
        self._session.ops += 1
        previous, done = self._tail, asyncio.get_running_loop().create_future()
        self._tail = done
        mesh = self._session.mesh
        try:
            if previous is not None:
                await previous  # always resolved with None, in a finally
            first = mesh.group_error(self.group_id)
            if first is not None:
                raise GroupBrokenError(f"group {self.group_id} (ranks {list(self.ranks)}) "
                                       f"failed earlier ({first}); destroy it and create a "
                                       "new one") from first
            try:
                async with timeout_after(limit):
                    await body(seq)
            except TimeoutError:
                raise CollectiveTimeoutError(
                    f"{what} #{seq} on group {self.group_id} (ranks {list(self.ranks)}) did "
                    f"not complete within {limit:g} s") from None
        except GroupBrokenError:
            raise
        except AsyncollError as exc:
            if not isinstance(exc, ConfigurationError):
                # The first failure poisons the group here and on its other members.
                mesh.abort_group(self.group_id, seq, exc, self.ranks)
            raise
        except asyncio.CancelledError:
            # Peers may be waiting for this rank's part of the operation.
            mesh.abort_group(self.group_id, seq, CollectiveError(
                f"{what} #{seq} on group {self.group_id} was cancelled on rank "
                f"{self._session.rank}"), self.ranks)
            raise
        finally:
            done.set_result(None)

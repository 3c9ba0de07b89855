"""GroupCore: what every collective of a group shares.

This layer numbers each group's operations in call order (the frames' seq),
runs them one after another so they complete in order, puts every operation
under a deadline, tells the data plane which operation runs (its
fingerprint), and makes the first failure sticky, as gloo's pairs do: the
group is broken on every member (the mesh sends ABORT frames) and later
calls raise GroupBrokenError from it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from asyncoll._group import arguments as check
from asyncoll._algorithms import selection
from asyncoll._algorithms.ops import coerce_op
from asyncoll._algorithms.team import Team
from asyncoll._compat import timeout as timeout_after
from asyncoll._group.context import Membership
from asyncoll._group.point_to_point import Messages
from asyncoll._wire.dtypes import dtype_code
from asyncoll._wire.frames import Fingerprint
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import (
    AsyncollError,
    ClosedError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
    broken_by,
    timed_out_words,
)
from asyncoll.types import ReduceOp

#: The coroutine a collective method returns.
Operation = Coroutine[Any, Any, None]


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


class GroupCore:
    """A group's members, its operations in call order, their deadlines and failures.

    AsyncProcessGroup adds the collectives; this is what they share.
    """

    def __init__(self, session: Membership, group_id: int, ranks: Sequence[int],
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
        self._messages = Messages(session, group_id, self.ranks)
        session.faults.register(group_id, self.ranks)

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

    # -- plumbing --------------------------------------------------------------------------

    def _reduce_op(self, op: Any, what: str) -> ReduceOp:
        reduce_op = coerce_op(op)
        self._check_member(what)
        return reduce_op

    def _choose(self, collective: str, nbytes: int, algorithm: str | None) -> str:
        forced = algorithm or self._session.forced_algorithms.get(collective)
        return selection.choose(collective, nbytes, self.size, forced)

    def _root_list(self, items: Sequence[Any] | None, root: int, name: str,
                   what: str) -> list[Any] | None:
        if self.rank == root:
            return check.outputs(check.tensor_list(items, self.size, name, what), name, what)
        if items is not None:
            raise ConfigurationError(f"{what}: {name} must be None on rank {self.global_rank}, "
                                     f"which is not dst {self.ranks[root]}")
        return None

    def _scratch_of(self, dtype: np.dtype, count: int) -> np.ndarray:
        nbytes = count * dtype.itemsize
        if self._scratch.nbytes < nbytes:
            self._scratch = np.empty(nbytes, dtype=np.uint8)
        return self._scratch[:nbytes].view(dtype)

    def _check_member(self, what: str) -> None:
        if not self.is_member:
            raise ConfigurationError(f"rank {self._session.rank} called {what} on group "
                                     f"{self.group_id} (ranks {list(self.ranks)}), which it "
                                     "is not a member of")

    def _run(self, what: str, timeout: float | timedelta | None,
             body: Callable[[Team], Awaitable[None]], fingerprint: Fingerprint) -> Operation:
        return self._in_turn(what, seconds(timeout, self.timeout), body, fingerprint)

    async def _in_turn(self, what: str, limit: float, body: Callable[[Team], Awaitable[None]],
                       fingerprint: Fingerprint) -> None:
        # The sequence number and the place in line are taken before the first
        # await, so operations run in the order they were called.
        self._seq += 1
        seq = self._seq
        self._session.ops += 1
        previous, done = self._tail, asyncio.get_running_loop().create_future()
        self._tail = done
        mesh, faults = self._session.mesh, self._session.faults
        try:
            if previous is not None:
                await previous  # always resolved with None, in a finally
            self._session.check_open(f"{what} on group {self.group_id}")
            first = faults.error(self.group_id)
            if first is not None:
                raise broken_by(f"group {self.group_id} (ranks {list(self.ranks)})",
                                   first) from first
            team = Team(mesh, self.ranks, self.group_id, seq, fingerprint=fingerprint)
            try:
                async with timeout_after(limit) as deadline:
                    faults.begin(self.group_id, seq, fingerprint)
                    await body(team)
                    pending = team.check_neighbours()
                    if pending is not None:
                        await pending
            except TimeoutError:
                if not deadline.expired():
                    raise  # another deadline's error (the coordinator's), not this one's
                silent = team.waiting_for()
                raise CollectiveTimeoutError(
                    f"{what} #{seq} on group {self.group_id} (ranks {list(self.ranks)}) did "
                    f"not complete within {limit:g} s; still waiting for "
                    f"{_ranks_phrase(silent)}. {timed_out_words(limit)}") from None
            faults.complete(self.group_id, seq)
        except (GroupBrokenError, ClosedError):
            raise
        except AsyncollError as exc:
            if not isinstance(exc, ConfigurationError):
                # The first failure poisons the group here and on its other members.
                faults.abort(self.group_id, seq, exc, self.ranks)
            raise
        except asyncio.CancelledError:
            # Peers may be waiting for this rank's part of the operation.
            faults.abort(self.group_id, seq, CollectiveError(
                f"{what} #{seq} on group {self.group_id} was cancelled on rank "
                f"{self._session.rank}"), self.ranks)
            raise
        finally:
            done.set_result(None)


def fingerprint_of(operation: Kind, dtype: np.dtype | None = None,
                 op: ReduceOp | None = None, root: int = -1, count: int = 0,
                 algorithm: int = 0) -> Fingerprint:
    return Fingerprint(operation, 0 if dtype is None else dtype_code(dtype),
                       0 if op is None else op.value + 1, algorithm, root, count)


def algorithm_code(collective: str, name: str) -> int:
    """The algorithm's number in the fingerprint: ranks must agree on it too."""
    return selection.ALGORITHMS[collective].index(name) + 1


def _ranks_phrase(ranks: list[int]) -> str:
    if not ranks:
        return "no rank's data (the time went in this rank's own work)"
    return "data from rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks))

"""GroupCore: what every collective of a group shares.

This layer numbers each group's operations in call order (the frames' seq),
runs them one after another so they complete in order, puts every operation
under a deadline, tells the data plane which operation runs (its
fingerprint), and makes the first failure sticky, as gloo's pairs do: the
group is broken on every member (the mesh sends ABORT frames) and later
calls raise GroupBrokenError from it.

A collective is an :class:`Operation`: a coroutine the event loop runs, and,
where the group's fast path takes it (a shared-memory arena on one host,
direct links across hosts: asyncoll._group.fast_path), also something the
blocking API can run in its own thread with
:meth:`Operation.run_here`, skipping the hop to the loop thread and back.
Which algorithm runs is decided when the call is made, from what every rank
knows alike (the collective, its size, the group), so ranks always agree;
only the thread that runs a fast-path operation differs: the caller's when no
earlier operation of the group is still on the loop, otherwise a thread of
the session's, in turn behind them. A blocking call that repeats the
signature of an earlier fast-path call does not make an Operation again: the
group remembers how that one ran (:meth:`GroupCore.remember`) and
:meth:`GroupCore.run_again` runs it on the new arrays, through the same
in-thread runner.
"""

from __future__ import annotations

import asyncio
import collections.abc
import functools
import math
from collections.abc import Awaitable, Callable, Coroutine, Generator, Hashable, Sequence
from datetime import timedelta
from typing import Any, cast

import numpy as np

from asyncoll._group import arguments as check
from asyncoll._algorithms.link_team import LinkTeam, run_here
from asyncoll._group.fast_path import FastPath, fast_path_of
from asyncoll._group.links_path import LinksStep
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
    timed_out_words,
)
from asyncoll.types import ReduceOp

#: What runs an operation on the group's fast path, in whichever thread: it is
#: given the path's step (asyncoll._group.arena_path.ArenaStep or
#: asyncoll._group.links_path.LinksStep).
Here = Callable[[Any], None]
#: What runs a remembered call again (GroupCore.remember): given the path's
#: step and the call's arrays (one flat array, or a tuple of them).
Again = Callable[[Any, Any], None]
#: Remembered calls per group (GroupCore.remember), forgotten all at once past it.
_REPEATS = 256


class _Repeat:
    """A remembered fast-path call: its name, its fingerprint and how to run it again."""

    __slots__ = ("what", "fingerprint", "run", "need")

    def __init__(self, what: str, fingerprint: Fingerprint, run: Again, need: int) -> None:
        self.what = what
        self.fingerprint = fingerprint
        self.run = run
        #: The bytes its path must have room for (see Operation.need).
        self.need = need


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
        #: How its errors name it.
        self._named = f"group {group_id} (ranks {list(self.ranks)})"
        self.timeout = timeout
        self._seq = 0
        self._tail: asyncio.Future[None] | None = None
        # Reused across operations (they run one at a time): allocating a large
        # buffer per call costs a page fault per 4 KiB touched.
        self._scratch = np.empty(0, dtype=np.uint8)
        self._messages = Messages(session, group_id, self.ranks)
        #: The group's way of running operations in the calling thread.
        self._fast: FastPath = fast_path_of(session, group_id, self.ranks)
        # The team of operations over direct links, made once (they run one at a time).
        self._link_team: LinkTeam | None = None
        # Fast-path calls to run again without making an Operation (see remember).
        self._repeats: dict[Hashable, _Repeat] = {}
        # Choices already made, by (collective, bytes, algorithm asked, path's capacity):
        # blocking calls repeat the same few, and each microsecond shows.
        self._choices: dict[tuple[str, int, str | None, int], str] = {}
        # Operations handed to the loop, and those of them finished: written
        # by one thread each (the caller's, the loop's), so no lock is needed.
        self._handed = 0
        self._finished = 0
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
        """The algorithm for ``collective`` moving ``nbytes`` (a size every member agrees on)."""
        fast = self._fast
        capacity = fast.capacity
        key = (collective, nbytes, algorithm, capacity)
        name = self._choices.get(key)
        if name is None:
            forced = algorithm or self._session.forced_algorithms.get(collective)
            name = selection.choose(collective, nbytes, self.size, forced, fast.algorithm,
                                    capacity)
            if len(self._choices) > 1024:
                self._choices.clear()
            self._choices[key] = name
        return name

    def _over_transport(self, collective: str, name: str, nbytes: int) -> str:
        """The algorithm over the transport: ``name``, or the one the arena stands in for.

        An arena operation keeps one ready in case the group's arena cannot
        be set up (every member then learns so, and runs it).
        """
        if name not in selection.FAST_PATHS:
            return name
        return selection.socket_choice(collective, nbytes, self.size)

    def _fast_body(self, name: str, here: Here, body: Callable[[Team], Awaitable[None]],
                   on_links: Here | None = None) -> Here | None:
        """What runs an operation whose algorithm is ``name`` on the fast path, if it is one.

        On the arena it is ``here``, the arena's own algorithm; over direct
        links it is ``on_links`` where the collective has one written for
        them, else ``body`` itself, the transport's algorithm, run in this
        thread over the links (asyncoll._algorithms.link_team).
        """
        if name == selection.ARENA:
            return here
        if name == selection.LINKS:
            return on_links or (lambda step: self._over_links(step, body))
        return None

    def _over_links(self, step: LinksStep, body: Callable[[Team], Awaitable[None]]) -> None:
        """Run the transport's algorithm ``body`` to its end over the group's direct links."""
        team = self._link_team
        if team is None or team.links is not step.links:
            team = self._link_team = LinkTeam(step.links, self.ranks, step.me)
        run_here(cast(Coroutine[Any, Any, None], body(cast(Team, team.again()))))
        team.check_neighbours()

    def _repeatable(self, operation: Operation, name: str,
                    timeout: float | timedelta | None, algorithm: str | None, key: Hashable,
                    on_arena: Again,
                    over_transport: Callable[[Team, Any], Awaitable[None]],
                    on_links: Again | None = None) -> Operation:
        """``operation``, remembered under ``key`` to run again (see :meth:`remember`)
        when it runs on a fast path with the group's timeout and the algorithm chosen
        by size.

        ``on_arena`` runs it on the arena's step and arrays like the call's;
        ``over_transport`` is the transport's algorithm on such arrays, which
        direct links run unless ``on_links`` (written for them) is given.
        """
        if timeout is None and algorithm is None:
            if name == selection.ARENA:
                self.remember(key, operation.what, operation.fingerprint, on_arena,
                              operation.need)
            elif name == selection.LINKS:
                self.remember(key, operation.what, operation.fingerprint,
                              on_links or (lambda step, arrays: self._over_links(
                                  step, lambda team: over_transport(team, arrays))),
                              operation.need)
        return operation

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
             body: Callable[[Team], Awaitable[None]], fingerprint: Fingerprint,
             here: Here | None = None, need: int = 0) -> Operation:
        """The operation: ``body`` over the transport, or ``here`` on the fast path if
        given (and the path has room for ``need`` bytes, the size it was chosen by)."""
        return Operation(self, what, seconds(timeout, self.timeout), body, fingerprint, here,
                         need)

    def _run_here(self, operation: Operation) -> bool:
        """Run a fast-path operation in the calling thread, if nothing of the group is on
        the loop.

        Returns False, having done nothing, where it must go to the loop instead.
        """
        assert operation.here is not None
        if operation.need > self._fast.room:
            return False
        return self._here(operation.what, operation.fingerprint, operation.limit,
                          _with_step, operation.here)

    def remember(self, key: Hashable, what: str, fingerprint: Fingerprint,
                 run: Again, need: int) -> None:
        """Keep how to run again, in the calling thread, a fast-path call keyed ``key``.

        ``key`` must name everything the operation was made from besides the
        array itself (collective, dtype, element count, op, root), for calls
        with the group's timeout and the algorithm chosen by size: another
        call with the same key makes the same fingerprint and algorithm, so
        :meth:`run_again` may skip making an Operation (an MPI persistent
        collective, without the user having to ask for one).
        """
        if key not in self._repeats:
            if len(self._repeats) >= _REPEATS:
                self._repeats.clear()
            self._repeats[key] = _Repeat(what, fingerprint, run, need)

    def run_again(self, key: Hashable, arrays: Any) -> bool:
        """Run the call remembered under ``key`` on ``arrays``, here, as :meth:`_run_here`
        would.

        ``arrays`` are the call's as the collective's remembering said (1-D
        C-contiguous arrays of the dtypes and sizes the key names; those
        written into writable). Returns False, having done nothing, when no
        call was remembered under ``key`` or the operation must go to the loop.
        """
        repeat = self._repeats.get(key)
        if repeat is None or repeat.need > self._fast.room:
            return False
        return self._here(repeat.what, repeat.fingerprint, self.timeout, repeat.run, arrays)

    def _here(self, what: str, fingerprint: Fingerprint, limit: float, run: Again,
              arrays: Any) -> bool:
        """Run ``run(step, arrays)`` on the fast path in the calling thread (see
        :meth:`_run_here`)."""
        if not self._fast.ready or self._handed != self._finished:
            return False
        session, group_id = self._session, self.group_id
        # Numbered, then refused on a closed session or a broken group, as on the loop.
        self._seq += 1
        seq = self._seq
        session.ops += 1
        session.check_open(what)
        faults = session.faults
        refused = faults.refusal(group_id, seq, self._named)
        if refused is not None:
            raise refused
        # Taking note is safe from this thread; checking frames kept early is the loop's.
        faults.begin(group_id, seq, fingerprint, scan=False)
        mesh = session.mesh
        if mesh.has_early:
            session.call_soon(faults.scan, group_id)
        try:
            self._on_fast_path(what, seq, limit, run, arrays, fingerprint)
        except (GroupBrokenError, ClosedError):
            raise
        except AsyncollError as exc:
            if not isinstance(exc, ConfigurationError):
                session.call_soon(faults.abort, group_id, seq, exc, self.ranks)
            raise
        except BaseException:
            session.call_soon(faults.abort, group_id, seq, self._cancelled(what, seq),
                              self.ranks)
            raise
        faults.complete(group_id, seq, scan=False)
        if mesh.has_early:
            session.call_soon(faults.scan, group_id)
        return True

    def _on_fast_path(self, what: str, seq: int, limit: float, run: Again, arrays: Any,
                      fingerprint: Fingerprint, step: list[Any] | None = None) -> None:
        """Run ``run(step, arrays)`` on the group's fast path in this thread (the caller's
        or the session's).

        ``step`` receives the step as soon as it exists, for a canceller.
        """
        fast = self._fast
        # An untimed try first: a timed acquire costs several times as much.
        if not fast.lock.acquire(False) and not fast.lock.acquire(timeout=limit):
            raise CollectiveTimeoutError(
                f"{what} #{seq} on group {self.group_id} waited {limit:g} s for another "
                f"thread of this process to finish its operation on the group. "
                f"{timed_out_words(limit)}")
        try:
            current = fast.step(fingerprint, limit)
            if step is not None:
                step.append(current)
            try:
                run(current, arrays)
            except (GroupBrokenError, ClosedError, ConfigurationError):
                raise
            except BaseException as exc:
                behind = fast.expired(exc)
                error: BaseException | None = fast.failure(exc)
                if behind is not None:
                    error = CollectiveTimeoutError(
                        f"{what} #{seq} on group {self.group_id} (ranks {list(self.ranks)}) "
                        f"did not complete within {limit:g} s; still waiting for "
                        f"{_ranks_phrase([self.ranks[i] for i in behind])}. "
                        f"{timed_out_words(limit)}")
                fast.abandon(current, error or exc)
                cause = error.__cause__ if error is not None else None
                if isinstance(error, GroupBrokenError) and isinstance(cause, AsyncollError):
                    # The path learned of an earlier failure the group layer has not
                    # heard of: make it the group's sticky error, on every member.
                    self._session.call_soon(self._session.faults.abort, self.group_id, seq,
                                            cause, self.ranks)
                if error is not None:
                    raise error from cause
                raise
        finally:
            fast.lock.release()

    async def _in_turn(self, operation: Operation) -> None:
        what, limit, fingerprint = operation.what, operation.limit, operation.fingerprint
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
            refused = faults.refusal(self.group_id, seq, self._named)
            if refused is not None:
                raise refused
            team = Team(mesh, self.ranks, self.group_id, seq, fingerprint=fingerprint)
            faults.begin(self.group_id, seq, fingerprint)
            fast = self._fast
            if operation.here is not None and fast.undecided:
                await self._under_deadline(what, seq, limit, team, fast.set_up)
                team = team.phase(2)  # the two phases before were the set-up's
            # An operation the path has no room for (an arena's slot smaller than
            # the one it was chosen by) runs the transport's algorithm, on every member.
            if operation.here is not None and fast.ready and operation.need <= fast.room:
                step: list[Any] = []
                try:
                    await self._session.run_blocking(lambda: self._on_fast_path(
                        what, seq, limit, _with_step, operation.here, fingerprint, step),
                        self.group_id)
                except asyncio.CancelledError:
                    if step:
                        step[0].cancelled = True
                    raise
            else:
                await self._under_deadline(what, seq, limit, team, operation.body)
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
            faults.abort(self.group_id, seq, self._cancelled(what, seq), self.ranks)
            raise
        finally:
            if operation.handed:
                self._finished += 1
            done.set_result(None)

    async def _under_deadline(self, what: str, seq: int, limit: float, team: Team,
                              body: Callable[[Team], Awaitable[None]]) -> None:
        """Run ``body(team)`` and the neighbour check within ``limit`` seconds."""
        try:
            async with timeout_after(limit) as deadline:
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

    def _cancelled(self, what: str, seq: int) -> CollectiveError:
        return CollectiveError(f"{what} #{seq} on group {self.group_id} was cancelled on rank "
                               f"{self._session.rank}")


class Operation(collections.abc.Coroutine):  # type: ignore[type-arg]
    """One collective call, made and checked, not yet run.

    It is a coroutine: awaiting it (or handing it to the loop) runs it in
    the group's turn. An operation the group's arena takes can instead run
    in the calling thread with :meth:`run_here`, the blocking API's fast path.
    """

    def __init__(self, core: GroupCore, what: str, limit: float,
                 body: Callable[[Team], Awaitable[None]], fingerprint: Fingerprint,
                 here: Here | None, need: int = 0) -> None:
        self.what = what
        self.limit = limit
        self.body = body
        self.fingerprint = fingerprint
        #: The arena algorithm chosen for it, or None: the transport's ``body``.
        self.here = here
        #: The bytes it was chosen for the fast path by: it runs there only where
        #: the path has room for them (FastPath.room), else ``body``.
        self.need = need
        #: Whether the caller counted it as handed to the loop (see :meth:`to_loop`).
        self.handed = False
        self._core = core
        self._coroutine: Coroutine[Any, Any, None] | None = None

    def run_here(self) -> bool:
        """Run it now, in this thread, if it is an arena operation that may; else False.

        It may when the group's arena is set up and none of the group's
        operations is still on the loop (they come first). Raises what the
        operation raises; afterwards it must not be awaited.
        """
        return self.here is not None and self._core._run_here(self)

    def to_loop(self) -> Operation:
        """Count it as on its way to the loop (call in the caller's thread, before handing it).

        Until it finishes there, later operations of the group do not run here.
        """
        self.handed = True
        self._core._handed += 1
        return self

    def _started(self) -> Coroutine[Any, Any, None]:
        if self._coroutine is None:
            self._coroutine = self._core._in_turn(self)
        return self._coroutine

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if val is None and tb is None:
            return self._started().throw(typ)
        return self._started().throw(typ, val, tb)

    def close(self) -> None:
        if self._coroutine is not None:
            self._coroutine.close()
        elif self.handed:
            self._core._finished += 1  # handed, never started: it will not finish

    def __await__(self) -> Generator[Any, None, None]:
        return self._started().__await__()

    def __repr__(self) -> str:
        return f"<Operation {self.what} on {self._core!r}>"


@functools.lru_cache(maxsize=4096)
def fingerprint_of(operation: Kind, dtype: np.dtype | None = None,
                 op: ReduceOp | None = None, root: int = -1, count: int = 0,
                 algorithm: int = 0) -> Fingerprint:
    return Fingerprint(operation, 0 if dtype is None else dtype_code(dtype),
                       0 if op is None else op.value + 1, algorithm, root, count)


def algorithm_code(collective: str, name: str) -> int:
    """The algorithm's number in the fingerprint: ranks must agree on it too."""
    return selection.ALGORITHMS[collective].index(name) + 1


def _with_step(step: Any, here: Here) -> None:
    """Run an Operation's ``here`` as GroupCore._here runs a remembered call: ``run(step,
    arrays)``, where the "arrays" are the operation's own ``here``."""
    here(step)


def _ranks_phrase(ranks: list[int]) -> str:
    if not ranks:
        return "no rank's data (the time went in this rank's own work)"
    return "data from rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks))

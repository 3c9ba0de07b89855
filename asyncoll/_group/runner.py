"""Runner: the lifecycle of a group's operations, in whichever thread runs them.

Every operation is numbered in call order (the frames' seq), refused on a
closed session or a broken group, announced to the data plane by its
fingerprint, run under its deadline, and completed; its first failure
breaks the group on every member (the mesh sends ABORT frames), so later
calls raise GroupBrokenError from it, as gloo's pairs do. Two forms share
these steps: :meth:`Runner.here` runs an operation on the group's fast path
in the calling thread, and :meth:`Runner.in_turn` runs one as a coroutine
on the loop, behind the group's earlier operations (on the fast path in
the group's own thread, or over the transport).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asyncoll._algorithms.team import Team
from asyncoll._compat import timeout as timeout_after
from asyncoll._defaults import SAMPLE_EVERY
from asyncoll._group.closing import drop_frames
from asyncoll._group.context import Membership
from asyncoll._group.fast_path import FastPath
from asyncoll._group.plan import Kernel, Plan
from asyncoll._group.recorder import ENDED, PATH, STARTED
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import (
    AsyncollError,
    ClosedError,
    CollectiveError,
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
    timed_out_words,
)


class Runner:
    """Runs one group's operations in call order, each under its deadline.

    Args:
        session: this process's membership in the job.
        group_id: the group.
        ranks: its members' global ranks, in group-rank order.
        fast: the group's way of running operations in the calling thread.
    """

    # What every call reads and writes, in slots: the compiled entry reads and writes
    # them there itself (asyncoll/_native/field.c).
    __slots__ = ("_seq", "handed", "finished", "run_fingerprint", "__dict__", "__weakref__")

    def __init__(self, session: Membership, group_id: int, ranks: tuple[int, ...],
                 fast: FastPath) -> None:
        self._session = session
        self._group_id = group_id
        self._ranks = ranks
        self._fast = fast
        self._early = session.mesh.early_count
        #: How its errors name the group.
        self._named = f"group {group_id} (ranks {list(ranks)})"
        self._seq = 0
        self._tail: asyncio.Future[None] | None = None
        # Operations handed to the loop, and those of them finished: written
        # by one thread each (the caller's, the loop's), so no lock is needed.
        self.handed = 0
        self.finished = 0
        #: This rank's flight recorder (None: off), told of every operation's steps.
        self.recorder = session.recorder
        #: The fingerprint of the recorder's run open for this group (RunSource).
        self.run_fingerprint: Fingerprint | None = None
        #: Why the group refuses operations, once it is closed here (None: open).
        self.closed: str | None = None
        if self.recorder is not None:
            self.recorder.add_group(group_id, ranks)

    def __repr__(self) -> str:
        return self._named

    def to_loop(self, plan: Plan) -> Plan:
        """Count ``plan`` as on its way to the loop (in the caller's thread, before handing it).

        Until it finishes there, later operations of the group do not run here.
        """
        plan.handed = True
        self.handed += 1
        return plan

    # -- the lifecycle's steps, shared by both forms ------------------------------------

    def _number(self) -> int:
        self._seq += 1
        self._session.ops += 1
        return self._seq

    def progress(self) -> tuple[int, int, int, float]:
        """Where the group's operations are (RunSource, for the flight recorder's runs):
        the last seq numbered and not refused, the one running or 0, the last completed,
        and the fast path's deadline for the running one (0: none)."""
        running, completed = self._session.faults.progress(self._group_id)
        numbered = self._seq
        if self._session.closed or self._group_id in self._session.faults.broken:
            numbered = max(running, completed)  # those numbered later were refused
        return numbered, running, completed, self._fast.deadline if running else 0.0

    def _admit(self, what: str, seq: int) -> None:
        """Refuse operation ``seq`` on a closed session or a broken group."""
        self._session.check_open(what)  # no formatting here: every call passes this way
        if self.closed is not None:
            raise ClosedError(f"{what}: {self.closed}")
        refused = self._session.faults.refusal(self._group_id, seq, self._named)
        if refused is not None:
            raise refused

    def _failed(self, exc: BaseException, what: str, seq: int, from_loop: bool) -> None:
        """Break the group on every member for operation ``seq``'s failure ``exc``.

        Not for the group's sticky error or a closed session, which break
        nothing new, nor for bad arguments, which nothing was sent for. Any
        other exception (a cancellation, an interrupt) gives up the operation:
        peers may be waiting for this rank's part of it. A coroutine closed
        unfinished (GeneratorExit) is the garbage collector's, not a failure.
        """
        if isinstance(exc, (GroupBrokenError, ClosedError, ConfigurationError, GeneratorExit)):
            return
        error = exc if isinstance(exc, AsyncollError) else CollectiveError(
            f"{what} #{seq} on group {self._group_id} was cancelled on rank "
            f"{self._session.rank}")
        faults = self._session.faults
        if from_loop:
            faults.abort(self._group_id, seq, error, self._ranks)
        else:
            self._session.call_soon(faults.abort, self._group_id, seq, error, self._ranks)

    # -- in the calling thread -----------------------------------------------------------

    def here(self, what: str, fingerprint: Fingerprint, limit: float, kernel: Kernel,
             arrays: Any, started: int = 0) -> bool:
        """Run ``kernel(step, arrays)`` on the fast path in the calling thread.

        Returns False, having done nothing, where it must go to the loop
        instead: the path is not set up, or an operation of the group is
        still there (it comes first).

        ``started``: the number on the path of the operation the compiled entry
        (asyncoll._group.express) started (0: none). It checked what this checks
        first, numbered the call, took the notes this takes before the step,
        published this member's part and holds the path's lock; ``kernel``
        finishes that operation (its step is the path's step for it).
        """
        fast = self._fast
        session, group_id = self._session, self._group_id
        faults = session.faults
        recorder = self.recorder
        if started:
            seq = self._seq
        else:
            if not fast.ready or self.handed != self.finished:
                return False
            # _number, and _admit only where something may refuse: written out, as
            # every call in this thread passes here.
            seq = self._seq = self._seq + 1
            session.ops += 1
            if session.closed or faults.broken:
                self._admit(what, seq)
            # Taking note is safe from this thread; checking frames kept early is the loop's.
            faults.begin(group_id, seq, fingerprint, False)
            if recorder is not None:
                # A repeated call is one more of the recorder's run: nothing to write but a
                # sample (asyncoll._group.recorder).
                if fingerprint is not self.run_fingerprint:
                    recorder.open_run(self, group_id, seq, what, fingerprint,
                                      fast.algorithm, limit)
                elif not seq % SAMPLE_EVERY:
                    recorder.sample(group_id, seq)
        early = self._early  # mesh.has_early, read without a call
        if early.frames:
            session.call_soon(faults.scan, group_id)
        try:
            self.on_fast_path(what, seq, limit, kernel, arrays, fingerprint, None, started)
        except BaseException as exc:
            if recorder is not None:
                recorder.failed_here(self, group_id, seq, what, fingerprint,
                                     fast.algorithm, limit, exc)
            self._failed(exc, what, seq, from_loop=False)
            raise
        faults.complete(group_id, seq, False)
        if early.frames:
            session.call_soon(faults.scan, group_id)
        return True

    def on_fast_path(self, what: str, seq: int, limit: float, kernel: Kernel, arrays: Any,
                     fingerprint: Fingerprint, step: list[Any] | None = None,
                     started: int = 0) -> None:
        """Run ``kernel(step, arrays)`` on the fast path in this thread (the caller's or the
        group's own), translating what the path raises into the group's errors.

        ``step`` receives the path's step as soon as it exists, for a canceller.
        ``started``: the operation the compiled entry started on the path (see
        :meth:`here`; 0: none); the caller then holds the path's lock (and releases it).
        """
        fast = self._fast
        held = started != 0
        # An untimed try first: a timed acquire costs several times as much.
        if not held and not fast.lock.acquire(False) and not fast.lock.acquire(timeout=limit):
            raise self._lock_timeout(what, seq, limit)
        try:
            current = fast.step(fingerprint, limit, started)
            if step is not None:
                step.append(current)
            try:
                kernel(current, arrays)
            except BaseException as exc:
                drop_frames(exc)  # they may hold views of the path's memory (closing.py)
                if not isinstance(exc, (GroupBrokenError, ClosedError, ConfigurationError)):
                    self._give_up(exc, what, seq, limit, current)
                raise
        finally:
            if not held:
                fast.lock.release()
                if fast.closing:
                    # Closed while this ran: the closer may have given up waiting for
                    # its end (asyncoll._group.closing).
                    fast.close()

    def _lock_timeout(self, what: str, seq: int, limit: float) -> CollectiveTimeoutError:
        return CollectiveTimeoutError(
            f"{what} #{seq} on group {self._group_id} waited {limit:g} s for another "
            f"thread of this process to finish its operation on the group. "
            f"{timed_out_words(limit)}")

    def _give_up(self, exc: BaseException, what: str, seq: int, limit: float,
                 current: Any) -> None:
        """Tell the path's other members that this one gave up on ``current`` for ``exc``,
        and raise the group's error for it; return where ``exc`` is that error."""
        fast = self._fast
        behind = fast.expired(exc)
        error: BaseException | None = fast.failure(exc)
        if behind is not None:
            error = self._timed_out(what, seq, limit, [self._ranks[i] for i in behind])
        fast.abandon(current, error or exc)
        cause = error.__cause__ if error is not None else None
        if isinstance(error, GroupBrokenError) and isinstance(cause, AsyncollError):
            # The path learned of an earlier failure the group layer has not
            # heard of: make it the group's sticky error, on every member.
            self._session.call_soon(self._session.faults.abort, self._group_id, seq,
                                    cause, self._ranks)
        if error is not None:
            raise error from cause

    # -- on the loop -----------------------------------------------------------------------

    async def in_turn(self, plan: Plan) -> None:
        """Run ``plan`` behind the group's earlier operations (a Plan's coroutine)."""
        what, limit, fingerprint = plan.what, plan.limit, plan.fingerprint
        # The sequence number and the place in line are taken before the first
        # await, so operations run in the order they were called.
        seq = self._number()
        previous, done = self._tail, asyncio.get_running_loop().create_future()
        self._tail = done
        faults, group_id = self._session.faults, self._group_id
        recorder = self.recorder
        entry = None if recorder is None else recorder.scheduled(group_id, seq, what,
                                                                 fingerprint, limit, plan.stack)
        try:
            if previous is not None:
                await previous  # always resolved with None, in a finally
            try:
                self._admit(what, seq)
            except BaseException:
                if recorder is not None and entry is not None:
                    # An operation refused never ran: to torch's analyzer it must not
                    # look as if this rank had reached it.
                    recorder.forget(entry)
                    entry = None
                raise
            if entry is not None:
                entry[STARTED] = _now()
            team = Team(self._session.mesh, self._ranks, group_id, seq,
                        fingerprint=fingerprint)
            faults.begin(group_id, seq, fingerprint)
            fast, kernel = self._fast, plan.kernel
            if kernel is not None and fast.undecided:
                await self._under_deadline(what, seq, limit, team, fast.set_up)
                team = team.phase(fast.set_up_phases)  # those before were the set-up's
            # A path that could not be set up leaves the operation to the transport's
            # algorithm, on every member.
            if entry is not None:
                entry[PATH] = fast.algorithm if kernel is not None and fast.ready else "loop"
            if kernel is not None and fast.ready:
                await self._in_own_thread(what, seq, limit, kernel, plan.arrays, fingerprint)
            else:
                await self._under_deadline(what, seq, limit, team,
                                           lambda t: plan.transport(t, plan.arrays))
            if plan.finish is not None:
                plan.finish(team.me)
            if entry is not None:
                entry[ENDED] = _now()
            faults.complete(group_id, seq)
        except BaseException as exc:
            if recorder is not None and entry is not None:
                recorder.failed(entry, exc)
            self._failed(exc, what, seq, from_loop=True)
            raise
        finally:
            if plan.handed:
                self.finished += 1
            done.set_result(None)

    async def _in_own_thread(self, what: str, seq: int, limit: float, kernel: Kernel,
                             arrays: Any, fingerprint: Fingerprint) -> None:
        """Run a kernel on the fast path in the group's thread, the loop going on meanwhile."""
        step: list[Any] = []
        try:
            await self._session.run_blocking(lambda: self.on_fast_path(
                what, seq, limit, kernel, arrays, fingerprint, step), self._group_id)
        except asyncio.CancelledError:
            if step:
                step[0].cancelled = True
            raise

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
            raise self._timed_out(what, seq, limit, team.waiting_for()) from None

    def _timed_out(self, what: str, seq: int, limit: float,
                   silent: list[int]) -> CollectiveTimeoutError:
        error = CollectiveTimeoutError(
            f"{what} #{seq} on {self._named} did not complete within {limit:g} s; still "
            f"waiting for {_ranks_phrase(silent)}. {timed_out_words(limit)}")
        error.waiting_for, error.seconds = tuple(silent), limit
        return error


_now = time.time_ns


def _ranks_phrase(ranks: list[int]) -> str:
    if not ranks:
        return "no rank's data (the time went in this rank's own work)"
    return "data from rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks))

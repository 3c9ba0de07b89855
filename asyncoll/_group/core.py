"""GroupCore: a group's members, how its calls become plans, and where plans run.

AsyncProcessGroup holds one, and offers its methods as the group's own.
Every collective method checks its arguments and hands :meth:`GroupCore.plan`
a Signature and its arrays; from them this layer chooses the algorithm by
size (from what every rank knows alike, so ranks always agree), derives the
fingerprint, binds the transport's algorithm and the fast path's kernel, and
remembers the call to run again.
Where a plan runs is decided here only: :meth:`GroupCore.execute` and
:meth:`GroupCore.submit` run it in the calling thread when the group's fast
path takes it (a shared-memory arena on one host, direct links across
hosts: asyncoll._group.fast_path) and nothing of the group is still on the
loop, else hand it to the loop; awaiting it runs it on the loop. A call
with the signature of an earlier fast-path one runs again without being
made anew: the plan remembers it in the group's Repeats
(asyncoll._group.repeats), which the front doors ask before they make a plan.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Hashable, Sequence
from datetime import timedelta
from typing import Any

from asyncoll._algorithms import selection
from asyncoll._group.context import Loop, Membership
from asyncoll._group.express import express_for
from asyncoll._group.fast_path import FastPath, fast_path_of
from asyncoll._group.hierarchy import HostHierarchy
from asyncoll._group.plan import Form, Plan, Signature, Transport, fingerprint_of, seconds
from asyncoll._group.repeats import Repeats
from asyncoll._group.runner import Runner
from asyncoll._group.transports import Scratch, transport_of
from asyncoll.errors import AsyncollError, ClosedError, ConfigurationError

#: Choices remembered per group (GroupCore._choose), forgotten all at once past it.
_CHOICES = 1024

#: The future of every call that ran to its end in the caller's thread: one
#: finished future serves them all (nothing is ever added to it).
DONE: concurrent.futures.Future[None] = concurrent.futures.Future()
DONE.set_result(None)


class GroupCore:
    """A group's members, and the making and placing of its calls.

    The group's collectives, object collectives and messages all go through it.
    """

    def __init__(self, session: Membership, group_id: int, ranks: Sequence[int],
                 timeout: float) -> None:
        self._session = session
        self.group_id = group_id
        #: The members' global ranks, in group-rank order.
        self.ranks: tuple[int, ...] = tuple(ranks)
        self.timeout = timeout
        #: This process's rank in the whole job.
        self.global_rank = me = session.rank
        #: This process's rank within the group, or -1 when it is not a member.
        self.rank = self.ranks.index(me) if me in self.ranks else -1
        #: The number of ranks in the group.
        self.size = len(self.ranks)
        self._scratch = Scratch()
        #: Whether the members are on more than one host (their hostnames differ).
        self._spans_hosts = len({session.mesh.hostname(rank) for rank in self.ranks}) > 1
        #: The group's way of running operations in the calling thread.
        self._fast: FastPath = fast_path_of(session, group_id, self.ranks, self._scratch)
        self._runner = Runner(session, group_id, self.ranks, self._fast)
        # Bound once: a repeat's every call goes through it, and each lookup shows.
        self._here = self._runner.here
        #: The group's compiled entry for repeated calls, or None (asyncoll._group.express).
        self.express = express_for(session, group_id, self._fast, self._runner, timeout)
        #: Fast-path calls to run again without being made anew (asyncoll._group.repeats).
        self.repeats = Repeats(self._here, self.express, self._fast, timeout)
        # Choices already made, by (collective, bytes, algorithm asked, path's capacity):
        # calls repeat the same few, and each microsecond shows.
        self._choices: dict[tuple[str, int, str | None, int], str] = {}
        session.faults.register(group_id, self.ranks)
        # Closed with the session unless it is closed before (close).
        session.on_close(self)

    # -- making plans ------------------------------------------------------------------

    def plan(self, what: str, signature: Signature, arrays: Any, nbytes: int,
             timeout: float | timedelta | None, algorithm: str | None,
             finish: Callable[[int], None] | None = None,
             repeat: tuple[Hashable, Form | None] | None = None) -> Plan:
        """The plan of a call of ``signature`` on ``arrays``, its algorithm chosen by size.

        A compressed all_reduce is exact on one host; across hosts, it runs the
        compressed ring among the hosts' leaders where the group has a hierarchy,
        else among all members, on the loop.

        Args:
            what: the call's name in errors ("all_reduce", "reduce_scatter_tensor").
            nbytes: the size the algorithm is chosen by, the same on every member.
            timeout: the call's; the group's when None.
            algorithm: the algorithm asked for; chosen by size when None.
            finish: run with this member's index once the call succeeded.
            repeat: the key the call repeats under (:func:`repeat_key` of its 1-D
                arrays) and what turns a repeat's arrays into the kernel's; the
                call is remembered when it takes the fast path with the group's
                timeout and the algorithm chosen by size.
        """
        if signature.compression is not None:  # arrays: (data, residual or None)
            if not self._spans_hosts:  # shared memory: exact, as compressing gains nothing
                signature, (arrays, residual) = signature._replace(compression=None), arrays
                if residual is not None:
                    residual[:] = 0  # added to the data already, and nothing is dropped
            elif not isinstance(self._fast, HostHierarchy):  # its leaders compress
                return self.plan_on_transport(what, signature,
                                              transport_of(signature, "ring", self._scratch),
                                              arrays, seconds(timeout, self.timeout), finish)
            else:
                repeat = None  # an exact call of the same arrays must not run it again
        collective = signature.collective
        name = self._choose(collective, nbytes, algorithm)
        # A fast-path call keeps the transport's algorithm ready in case the path
        # cannot be set up (every member then learns so, and runs it).
        over = selection.socket_choice(collective, nbytes, self.size) \
            if name in selection.FAST_PATHS else name
        transport = transport_of(signature, over, self._scratch)
        fingerprint = fingerprint_of(signature, name)
        kernel = None
        if name in selection.FAST_PATHS:
            kernel = self._fast.kernel(signature, over, transport)
            if repeat is not None and timeout is None and algorithm is None:
                self.repeats.remember(repeat[0], what, fingerprint, kernel, repeat[1])
        return Plan(self._runner, what, fingerprint, seconds(timeout, self.timeout), transport,
                    arrays, finish, kernel)

    def plan_on_transport(self, what: str, signature: Signature, transport: Transport,
                          arguments: Any, limit: float,
                          finish: Callable[[int], None] | None = None) -> Plan:
        """The plan of a call that has one algorithm, over the transport: ``transport(team,
        arguments)`` within ``limit`` seconds."""
        return Plan(self._runner, what, fingerprint_of(signature), limit, transport,
                    arguments, finish)

    def _choose(self, collective: str, nbytes: int, algorithm: str | None) -> str:
        """The algorithm for ``collective`` moving ``nbytes`` (a size every member agrees on)."""
        fast = self._fast
        capacity = fast.capacity
        key = (collective, nbytes, algorithm, capacity)
        name = self._choices.get(key)
        if name is None:
            forced = algorithm or self._session.policy.forced_algorithms.get(collective)
            name = selection.choose(collective, nbytes, self.size, forced, fast.algorithm,
                                    capacity, fast.up_to)
            if len(self._choices) >= _CHOICES:
                self._choices.clear()
            self._choices[key] = name
        return name

    def check_member(self, what: str) -> None:
        """Refuse ``what`` on a process that is not a member.

        Raises:
            ConfigurationError: this process is not a member.
        """
        if self.rank < 0:
            raise ConfigurationError(f"rank {self.global_rank} called {what} on group "
                                     f"{self.group_id} (ranks {list(self.ranks)}), which it "
                                     "is not a member of")

    def abort(self, error: AsyncollError) -> None:
        """Break this group here and tell its members: every operation of it running or
        to come fails with ``error``, here and, once told, on the others. On the loop."""
        running, completed = self._session.faults.progress(self.group_id)
        self._session.faults.abort(self.group_id, running or completed + 1, error, self.ranks)

    def failure(self) -> AsyncollError | None:
        """What broke this group, or None while it is intact."""
        return self._session.faults.error(self.group_id)

    def close(self, reason: str) -> None:
        """Close the group here: refuse its later calls with ClosedError (``reason``),
        fail its operations waiting on the loop, unmap its arena, close its direct
        links and end its thread, once no operation runs on them
        (asyncoll._group.closing). Idempotent; on the loop."""
        if self._runner.closed is not None:
            return
        self._runner.closed = reason
        self.repeats.forget()
        # Its operations on the loop, waiting for peers' frames, end now too.
        self._session.mesh.fail_channel(self.group_id, ClosedError(reason))
        self._fast.close()
        self._session.end_lane(self.group_id)
        self._session.forget(self)

    # -- placing plans -----------------------------------------------------------------

    def execute(self, plan: Awaitable[Any], loop: Loop) -> Any:
        """Run ``plan`` to its end and return its result: in this thread where its path
        allows, else on ``loop``'s thread, waiting for it.

        Raises what the call raises.
        """
        if isinstance(plan, Plan):
            if self._ran_here(plan):
                return None
            self._runner.to_loop(plan)
        return loop.run(plan)  # type: ignore[arg-type]

    def submit(self, plans: Sequence[Awaitable[Any]], loop: Loop,
               after: Sequence[Callable[[], None] | None] = ()) -> concurrent.futures.Future[None]:
        """Start ``plans`` one after another; return the future of their end.

        Leading plans whose path allows run in this thread before it
        returns; the rest run on ``loop``'s thread, in order. ``after[i]``
        runs once ``plans[i]`` succeeded. A failure fails the future (its
        ``result()`` raises it, as from the loop) and drops the plans after it.
        One plan's future has its result (a receive's sender).
        """
        steps = list(plans)
        finishes = list(after) + [None] * (len(steps) - len(after))
        while steps:
            plan = steps[0]
            if not isinstance(plan, Plan):
                break
            try:
                if not self._ran_here(plan):
                    break
            except BaseException as exc:
                for later in steps[1:]:
                    later.close()  # type: ignore[attr-defined]
                if isinstance(exc, AsyncollError):
                    return failed(exc)
                raise
            steps.pop(0)
            finish = finishes.pop(0)
            if finish is not None:
                finish()
        if not steps:
            return DONE
        for plan in steps:
            if isinstance(plan, Plan):
                self._runner.to_loop(plan)
        if len(steps) == 1 and finishes[0] is None:
            return loop.submit(steps[0])  # type: ignore[arg-type]
        return loop.submit(_in_order(steps, finishes))

    def _ran_here(self, plan: Plan) -> bool:
        """Whether ``plan`` ran in this thread (False: it must go to the loop; nothing ran)."""
        kernel = plan.kernel
        if kernel is None or not self._here(
                plan.what, plan.fingerprint, plan.limit, kernel, plan.arrays):
            return False
        if plan.finish is not None:
            plan.finish(self.rank)
        return True


def failed(error: AsyncollError) -> concurrent.futures.Future[None]:
    """A future that failed with ``error`` (its ``result()`` raises it, as from the loop)."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    future.set_exception(error)
    return future


async def _in_order(steps: list[Awaitable[Any]], after: list[Callable[[], None] | None]
                    ) -> None:
    for index, step in enumerate(steps):
        try:
            await step
        except BaseException:
            for later in steps[index + 1:]:
                later.close()  # type: ignore[attr-defined]
            raise
        finish = after[index]
        if finish is not None:
            finish()

"""Which connections a coordinator's ports hold: a bound before authentication, a budget.

A connection is *pending* from its accept until it has shown it belongs
(the rendezvous port: its proof of the token, or its first request without
one; the HTTP port: a complete, authorised request). Each port holds at most
``bound`` pending connections: past it, the oldest pending connection is
closed, so that idle sockets cannot hold descriptors that members and
authorised requests need. Evicting the oldest, not refusing the newest,
keeps a real peer served under a flood of idle ones: it authenticates
within a round trip, long before ``bound`` newer connections arrive. Up to
twice the bound are held while the oldest is younger than :data:`GRACE_S`:
a large job's members all connect at once, and the daemon takes a while to
answer each.

Every connection, pending or not, counts against the daemon's budget of
descriptors (its open-files limit, less those open at start and a spare):
when it is spent, a pending connection of either port makes way, and if
none is pending the new connection is refused, with words that say why.
Pure bookkeeping: the caller closes what :meth:`Door.enter` says to.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable

log = logging.getLogger("asyncoll.coordinator")

#: Connections the kernel queues before the daemon accepts them, on each port. A
#: job's members connect at once; past the backlog, a handshake waits for the
#: kernel's retransmission timers (seconds). Linux caps it at somaxconn.
LISTEN_BACKLOG = 65535
#: Descriptors kept spare, below the open-files limit, for what the daemon opens
#: besides connections (a log file, a listener, uvloop's own).
SPARE_DESCRIPTORS = 32
#: The budget when the open-files limit is unknown (no ``resource`` module).
UNKNOWN_LIMIT = 65536
#: The least budget assumed, however many descriptors were open at start.
LEAST_BUDGET = 64
#: Each port's pending bound, as a share of the budget, and its least value.
RENDEZVOUS_SHARE, HTTP_SHARE = 5, 10
LEAST_PENDING = 16
#: Seconds a pending connection has to authenticate before the bound may close it.
GRACE_S = 3.0
#: Seconds between two log lines of one kind (the later one counts what it covers).
LOG_EVERY_S = 10.0


def descriptor_budget() -> int:
    """Connections this process may still hold: its open-files limit, less those open now
    and :data:`SPARE_DESCRIPTORS`."""
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            limit = UNKNOWN_LIMIT
    except ImportError:  # pragma: no cover - Windows
        limit = UNKNOWN_LIMIT
    try:
        in_use = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:  # pragma: no cover - no /proc
        in_use = 0
    return max(limit - in_use - SPARE_DESCRIPTORS, LEAST_BUDGET)


def raise_descriptor_limit() -> tuple[int, int] | None:
    """Raise the soft open-files limit to the hard one; (old, new), or None if unchanged.

    For the daemon's entry only: a library must not change its process's limits.
    """
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard or soft == resource.RLIM_INFINITY:
            return None
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # no resource module, or a capped hard limit
        return None
    return soft, hard


class Throttle:
    """Counts events, and says when one deserves a log line: the first at once, then at
    most one per ``period_s``, which reports the events since the previous line."""

    def __init__(self, period_s: float = LOG_EVERY_S) -> None:
        self._period_s = period_s
        self._next = float("-inf")
        self._count = 0

    def count(self, now: float) -> int:
        """Count one event at ``now``; the events to report now (0: stay quiet)."""
        self._count += 1
        if now < self._next:
            return 0
        self._next = now + self._period_s
        counted, self._count = self._count, 0
        return counted

    def warn(self, now: float, words: str) -> None:
        """Count one event at ``now``, and log ``words`` if it is time for a line."""
        counted = self.count(now)
        if counted:
            log.warning("%s (%d such since the last line like it)", words, counted)


class Budget:
    """The connections one coordinator may hold across its ports (``capacity``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.doors: list[Door] = []

    def make_way(self) -> bool:
        """Close the oldest pending connection of any door; False if none is pending."""
        waiting = [door for door in self.doors if door.pending]
        if not waiting:
            return False
        min(waiting, key=lambda door: door.oldest()).evict_oldest()
        return True


class Door:
    """One port's connections, counted, with at most ``bound`` pending.

    Args:
        budget: the coordinator's, shared by its doors.
        bound: the most pending connections this port holds (twice that, for
            :data:`GRACE_S`).
        what: the port, in words for the log ("the rendezvous port").
    """

    def __init__(self, budget: Budget, bound: int, what: str) -> None:
        self.budget = budget
        self.bound = bound
        self.what = what
        self._throttle = Throttle()
        #: Pending connections, oldest first: ticket -> (entered at, close).
        self.pending: collections.OrderedDict[int, tuple[float, Callable[[], None]]] = (
            collections.OrderedDict())
        self._held: set[int] = set()
        self._tickets = 0
        #: Connections closed to keep the bound or the budget, and refused.
        self.evicted = 0
        self.refused = 0
        budget.doors.append(self)

    def enter(self, close: Callable[[], None], now: float) -> int | None:
        """Count a new connection (``close`` ends it); its ticket, or None to refuse it.

        On the way, it may close the oldest pending connections (``close`` of theirs).
        Either, and a refusal, is logged, at most once per :data:`LOG_EVERY_S`.
        """
        if len(self.pending) >= self.bound and (len(self.pending) >= 2 * self.bound
                                                or now - self.oldest() >= GRACE_S):
            self.evict_oldest()
            self._throttle.warn(now, f"{self.what} holds at most {self.bound} connections "
                                     f"that have not authenticated ({2 * self.bound} for "
                                     f"{GRACE_S:g} s): closed the oldest")
        if self.budget.held >= self.budget.capacity:
            if not self.budget.make_way():
                self.refused += 1
                self._throttle.warn(now, f"out of file descriptors: {self.budget.held} "
                                         "connections are open, all that the open-files "
                                         f"limit allows; refused a new one on {self.what} "
                                         "(raise the limit: ulimit -n)")
                return None
            self._throttle.warn(now, f"out of file descriptors ({self.budget.held} "
                                     "connections are open): closed the oldest connection "
                                     "that had not authenticated")
        self._tickets += 1
        ticket = self._tickets
        self.pending[ticket] = (now, close)
        self._held.add(ticket)
        self.budget.held += 1
        return ticket

    def admit(self, ticket: int) -> None:
        """The connection has authenticated: it is no longer pending, and never evicted."""
        self.pending.pop(ticket, None)

    def leave(self, ticket: int) -> None:
        """The connection is closed (by either side); forget it."""
        self.pending.pop(ticket, None)
        if ticket in self._held:
            self._held.discard(ticket)
            self.budget.held -= 1

    def oldest(self) -> float:
        """When the oldest pending connection entered (call only with one pending)."""
        return next(iter(self.pending.values()))[0]

    def evict_oldest(self) -> None:
        """Close the oldest pending connection, and stop counting it at once."""
        ticket, (_, close) = self.pending.popitem(last=False)
        self.leave(ticket)
        self.evicted += 1
        close()

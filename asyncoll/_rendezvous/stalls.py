"""A coordinator that did not run for a while reads before it judges (issue 56).

A daemon that was stopped (SIGSTOP, a debugger), swapped out, frozen in its
container or paused with its VM runs again with its monotonic clock moved on
by the whole pause, while the heartbeats its members sent meanwhile still
wait, unread, on its connections. Judged at once, every member of every job
would look silent for the whole pause.

The rule: a tick that comes more than :data:`STALL_AFTER_S` after the one
before decides nothing: no heartbeat, rendezvous, agreement or adoption
deadline expires on it. Before the next tick (a tick period later), the event
loop reads what is queued, and a heartbeat counts as heard when it is read.
Every member alive during the pause beat at least once meanwhile (members
beat every quarter of their deadline at most), so it is heard again; a member
that died meanwhile is still found, at once if its connection closed, within
its heartbeat deadline of the daemon's running again if it froze.

Why not a deadline in the time the daemon was running: nothing measures that
time (the monotonic clock counts a stopped process's pause, its CPU time stops
in idle waits too), and crediting each late tick's delay to every member
would stop the members' clocks for good in a daemon late on every tick (too
loaded), where a frozen member would then never be found. For the same
reason, a late tick that follows one that decided nothing decides: between
the two the loop has read. A second stall within one tick period of the
first is the rule's limit: that tick is judged as any other.
"""

from __future__ import annotations

import logging

from asyncoll._rendezvous.words import log

#: A tick this long after the one before means the daemon did not run in
#: between. Far above a tick period (0.1 s) and the delays of a busy loop,
#: below what a heartbeat deadline worth having (a second or more) minus the
#: quarter of it between two heartbeats leaves.
STALL_AFTER_S = 0.5
#: Pauses at least this long are worth a warning; shorter ones (a loaded
#: loop) are logged at debug level, as they may come every other tick.
WARN_AFTER_S = 1.0


class Stalls:
    """Which of the coordinator's ticks come after it did not run, and decide nothing.

    Args:
        after_s: the longest time between two ticks that is not a pause (math.inf:
            none is; a test's fake clock may jump as far as it likes).
    """

    def __init__(self, after_s: float = STALL_AFTER_S) -> None:
        self.after_s = after_s
        self._last: float | None = None
        self._held = False

    def hold(self, now: float) -> bool:
        """Whether the tick at ``now`` must decide nothing: it comes more than ``after_s``
        after the one before, and that one decided."""
        gap = 0.0 if self._last is None else now - self._last
        self._last = now
        if gap <= self.after_s or self._held:
            self._held = False
            return False
        self._held = True
        log.log(logging.WARNING if gap >= WARN_AFTER_S else logging.DEBUG,
                "the coordinator did not run for %.1f s (stopped, swapped out, or its machine "
                "paused?): it reads what its members sent meanwhile before it judges any "
                "deadline", gap)
        return True

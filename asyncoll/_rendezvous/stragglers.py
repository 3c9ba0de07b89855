"""Which rank the others wait for: stragglers and stuck operations, from heartbeats (issue 29).

Every rank samples its operations whose sequence number is a multiple of
:data:`SAMPLE_EVERY` (asyncoll._defaults) and sends, with each heartbeat, when it entered them
(its own clock) and when it sent the heartbeat. The coordinator puts each
rank's times on its own clock (the least difference seen between a rank's
send time and the coordinator's receive time: the rank's clock offset plus
the shortest transit), and once every member of the group has sent an
operation's time, notes which one arrived last and how much after the one
before it. A rank that arrived last, late by more than :data:`LATE_US`, in
a large share of a group's recent operations, and in far more of its late
ones than its part of the group, is its straggler.

Plain data and pure functions, driven by the state machine
(asyncoll._rendezvous.heartbeats).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


#: The most samples a heartbeat carries (the newest).
SAMPLES_PER_HEARTBEAT = 256
#: An operation whose last rank arrived this long after the one before was late:
#: beyond a rank descheduled for a time slice or two, which any rank meets.
LATE_US = 5000.0
#: Sampled operations kept per group, and the least number judged on.
WINDOW = 1000
ENOUGH = 20
#: A straggler arrived last and late in at least this share of the window's
#: operations, and in a share of the late ones well above its part of the group
#: (at least twice its part, between half and three quarters of them).
STRAGGLER_SHARE = 0.1
LATE_SHARE_BOUNDS = (0.5, 0.75)
#: Samples waiting for the rest of their group (beyond: the oldest are dropped).
OPEN_LIMIT = 4096
#: Heartbeats whose clock difference is kept, for a rank's clock offset.
OFFSET_HEARTBEATS = 16


@dataclass(frozen=True, slots=True)
class Doing:
    """A rank's operation as its last heartbeat told it."""

    group_id: int
    seq: int
    collective: str
    #: Still running (else: its last operation, completed or failed).
    running: bool
    #: When it started, on the coordinator's clock.
    since: float


@dataclass(slots=True)
class Clock:
    """A rank's clock offset to the coordinator's, in microseconds."""

    differences: deque[float] = field(default_factory=lambda: deque(maxlen=OFFSET_HEARTBEATS))

    def heard(self, now: float, clock_us: int) -> float:
        """A heartbeat sent at ``clock_us`` (the rank's clock) came at ``now``: the offset."""
        self.differences.append(now * 1e6 - clock_us)
        return min(self.differences)


@dataclass(frozen=True, slots=True)
class Straggler:
    """A rank that its group's other members wait for, over a window of operations."""

    group_id: int
    rank: int
    #: Sampled operations it arrived last (and late) in, of ``operations``.
    last: int
    operations: int
    median_late_us: float

    def text(self) -> str:
        """In words: "rank 3 arrived last in 78 % of the last 1000 sampled operations..."."""
        return (f"rank {self.rank} arrived last in {100 * self.last / self.operations:.0f} % "
                f"of the last {self.operations} sampled operations of group {self.group_id}, "
                f"a median of {self.median_late_us / 1000:.1f} ms late")


@dataclass(slots=True)
class Arrivals:
    """A job's sampled arrival times, and each group's window of who arrived last."""

    #: (group, seq) -> rank -> arrival, coordinator clock, microseconds.
    open: dict[tuple[int, int], dict[int, float]] = field(default_factory=dict)
    #: group -> (rank last and late, or -1; how late, us), newest last.
    windows: dict[int, deque[tuple[int, float]]] = field(default_factory=dict)
    #: group -> its size.
    sizes: dict[int, int] = field(default_factory=dict)

    def arrived(self, group_id: int, seq: int, rank: int, at_us: float, size: int) -> None:
        """Rank ``rank`` entered operation ``seq`` of a group of ``size`` at ``at_us``."""
        key = (group_id, seq)
        times = self.open.get(key)
        if times is None:
            if len(self.open) >= OPEN_LIMIT:
                # Samples a member never completes (it left, or sampled fewer): the oldest.
                del self.open[next(iter(self.open))]
            times = self.open[key] = {}
        times[rank] = at_us
        if len(times) < size:
            return
        del self.open[key]
        order = sorted(times.items(), key=lambda item: item[1])
        (last, last_at), before = order[-1], order[-2][1] if len(order) > 1 else order[-1][1]
        late = last_at - before
        window = self.windows.setdefault(group_id, deque(maxlen=WINDOW))
        self.sizes[group_id] = size
        window.append((last if late > LATE_US else -1, late))

    def stragglers(self) -> list[Straggler]:
        """Each group's straggler, if it has one."""
        found = []
        for group_id, window in sorted(self.windows.items()):
            if len(window) < ENOUGH:
                continue
            late: dict[int, list[float]] = {}
            for rank, how_late in window:
                if rank >= 0:
                    late.setdefault(rank, []).append(how_late)
            total = sum(len(times) for times in late.values())
            low, high = LATE_SHARE_BOUNDS
            most = min(high, max(low, 2 / self.sizes.get(group_id, 2))) * total
            for rank, times in sorted(late.items()):
                if len(times) >= STRAGGLER_SHARE * len(window) and len(times) >= most:
                    found.append(Straggler(group_id, rank, len(times), len(window),
                                           statistics.median(times)))
        return found

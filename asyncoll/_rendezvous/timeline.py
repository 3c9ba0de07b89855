"""The coordinator's recent job events: started, members lost or left, reconfigured, adopted.

What a dashboard's timeline shows. Bounded: the oldest events go first, so
a daemon that runs for weeks keeps only the last :data:`EVENTS_KEPT`. Each
event has an id, one more than the one before, so a reader asks for what
came after the last id it saw. Times are the state's clock (``now``).
"""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass

#: How many events are kept.
EVENTS_KEPT = 1000


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to a job."""

    id: int
    time: float
    job: str
    #: "started", "pending", "left", "lost", "reconfigured", "adopted" or "ended".
    kind: str
    text: str


class Timeline:
    """The last :data:`EVENTS_KEPT` events, oldest first."""

    def __init__(self) -> None:
        self._events: collections.deque[Event] = collections.deque(maxlen=EVENTS_KEPT)
        self._next = 1

    def record(self, now: float, job: str, kind: str, text: str) -> None:
        """Something of ``kind`` happened to ``job`` at ``now``, as ``text`` says."""
        self._events.append(Event(self._next, now, job, kind, text))
        self._next += 1

    @property
    def next_id(self) -> int:
        """The id the next event will have."""
        return self._next

    def since(self, after: int, limit: int) -> list[Event]:
        """Up to ``limit`` of the events after id ``after``, oldest first."""
        first = self._events[0].id if self._events else self._next
        skip = max(after + 1 - first, 0)
        return list(itertools.islice(self._events, skip, skip + limit))

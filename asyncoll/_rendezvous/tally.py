"""What the coordinator counts for its metrics (``asyncoll-coordinator --metrics-port``).

Plain counters and the latencies observed since the daemon last read them,
kept by the pure state machine; the daemon's metrics server turns them into
Prometheus metrics. Latencies are kept only while someone reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Tally:
    """The coordinator's counters since it started."""

    heartbeats: int = 0
    #: Members that did not leave: disconnected, silent, or not back after a restart.
    members_lost: int = 0
    #: Agreements that failed because ranks disagreed (new_group with other ranks).
    desyncs: int = 0
    jobs_adopted: int = 0
    #: Ticks that decided nothing: the coordinator had not run for a while before them.
    stalls: int = 0
    #: Whether latencies are kept (a metrics server reads and drains them).
    observing: bool = False
    rendezvous_s: list[float] = field(default_factory=list)
    new_group_s: list[float] = field(default_factory=list)

    def rendezvous(self, seconds: float) -> None:
        """A rendezvous completed, ``seconds`` after its first join."""
        if self.observing:
            self.rendezvous_s.append(seconds)

    def new_group(self, seconds: float) -> None:
        """A new_group completed, ``seconds`` after its first call."""
        if self.observing:
            self.new_group_s.append(seconds)

    def drain(self) -> tuple[list[float], list[float]]:
        """The rendezvous and new_group latencies since the last drain."""
        drained = self.rendezvous_s, self.new_group_s
        self.rendezvous_s, self.new_group_s = [], []
        return drained

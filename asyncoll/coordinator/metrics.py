"""Prometheus metrics of a coordinator, served on ``/metrics`` (``--http-port``).

Read from the coordinator's state at each scrape, in its event loop (the
state is not shared with another thread); served by its HTTP server
(asyncoll.coordinator.http). Needs ``prometheus_client``
(``pip install asyncoll[metrics]``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from asyncoll._rendezvous.heartbeats import job_rate
from asyncoll._rendezvous.state import RendezvousState
from asyncoll.errors import ConfigurationError

log = logging.getLogger("asyncoll.coordinator")

#: Latency buckets, seconds: a small job's rendezvous is milliseconds, a large
#: one's or one waiting for a slow process many seconds.
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)


def _client() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core  # noqa: F401  (the metric families)
    except ImportError:
        raise ConfigurationError("/metrics needs prometheus_client: pip install "
                                 "'asyncoll[metrics]' (or prometheus_client)") from None
    return prometheus_client


class _Collector:
    """Every metric, made anew from the coordinator's state at each scrape."""

    def __init__(self, state: RendezvousState) -> None:
        client = _client()
        self._state = state
        self._core = client.core
        state.tally.observing = True
        self._histograms = {
            name: client.Histogram(f"asyncoll_{name}_seconds", text, buckets=BUCKETS,
                                   registry=None)
            for name, text in (("rendezvous", "Time from a job's first join to its "
                                              "rendezvous' completion."),
                               ("new_group", "Time from a new_group's first call to the "
                                             "group's creation."))}

    def collect(self) -> Iterator[Any]:
        core, state, tally = self._core, self._state, self._state.tally
        for name, values in zip(("rendezvous", "new_group"), tally.drain(), strict=True):
            for value in values:
                self._histograms[name].observe(value)
            yield from self._histograms[name].collect()
        for name, value, text in (
                ("heartbeats", tally.heartbeats, "Heartbeats received."),
                ("members_lost", tally.members_lost, "Members lost (not left): "
                                                     "disconnected, silent, or not back after "
                                                     "a coordinator restart."),
                ("desyncs", tally.desyncs, "Agreements that failed because ranks disagreed."),
                ("jobs_adopted", tally.jobs_adopted, "Running jobs taken back after a "
                                                     "restart."),
                ("stalls", tally.stalls, "Times the coordinator had not run for a while "
                                         "(stopped, swapped out, paused), then read before "
                                         "it judged any deadline.")):
            counter = core.CounterMetricFamily(f"asyncoll_{name}", text)
            counter.add_metric([], value)
            yield counter
        jobs = core.GaugeMetricFamily("asyncoll_jobs", "Jobs, by state.", labels=["state"])
        members = core.GaugeMetricFamily("asyncoll_members", "Members and waiting processes "
                                         "of each job, by state.", labels=["job", "state"])
        rate = core.GaugeMetricFamily("asyncoll_job_operations_per_second", "Operations "
                                      "per second of each running job: the median of its "
                                      "live members' rates between their last two "
                                      "heartbeats (collectives of the job, not summed "
                                      "over ranks).",
                                      labels=["job"])
        ops = core.GaugeMetricFamily("asyncoll_job_operations", "Operations each running "
                                     "job's live members reported, summed.", labels=["job"])
        straggling = core.GaugeMetricFamily(
            "asyncoll_straggler_share", "Each group's straggler: the share of the group's "
            "last sampled operations it arrived last and late in (no sample: none).",
            labels=["job", "group", "rank"])
        by_state: dict[str, int] = {"waiting": 0, "running": 0, "adopting": 0}
        for job in state.jobs():
            kind = "running" if job.running else "adopting" if job.adopting else "waiting"
            by_state[kind] += 1
            counts = {"waiting": len(job.waiting), "pending": len(job.pending),
                      "adopting": len(job.rejoins)}
            if job.running:
                live = job.live()
                counts["running"], counts["gone"] = len(live), len(job.departed)
                rate.add_metric([job.name], job_rate([job.members[r].ops_rate for r in live]))
                ops.add_metric([job.name], sum(max(job.members[r].ops, 0) for r in live))
            for s in job.arrivals.stragglers():
                straggling.add_metric([job.name, str(s.group_id), str(s.rank)],
                                      s.last / s.operations)
            for member_state, count in counts.items():
                members.add_metric([job.name, member_state], count)
        for kind, count in by_state.items():
            jobs.add_metric([kind], count)
        yield from (jobs, members, rate, ops, straggling)


class Metrics:
    """``/metrics``: the coordinator's state in Prometheus' text format, made at each scrape."""

    def __init__(self, state: RendezvousState) -> None:
        client = _client()
        self._registry = client.CollectorRegistry()
        self._registry.register(_Collector(state))
        self._render = client.generate_latest
        #: The content type of :meth:`render`'s bytes.
        self.content_type: str = client.CONTENT_TYPE_LATEST

    @classmethod
    def of(cls, state: RendezvousState, required: bool) -> Metrics | None:
        """The metrics of ``state``; None without prometheus_client, unless ``required``.

        Raises:
            ConfigurationError: ``required`` and prometheus_client is missing.
        """
        try:
            return cls(state)
        except ConfigurationError:
            if required:
                raise
            return None

    def render(self) -> bytes:
        """Every metric, now."""
        return bytes(self._render(self._registry))

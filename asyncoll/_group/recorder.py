"""Recorder: a rank's flight recorder, the last operations of its groups and how they went.

Every collective the group layer runs (asyncoll._group.runner) is entered
here; the ring keeps (at least) the last ``capacity`` operations, as torch's
Flight Recorder does. Writing them out (:meth:`Recorder.dump`, in the format
torch's analyzer reads: asyncoll._group.flight) happens only when asked: an
operation timed out or a peer was lost or out of step (:meth:`alarm`), a
SIGUSR1, or ``asyncoll status --dump``.

An operation on the event loop gets an entry of its own, a list changed in
place as it is scheduled, started, completed or failed. An operation in
the calling thread takes a few microseconds, and whatever is done for each
one shows in that time, so those are kept as *runs*: one entry for the
consecutive operations of a group with the same fingerprint (and limit),
opened by the first and closed when any other entry is made; a repeated
call gives the very same fingerprint object, which the runner tells apart
from another in one step. Nothing is written for the rest of a run's
operations: their sequence numbers and states are read from the group's
runner (a :class:`RunSource`) when the ring is read, and their times are
known for the run's first operation and for the sampled ones (every
SAMPLE_EVERY-th, which heartbeats carry for straggler attribution anyway).
:meth:`Recorder.entries` gives every operation its own entry again.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Container, Iterator, Sequence
from typing import Any, Protocol

from asyncoll._defaults import SAMPLE_EVERY
from asyncoll._group import flight
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import (
    CollectiveTimeoutError,
    ConfigurationError,
    MismatchError,
    PeerLostError,
)

log = logging.getLogger("asyncoll")

#: An entry's fields, by index: record id, group id, seq, collective (asyncoll's
#: name), fingerprint, path ("arena", "links", "loop"; "": not chosen yet), limit (s),
#: created, started and ended (time.time_ns; 0: not yet), error (the exception's type
#: name), stack; and in the ring, the last seq it stands for (None: a run still open)
#: and the run's source (None: an operation of its own).
(ID, GROUP, SEQ, WHAT, FINGERPRINT, PATH, LIMIT, CREATED, STARTED, ENDED, ERROR,
 STACK, LAST, SOURCE) = range(14)
#: ENDED of an operation known to be completed, at a time not taken (one of a run).
UNTIMED = -1
#: The failures that make a rank write its recorder out by itself.
ALARMS = (CollectiveTimeoutError, PeerLostError, MismatchError)
#: The most frames of a caller's stack an entry keeps (ASYNCOLL_TRACE_STACKS=1).
STACK_FRAMES = 64
#: Sampled times kept, at least (see Recorder.sample).
SAMPLES_KEPT = 256

_now = time.time_ns
_LATEST = 1 << 63  # sorts after every time, for bisect
#: An operation a heartbeat may tell of: its record id, what it tells (Recorder.report),
#: and the run whose start time is still to be found (None: known).
_Shown = tuple[int, tuple[int, int, str, bool, int], list[Any] | None]


class RunSource(Protocol):
    """A group's runner, as the recorder sees it: where a run's progress is read."""

    #: The fingerprint of the run the recorder has open for it (None: none); the
    #: recorder sets it, and clears it when it closes the run.
    run_fingerprint: Fingerprint | None

    def progress(self) -> tuple[int, int, int, float]:
        """(the last seq numbered and not refused, the seq running in the calling thread
        or 0, the last seq completed, the running one's deadline on time.monotonic's
        clock or 0)."""


class Recorder:
    """The last ``capacity`` operations of one rank, in every group.

    Args:
        capacity: entries kept (ASYNCOLL_TRACE_BUFFER), at least 1.
        rank: this rank in the job, for the dump's name.
        directory: where :meth:`dump` writes (ASYNCOLL_TRACE_DIR).
        stacks: keep each operation's Python stack (ASYNCOLL_TRACE_STACKS=1); every
            operation in the calling thread is then a run of its own.

    Raises:
        ConfigurationError: ``capacity`` is below 1.
    """

    def __init__(self, capacity: int, rank: int, directory: str, job: str = "",
                 stacks: bool = False) -> None:
        if capacity < 1:
            raise ConfigurationError(f"a flight recorder keeps at least 1 operation, got "
                                     f"{capacity}; with ASYNCOLL_TRACE_BUFFER=0 make none")
        self.capacity = capacity
        self.rank = rank
        self.directory = directory
        self.job = job
        self.stacks = stacks
        self._ring: list[list[Any] | None] = [None] * capacity
        self._stored = 0
        #: The record id of the next operation (a run takes one per operation).
        self._next = 0
        self._open: list[Any] | None = None
        self._lock = threading.Lock()  # making entries: cold paths only
        # (index, group id, seq, time) of sampled operations, in a ring of their own.
        self._samples: list[tuple[int, int, int, int] | None] = [None] * max(
            SAMPLES_KEPT, capacity // SAMPLE_EVERY + 1)
        self._sampled = itertools.count()
        #: Every group this rank records for: its members' global ranks.
        self.groups: dict[int, tuple[int, ...]] = {}
        self._failures = 0
        # What the last dump saw: a failure repeating it (every group a lost peer
        # breaks, one by one) writes nothing new.
        self._dumped: tuple[int, int] | None = None
        self._dump_lock = threading.RLock()  # re-entered by a signal handler
        self._dumps = itertools.count()

    def add_group(self, group_id: int, ranks: Sequence[int]) -> None:
        """Record the members of a group, for the dump's process-group table."""
        self.groups[group_id] = tuple(ranks)

    # -- in the calling thread ---------------------------------------------------------

    def open_run(self, source: RunSource, group_id: int, seq: int, what: str,
                 fingerprint: Fingerprint, path: str, limit: float) -> None:
        """Operation ``seq`` of ``group_id`` starts now in the calling thread, the first of
        a run; the next ones with the same ``fingerprint`` object belong to it."""
        now = _now()
        with self._lock:
            run = self._open
            if (run is not None and run[SOURCE] is source and not self.stacks
                    and run[FINGERPRINT] == fingerprint and run[WHAT] == what
                    and run[LIMIT] == limit and run[PATH] == path):
                # The same call made anew (not repeated): still one more of the run.
                source.run_fingerprint = fingerprint
            else:
                entry = [0, group_id, seq, what, fingerprint, path, limit, now, now, 0, None,
                         _stack() if self.stacks else None, None, source]
                self._enter(entry, group_id, seq)
                self._open = entry
                if not self.stacks:
                    source.run_fingerprint = fingerprint
        if not seq % SAMPLE_EVERY:
            self._sample(group_id, seq, now)

    @property
    def sample_ring(self) -> tuple[list[tuple[int, int, int, int] | None], Iterator[int]]:
        """Where :meth:`sample` keeps its samples, and the count that numbers them: the
        compiled entry (asyncoll._group.express) samples its calls there as it does."""
        return self._samples, self._sampled

    def sample(self, group_id: int, seq: int) -> None:
        """Operation ``seq`` of ``group_id`` (a multiple of SAMPLE_EVERY) starts now."""
        self._sample(group_id, seq, _now())

    def failed_here(self, source: RunSource, group_id: int, seq: int, what: str,
                    fingerprint: Fingerprint, path: str, limit: float,
                    error: BaseException) -> None:
        """Operation ``seq`` of ``group_id``, run in the calling thread, failed with
        ``error``: it leaves its run for an entry of its own."""
        now = _now()
        began = _began(now, limit, source.progress()[3])
        entry = [0, group_id, seq, what, fingerprint, path, limit, began, began, now,
                 type(error).__name__, None, seq, None]
        with self._lock:
            run = self._open
            if run is not None and run[GROUP] == group_id and run[SEQ] == seq:
                entry[STACK] = run[STACK]  # the run it opened ends before it
            self._enter(entry, group_id, seq)
        self._failures += 1
        self.alarm(error)

    # -- on the loop -------------------------------------------------------------------

    def scheduled(self, group_id: int, seq: int, what: str, fingerprint: Fingerprint,
                  limit: float, stack: list[tuple[str, str, int]] | None) -> list[Any]:
        """Enter operation ``seq`` of ``group_id``, numbered and waiting for its turn on the
        loop; the caller marks it started, completed (STARTED, PATH, ENDED) or
        :meth:`failed`."""
        now = _now()
        entry = [0, group_id, seq, what, fingerprint, "", limit, now, 0, 0, None, stack, seq,
                 None]
        with self._lock:
            self._enter(entry, group_id, seq)
        if not seq % SAMPLE_EVERY:
            self._sample(group_id, seq, now)
        return entry

    def forget(self, entry: list[Any]) -> None:
        """Take ``entry`` out: its operation was refused before it ran."""
        self._remove(entry)

    def failed(self, entry: list[Any], error: BaseException) -> None:
        """The operation of ``entry`` failed with ``error``; write the recorder out if it
        is one of the failures that call for it (:data:`ALARMS`)."""
        entry[ENDED] = _now()
        entry[ERROR] = type(error).__name__
        self._failures += 1
        self.alarm(error)

    def caller_stack(self) -> list[tuple[str, str, int]] | None:
        """The calling thread's stack, where stacks are kept (else None)."""
        return _stack() if self.stacks else None

    # -- making entries (under the lock) ---------------------------------------------

    def _enter(self, entry: list[Any], group_id: int, seq: int) -> None:
        """Close the open run, and store ``entry`` (operation ``seq`` of ``group_id``)."""
        run = self._open
        if run is not None:
            self._open = None
            source = run[SOURCE]
            # Cleared before the progress is read: an operation numbered meanwhile
            # is then in this run, or opens the next (entries() trims the overlap).
            source.run_fingerprint = None
            last = source.progress()[0]
            if run[GROUP] == group_id:
                last = min(last, seq - 1)
            run[LAST] = last
            self._next = run[ID] + max(last - run[SEQ] + 1, 0)
            if last < run[SEQ]:
                self._remove(run)  # none of it ran here (its first failed, or was refused)
        entry[ID] = self._next
        self._next += 1
        self._ring[self._stored % self.capacity] = entry
        self._stored += 1

    def _remove(self, entry: list[Any]) -> None:
        for i, kept in enumerate(self._ring):
            if kept is entry:
                self._ring[i] = None

    def _sample(self, group_id: int, seq: int, when: int) -> None:
        index = next(self._sampled)
        self._samples[index % len(self._samples)] = (index, group_id, seq, when)

    # -- reading -----------------------------------------------------------------------

    def entries(self) -> list[list[Any]]:
        """The last ``capacity`` operations, oldest first, each an entry of its own (runs
        given one per operation; copies: later changes do not show in them)."""
        times: dict[int, list[tuple[int, int]]] = {}
        for _, group_id, seq, when in sorted(s for s in list(self._samples) if s is not None):
            times.setdefault(group_id, []).append((seq, when))
        kept: list[list[Any]] = []
        for entry, first, last in reversed(self._spans()):
            if entry[SOURCE] is None:
                kept.append(list(entry[:LAST]))
            else:
                kept.extend(_expanded(entry, first, last, times,
                                      self.capacity - len(kept)))
            if len(kept) >= self.capacity:
                break
        kept.reverse()
        return kept

    def _spans(self) -> list[tuple[list[Any], int, int]]:
        """(entry, its first seq, its last) of the entries kept, in record order; a run
        still open ends at its source's progress, and a run ends before the next entry of
        its group begins."""
        kept = sorted((e for e in list(self._ring) if e is not None), key=lambda e: e[ID])
        following: dict[int, int] = {}
        spans: list[tuple[list[Any], int, int]] = []
        for entry in reversed(kept):
            last = entry[LAST]
            if last is None:
                last = int(entry[SOURCE].progress()[0])
            after = following.get(entry[GROUP])
            if after is not None:
                last = min(last, after - 1)
            following[entry[GROUP]] = entry[SEQ]
            if last >= entry[SEQ]:
                spans.append((entry, entry[SEQ], last))
        spans.reverse()
        return spans

    def report(self, after: int, limit: int, groups: Container[int]
               ) -> tuple[tuple[int, int, str, bool, int] | None, int, list[int]]:
        """What a heartbeat tells of this rank's operations, in one look through the ring
        (for a heartbeat, not for every operation).

        Returns:
            - its oldest operation started and not ended, or else its newest: (group
              id, seq, collective, still running, started at, time.time_ns()), or None;
            - the newest sample's index, for the next call's ``after``;
            - (group id, seq, created at in microseconds), flattened, of the last
              ``limit`` sampled operations of ``groups`` after ``after`` (see
              asyncoll._rendezvous.stragglers).
        """
        running: _Shown | None = None
        newest: _Shown | None = None
        progress: dict[int, tuple[int, int, int, float]] = {}  # by source, read once
        for entry, first, last in self._spans():
            source = entry[SOURCE]
            shown: _Shown
            if source is None:
                going = bool(entry[STARTED]) and not entry[ENDED]
                shown = (entry[ID], (entry[GROUP], entry[SEQ], entry[WHAT], going,
                                     entry[STARTED] or entry[CREATED]), None)
            else:
                if id(source) not in progress:
                    progress[id(source)] = source.progress()
                _, current, _, deadline = progress[id(source)]
                going = first <= current <= last
                seq = current if going else last
                timed = going and bool(deadline)
                since = _began(_now(), entry[LIMIT], deadline) if timed else entry[CREATED]
                shown = (entry[ID] + seq - first,
                         (entry[GROUP], seq, entry[WHAT], going, since),
                         None if timed else entry)
            if going and (running is None or shown[0] < running[0]):
                running = shown
            if newest is None or shown[0] > newest[0]:
                newest = shown
        kept = [s for s in list(self._samples) if s is not None]
        sampled = sorted(s for s in kept if s[0] > after and s[1] in groups)[-limit:]
        mark = max((s[0] for s in kept), default=after)
        samples = [v for s in sampled for v in (s[1], s[2], s[3] // 1000)]
        doing = running or newest
        if doing is None:
            return None, mark, samples
        _, (group_id, seq, what, going, since), run = doing
        if run is not None:
            # Not the run's first operation's start, which grows with the run's length.
            since = _known_start(run, seq, kept)
        return (group_id, seq, what, going, since), mark, samples

    # -- writing out -------------------------------------------------------------------

    def alarm(self, error: BaseException) -> None:
        """Write the recorder out if ``error`` calls for it and something changed since
        the last dump; never raises (the failure being reported matters more)."""
        if not isinstance(error, ALARMS):
            return
        if (self._recorded(), self._failures) == self._dumped:
            return
        self.dump(f"{type(error).__name__}: {error}")

    def dump(self, reason: str) -> str | None:
        """Write the recorder to ``directory``/asyncoll_trace_rank_<rank>, replacing an
        earlier dump; return the path, or None where it could not be written (logged)."""
        with self._dump_lock:
            self._dumped = (self._recorded(), self._failures)
            entries = self.entries()
            path = os.path.join(self.directory, f"{flight.PREFIX}{self.rank}")
            partial = os.path.join(self.directory,
                                   f".{flight.PREFIX}{self.rank}.{os.getpid()}."
                                   f"{next(self._dumps)}.partial")
            try:
                data = pickle.dumps(flight.torch_dump(self.rank, entries, self.groups,
                                                      self.job, reason))
                os.makedirs(self.directory, exist_ok=True)
                with open(partial, "wb") as out:
                    out.write(data)
                os.replace(partial, path)
            except OSError as exc:
                log.warning("rank %d could not write its flight recorder to %s: %s",
                            self.rank, path, exc)
                return None
        log.warning("rank %d wrote its flight recorder (%d operations) to %s (%s)",
                    self.rank, len(entries), path, reason.split("\n")[0][:200])
        return path

    def _recorded(self) -> int:
        """Operations recorded so far (the record id the next one would get)."""
        run = self._open
        if run is None:
            return self._next
        return max(self._next, int(run[ID] + run[SOURCE].progress()[0] - run[SEQ] + 1))


def _expanded(run: list[Any], first: int, last: int,
              times: dict[int, list[tuple[int, int]]], room: int) -> list[list[Any]]:
    """The last ``room`` operations of ``run`` (seqs ``first`` to ``last``), newest first,
    each an entry of its own; ``times``: each group's sampled (seq, time), in order.

    An operation's time is known for the run's first and for the sampled ones; the
    others are created no earlier than the last time known before them (their
    CREATED), and their STARTED and ENDED are not known (ENDED is UNTIMED once done).
    """
    _, running, completed, deadline = run[SOURCE].progress()
    group, rid = run[GROUP], run[ID] - first
    sampled = times.get(group, [])
    known = [(first, run[CREATED])]
    known += sampled[bisect.bisect_right(sampled, (first, _LATEST)):
                     bisect.bisect_right(sampled, (last, _LATEST))]
    out: list[list[Any]] = []
    for seq in range(last, max(first, last - room + 1) - 1, -1):
        while known[-1][0] > seq:
            known.pop()
        at, when = known[-1]
        started = when if at == seq else 0
        ended = 0
        if seq <= completed:
            ended = UNTIMED
        elif seq == running and deadline:
            started = _began(_now(), run[LIMIT], deadline)
        out.append([rid + seq, group, seq, run[WHAT], run[FINGERPRINT], run[PATH],
                    run[LIMIT], when, started, ended, None,
                    run[STACK] if seq == first else None])
    return out


def _known_start(run: list[Any], seq: int,
                 samples: Sequence[tuple[int, int, int, int]]) -> int:
    """When operation ``seq`` of ``run`` started, as near as known: the time of the newest
    of its run's operations up to ``seq`` that was sampled, else the run's first's (so at
    most SAMPLE_EVERY operations early, however long the run has gone on)."""
    group, first = run[GROUP], run[SEQ]
    return max((when for _, g, s, when in samples if g == group and first <= s <= seq),
               default=run[CREATED])


def _began(now: int, limit: float, deadline: float) -> int:
    """When an operation running under ``limit`` seconds to ``deadline`` (time.monotonic's
    clock; 0: not known) began, on time.time_ns's clock (``now``: its reading)."""
    if not deadline:
        return now
    return now - int((time.monotonic() - deadline + limit) * 1e9)


def _stack() -> list[tuple[str, str, int]]:
    """The caller's frames, innermost first: (function, file, line), as torch keeps them."""
    frame = sys._getframe(2)
    frames: list[tuple[str, str, int]] = []
    while frame is not None and len(frames) < STACK_FRAMES:
        code = frame.f_code
        frames.append((code.co_name, code.co_filename, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
    return frames

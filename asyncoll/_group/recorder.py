"""Recorder: a rank's flight recorder, the last operations of its groups and how they went.

Every collective the group layer runs (asyncoll._group.runner) is entered
here as it is scheduled or started, and marked as it completes or fails;
the ring keeps the last ``capacity`` of them, as torch's Flight Recorder
does. Writing them out (:meth:`Recorder.dump`, in the format torch's
analyzer reads: asyncoll._group.flight) happens only when asked: an
operation timed out or a peer was lost or out of step (:meth:`alarm`), a
SIGUSR1, or ``asyncoll status --dump``.

The fast path records in the calling thread, and an arena all_reduce of a
few bytes takes a few microseconds, so an entry is a plain list made in one
step and changed in place (no object, no dict, no lock: a slot of the ring
is replaced in one store, and record ids come from ``itertools.count``,
which the GIL makes atomic); everything torch's format wants is derived
from it only when it is written out.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Container, Sequence
from typing import Any

from asyncoll._group import flight
from asyncoll._wire.frames import Fingerprint
from asyncoll.errors import (
    CollectiveTimeoutError,
    ConfigurationError,
    MismatchError,
    PeerLostError,
)

log = logging.getLogger("asyncoll")

#: An entry's fields, by index (see flight.Entry for their meaning).
(ID, GROUP, SEQ, WHAT, FINGERPRINT, PATH, LIMIT, CREATED, STARTED, ENDED, ERROR,
 STACK) = range(12)
#: The failures that make a rank write its recorder out by itself.
ALARMS = (CollectiveTimeoutError, PeerLostError, MismatchError)
#: The most frames of a caller's stack an entry keeps (ASYNCOLL_TRACE_STACKS=1).
STACK_FRAMES = 64

_now = time.time_ns


class Recorder:
    """The last ``capacity`` operations of one rank, in every group.

    Args:
        capacity: operations kept (ASYNCOLL_TRACE_BUFFER), at least 1.
        rank: this rank in the job, for the dump's name.
        directory: where :meth:`dump` writes (ASYNCOLL_TRACE_DIR).
        stacks: keep each operation's Python stack (ASYNCOLL_TRACE_STACKS=1).

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
        self._ids = itertools.count()
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

    # -- the hot path ----------------------------------------------------------------------

    def started(self, group_id: int, seq: int, what: str, fingerprint: Fingerprint,
                path: str, limit: float) -> list[Any]:
        """Enter operation ``seq`` of ``group_id``, starting now on ``path``; return its entry."""
        now = _now()
        rid = next(self._ids)
        entry = [rid, group_id, seq, what, fingerprint, path, limit, now, now, 0, None,
                 _stack() if self.stacks else None]
        self._ring[rid % self.capacity] = entry
        return entry

    def scheduled(self, group_id: int, seq: int, what: str, fingerprint: Fingerprint,
                  limit: float, stack: list[tuple[str, str, int]] | None) -> list[Any]:
        """Enter operation ``seq`` of ``group_id``, numbered and waiting for its turn."""
        rid = next(self._ids)
        entry = [rid, group_id, seq, what, fingerprint, "", limit, _now(), 0, 0, None, stack]
        self._ring[rid % self.capacity] = entry
        return entry

    def forget(self, entry: list[Any]) -> None:
        """Take ``entry`` out: its operation was refused before it ran."""
        slot = entry[ID] % self.capacity
        if self._ring[slot] is entry:
            self._ring[slot] = None

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

    # -- reading -----------------------------------------------------------------------

    def entries(self) -> list[list[Any]]:
        """The entries kept, oldest first (copies: later changes do not show in them)."""
        kept = [list(e) for e in list(self._ring) if e is not None]
        kept.sort(key=lambda e: e[ID])
        return kept

    def report(self, after: int, every: int, limit: int, groups: Container[int]
               ) -> tuple[tuple[int, int, str, bool, int] | None, int, list[int]]:
        """What a heartbeat tells of this rank's operations, in one look through the ring
        (some tens of microseconds for the default 2000: for a heartbeat, not for every
        operation).

        Returns:
            - its oldest operation started and not ended, or else its newest: (group
              id, seq, collective, still running, started at, time.time_ns()), or None;
            - the newest record id seen, for the next call's ``after``;
            - (group id, seq, created at in microseconds), flattened, of the last
              ``limit`` operations of ``groups`` recorded after ``after`` whose seq is
              a multiple of ``every`` (see asyncoll._rendezvous.stragglers).
        """
        running: list[Any] | None = None
        newest: list[Any] | None = None
        sampled: list[list[Any]] = []
        for entry in list(self._ring):
            if entry is None:
                continue
            if entry[STARTED] and not entry[ENDED] and (
                    running is None or entry[ID] < running[ID]):
                running = entry
            if newest is None or entry[ID] > newest[ID]:
                newest = entry
            if entry[ID] > after and entry[SEQ] % every == 0 and entry[GROUP] in groups:
                sampled.append(entry)
        sampled.sort(key=lambda e: e[ID])
        samples = [v for e in sampled[-limit:] for v in (e[GROUP], e[SEQ], e[CREATED] // 1000)]
        mark = newest[ID] if newest is not None else after
        shown = running or newest
        if shown is None:
            return None, mark, samples
        return ((shown[GROUP], shown[SEQ], shown[WHAT], shown is running,
                 shown[STARTED] or shown[CREATED]), mark, samples)

    # -- writing out -------------------------------------------------------------------

    def alarm(self, error: BaseException) -> None:
        """Write the recorder out if ``error`` calls for it and something changed since
        the last dump; never raises (the failure being reported matters more)."""
        if not isinstance(error, ALARMS):
            return
        seen = (self._peek_next_id(), self._failures)
        if seen == self._dumped:
            return
        self.dump(f"{type(error).__name__}: {error}")

    def dump(self, reason: str) -> str | None:
        """Write the recorder to ``directory``/asyncoll_trace_rank_<rank>, replacing an
        earlier dump; return the path, or None where it could not be written (logged)."""
        with self._dump_lock:
            self._dumped = (self._peek_next_id(), self._failures)
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

    def _peek_next_id(self) -> int:
        newest = max((e[ID] for e in list(self._ring) if e is not None), default=-1)
        return newest + 1


def _stack() -> list[tuple[str, str, int]]:
    """The caller's frames, innermost first: (function, file, line), as torch keeps them."""
    frame = sys._getframe(2)
    frames: list[tuple[str, str, int]] = []
    while frame is not None and len(frames) < STACK_FRAMES:
        code = frame.f_code
        frames.append((code.co_name, code.co_filename, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
    return frames

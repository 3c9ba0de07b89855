"""GroupFaults: which groups are broken on this rank, why, and telling their members.

The group layer's half of failure handling; the transport's half is one
``fail`` per peer or channel (a tag's first field: here a group's id). This
object listens to the mesh (:class:`asyncoll._transport.base.Listener`) and
decides:

- a lost peer breaks every group it belongs to;
- an ABORT frame from a member breaks its group here too, and is passed on
  to the members connected to this rank, so it reaches every member some
  operation connected, not just the neighbours of the rank that failed first;
- a frame kept early for the operation running now, with another
  fingerprint, or for an operation this rank already completed, means the
  ranks are out of step: the group is broken with MismatchError;
- and how a frame that does not fit its receive, or waiting for a member
  that left, is worded (asyncoll._group.mismatch): the mesh fails the
  receive with the error this object gives it.

Breaking a group is sticky, as gloo's pair errors are: every pending and
later send and receive of it fails with the first error (the mesh does
that), and ABORT frames tell the other members, so a ring whose member
failed does not wait for data that will never come.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from asyncoll._group.mismatch import desync, left_error, size_mismatch, stale
from asyncoll._transport.base import MeshControl, Tag
from asyncoll._wire.frames import Fingerprint, decode_abort, encode_abort
from asyncoll.errors import (
    AsyncollError,
    CollectiveTimeoutError,
    PeerLostError,
    broken_by,
    error_code,
    error_from_code,
    timed_out_words,
)


def named_by(error: BaseException) -> tuple[int, float]:
    """(the rank ``error`` names, a timeout's deadline in seconds) for the records that
    tell other members why this one gave up: the lost peer of a PeerLostError, the
    first rank a CollectiveTimeoutError waited for; (-1, 0.0) for the rest."""
    if isinstance(error, PeerLostError):
        return error.rank, 0.0
    if isinstance(error, CollectiveTimeoutError) and error.waiting_for:
        return error.waiting_for[0], error.seconds
    return -1, 0.0


class Progress:
    """Where one group's operations are on this rank: the one running now ((seq,
    fingerprint), or None), the last seq completed (0: none), and that operation's
    (seq, fingerprint), so that a frame sent late for it can name the argument that
    differs.

    Its fields are slots, which the compiled entry writes itself
    (asyncoll/_native/field.c).
    """

    __slots__ = ("running", "completed", "last")

    def __init__(self) -> None:
        self.running: tuple[int, Fingerprint] | None = None
        self.completed = 0
        self.last: tuple[int, Fingerprint] | None = None


#: What a group that never ran an operation here reads as (never written).
_NOTHING_YET = Progress()


class GroupFaults:
    """The broken state of this rank's groups; the mesh's listener."""

    def __init__(self, mesh: MeshControl) -> None:
        self._mesh = mesh
        #: Members of every group this rank knows (and of point-to-point channels).
        self._groups: dict[int, tuple[int, ...]] = {}
        #: Each broken group's first error (empty while every group is intact).
        self.broken: dict[int, AsyncollError] = {}
        #: The operation each broken group broke in, where known.
        self._broken_in: dict[int, int] = {}
        #: The operation each group runs now, and the last one each completed.
        self._progress: dict[int, Progress] = {}
        #: Members that left the job, with the error of waiting for them.
        self._left: dict[int, AsyncollError] = {}
        #: Members lost: found by the data plane or told by the coordinator.
        self._lost: set[int] = set()
        #: Told of each group's breaking error, once (the flight recorder's alarm).
        self.on_break: Callable[[AsyncollError], None] | None = None
        mesh.listener = self

    def register(self, group_id: int, ranks: Sequence[int]) -> None:
        """Record a group's members, so a lost peer breaks every group it belongs to."""
        self._groups[group_id] = tuple(ranks)

    def error(self, group_id: int) -> AsyncollError | None:
        """The failure that broke group ``group_id``, or None while it is intact."""
        return self.broken.get(group_id)

    def stopping(self, group_id: int) -> AsyncollError | None:
        """What stops the operation running in ``group_id`` (None: the group is intact).

        The group's error where it broke in this operation, or without one (a
        member was lost); GroupBrokenError, caused by it, where it broke in an
        earlier operation, which this member had completed already.
        """
        first = self.broken.get(group_id)
        if first is None:
            return None
        running = self._progress.get(group_id, _NOTHING_YET).running
        broke_in = self._broken_in.get(group_id, 0)
        if running is None or not broke_in or running[0] <= broke_in:
            return copy.copy(first)
        error = broken_by(f"group {group_id} (ranks {list(self._groups.get(group_id, ()))})",
                          first)
        error.__cause__ = first
        return error

    def refusal(self, group_id: int, seq: int, what: str) -> AsyncollError | None:
        """The error operation ``seq`` of group ``group_id`` (named ``what``) meets as it
        begins, or None while the group is intact.

        The group's own error where it broke in this very operation (a member gave
        up on it before it began here: it is this call's failure too); else
        GroupBrokenError, caused by it.
        """
        first = self.broken.get(group_id)
        if first is None:
            return None
        if self._broken_in.get(group_id) == seq:
            return copy.copy(first)
        error = broken_by(what, first)
        error.__cause__ = first
        return error

    def begin(self, group_id: int, seq: int, fingerprint: Fingerprint,
              scan: bool = True) -> None:
        """Operation ``seq`` of ``group_id`` starts here: frames for it must match it.

        With ``scan`` False it only takes note, which any thread may do; the
        frames already kept are then checked by :meth:`scan`, on the loop.
        """
        progress = self._progress.get(group_id)
        if progress is None:
            progress = self.progress_of(group_id)
        progress.running = (seq, fingerprint)
        if scan:
            self.scan(group_id)

    def progress(self, group_id: int) -> tuple[int, int]:
        """(the seq ``group_id`` runs now, or 0; the last seq it completed, or 0)."""
        progress = self._progress.get(group_id, _NOTHING_YET)
        running = progress.running
        return (running[0] if running is not None else 0), progress.completed

    def progress_of(self, group_id: int) -> Progress:
        """Group ``group_id``'s record of its operations here (made at its first)."""
        progress = self._progress.get(group_id)
        if progress is None:
            progress = self._progress[group_id] = Progress()
        return progress

    def complete(self, group_id: int, seq: int, scan: bool = True) -> None:
        """Operation ``seq`` of ``group_id`` finished here (``scan``: as for begin).

        A frame kept for it (or for an earlier one) was sent by a rank that ran
        a different operation: the group is out of step and is broken.
        """
        progress = self._progress.get(group_id)
        if progress is None:
            progress = self.progress_of(group_id)
        progress.completed = seq
        running, progress.running = progress.running, None
        if running is not None and running[0] == seq:
            progress.last = running
        if scan:
            self.scan(group_id)

    def scan(self, group_id: int) -> None:
        """Check the frames kept early for ``group_id`` against what it runs and ran."""
        if not self._mesh.has_early:
            return
        progress = self._progress.get(group_id, _NOTHING_YET)
        running, completed = progress.running, progress.completed
        for peer, tag, theirs in self._mesh.early(group_id):
            if running is not None and tag[1] == running[0] and theirs != running[1]:
                self.abort(group_id, tag[1], desync(self._mesh.rank, peer, tag, running[1],
                                                    theirs))
                return
            if tag[1] <= completed:
                self._stale(peer, tag, theirs)

    def abort(self, group_id: int, seq: int, error: AsyncollError,
              members: Sequence[int] | None = None) -> None:
        """Break group ``group_id`` here, and tell its other members to do the same."""
        if self._break(group_id, error, seq):
            self._send_aborts(group_id, seq, error, members)

    def member_left(self, peer: int, hostname: str) -> None:
        """``peer`` left the job (the coordinator says so): nothing more can come from it.

        No group breaks: the ranks' last operations with it may still be
        completing. Only waiting for it fails (the mesh's receives, and
        :meth:`left` for waits elsewhere).
        """
        self._left[peer] = left_error(peer, hostname)
        self._mesh.peer_left(peer, hostname)

    def gone(self) -> set[int]:
        """The members this rank knows left or were lost."""
        return self._lost | self._left.keys()

    def someone_left(self) -> bool:
        """Whether any member left the job (the coordinator said so)."""
        return bool(self._left)

    def left(self, peer: int) -> AsyncollError | None:
        """The error of waiting for ``peer``, if it left the job; else None."""
        return self._left.get(peer)

    def peer_lost(self, peer: int, error: AsyncollError) -> None:
        """``peer`` is gone: fail everything with it and break every group it is in.

        The other members hear it from this rank too (ABORT frames), before
        anything else this rank may send them, such as its goodbye.
        """
        self._lost.add(peer)
        self._mesh.fail_peer(peer, error)
        for group_id, members in list(self._groups.items()):
            if peer in members and self._break(group_id, error):
                completed = self._progress.get(group_id, _NOTHING_YET).completed
                self._send_aborts(group_id, completed + 1, error, members)

    def exclude(self, error: AsyncollError) -> None:
        """The job went on without this rank (an elastic job): break every group.

        No aborts are sent: the other members have left this generation's mesh.
        """
        for group_id in list(self._groups):
            self._break(group_id, error)

    # -- the mesh's Listener ------------------------------------------------------------

    def early_frame(self, peer: int, tag: Tag, fingerprint: Fingerprint) -> None:
        """A frame was kept early: it must fit what its group runs, or ran."""
        progress = self._progress.get(tag[0], _NOTHING_YET)
        running = progress.running
        if running is not None and running[0] == tag[1] and running[1] != fingerprint:
            self.abort(tag[0], tag[1], desync(self._mesh.rank, peer, tag, running[1],
                                              fingerprint))
        elif tag[1] <= progress.completed:
            self._stale(peer, tag, fingerprint)

    def frame_mismatched(self, peer: int, tag: Tag, mine: Fingerprint,
                         theirs: Fingerprint) -> AsyncollError:
        """A frame of another operation than its receive's: the ranks are out of step."""
        return desync(self._mesh.rank, peer, tag, mine, theirs)

    def frame_wrong_size(self, peer: int, tag: Tag, sent: int,
                         expected: int) -> AsyncollError:
        """A frame of another size than its receive's: the collectives' sizes differ."""
        return size_mismatch(peer, tag, sent, expected)

    def peer_departed(self, peer: int, hostname: str) -> AsyncollError:
        """A member left the job while this rank still waited for its data."""
        return left_error(peer, hostname)

    def control_received(self, peer: int, tag: Tag, payload: bytes) -> None:
        """Rank ``peer`` gave up on operation ``tag[1]`` of a group: break it here too."""
        group_id, seq = tag[0], tag[1]
        code, lost, message = decode_abort(payload)
        error = self.gave_up(group_id, seq, peer, code, lost, message)
        if self._break(group_id, error, seq):
            self._send_aborts(group_id, seq, error, None, skip=peer)

    def gave_up(self, group_id: int, operation: int, peer: int, code: str, lost: int,
                said: str = "", where: str = "", waited: float = 0.0) -> AsyncollError:
        """The error rank ``peer`` gave up on ``operation`` of ``group_id`` with, here.

        ``code`` is its error's (asyncoll.errors.error_code), ``lost`` the rank
        its error names (:func:`named_by`; -1: none), ``said`` its message,
        ``where`` the path it gave up on, for the words (an arena or direct
        links number operations their own way), ``waited`` a timeout's
        deadline (0.0: unknown). Every path's "rank X gave up" is worded here.
        """
        if said.startswith("rank ") and "abandoned operation" in said:
            text = said  # relayed: it names the member that gave up first
        else:
            text = f"rank {peer} abandoned operation #{operation} of group {group_id}{where}" + (
                f": {said}" if said else "")
        error = error_from_code(code, text)
        if isinstance(error, CollectiveTimeoutError) and lost >= 0:
            # Waited for by the peer, this rank was itself waiting (on a third, its
            # deadline not yet out): what it waits for now is the peer that gave up.
            waiting = peer if lost == self._mesh.rank else lost
            error.waiting_for, error.seconds = (waiting,), waited
            if not said and waited:
                # Only numbers came (an arena's control line): say what torch's callers match.
                error.args = (f"{text}: it waited {waited:g} s for data from rank {lost}. "
                              f"{timed_out_words(waited)}",)
        if isinstance(error, PeerLostError):
            error.rank = lost if lost >= 0 else peer
            error.host = self._mesh.hostname(error.rank)
            error.args = (f"rank {error.rank} on host {error.host} was lost (rank {peer} gave "
                          f"up on operation #{operation} of group {group_id}{where} for it)",)
        return error

    # -- internals ----------------------------------------------------------------------

    def _break(self, group_id: int, error: AsyncollError, seq: int = 0) -> bool:
        if group_id in self.broken:
            return False
        self.broken[group_id] = error
        if seq:
            self._broken_in[group_id] = seq
        self._mesh.fail_channel(group_id, error)
        if self.on_break is not None:
            self.on_break(error)
        return True

    def _send_aborts(self, group_id: int, seq: int, error: AsyncollError,
                     members: Sequence[int] | None, skip: int = -1) -> None:
        lost = named_by(error)[0]
        payload = memoryview(encode_abort(error_code(type(error)), str(error), lost))
        for peer in members if members is not None else self._groups.get(group_id, ()):
            if peer != skip:
                self._mesh.send_control(peer, (group_id, seq, 0), payload)

    def _stale(self, peer: int, tag: Tag, theirs: Fingerprint) -> None:
        """Rank ``peer`` sent data for an operation this rank finished without it."""
        last = self._progress.get(tag[0], _NOTHING_YET).last
        mine = last[1] if last is not None and last[0] == tag[1] else None
        self.abort(tag[0], tag[1], stale(self._mesh.rank, peer, tag, mine, theirs))

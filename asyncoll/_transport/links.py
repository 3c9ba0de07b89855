"""DirectLinks: one process's own TCP connections to a group's members, used from one thread.

For collectives that run to completion in the calling thread across hosts
(issue 13's fast path where the members do not share a host): a member has
a connection to each member its algorithms exchange records with, opened
the first time one does (by the lower member of the pair, as the mesh's),
and used only by whichever thread runs the group's operation of the moment
(one at a time). So a member of N holds O(log N) of them for recursive
doubling and the binomial tree, not N - 1. The event loop never touches
them: no hop to its thread and back, no wake-up of it, on the way of a
small blocking collective.

The higher member of a pair queues what it sends until the lower one's
connection arrives; every wait also accepts connections on the member's
listening socket, and takes a new one once its greeting carries this
member's cookie (which only the job's members learned).

A record is a frame of the mesh's wire format (asyncoll._wire.frames): a
DATA frame whose seq is the operation's number on these links, with the
algorithm's step, the operation's fingerprint and the payload's length,
then the payload. Each member's records meet their receives in its
connection's :class:`~asyncoll._transport.matcher.Matcher`, by tag (0, the
operation, the step), as the mesh's frames do in its inboxes: records of an
operation this member has not reached yet (a peer may run ahead) are kept
until it gets there. An ABORT frame says
the sender gave up on operation ``seq``, with the mesh's ABORT payload (its
error's code, the rank that error names, its message).

The links are three parts: the sockets (Connections,
asyncoll._transport.link_connections, which DirectLinks extends), the
records arriving on them (a RecordReader, asyncoll._transport.link_reader),
and, here, what an operation does with both: stamp, send, post, wait.
Their ``mesh`` (asyncoll._transport.link_mesh) is the same links behind the
algorithms' Mesh seam.

Waiting polls the sockets in slices of :data:`CHECK_S`, between which a
failure check runs and the deadline is looked at; every send is
non-blocking, and a wait also moves the bytes of sends still queued, so two
members sending each other large records at once never block each other.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable, Sequence

from asyncoll._transport.base import Tag
from asyncoll._transport.link_connections import WOULD_BLOCK, Connections, transmit
from asyncoll._transport.link_errors import LinkLost, LinksExpired
from asyncoll._transport.link_mesh import Flushed, LinksMesh
from asyncoll._transport.link_opening import Dialling
from asyncoll._transport.link_reader import RecordReader
from asyncoll._wire.frames import (
    NO_FINGERPRINT,
    Fingerprint,
    FrameKind,
    encode_abort,
    pack_fields,
    pack_header,
)

# Module constants: reading an Enum member off its class costs 0.2 us a time.
_DATA, _ABORT = int(FrameKind.DATA), int(FrameKind.ABORT)
#: Seconds between failure checks while a wait blocks in poll().
CHECK_S = 0.01
#: Polls that do not sleep before a wait sleeps in poll(): a small record
#: often arrives within microseconds, sooner than a sleeping thread wakes up.
EAGER_POLLS = 64


class DirectLinks(Connections):
    """This member's connections to the others of one group, by member index.

    Args:
        sockets: connected sockets, by member index, to begin with.
        eager_polls: polls that do not sleep before a wait does (0 where this
            host runs more members than it has processors: a member that
            keeps its processor then delays the one it waits for).
        dialling: how to open the links to other members when first needed,
            and accept theirs; without it, ``sockets`` are all there is.
    """

    def __init__(self, sockets: dict[int, socket.socket], eager_polls: int = EAGER_POLLS,
                 dialling: Dialling | None = None) -> None:
        super().__init__(sockets, dialling)
        self._eager_polls = eager_polls
        #: What reads the records that arrive, and checks them against the operation.
        self._reader = reader = RecordReader(self)
        self._read = reader.read
        #: The operation now running and its fingerprint, which every record sent carries
        #: (the reader holds the same two, for the records that arrive).
        self.operation = 0
        self.fingerprint: Fingerprint = NO_FINGERPRINT
        #: The receives this operation completed, (member, step): the reader's.
        self._done = reader.done
        #: Whether records kept early are yet to be checked against the operation now run.
        self._unchecked = False
        self.deadline = 0.0
        self.check: Callable[[list[int]], None] = lambda waiting_for: None
        #: What awaiting a send over the Mesh seam does: wait for every record to leave.
        self._flushed = Flushed(self)
        #: These links behind the algorithms' Mesh seam, for a Team to run over
        #: (rank -1: links made of given sockets only do not know this member's index).
        self.mesh = LinksMesh(self, dialling.me, len(dialling.addresses)) \
            if dialling is not None else LinksMesh(self, -1, len(sockets) + 1)

    # -- what an operation does ------------------------------------------------------------

    def stamp(self, operation: int, fingerprint: Sequence[int], deadline: float,
              check: Callable[[list[int]], None]) -> None:
        """From now on, records carry ``operation`` and ``fingerprint`` (and must match them),
        and waits end at ``deadline``, calling ``check`` between polls."""
        reader = self._reader
        self.operation = reader.operation = operation
        # tuple.__new__ skips NamedTuple's argument parsing: this runs every operation.
        self.fingerprint = reader.fingerprint = tuple.__new__(Fingerprint, fingerprint)
        self.deadline = deadline
        self.check = check
        # Receives an operation left posted (it failed) carry its number in their
        # tags: no later record reaches them (abort forgets them).
        self._done.clear()
        self._unchecked = bool(self._early.frames) or reader.later is not None

    def send(self, index: int, step: int, payload: memoryview) -> None:
        """Start sending record ``step`` to member ``index`` (:meth:`send_tagged`)."""
        self.send_tagged(index, (0, 0, step), payload)

    def send_tagged(self, index: int, tag: Tag, payload: memoryview,
                    fingerprint: Fingerprint = NO_FINGERPRINT) -> Flushed:
        """Start sending the record of step ``tag[2]`` to member ``index``; :meth:`flush`,
        or awaiting what this returns, waits for it to leave.

        The Mesh seam's ``send`` (LinksMesh): of a tag only its step goes on the
        wire, and every record carries the stamped fingerprint (not ``fingerprint``).
        The payload's memory must stay unchanged until it has left.
        """
        peer = self._peers.get(index) or self._open(index)
        if peer.closed is not None:
            raise LinkLost(index, peer.closed)
        header = memoryview(pack_fields(_DATA, 0, 0, tag[2], self.operation, payload.nbytes,
                                        *self.fingerprint))
        if peer.out or peer.sock is None:
            peer.out.append(header)
            if payload.nbytes:
                peer.out.append(payload)
            if peer.sock is None:
                self._queued.add(index)
            return self._flushed
        try:
            sent = transmit(peer.sock, [header, payload])
        except WOULD_BLOCK:
            sent = 0
        except OSError as exc:
            raise LinkLost(index, f"failed: {exc}") from None
        if sent < header.nbytes:
            peer.out.append(header[sent:])
            peer.out.append(payload)
        elif sent < header.nbytes + payload.nbytes:
            peer.out.append(payload[sent - header.nbytes:])
        if peer.out:
            self._want_write(peer)
        return self._flushed

    def post(self, index: int, step: int, out: memoryview) -> None:
        """Expect record ``step`` of this operation from member ``index``, into ``out``."""
        peer = self._peers.get(index) or self._open(index)
        tag = (0, self.operation, step)
        kept = peer.take(tag) if peer.kept else None
        if kept is not None:
            self._reader.fill(index, out, kept[1], kept[0])
            self._done.add((index, step))
        else:
            peer.posted[tag] = out

    def received(self, index: int, step: int) -> bool:
        """Whether the record posted for (``index``, ``step``) has arrived."""
        return (index, step) in self._done

    def wait_received(self, index: int, step: int) -> None:
        """Block until the record posted for (``index``, ``step``) has arrived."""
        key = (index, step)
        if not self._unchecked:
            # A record that has arrived is taken, even if its sender closed since.
            if key in self._done:
                return
            peer = self._peers[index]
            if not self._writing and not self._gone and peer.sock is not None:
                # A small record has often arrived by now: one recv, no poll, takes it.
                self._read(peer)
                if key in self._done:
                    return
        self._wait(lambda: key in self._done, lambda: [index])

    def flush(self) -> None:
        """Block until every record sent has left this process."""
        if not self._writing and not self._queued and not self._unchecked and not self._gone:
            return  # small records leave within their send: nothing to wait for
        self._wait(lambda: not self._writing and not self._queued, self._unsent)
        # A closed connection stops being written (ended): what it kept did not leave.
        self._fail_if_gone(self._unsent)

    def _unsent(self) -> list[int]:
        """The members that records queued for them have not yet left for."""
        return [index for index, peer in self._peers.items() if peer.out]

    def abort(self, operation: int, code: str, rank: int, message: str = "") -> None:
        """Tell every member, best effort, that this one gave up on ``operation``, and why
        (its error's ``code``, the ``rank`` that error names)."""
        payload = encode_abort(code, message, rank)
        record = pack_header(_ABORT, 0, operation, 0, len(payload)) + payload
        for peer in self._peers.values():
            peer.posted.clear()  # this member waits for none of them now
            try:
                # (A TLS send must not cut in before one that waits to be retried.)
                if peer.sock is not None and not (peer.out and
                                                  isinstance(peer.sock, ssl.SSLSocket)):
                    peer.sock.send(record)
            except OSError:
                pass

    # -- waiting and moving bytes ----------------------------------------------------------

    def _wait(self, ready: Callable[[], bool], waiting_for: Callable[[], list[int]]) -> None:
        if self._unchecked:
            self._unchecked = False
            self._reader.check_early(self._peers.values())
        eager = self._eager_polls
        while not ready():
            self._fail_if_gone(waiting_for)
            if self._writing:
                self._write_some()
            if eager:
                # A small record often arrives within microseconds: look without
                # sleeping first (a sleeping thread takes longer to wake).
                eager -= 1
                events = self._poll.poll(0)
            else:
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    raise LinksExpired(waiting_for())
                events = self._poll.poll(min(remaining, CHECK_S) * 1000)
                if not events:
                    self.check(waiting_for())
                    continue
            for fd, event in events:
                if fd == self._server_fd:
                    self._accept()
                    continue
                ready_peer = self._by_fd.get(fd)
                if ready_peer is not None and event & (select.POLLIN | select.POLLERR |
                                                       select.POLLHUP):
                    self._read(ready_peer)

    def _fail_if_gone(self, waiting_for: Callable[[], list[int]]) -> None:
        """Raise LinkLost if a member the wait is for has closed its connection."""
        if self._gone:
            for index in waiting_for():
                peer = self._peers.get(index)
                if peer is not None and peer.closed is not None:
                    raise LinkLost(index, peer.closed)

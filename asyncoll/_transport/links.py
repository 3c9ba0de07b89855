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
from typing import Any

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._transport.link_connections import (
    READ_BYTES,
    WOULD_BLOCK,
    Connections,
    Peer,
    pending,
    transmit,
)
from asyncoll._transport.link_mesh import LinksMesh
from asyncoll._transport.link_errors import LinkAborted, LinkLost, LinkMismatch, LinksExpired
from asyncoll._transport.link_opening import Dialling
from asyncoll._wire.frames import (
    HEADER_FIELDS,
    MAGIC,
    NO_FINGERPRINT,
    Fingerprint,
    FrameKind,
    check_fields,
    decode_abort,
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
        #: The operation now running, its fingerprint, and the receives it completed
        #: (member, step); those still waiting are in each peer's matcher.
        self.operation = 0
        self.fingerprint: Fingerprint = NO_FINGERPRINT
        self._done: set[tuple[int, int]] = set()
        #: Whether records kept early are yet to be checked against the operation now run.
        self._unchecked = False
        #: An ABORT for an operation after the one now running, kept until it runs.
        self._later: LinkAborted | None = None
        self.deadline = 0.0
        self.check: Callable[[list[int]], None] = lambda waiting_for: None
        #: These links behind the algorithms' Mesh seam, for a Team to run over
        #: (rank -1: links made of given sockets only do not know this member's index).
        self.mesh = LinksMesh(self, dialling.me, len(dialling.addresses)) \
            if dialling is not None else LinksMesh(self, -1, len(sockets) + 1)

    # -- what an operation does ------------------------------------------------------------

    def stamp(self, operation: int, fingerprint: Sequence[int], deadline: float,
              check: Callable[[list[int]], None]) -> None:
        """From now on, records carry ``operation`` and ``fingerprint`` (and must match them),
        and waits end at ``deadline``, calling ``check`` between polls."""
        self.operation = operation
        # tuple.__new__ skips NamedTuple's argument parsing: this runs every operation.
        self.fingerprint = tuple.__new__(Fingerprint, fingerprint)
        self.deadline = deadline
        self.check = check
        # Receives an operation left posted (it failed) carry its number in their
        # tags: no later record reaches them (abort forgets them).
        self._done.clear()
        self._unchecked = bool(self._early.frames) or self._later is not None

    def send(self, index: int, step: int, payload: memoryview) -> None:
        """Start sending a record to member ``index``; :meth:`flush` waits for it to leave.

        The payload's memory must stay unchanged until then.
        """
        peer = self._peers.get(index) or self._open(index)
        if peer.closed is not None:
            raise LinkLost(index, peer.closed)
        header = memoryview(pack_fields(_DATA, 0, 0, step, self.operation, payload.nbytes,
                                        *self.fingerprint))
        if peer.out or peer.sock is None:
            peer.out.append(header)
            if payload.nbytes:
                peer.out.append(payload)
            if peer.sock is None:
                self._queued.add(index)
            return
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

    def post(self, index: int, step: int, out: memoryview) -> None:
        """Expect record ``step`` of this operation from member ``index``, into ``out``."""
        peer = self._peers.get(index) or self._open(index)
        tag = (0, self.operation, step)
        kept = peer.take(tag) if peer.kept else None
        if kept is not None:
            self._fill(index, out, kept[1], kept[0])
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
        # A closed connection stops being written (_closed): what it kept did not leave.
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
            self._check_early()
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

    def _check_early(self) -> None:
        """Raise LinkMismatch for a record kept early that this operation cannot take,
        or the ABORT kept for it.

        A record that came before this member began the operation it was sent
        for is checked here, at the operation's first wait: the member may wait
        for someone else and never post its receive. A record of an operation
        already over was never taken: its sender ran something else then.
        """
        self._unchecked = False
        later = self._later
        if later is not None and later.operation <= self.operation:
            self._later = None
            raise later
        for peer in self._peers.values():
            for (_, operation, _), (payload, fingerprint, _) in peer.kept.items():
                if operation < self.operation or (operation == self.operation and
                                                  fingerprint != self.fingerprint):
                    raise LinkMismatch(peer.index, fingerprint, len(payload), operation)

    def _fail_if_gone(self, waiting_for: Callable[[], list[int]]) -> None:
        """Raise LinkLost if a member the wait is for has closed its connection."""
        if self._gone:
            for index in waiting_for():
                peer = self._peers.get(index)
                if peer is not None and peer.closed is not None:
                    raise LinkLost(index, peer.closed)

    def _read(self, peer: Peer) -> None:
        """Read what ``peer``'s socket holds (poll said it holds something, or a wait
        looks before it polls), record by record.

        Bytes go into the peer's read buffer with one recv, and records are cut
        from it; a payload larger than the buffer is read straight into its
        destination. Only a recv that filled the buffer is followed by another,
        so a wait costs one system call per arrival, not an EAGAIN as well.
        """
        if peer.index < 0:
            identified = self._identify(peer)
            if identified is None:
                return
            peer = identified
        sock = peer.sock
        assert sock is not None
        while True:
            self._parse(peer)
            target = peer.target
            try:
                if target is not None and target.nbytes - peer.target_got > READ_BYTES:
                    got = sock.recv_into(target[peer.target_got:])
                    if got == 0:
                        self._closed(peer, "was closed by the peer")
                        return
                    peer.target_got += got
                    if peer.target_got == target.nbytes:
                        self._finish_record(peer)
                    if not pending(sock):
                        return
                    continue
                if peer.start:
                    leftover = peer.end - peer.start
                    peer.buffer[:leftover] = peer.buffer[peer.start:peer.end]
                    peer.start, peer.end = 0, leftover
                got = sock.recv_into(peer.view[peer.end:])
            except WOULD_BLOCK:
                return
            except OSError as exc:
                self._closed(peer, f"broke: {exc}")
                return
            if got == 0:
                self._closed(peer, "was closed by the peer")
                return
            peer.end += got
            if peer.end < len(peer.buffer) and not pending(sock):
                self._parse(peer)
                return

    def _parse(self, peer: Peer) -> None:
        """Cut the records (and parts of payloads) the read buffer holds."""
        buffer = peer.buffer
        while True:
            if peer.target is None:
                if peer.end - peer.start < HEADER_FIELDS.size:
                    return
                header = HEADER_FIELDS.unpack_from(buffer, peer.start)
                peer.start += HEADER_FIELDS.size
                self._start_record(peer, header)
                continue
            target = peer.target
            take = min(peer.end - peer.start, target.nbytes - peer.target_got)
            if take:
                target[peer.target_got:peer.target_got + take] = \
                    buffer[peer.start:peer.start + take]
                peer.start += take
                peer.target_got += take
            if peer.target_got < target.nbytes:
                return
            self._finish_record(peer)

    def _start_record(self, peer: Peer, header: tuple[Any, ...]) -> None:
        """Decode a header; point the peer at where its payload goes."""
        if header[1] != PROTOCOL_VERSION or header[0] != MAGIC:
            check_fields(header)  # raises: not this protocol's frame
        kind, step, operation, nbytes = header[2], header[5], header[6], header[7]
        fingerprint = header[8:14]
        if kind != _DATA:
            if kind != _ABORT:
                raise LinkLost(peer.index, f"sent a frame of kind {kind}, not a link's record")
            peer.aborted = operation
            peer.target = memoryview(bytearray(nbytes))
            peer.target_got = 0
            if nbytes == 0:
                self._finish_record(peer)
            return
        tag = (0, operation, step)
        posted = peer.posted.get(tag) if operation == self.operation else None
        if posted is not None:
            if fingerprint != self.fingerprint or nbytes != posted.nbytes:
                raise LinkMismatch(peer.index, fingerprint, nbytes, operation)
            peer.target = posted
        else:
            # A record of this operation must carry its fingerprint, posted or not
            # (yet); one of an operation already over, or a step already received,
            # was sent by a member that ran something else.
            if operation < self.operation or (operation == self.operation and (
                    (peer.index, step) in self._done or fingerprint != self.fingerprint)):
                raise LinkMismatch(peer.index, fingerprint, nbytes, operation)
            peer.target = memoryview(bytearray(nbytes))
        peer.key = tag
        peer.fingerprint = fingerprint
        peer.target_got = 0
        if nbytes == 0:
            self._finish_record(peer)

    def _finish_record(self, peer: Peer) -> None:
        target, peer.target = peer.target, None
        assert target is not None
        if peer.aborted is not None:
            code, rank, message = decode_abort(bytes(target))
            aborted = LinkAborted(peer.index, peer.aborted, code, rank, message)
            peer.aborted = None
            if aborted.operation > self.operation:
                # Given up on an operation this member has yet to run (the sender
                # finished this one): it fails that one, at its first wait.
                self._later = self._later or aborted
                return
            raise aborted
        tag = peer.key
        posted = peer.posted.pop(tag, None) if tag[1] == self.operation else None
        if posted is None:
            # Not posted at its header, it went to a bytearray of its own; or (abort
            # forgot its receive meanwhile) to that receive's memory: copied then.
            own = target.obj
            peer.keep(tag, own if isinstance(own, bytearray) and len(own) == target.nbytes
                      else bytearray(target), peer.fingerprint)
            return
        if posted is not target:
            # It began arriving before its receive was posted (while this member
            # was still in an earlier operation): it went to a buffer of its own.
            self._fill(peer.index, posted, peer.fingerprint, target)
        self._done.add((peer.index, tag[2]))

    def _fill(self, index: int, out: memoryview, fingerprint: tuple[int, ...],
              payload: bytearray | memoryview) -> None:
        """Copy a record kept aside into its receive, once it is checked like any other."""
        if fingerprint != self.fingerprint or len(payload) != out.nbytes:
            raise LinkMismatch(index, fingerprint, len(payload), self.operation)
        out[:] = payload

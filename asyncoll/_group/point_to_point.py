"""send and recv: messages between two members of a group, outside its collectives.

Point-to-point frames carry the group id with the top bit set, so they
never match a collective's frames; the frame's seq counts the messages sent
to (or received from) that peer with that tag, and its step is the tag.
Both sides count in call order, so messages with one tag between one pair
arrive in the order they were sent, as MPI promises, with no negotiation.

A message that times out or is cancelled leaves the two counts out of step,
so it breaks the group's point-to-point channel here and on the peer
(sticky, like a collective's failure); the collectives are not affected.

A receive from any source (torch's `recv` without `src`) takes the first
message with its tag to arrive from any of the peers. It must not take a count
it does not use: the count of a peer's next message is the only thing that
matches it, so a receive posted on every peer and cancelled on all but one
would either leave a cancelled receive holding a count (the peer's next
message would then match nobody) or, once a second message had started to
arrive into it, lose that message. So it claims nothing until a message is
here: it *watches* the next frame of every peer (the transport's `watch`:
resolved when the frame is kept as an early frame, taking nothing), takes the
peer whose frame arrived first (arrival stamps order frames across peers),
and only then counts and posts the receive for that peer, which the kept
frame completes at once. Cancelled watches leave no trace. Until it has chosen,
a timeout or cancellation costs nothing, and does not break the channel.

Receives with one tag match in call order, as MPI's do: a receive called
while an earlier receive from any source with that tag has not chosen its
sender waits for that choice before it takes a count, so a later
`recv(src=p)` cannot take p's next message (and count) from under an
earlier receive from any source, which would then watch a frame no longer
coming to it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any

from numpy.typing import NDArray

from asyncoll._algorithms.team import as_bytes
from asyncoll._compat import timeout as timeout_after
from asyncoll._group import arguments as check
from asyncoll._group.context import Membership
from asyncoll._group.core import GroupCore
from asyncoll._group.plan import seconds
from asyncoll._group.tensors import Buffer, as_buffer, as_source
from asyncoll._wire.dtypes import dtype_code
from asyncoll._wire.frames import Fingerprint, Operation
from asyncoll.errors import (
    AsyncollError,
    CollectiveError,
    ConfigurationError,
    CollectiveTimeoutError,
    broken_by,
    timed_out_words,
)

#: The largest tag a message may carry (the frame's 32-bit step).
MAX_TAG = (1 << 32) - 1
_CHANNEL_BIT = 1 << 31


def _fingerprint(data: NDArray[Any]) -> Fingerprint:
    return Fingerprint(Operation.SEND, dtype_code(data.dtype), elements=data.size)


class Messages:
    """The point-to-point channel of one group on this rank."""

    def __init__(self, session: Membership, group_id: int, ranks: Sequence[int]) -> None:
        self._session = session
        self._group_id = group_id
        self._channel = _CHANNEL_BIT | group_id
        self._ranks = tuple(ranks)
        session.faults.register(self._channel, ranks)
        self._sent: dict[tuple[int, int], int] = {}
        self._received: dict[tuple[int, int], int] = {}
        #: Per tag, the latest receive from any source, resolved once it has chosen.
        self._choosing: dict[int, asyncio.Future[None]] = {}

    async def send(self, peer: int, tag: int, data: NDArray[Any], limit: float) -> None:
        """Send `data` to global rank `peer`; done when its memory may be reused."""
        count = self._sent[peer, tag] = self._sent.get((peer, tag), 0) + 1
        frame = (self._channel, count, tag)
        await self._transfer(f"send #{count} to rank {peer} (tag {tag})", peer, limit,
                             lambda: self._session.mesh.send(peer, frame, as_bytes(data),
                                                             _fingerprint(data)))

    async def recv(self, peer: int, tag: int, buffer: Buffer, limit: float) -> int:
        """Receive the next message from global rank `peer` with `tag`; return `peer`."""
        earlier = self._choosing.get(tag)
        if earlier is not None:
            await self._after(earlier, f"recv from rank {peer} (tag {tag})", limit)
        return await self._take(peer, tag, buffer, limit)

    async def recv_any(self, peers: Sequence[int], tag: int, buffer: Buffer,
                       limit: float) -> int:
        """Receive the first message with `tag` to arrive from any of `peers`; return
        its sender (a global rank). See the module's docstring for how.
        """
        what = f"recv from any of ranks {list(peers)} (tag {tag})"
        earlier = self._choosing.get(tag)
        chosen: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._choosing[tag] = chosen
        try:
            async with timeout_after(limit) as deadline:
                if earlier is not None:
                    await _settled(earlier)
                self._check(what)
                peer = await self._first_arrival(peers, tag)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise CollectiveTimeoutError(_timed_out(f"{what} on group {self._group_id}",
                                                    limit)) from None
        finally:
            # Receives called after this one may take counts now.
            chosen.set_result(None)
            if self._choosing.get(tag) is chosen:
                del self._choosing[tag]
        # Its frame is here: the receive completes at once (within the same deadline).
        return await self._take(peer, tag, buffer, limit)

    async def _take(self, peer: int, tag: int, buffer: Buffer, limit: float) -> int:
        count = self._received[peer, tag] = self._received.get((peer, tag), 0) + 1
        frame = (self._channel, count, tag)
        await self._transfer(f"recv #{count} from rank {peer} (tag {tag})", peer, limit,
                             lambda: self._session.mesh.recv_into(
                                 peer, frame, as_bytes(buffer.flat), _fingerprint(buffer.flat)))
        buffer.write_back()
        return peer

    async def _after(self, earlier: asyncio.Future[None], what: str, limit: float) -> None:
        """Wait (within `limit`) for an earlier receive from any source to choose."""
        try:
            async with timeout_after(limit) as deadline:
                await _settled(earlier)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise CollectiveTimeoutError(_timed_out(f"{what} on group {self._group_id}",
                                                    limit)) from None

    async def _first_arrival(self, peers: Sequence[int], tag: int) -> int:
        """The peer whose next frame with `tag` arrives first; nothing is taken.

        A peer that fails (left the job, or was lost) drops out of the race; the
        receive fails once every peer has, or when the channel itself breaks.
        """
        mesh = self._session.mesh
        pending = {mesh.watch(peer, (self._channel, self._received.get((peer, tag), 0) + 1,
                                     tag)): peer for peer in peers}
        try:
            while True:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                arrivals, failures = [], []
                for watch in done:
                    peer = pending.pop(watch)
                    error = watch.exception()
                    if error is None:
                        arrivals.append((watch.result(), peer))
                    else:
                        failures.append(error)
                if arrivals:
                    return min(arrivals)[1]
                broken = self._session.faults.error(self._channel)
                if broken is not None or not pending:
                    raise broken or failures[0]
        finally:
            for watch in pending:
                watch.cancel()

    def abort(self, error: AsyncollError) -> None:
        """Break this group's messages here and tell its members (as GroupCore.abort)."""
        self._session.faults.abort(self._channel, 0, error, self._ranks)

    def _check(self, what: str) -> None:
        self._session.check_open(what)
        first = self._session.faults.error(self._channel)
        if first is not None:
            raise broken_by(f"point-to-point messages of group {self._group_id}",
                            first) from first

    async def _transfer(self, what: str, peer: int, limit: float,
                        start: Callable[[], Awaitable[None]]) -> None:
        faults = self._session.faults
        self._session.ops += 1
        self._check(what)
        try:
            async with timeout_after(limit) as deadline:
                await start()
        except TimeoutError:
            if not deadline.expired():
                raise
            error = CollectiveTimeoutError(_timed_out(f"{what} on group {self._group_id}",
                                                      limit))
            faults.abort(self._channel, 0, error, (peer,))
            raise error from None
        except asyncio.CancelledError:
            faults.abort(self._channel, 0, CollectiveError(f"{what} was cancelled"),
                             (peer,))
            raise


async def _settled(future: asyncio.Future[None]) -> None:
    """Wait for `future` without cancelling it when this task is cancelled."""
    await asyncio.wait([future])


def _timed_out(what: str, limit: float) -> str:
    return f"{what} did not complete within {limit:g} s. {timed_out_words(limit)}"


class PointToPoint:
    """A group's send and recv (see the module): checked here, carried by its Messages."""

    def __init__(self, core: GroupCore, session: Membership) -> None:
        # What each message reads, taken once: none of it changes in a group's life.
        self._session = session
        self._group_id = core.group_id
        self._ranks = core.ranks
        self._timeout = core.timeout
        self._me = session.rank
        self._check_member = core.check_member

    @functools.cached_property
    def _messages(self) -> Messages:
        # Made on the first message: a group that sends none registers no channel.
        return Messages(self._session, self._group_id, self._ranks)

    def abort(self, error: AsyncollError) -> None:
        """Fail every message of this group, running or to come, with `error`, and tell
        its members. On the loop."""
        self._messages.abort(error)

    def failure(self) -> AsyncollError | None:
        """What broke this group's messages, or None while they are intact (or unused)."""
        messages: Messages | None = self.__dict__.get("_messages")
        return None if messages is None else self._session.faults.error(messages._channel)

    def send(self, tensor: Any, dst: int, tag: int = 0,
             timeout: float | timedelta | None = None) -> Coroutine[Any, Any, None]:
        """Send `tensor` to global rank `dst`, which calls recv with the same tag.

        Messages to one peer with one tag arrive in the order they were sent.
        """
        peer = self._peer(dst, "dst", tag, "send")
        data = as_source(tensor, "send")
        return self._messages.send(peer, tag, data, seconds(timeout, self._timeout))

    def recv(self, tensor: Any, src: int | None, tag: int = 0,
             timeout: float | timedelta | None = None) -> Coroutine[Any, Any, int]:
        """Receive into `tensor` what global rank `src` sends with `tag`; return the sender.

        With `src` None (torch's receive from any source), the first message
        with `tag` to arrive from any other member is received, and its
        sender's global rank returned; one member's messages with one tag still
        arrive in the order it sent them, and receives with one tag match in
        the order they were called (see the module).

        Raises:
            ConfigurationError: bad `src` or `tag`, or `src` None in a group of one.
            CollectiveTimeoutError: no message within the timeout. One from any source
                that has not yet received breaks nothing; any other breaks the group's
                point-to-point messages.
        """
        if src is None:
            self._check_member("recv")
            _check_tag(tag, "recv")
            peers = [rank for rank in self._ranks if rank != self._me]
            if not peers:
                raise ConfigurationError("recv without src in a group of one rank: no other "
                                         "member can send to it")
            buffer = as_buffer(tensor, "recv")
            return self._messages.recv_any(peers, tag, buffer, seconds(timeout, self._timeout))
        peer = self._peer(src, "src", tag, "recv")
        buffer = as_buffer(tensor, "recv")
        return self._messages.recv(peer, tag, buffer, seconds(timeout, self._timeout))

    def _peer(self, rank: int, role: str, tag: int, what: str) -> int:
        self._check_member(what)
        check.member_index(self._ranks, rank, role, what)
        if rank == self._me:
            raise ConfigurationError(f"{what}: {role} {rank} is this process's own rank; "
                                     "a rank cannot send to or receive from itself")
        _check_tag(tag, what)
        return int(rank)


def _check_tag(tag: int, what: str) -> None:
    if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= MAX_TAG:
        raise ConfigurationError(f"{what}: tag must be an int from 0 to {MAX_TAG}, got {tag!r}")

"""A peer's connection to the coordinator: requests and their replies.

The connection outlives its coordinator: when it drops, the client dials
again, with jittered backoff, the same address or the next of the job's
coordinator addresses, and a member re-registers (Rejoin) so that a
restarted coordinator takes its job back. Requests wait for that within
their own deadline, and those in flight at the drop are sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl
from collections.abc import Callable, Sequence

from asyncoll import _auth
from asyncoll._compat import timeout as timeout_after
from asyncoll._tls import handshake as tls_handshake
from asyncoll._tls.context import Tls
from asyncoll._rendezvous.control import read_message, write_message
from asyncoll._rendezvous.greeting import read_greeting
from asyncoll._rendezvous.waiting import report_gaps, unreachable_text
from asyncoll._defaults import (
    CONNECT_RETRY_INTERVAL_S,
    GREETING_TIMEOUT_S,
    HANDSHAKE_TIMEOUT_S,
    MAX_COORDINATOR_REPLY_BYTES,
    RECONNECT_BACKOFF_CAP_S,
)
from asyncoll._wire.endpoint import join_host_port
from asyncoll._wire.messages import (
    Adopted,
    Challenge,
    DumpTrace,
    Error,
    MemberGone,
    MembersLeft,
    MembersPending,
    Message,
    Proof,
    Rejoin,
)
from asyncoll.errors import (
    AsyncollError,
    AuthenticationError,
    ProtocolError,
    RendezvousError,
    RendezvousTimeoutError,
    error_from_code,
)

log = logging.getLogger("asyncoll.rendezvous")


async def open_with_retry(host: str, port: int, timeout: float,
                          fallbacks: Sequence[tuple[str, int]] = (), tls: Tls | None = None,
                          waits_for: str | None = None, patient: bool = True
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """Connect to ``host:port`` or one of ``fallbacks``, retrying while they refuse, for up
    to ``timeout`` seconds; return the streams and which address answered (0: the first).

    A coordinator may start after its workers (torch's store behaves the same),
    so a refused connection is retried until the deadline, each address in turn.
    With ``tls``, the connection speaks TLS; a failed TLS handshake is not retried.
    With ``waits_for`` (who should answer there: a rank joining its job), a warning
    says so while it retries, at growing intervals, naming the addresses and the
    deadline.
    Not ``patient`` (a tool asking a coordinator that should be running), a refusal by
    the last address is final.

    Raises:
        RendezvousTimeoutError: nothing accepted the connection in time.
        RendezvousError: not ``patient``, and every address refused the connection.
        AuthenticationError: the TLS handshake failed (the message says why).
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    deadline = began + timeout
    addresses = [(host, port), *fallbacks]
    last: OSError | None = None

    async def report(who: str) -> None:
        where = " or ".join(join_host_port(*a) for a in addresses)
        for gap in report_gaps():
            await asyncio.sleep(gap)
            now = loop.time()
            log.warning("%s", unreachable_text(who, where, now - began, last,
                                               deadline - now, timeout))

    reporter = loop.create_task(report(waits_for)) if waits_for else None
    try:
        for attempt in itertools.count():
            index = attempt % len(addresses)
            remaining = deadline - loop.time()
            if remaining <= 0:
                where = " or ".join(join_host_port(*a) for a in addresses)
                raise RendezvousTimeoutError(
                    f"could not reach the coordinator at {where} within {timeout:.1f} s "
                    f"(last error: {last}); start it (asyncoll-coordinator --host {host} "
                    f"--port {port}) or check MASTER_ADDR/MASTER_PORT") from last
            try:
                async with timeout_after(min(remaining, HANDSHAKE_TIMEOUT_S)):
                    reader, writer = await _dial(*addresses[index], tls)
                    return reader, writer, index
            except ssl.SSLError as exc:
                where = join_host_port(*addresses[index])
                raise tls_handshake.refusal(exc, f"the coordinator at {where}",
                                            mutual=tls is not None and tls.mutual) from exc
            except (OSError, TimeoutError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(f"connect timed out: {exc}")
                if not patient and index == len(addresses) - 1 and isinstance(
                        exc, ConnectionRefusedError):
                    where = " or ".join(join_host_port(*a) for a in addresses)
                    raise RendezvousError(f"nothing listens at {where} ({exc.strerror or exc})"
                                          ) from exc
            if index == len(addresses) - 1:
                await asyncio.sleep(min(CONNECT_RETRY_INTERVAL_S,
                                        max(0.0, deadline - loop.time())))
    finally:
        if reporter is not None:
            reporter.cancel()
    raise AssertionError("unreachable")


async def _dial(host: str, port: int, tls: Tls | None
                ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection to ``host:port``, over TLS with ``tls``."""
    if tls is None:
        return await asyncio.open_connection(host, port)
    return await asyncio.open_connection(host, port, ssl=tls.client,
                                         ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)


async def _answer_challenge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            address: str, token: bytes | None, tls: Tls | None = None,
                            greeting: float = HANDSHAKE_TIMEOUT_S) -> None:
    """Read the coordinator's challenge (its first bytes within ``greeting`` seconds) and,
    if it asks, prove the shared secret."""
    try:
        async with timeout_after(HANDSHAKE_TIMEOUT_S):
            item = await read_greeting(reader, writer, address, greeting,
                                       nudge=tls is None)
            if item is not None and isinstance(item[1], Error):  # a TLS coordinator's refusal
                raise error_from_code(item[1].code, f"the coordinator at {address} refused "
                                                    f"this peer: {item[1].message}")
            if item is None and tls is not None:
                raise tls_handshake.closed_after_handshake(f"the coordinator at {address}")
            if item is None:
                # A daemon out of descriptors says so; one that could not even accept
                # (its event loop closes what it cannot take) ends here.
                raise RendezvousError(f"the coordinator at {address} closed the connection "
                                      "before greeting this peer: it may be out of file "
                                      "descriptors (see its log), or not an asyncoll "
                                      "coordinator")
            if not isinstance(item[1], Challenge):
                raise ProtocolError(f"{address} did not greet like an asyncoll coordinator "
                                    f"(its first message is a {item[1].TYPE}): point "
                                    "init_method at an asyncoll coordinator")
            challenge = item[1]
            if not challenge.required and token is None:
                return
            if not challenge.required:
                raise AuthenticationError(
                    f"the coordinator at {address} asks for no shared secret, but this peer "
                    "has ASYNCOLL_TOKEN set: it cannot prove it is the job's coordinator. "
                    "Start it with --token-file (or the same ASYNCOLL_TOKEN), or unset "
                    "ASYNCOLL_TOKEN here")
            if token is None:
                raise AuthenticationError(
                    f"the coordinator at {address} requires the job's shared secret: set "
                    "ASYNCOLL_TOKEN (asyncoll-run and asyncoll status take --token-file)")
            mine = _auth.new_nonce()
            write_message(writer, Proof(response=_auth.answer(token, "coordinator",
                                                              challenge.nonce), nonce=mine), 1)
            reply = await read_message(reader)
    except TimeoutError:
        raise RendezvousTimeoutError(f"the coordinator at {address} did not finish the "
                                     f"handshake within {HANDSHAKE_TIMEOUT_S} s") from None
    except ssl.SSLError as exc:
        raise tls_handshake.refusal(exc, f"the coordinator at {address}",
                                    mutual=tls is not None and tls.mutual) from exc
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise RendezvousError(f"lost the connection to the coordinator at {address} during "
                              f"the handshake: {exc}") from exc
    if reply is not None and isinstance(reply[1], Error):
        raise error_from_code(reply[1].code, f"the coordinator at {address} refused this "
                                             f"peer: {reply[1].message}")
    if reply is None or not isinstance(reply[1], Proof):
        raise AuthenticationError(f"the coordinator at {address} closed the connection after "
                                  "this peer's proof of the shared secret")
    if not _auth.verify(token, "coordinator/server", mine, reply[1].response):
        raise AuthenticationError(f"the coordinator at {address} accepted this peer but did "
                                  "not prove the shared secret in return: it is not the "
                                  "job's coordinator")


class CoordinatorClient:
    """One control link to the job's coordinator; many requests may be outstanding on it.

    The link outlives a coordinator's death (see the module's docstring):
    only a coordinator's refusal, or :meth:`close`, ends it for good.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 addresses: Sequence[tuple[str, int]], at: int = 0,
                 token: bytes | None = None, tls: Tls | None = None) -> None:
        self._reader = reader
        self._writer = writer
        #: Every address the job's coordinator may answer at, in the order tried.
        self.addresses = tuple(addresses)
        self._at = at
        self.address = join_host_port(*self.addresses[at])
        self._token = token
        self._tls = tls
        self._ids = itertools.count(1)
        # Each request's message too: those in flight when the link drops are sent again.
        self._pending: dict[int, tuple[Message, asyncio.Future[Message]]] = {}
        self._closed: AsyncollError | None = None
        self._up = asyncio.Event()
        self._up.set()
        #: Called with each notice the coordinator sends unasked (a member gone).
        self.on_notice: Callable[[Message], None] | None = None
        #: The newest membership event the notices told of (their job's epoch).
        self.heard_epoch = 0
        #: Called once, with the error, when the link ends for good.
        self.on_lost: Callable[[AsyncollError], None] | None = None
        #: This member's re-registration for a restarted coordinator, made anew at each
        #: reconnection (None: not a member yet; its requests are simply sent again).
        self.rejoin: Callable[[], Rejoin] | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._serve())

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float, token: bytes | None = None,
                      fallbacks: Sequence[tuple[str, int]] = (), tls: Tls | None = None,
                      waits_for: str | None = None, patient: bool = True
                      ) -> CoordinatorClient:
        """Connect to the coordinator at ``host:port``, or at one of ``fallbacks`` (see
        :func:`open_with_retry`, which says while it waits that it waits for ``waits_for``,
        and which ``patient`` is passed to).

        Answers the coordinator's challenge with ``token`` (None: this peer has no secret),
        over TLS with ``tls`` (None: plain TCP).

        Raises:
            AuthenticationError: the coordinator needs a secret this peer lacks, or
                refused the one it has.
            ProtocolError: the other side is not an asyncoll coordinator.
            RendezvousError: the coordinator refused the connection (out of file
                descriptors, say) or closed it before greeting this peer.
        """
        reader, writer, at = await open_with_retry(host, port, timeout, fallbacks, tls,
                                                   waits_for, patient)
        addresses = ((host, port), *fallbacks)
        try:
            await _answer_challenge(reader, writer, join_host_port(*addresses[at]), token, tls,
                                    GREETING_TIMEOUT_S)
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, addresses, at, token, tls)

    @property
    def lost(self) -> AsyncollError | None:
        """Why the link ended for good (None while it is up or reconnecting)."""
        return self._closed

    @property
    def up(self) -> bool:
        """Whether a coordinator answers now (False while reconnecting, or ended)."""
        return self._up.is_set()

    @property
    def local_host(self) -> str:
        """The local address of this connection: the interface that reaches the coordinator."""
        return str(self._writer.get_extra_info("sockname")[0])

    async def request(self, message: Message, timeout: float, what: str) -> Message:
        """Send ``message`` and return its reply.

        While the coordinator is being reached again, the request waits for it,
        within the same ``timeout``.

        Args:
            message: the request.
            timeout: seconds to wait for the reply.
            what: the request in words, for the timeout message.

        Raises:
            AsyncollError: the coordinator answered with an error (mapped to its class).
            RendezvousTimeoutError: no reply within ``timeout`` (naming the addresses
                tried, if no coordinator was reachable).
            RendezvousError: the link to the coordinator ended for good.
        """
        if self._closed is not None:
            raise self._closed
        request_id = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (message, future)
        try:
            if self._up.is_set():
                write_message(self._writer, message, request_id)
            # Else it is sent once a coordinator answers (see _back_up).
            async with timeout_after(timeout) as deadline:
                reply = await future
        except TimeoutError:
            if not deadline.expired():
                raise  # the reply's own error, a TimeoutError too: not this deadline's
            if not self._up.is_set():
                raise RendezvousTimeoutError(
                    f"{what}: no coordinator reachable within {timeout:.1f} s (tried "
                    f"{', '.join(join_host_port(*a) for a in self.addresses)})") from None
            raise RendezvousTimeoutError(
                f"{what}: no answer from the coordinator at {self.address} within "
                f"{timeout:.1f} s") from None
        finally:
            self._pending.pop(request_id, None)
        if isinstance(reply, Error):
            raise error_from_code(reply.code, reply.message)
        return reply

    def notify(self, message: Message) -> None:
        """Send ``message``, which the coordinator does not answer (a heartbeat); dropped
        while no coordinator answers."""
        if self._up.is_set() and not self._writer.is_closing():
            write_message(self._writer, message, 0)

    def end(self) -> None:
        """This member has left its job: from now on the link's end, the coordinator's
        going included, is expected, and nothing is dialled again (a coordinator reached
        again would count this member lost). Outstanding requests fail with
        RendezvousError; :meth:`close` still closes the connection."""
        self._fail_pending(RendezvousError(f"this process left its job at the coordinator "
                                           f"at {self.address}"))

    async def close(self) -> None:
        """Close the link; outstanding requests fail with RendezvousError."""
        self._fail_pending(RendezvousError(f"the connection to the coordinator at "
                                           f"{self.address} was closed by this process"))
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                await self._writer.wait_closed()

    async def _serve(self) -> None:
        """Read replies until the link ends for good, reconnecting whenever it drops."""
        while True:
            error, final = await self._read_replies()
            if final or self._closed is not None:
                break
            self._up.clear()
            self._writer.close()
            log.warning("%s; reaching a coordinator again (%s)", error,
                        ", ".join(join_host_port(*a) for a in self.addresses))
            refusal = await self._reconnect()
            if refusal is None:
                continue
            error = refusal
            break
        first = self._closed is None
        self._fail_pending(error)
        if first and self.on_lost is not None:
            self.on_lost(error)

    async def _read_replies(self) -> tuple[AsyncollError, bool]:
        """Read replies until the connection ends: (why, whether for good)."""
        try:
            while True:
                item = await read_message(self._reader, MAX_COORDINATOR_REPLY_BYTES)
                if item is None:
                    return RendezvousError(f"the coordinator at {self.address} closed the "
                                           "connection"), False
                request_id, message = item
                entry = self._pending.get(request_id)
                if entry is not None and not entry[1].done():
                    entry[1].set_result(message)
                elif request_id == 0 and isinstance(message, (MemberGone, MembersLeft,
                                                               MembersPending)):
                    self._notice(message)
                elif request_id == 0 and isinstance(message, DumpTrace):
                    if self.on_notice is not None:
                        self.on_notice(message)  # no membership event: no epoch
                elif request_id == 0 and isinstance(message, Error):
                    # The coordinator refused this peer as a whole.
                    return error_from_code(message.code, f"the coordinator at {self.address} "
                                                         f"closed the connection: "
                                                         f"{message.message}"), True
                else:
                    log.debug("unexpected %s message from the coordinator (request %d)",
                              message.TYPE, request_id)
        except ProtocolError as exc:
            return exc, True
        except (OSError, asyncio.IncompleteReadError) as exc:
            error = RendezvousError(f"lost the connection to the coordinator at "
                                    f"{self.address}: {exc}")
            error.__cause__ = exc
            return error, False

    async def _reconnect(self) -> AsyncollError | None:
        """Dial the addresses in turn, with backoff, until a coordinator takes this peer
        back; return None then, or the refusal that ends the link."""
        for attempt in itertools.count():
            for offset in range(len(self.addresses)):
                at = (self._at + offset) % len(self.addresses)
                address = join_host_port(*self.addresses[at])
                try:
                    async with timeout_after(HANDSHAKE_TIMEOUT_S):
                        reader, writer = await _dial(*self.addresses[at], self._tls)
                except (OSError, TimeoutError):
                    continue
                try:
                    await _answer_challenge(reader, writer, address, self._token, self._tls)
                    refusal = await self._register(reader, writer, address)
                except (AsyncollError, OSError, asyncio.IncompleteReadError) as exc:
                    log.info("the coordinator at %s did not take this peer back: %s",
                             address, exc)
                    writer.close()
                    continue
                if refusal is not None:
                    writer.close()
                    return refusal
                self._reader, self._writer, self._at, self.address = reader, writer, at, address
                self._back_up()
                return None
            bound = min(RECONNECT_BACKOFF_CAP_S, CONNECT_RETRY_INTERVAL_S * 2 ** attempt)
            await asyncio.sleep(bound * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    async def _register(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        address: str) -> AsyncollError | None:
        """Re-register this member on a new connection, and wait until its job is adopted.

        Returns the coordinator's refusal (it ends the link), or None once
        adopted (or at once for a peer that is not a member yet).

        Raises:
            RendezvousTimeoutError: not adopted in time; the caller tries again.
            RendezvousError, OSError: the connection failed; the same.
        """
        if self.rejoin is None:
            return None
        rejoin = self.rejoin()
        request_id = next(self._ids)
        write_message(writer, rejoin, request_id)
        # Adoption takes at most the job's grace (its heartbeat timeout) once a majority
        # is back; a coordinator that waits longer has not got one: try another.
        wait = rejoin.heartbeat_timeout + HANDSHAKE_TIMEOUT_S
        try:
            async with timeout_after(wait):
                while True:
                    item = await read_message(reader, MAX_COORDINATOR_REPLY_BYTES)
                    if item is None:
                        raise RendezvousError(f"the coordinator at {address} closed the "
                                              "connection before taking the job back")
                    if item[0] == request_id:
                        break
        except TimeoutError:
            raise RendezvousTimeoutError(f"the coordinator at {address} did not take job "
                                         f"{rejoin.job!r} back within {wait:g} s") from None
        reply = item[1]
        if isinstance(reply, Error):
            return error_from_code(reply.code, f"the coordinator at {address} refused to "
                                                f"take this rank back: {reply.message}")
        if not isinstance(reply, Adopted):
            return ProtocolError(f"the coordinator at {address} answered a re-registration "
                                 f"with {reply.TYPE}")
        log.warning("re-registered with the coordinator at %s: job %r adopted (generation %d, "
                    "%d members)", address, rejoin.job, reply.generation, reply.members)
        return None

    def _back_up(self) -> None:
        """A coordinator answers again: send what waited for it, in order."""
        for request_id, (message, future) in sorted(self._pending.items()):
            if not future.done():
                write_message(self._writer, message, request_id)
        self._up.set()

    def _notice(self, message: MemberGone | MembersLeft | MembersPending) -> None:
        self.heard_epoch = max(self.heard_epoch, message.epoch)
        if self.on_notice is not None:
            self.on_notice(message)

    def _fail_pending(self, error: AsyncollError) -> None:
        if self._closed is None:
            self._closed = error
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(error)

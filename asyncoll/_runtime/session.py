"""One process's membership in a job: its coordinator link and its data plane."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from asyncoll._defaults import (
    COORDINATOR_GRACE_S,
    EMBEDDED_DRAIN_TIMEOUT_S,
    HEARTBEAT_INTERVAL_S,
    LEAVE_TIMEOUT_S,
    PROTOCOL_VERSION,
    RECONNECT_BACKOFF_CAP_S,
)
from asyncoll._group.context import Closable
from asyncoll._group.faults import GroupFaults
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._rendezvous.stragglers import SAMPLES_PER_HEARTBEAT
from asyncoll._runtime import ending, tracing
from asyncoll._runtime.addresses import listen_plan
from asyncoll._runtime.joining import (
    connect,
    learn_directory,
    listen,
    report_while_waiting,
)
from asyncoll._runtime.lanes import Lanes
from asyncoll._runtime.liveness import heartbeat, keep_alive
from asyncoll._runtime.registration import Identity, Registration
from asyncoll._runtime.settings import Settings
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._wire.messages import (
    Barrier,
    CheckMembership,
    GroupCreated,
    Heartbeat,
    Join,
    Leave,
    MemberGone,
    MembershipState,
    MembersLeft,
    Message,
    NewGroup,
    Reconfigure,
    Rejoin,
    Status,
    StatusReply,
    StragglerStatus,
    Welcome,
)
from asyncoll._wire.status import DumpTrace
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import (
    AsyncollError,
    ClosedError,
    ExcludedError,
    MismatchError,
    PeerLostError,
    ProtocolError,
    RendezvousError,
)

log = logging.getLogger("asyncoll")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Rendezvous:
    """Where and how to join: the result of parsing init_process_group's arguments."""

    host: str
    port: int
    job: str
    world_size: int
    rank: int
    timeout: float
    may_host: bool
    #: An elastic job (issue 15): joining it while it runs makes this peer
    #: pending until a reconfigure admits it; its size bounds (0: none).
    elastic: bool = False
    min_size: int = 0
    max_size: int = 0
    #: Other addresses of the job's coordinator, tried in turn after (host, port)
    #: when it cannot be reached (ASYNCOLL_COORDINATOR=host:port,host:port).
    fallbacks: tuple[tuple[str, int], ...] = ()
    #: What reconfigures that list their members name this process by ("": a new
    #: random one; a process moving to another job keeps its own).
    token: str = ""
    #: (host, port) is the store of torchrun's agent, where the job's coordinator is
    #: published (asyncoll._runtime.torchrun), not the coordinator.
    torch_store: bool = False
    #: Who should answer at (host, port), for the lines a rank waiting for it logs.
    waits_for: str = "the coordinator"

    @property
    def bounds(self) -> tuple[bool, int, int]:
        """(elastic, min_size, max_size)."""
        return self.elastic, self.min_size, self.max_size


class Session:
    """This process's link to its coordinator and peers, from join to leave."""

    # What every call reads, in a slot: the compiled entry reads it there itself
    # (asyncoll/_native/field.c).
    __slots__ = ("closed", "__dict__", "__weakref__")

    def __init__(self, client: CoordinatorClient, mesh: TcpMesh, welcome: Welcome,
                 job: str, timeout: float, embedded: Coordinator | None,
                 settings: Settings, bounds: tuple[bool, int, int] = (False, 0, 0),
                 token: str = "") -> None:
        self.client = client
        self.mesh = mesh
        #: Which groups are broken, and why; told of lost peers and ABORT frames.
        self.faults = GroupFaults(mesh)
        self.rank = welcome.rank
        #: This rank's flight recorder (None: ASYNCOLL_TRACE_BUFFER=0); a group broken
        #: for a timeout, a lost peer or a desync makes it write itself out.
        self.recorder = tracing.recorder_for(settings, welcome.rank, job)
        self.faults.on_break = None if self.recorder is None else self.recorder.alarm
        self.world_size = welcome.world_size
        #: The job's membership this session belongs to (one more per reconfigure).
        self.generation = welcome.generation
        # Set when a reconfigure replaced this session with the next generation's.
        self._replaced_by: str | None = None
        self.job = job
        self.timeout = timeout
        self._embedded = embedded
        #: What the runtime read from the environment when this process joined.
        self.settings = settings
        #: How this process's groups run their operations (the group layer reads it).
        self.policy = settings.policy
        address = mesh.peer_address(welcome.rank) or ("", 0)
        #: What this member re-registers with a restarted coordinator.
        self.registration = Registration(Identity.of(
            welcome, job, address, mesh.hostname(welcome.rank), settings.heartbeat_timeout,
            bounds, token))
        #: Set once this rank destroyed its process group or a new one replaced it.
        self.closed = False
        #: Operations started on this rank's Python path, in every group.
        self.ops = 0
        #: Operations the groups' compiled entries started (asyncoll._group.express):
        #: one int64 they all count in, so that none writes a Python int a call. A
        #: bytearray, not a memoryview of one: the garbage collector may clear a
        #: memoryview in a cycle while an entry still holds its buffer.
        self.compiled_ops = bytearray(8)
        self._heartbeat_interval = min(HEARTBEAT_INTERVAL_S,
                                       settings.heartbeat_timeout / 4)
        self._heartbeat = asyncio.ensure_future(self._beat())
        self._keepalive = asyncio.ensure_future(keep_alive(
            client, mesh, settings.heartbeat_timeout, self._heartbeat_interval / 2))
        self._loop = asyncio.get_running_loop()
        self._lanes = Lanes(self._loop, self.rank)
        # The groups to close with the session, weakly: one dropped unclosed goes with
        # its last reference, one destroyed (AsyncProcessGroup.destroy) leaves at once.
        self._parts: weakref.WeakSet[Closable] = weakref.WeakSet()
        client.on_notice = self._notice
        #: The job's epoch at the last "unchanged" answer; none yet in this generation.
        self._agreed_epoch = -1
        client.on_lost = self._coordinator_lost
        client.rejoin = self._rejoin

    @classmethod
    async def join(cls, where: Rendezvous, settings: Settings,
                   embedded: Coordinator | None = None) -> Session:
        """Reach the coordinator, start the data plane and wait for the world.

        Args:
            where: the coordinator's address, the job, this rank.
            settings: what the runtime read from the environment.
            embedded: the coordinator this process hosts for the job (the runtime
                started it): the session stops it when it closes, or fails to join.

        Raises:
            RendezvousError: refused, unreachable, or timed out (subclasses say which).
            ConfigurationError: the coordinator refused this peer's arguments.
        """
        client: CoordinatorClient | None = None
        mesh: TcpMesh | None = None
        try:
            client = await connect(where, settings.token, settings.tls)
            mesh = TcpMesh(where.job, settings.transport)
            plan = listen_plan(client.local_host, settings.environment)
            port = await listen(mesh, plan)
            join = Join(job=where.job, rank=where.rank, world_size=where.world_size,
                        host=plan.advertise, port=port,
                        hostname=settings.hostname or socket.gethostname(),
                        pid=os.getpid(), version=PROTOCOL_VERSION, timeout=where.timeout,
                        heartbeat_timeout=settings.heartbeat_timeout,
                        elastic=int(where.elastic), min_size=where.min_size,
                        max_size=where.max_size, token=where.token or secrets.token_hex(8))
            reporter = asyncio.ensure_future(report_while_waiting(client, where.job,
                                                                  where.timeout))
            try:
                welcome = await client.request(join, where.timeout + COORDINATOR_GRACE_S,
                                               f"rendezvous of job {where.job!r}")
            finally:
                reporter.cancel()
            if not isinstance(welcome, Welcome):
                raise ProtocolError(f"the coordinator answered a join with {welcome.TYPE}")
            learn_directory(mesh, client, welcome, where.timeout)
        except BaseException:
            await _close_quietly(client, mesh, embedded)
            raise
        return cls(client, mesh, welcome, where.job, where.timeout, embedded, settings,
                   where.bounds, join.token)

    async def new_group(self, ranks: tuple[int, ...],
                        timeout: float) -> tuple[int, tuple[int, ...]]:
        """Agree with every rank on a new group; return (group id, its ranks)."""
        self._need_coordinator("new_group")
        with self.registration.new_groups.awaiting():
            reply = await self.client.request(NewGroup.of(ranks, timeout),
                                              timeout + COORDINATOR_GRACE_S,
                                              f"new_group({list(ranks)})")
        if not isinstance(reply, GroupCreated):
            raise ProtocolError(f"the coordinator answered new_group with {reply.TYPE}")
        self.registration.groups[reply.group_id] = reply.ranks
        return reply.group_id, reply.ranks

    async def barrier(self, group_id: int, timeout: float) -> None:
        """Wait until every member of the group has reached the same barrier.

        The coordinator enforces ``timeout`` and names the members that did not
        arrive; this rank waits :data:`COORDINATOR_GRACE_S` longer for that answer.
        """
        self._need_coordinator("monitored_barrier")
        with self.registration.barrier(group_id) as seq:
            await self.client.request(Barrier(group_id=group_id, seq=seq, timeout=timeout),
                                      timeout + COORDINATOR_GRACE_S,
                                      f"barrier #{seq} of group {group_id}")

    def heard_of_change(self) -> bool:
        """Whether the coordinator told of a membership event that the last unchanged
        answer of :meth:`membership_changed` did not account for, or none came yet.

        False on every member means nothing changed; True on any, ask the coordinator.
        """
        return self.client.heard_epoch > self._agreed_epoch

    def changed_membership(self, error: AsyncollError) -> bool:
        """Whether ``error``, from the all_reduce that starts a membership check, means
        the membership changed (a member lost, or one that left): then the coordinator
        decides for everyone. Else (a desync, say) the check fails with it.
        """
        return isinstance(error, PeerLostError) or (isinstance(error, MismatchError)
                                                    and self.faults.someone_left())

    async def membership_changed(self, timeout: float) -> bool:
        """Whether a member was lost or left, or a process is pending (every member asks;
        all get the same answer, decided once by the coordinator)."""
        self.check_open("membership_changed")
        self._need_coordinator("membership_changed")
        with self.registration.checks.awaiting():
            reply = await self.client.request(CheckMembership(timeout=timeout),
                                              timeout + COORDINATOR_GRACE_S,
                                              "membership check")
        if not isinstance(reply, MembershipState):
            raise ProtocolError(f"the coordinator answered a membership check with "
                                f"{reply.TYPE}")
        if not reply.changed:
            self._agreed_epoch = max(self._agreed_epoch, reply.epoch)
        return bool(reply.changed)

    async def stragglers(self, timeout: float) -> tuple[StragglerStatus, ...]:
        """The coordinator's stragglers of this job (see asyncoll._rendezvous.stragglers)."""
        self._need_coordinator("get_straggler_report")
        reply = await self.client.request(Status(job=self.job), timeout, "straggler report")
        if not isinstance(reply, StatusReply):
            raise ProtocolError(f"the coordinator answered a status with {reply.TYPE}")
        mine = [job for job in reply.jobs if job.running_generation(self.generation)]
        return mine[0].stragglers if mine else ()

    @property
    def token(self) -> str:
        """What reconfigures that list their members name this process by."""
        return self.registration.identity.token

    async def reconfigure(self, timeout: float, named: tuple[str, ...] = (),
                          ordered: bool = False, without: tuple[int, ...] = (),
                          uuid: int = -1) -> Session:
        """Agree with the live members and the pending processes on the next membership.

        By default that is every live member that calls and the pending
        processes; ``named`` (tokens) makes it exactly those processes, ranked
        in that order when ``ordered``; ``without`` the live members but those
        ranks. Returns the next generation's session: new ranks, a new data plane
        (connections of its own), the same coordinator link. This one is
        closed for good; its groups refuse every call with ClosedError.

        Raises:
            ConfigurationError: the job is not elastic, or this process may not
                take part in the membership asked for.
            MismatchError: another member asked for another membership.
            RendezvousTimeoutError: fewer than the job's min_size took part in
                time, or a process asked for did not.
            ExcludedError: the job went on without this process.
        """
        self.check_open("reconfigure")
        self._need_coordinator("reconfigure")
        mesh = TcpMesh(self.job, self.settings.transport)
        try:
            plan = listen_plan(self.client.local_host, self.settings.environment)
            port = await listen(mesh, plan)
            welcome = await self.client.request(
                Reconfigure(timeout=timeout, host=plan.advertise, port=port, named=named,
                            ordered=int(ordered), without=without, uuid=uuid),
                timeout + COORDINATOR_GRACE_S, f"reconfigure of job {self.job!r}")
            if not isinstance(welcome, Welcome):
                raise ProtocolError(f"the coordinator answered reconfigure with "
                                    f"{welcome.TYPE}")
            learn_directory(mesh, self.client, welcome, self.timeout)
        except BaseException:
            await mesh.close()
            raise
        await self._retire(f"the job was reconfigured (generation {welcome.generation}, "
                           f"{welcome.world_size} members); groups made before are closed: "
                           "make them anew after reconfigure()")
        return Session(self.client, mesh, welcome, self.job, self.timeout, self._embedded,
                       self.settings, self.registration.identity.bounds, self.token)

    async def _retire(self, reason: str) -> None:
        """Close this generation's data plane, keeping the coordinator link for the next."""
        self.closed = True
        self._replaced_by = reason
        self._heartbeat.cancel()
        self._keepalive.cancel()
        self._stop_groups(reason)
        await self.mesh.close()

    def _stop_groups(self, reason: str) -> None:
        """Close the groups (their arenas, links and lanes' threads)."""
        for part in list(self._parts):
            try:
                part.close(reason)
            except BufferError:
                # A view of an arena still held: a bug, said loudly; the others close.
                log.exception("a group of rank %d could not unmap its shared memory",
                              self.rank)
        self._parts.clear()
        self._lanes.end_all()

    def operations(self) -> int:
        """Operations started on this rank, in every group, on either path (the
        heartbeats report it)."""
        return self.ops + int.from_bytes(self.compiled_ops, sys.byteorder, signed=True)

    async def _beat(self) -> None:
        """Tell the coordinator, every few seconds, that this rank is alive, how busy, and
        (from the flight recorder) what it is doing."""
        sampled = -1
        while True:
            if self.recorder is None:
                self.client.notify(Heartbeat(ops=self.operations()))
            else:
                doing, sampled, samples = self.recorder.report(
                    sampled, SAMPLES_PER_HEARTBEAT, self.registration.groups)
                self.client.notify(heartbeat(self.operations(), doing, samples))
            await asyncio.sleep(self._heartbeat_interval)

    def _rejoin(self) -> Rejoin:
        """This member's re-registration, for a restarted coordinator."""
        self.registration.gone.update(self.faults.gone())
        return self.registration.rejoin(max(self.client.heard_epoch, self._agreed_epoch))

    def _notice(self, message: Message) -> None:
        """The coordinator says a member is gone: fail what depended on it (or asks for
        the flight recorder: asyncoll status --dump)."""
        if isinstance(message, DumpTrace):
            if self.recorder is not None:
                self.recorder.dump("asked through the coordinator (asyncoll status --dump)")
            return
        if isinstance(message, MembersLeft):
            self.registration.gone.update(message.ranks)
            for rank in message.ranks:
                if rank != self.rank:
                    self.faults.member_left(rank, self.mesh.hostname(rank))
            return
        if not isinstance(message, MemberGone) or message.rank == self.rank:
            return
        self.registration.gone.add(message.rank)
        # A coordinator that took the job back knows no address of a member that
        # did not come back: this rank's directory does.
        hostname = message.hostname or self.mesh.hostname(message.rank)
        host = message.host or (self.mesh.peer_address(message.rank) or ("?", 0))[0]
        if message.how == "left":
            self.faults.member_left(message.rank, hostname)
            return
        log.warning("rank %d on %s was lost: %s", message.rank, hostname, message.reason)
        self.faults.peer_lost(message.rank, PeerLostError(
            f"rank {message.rank} on host {hostname} ({host}) was lost: "
            f"{message.reason} (the coordinator's notice)", rank=message.rank,
            host=hostname))

    def run_blocking(self, action: Callable[[], T], lane: int) -> Awaitable[T]:
        """Run ``action`` on ``lane``'s own thread, off the loop; await its result."""
        return self._lanes.run(action, lane)

    def call_soon(self, action: Callable[..., Any], *args: Any) -> None:
        """Run ``action(*args)`` on the loop thread; callable from any thread."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(action, *args)

    def on_close(self, part: Closable) -> None:
        """Close ``part`` (a group) when the session closes, unless it closed before."""
        if self.closed:
            part.close("this rank's process group is closed")
        else:
            self._parts.add(part)

    def forget(self, part: Closable) -> None:
        """``part`` closed on its own: nothing more to do for it at the session's close."""
        self._parts.discard(part)

    def end_lane(self, lane: int) -> None:
        """End ``lane``'s thread once the actions queued on it, if any, have run."""
        self._lanes.end(lane)

    def check_open(self, what: str) -> None:
        """Refuse ``what`` once this rank has destroyed its process group.

        Raises:
            ClosedError: :meth:`close` has been called.
        """
        if self._replaced_by is not None:
            raise ClosedError(f"{what}: {self._replaced_by}")
        if self.closed:
            raise ClosedError(f"{what}: this rank destroyed its process group "
                              "(destroy_process_group) and cannot use it or its sub-groups "
                              "any more; call init_process_group again first")

    def _need_coordinator(self, what: str) -> None:
        """Refuse, with the reason, what needs a coordinator this rank has lost."""
        lost = self.client.lost
        if lost is not None and not self.closed:
            raise RendezvousError(
                f"{what} needs the coordinator, and this rank's link to it ended for good "
                f"({lost}); collectives on existing groups keep working over the data plane.")

    def _coordinator_lost(self, error: AsyncollError) -> None:
        if isinstance(error, ExcludedError):
            # The job went on without this process: nothing of it may go on.
            self.faults.exclude(error)
            log.warning("%s", error)
        elif not self.closed:
            log.warning("%s; collectives go on over the data plane, but new_group, "
                        "monitored_barrier and the coordinator's failure notices are gone "
                        "for good", error)

    async def close(self, abandon: bool = False) -> None:
        """Leave the job (at exit on an exception: as lost, see ending); close; never
        raises. ``abandon`` (an abort, the next group being made): say goodbye only to
        a coordinator reached now."""
        if self.closed:
            return
        self.closed = True
        self._heartbeat.cancel()
        self._keepalive.cancel()
        # A coordinator being reached again gets a moment, not the whole leave
        # timeout: one that never comes back (it died with rank 0) must not hold
        # every member's exit; one that does counts this rank lost, which is harmless.
        ended = ending.ended()
        with contextlib.suppress(AsyncollError, OSError):
            if self.client.up or not abandon:
                await self.client.request(Leave(ended=ended), LEAVE_TIMEOUT_S
                                          if self.client.up else RECONNECT_BACKOFF_CAP_S,
                                          "leave")
        self.client.end()  # left: its coordinator may now stop first (rank 0's, say)
        await ending.linger(ended, self.client)  # then its links end with no goodbye
        self._stop_groups("this rank destroyed its process group (destroy_process_group)")
        await _close_quietly(self.client, self.mesh, self._embedded, self.job, not ended)


async def _close_quietly(client: CoordinatorClient | None, mesh: TcpMesh | None,
                         embedded: Coordinator | None, job: str | None = None,
                         goodbye: bool = True) -> None:
    if mesh is not None:
        await mesh.close(goodbye)
    if embedded is not None and job is not None:
        # Peers still finishing must be able to leave before the coordinator goes.
        if not await embedded.wait_until_idle(job, EMBEDDED_DRAIN_TIMEOUT_S):
            log.warning("stopping the embedded coordinator with job %r still active", job)
    if client is not None:
        await client.close()
    if embedded is not None:
        await embedded.stop()


"""AsyncProcessGroup: the collectives of one group, each checked and made into a plan.

Every collective method checks its arguments at once, in the caller's
thread, so bad input raises before anything is sent, and returns the call's
Plan (asyncoll._group.plan): awaiting it runs it in the group's turn, and
the blocking front doors hand it to `execute` or `submit`. `src` and
`dst` are global ranks, as in torch. Point-to-point messages (send, recv)
are not sequenced with the collectives; they are matched per (peer, tag) in
call order, as MPI's are.

The group holds its parts and offers their methods as its own
(asyncoll._group.delegate): its core makes and places the plans
(asyncoll._group.core) and remembers those to run again (its repeats,
asyncoll._group.repeats); its object collectives (asyncoll._group.objects)
and its messages (asyncoll._group.point_to_point) use the core.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from numpy.typing import NDArray

from asyncoll._algorithms import monitored
from asyncoll._algorithms.compression import Compression, compression_of, fed_back
from asyncoll._algorithms.pairwise import direct_gather, direct_scatter
from asyncoll._algorithms.ops import check_op, coerce_op
from asyncoll._algorithms.team import Team
from asyncoll._group import arguments as check
from asyncoll._group import blockwise
from asyncoll._group.context import Membership
from asyncoll._group.core import GroupCore
from asyncoll._group.delegate import Delegate, bind
from asyncoll._group.objects import ObjectCollectives
from asyncoll._group.plan import Plan, Signature, repeat_key, seconds
from asyncoll._group.point_to_point import PointToPoint
from asyncoll._group.repeats import Repeats
from asyncoll._group.tensors import as_buffer, as_source, write_back
from asyncoll._group.transports import spread
from asyncoll._defaults import COORDINATOR_GRACE_S
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import AsyncollError, ConfigurationError
from asyncoll.types import ReduceOp

Timeout = float | timedelta | None


class WorldGroup:
    """The type of `WORLD`."""

    def __repr__(self) -> str:
        return "asyncoll.group.WORLD"


#: torch's `dist.group.WORLD`: as `group=`, the world of the blocking API.
WORLD = WorldGroup()


def _all_reduce_call(flat: NDArray[Any], op: ReduceOp,
                     compression: object) -> tuple[Signature, Any]:
    """all_reduce's signature and arrays: `flat`, or a compressed call's (data, residual
    or None), its residual fed back (asyncoll._algorithms.compression.fed_back)."""
    signature = Signature("all_reduce", Kind.ALL_REDUCE, flat.dtype, flat.size, op,
                          compression=compression_of(compression, op, flat.dtype))
    return signature, flat if signature.compression is None else fed_back(compression, flat)


class AsyncProcessGroup:
    """A set of ranks that run collectives together (torch's ProcessGroup).

    Every rank of the job holds one for each group created, members or not;
    on a non-member, `rank` is -1 and collectives refuse to run. Its
    object collectives and its send and recv are those of its parts,
    ObjectCollectives (asyncoll._group.objects) and PointToPoint
    (asyncoll._group.point_to_point).
    """

    # Its compiled entry in a slot: the compiled fronts read it there themselves
    # (asyncoll/_native/front.c).
    __slots__ = ("express", "__dict__", "__weakref__")

    def __init__(self, session: Membership, group_id: int, ranks: Sequence[int],
                 timeout: float) -> None:
        core = self._core = GroupCore(session, group_id, ranks, timeout)
        self._session = session
        self._repeats = core.repeats
        self._objects = ObjectCollectives(core)
        self._p2p = PointToPoint(core, session)
        self.group_id = group_id
        #: The members' global ranks, in group-rank order.
        self.ranks: tuple[int, ...] = core.ranks
        self.timeout = timeout
        self._me = core.rank
        #: The compiled entry of its repeated blocking calls, or None (asyncoll._group.express).
        self.express = core.express
        bind(self)

    @property
    def rank(self) -> int:
        """This process's rank within the group, or -1 when it is not a member."""
        return self._me

    @property
    def size(self) -> int:
        """The number of ranks in the group."""
        return len(self.ranks)

    @property
    def global_rank(self) -> int:
        """This process's rank in the whole job."""
        return self._session.rank

    @property
    def is_member(self) -> bool:
        """Whether this process belongs to the group."""
        return self._me >= 0

    def __repr__(self) -> str:
        return f"<AsyncProcessGroup {self.group_id} ranks={list(self.ranks)}>"

    def abort(self, error: AsyncollError) -> None:
        """Fail every operation of this group, running or to come, with `error`, here and
        (told by this rank) on its other members. On the loop."""
        self._core.abort(error)
        self._p2p.abort(error)

    def failure(self) -> AsyncollError | None:
        """What broke this group (its collectives first, then its messages), or None."""
        return self._core.failure() or self._p2p.failure()

    async def destroy(self) -> None:
        """Close this group on this rank (torch's destroy_process_group(group)): its
        arena is unmapped, its links closed and its thread ended at once (an operation
        of it running in another thread stops, with ClosedError, first). Later calls
        raise ClosedError; other groups go on; nothing is sent. Never raises."""
        self._core.close(f"{self!r} was destroyed on this rank")

    # -- its parts' methods, as its own ----------------------------------------------------

    plan = Delegate("_core", GroupCore.plan)
    plan_on_transport = Delegate("_core", GroupCore.plan_on_transport)
    check_member = Delegate("_core", GroupCore.check_member)
    execute = Delegate("_core", GroupCore.execute)
    submit = Delegate("_core", GroupCore.submit)
    again = Delegate("_repeats", Repeats.again)
    all_gather_object = Delegate("_objects", ObjectCollectives.all_gather_object)
    broadcast_object_list = Delegate("_objects", ObjectCollectives.broadcast_object_list)
    gather_object = Delegate("_objects", ObjectCollectives.gather_object)
    scatter_object_list = Delegate("_objects", ObjectCollectives.scatter_object_list)
    send = Delegate("_p2p", PointToPoint.send)
    recv = Delegate("_p2p", PointToPoint.recv)

    # -- reductions --------------------------------------------------------------------

    def all_reduce(self, tensor: Any, op: Any = ReduceOp.SUM, timeout: Timeout = None,
                   algorithm: str | None = None,
                   compression: str | Compression | None = None) -> Plan:
        """Reduce `tensor` across the group, in place, on every member.

        Args:
            tensor: a numpy array or CPU torch tensor; holds the result afterwards,
                bitwise identical on every member.
            op: a ReduceOp (torch's ReduceOp is accepted too).
            timeout: seconds or a timedelta; the group's timeout by default.
            algorithm: "ring", "recursive_doubling", "arena" (one host: shared memory)
                or "links" (across hosts; both in the calling thread); by size if None.
            compression: "bf16" or "int8" between hosts (docs/guides/compression.md).

        Raises:
            ConfigurationError: bad tensor, dtype/op pair, timeout, algorithm or
                compression; not a member.
            CollectiveError: the operation failed (see its subclasses).
        """
        what = "all_reduce"
        reduce_op = self._reduce_op(op, what)
        buffer = as_buffer(tensor, what)
        flat = buffer.flat
        check_op(reduce_op, flat.dtype)
        signature, arrays = _all_reduce_call(flat, reduce_op, compression)
        return self.plan(what, signature, arrays, flat.nbytes, timeout, algorithm,
                         write_back([buffer]), (repeat_key(what, flat, reduce_op), None))

    def reduce(self, tensor: Any, dst: int, op: Any = ReduceOp.SUM, timeout: Timeout = None,
               algorithm: str | None = None) -> Plan:
        """Reduce `tensor` across the group into global rank `dst`'s tensor.

        The other members' tensors are left as they were.

        Args:
            algorithm: "chain", "tree", "arena" or "links"; chosen by size when None.
        """
        what = "reduce"
        reduce_op = self._reduce_op(op, what)
        root = check.member_index(self.ranks, dst, "dst", what)
        buffer = as_buffer(tensor, what)
        flat = buffer.flat
        check_op(reduce_op, flat.dtype)
        return self.plan(what, Signature(what, Kind.REDUCE, flat.dtype, flat.size, reduce_op,
                                         root), flat, flat.nbytes, timeout, algorithm,
                         write_back([buffer], root, at_root=True),
                         (repeat_key(what, flat, reduce_op, dst), None))

    def reduce_scatter(self, output: Any, input_list: Sequence[Any], op: Any = ReduceOp.SUM,
                       timeout: Timeout = None, algorithm: str | None = None) -> Plan:
        """Reduce `input_list[i]` across the group into member i's `output`.

        Sizes may differ between members: `input_list[i]` must have as many
        elements as member i's output, on every member. `algorithm` is
        "ring" or "arena"; chosen by size when None.
        """
        what = "reduce_scatter"
        reduce_op = self._reduce_op(op, what)
        inputs = check.sources(check.tensor_list(input_list, self.size, "input_list", what),
                               "input_list", what)
        return blockwise.reduce_scatter(self._core, what, as_buffer(output, what), inputs,
                                        reduce_op, timeout, algorithm)

    def reduce_scatter_tensor(self, output: Any, input: Any, op: Any = ReduceOp.SUM,
                              timeout: Timeout = None, algorithm: str | None = None) -> Plan:
        """Reduce `input` across the group; member i gets block i of the result.

        `input` has group-size times as many elements as `output`.
        """
        what = "reduce_scatter_tensor"
        reduce_op = self._reduce_op(op, what)
        flat = as_source(input, what)
        buffer = as_buffer(output, what)
        count = buffer.flat.size
        check.same_size(flat, count * self.size, "input", what,
                        f"group size {self.size} x the output's {count}")
        return blockwise.reduce_scatter(self._core, what, buffer,
                                        blockwise.blocks(flat, count, self.size), reduce_op,
                                        timeout, algorithm, flat)

    # -- one to all, all to one ----------------------------------------------------------

    def broadcast(self, tensor: Any, src: int, timeout: Timeout = None,
                  algorithm: str | None = None) -> Plan:
        """Copy global rank `src`'s `tensor` into every member's `tensor`.

        Args:
            algorithm: "chain", "tree", "arena" or "links"; chosen by size when None.
        """
        what = "broadcast"
        self.check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        buffer = as_buffer(tensor, what)
        flat = buffer.flat
        return self.plan(what, Signature(what, Kind.BROADCAST, flat.dtype, flat.size,
                                         root=root), flat, flat.nbytes, timeout, algorithm,
                         write_back([buffer], root, at_root=False),
                         (repeat_key(what, flat, None, src), None))

    def gather(self, tensor: Any, gather_list: Sequence[Any] | None, dst: int,
               timeout: Timeout = None) -> Plan:
        """Copy every member's `tensor` into `gather_list[i]` on global rank `dst`.

        `gather_list` (one tensor per member) is given on `dst` only; others pass None.
        """
        what = "gather"
        self.check_member(what)
        root = check.member_index(self.ranks, dst, "dst", what)
        mine = as_source(tensor, what)
        listed = blockwise.at_root(self._core, gather_list, root, "gather_list", "dst", what)
        buffers = flats = None
        if listed is not None:
            buffers = check.outputs(listed, "gather_list", what)
            flats = [b.flat for b in buffers]
            blockwise.check_blocks(mine, flats, root, "gather_list", what)
        return self.plan_on_transport(
            what, Signature(what, Kind.GATHER, mine.dtype, root=root), spread(direct_gather),
            (mine, root, flats), seconds(timeout, self.timeout), write_back(buffers or ()))

    def scatter(self, tensor: Any, scatter_list: Sequence[Any] | None, src: int,
                timeout: Timeout = None) -> Plan:
        """Copy `scatter_list[i]` on global rank `src` into member i's `tensor`.

        `scatter_list` (one tensor per member) is given on `src` only; others pass None.
        """
        what = "scatter"
        self.check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        buffer = as_buffer(tensor, what)
        listed = blockwise.at_root(self._core, scatter_list, root, "scatter_list", "src", what)
        blocks = None
        if listed is not None:
            blocks = check.sources(listed, "scatter_list", what)
            blockwise.check_blocks(buffer.flat, blocks, root, "scatter_list", what)
        return self.plan_on_transport(
            what, Signature(what, Kind.SCATTER, buffer.flat.dtype, root=root),
            spread(direct_scatter), (buffer.flat, root, blocks), seconds(timeout, self.timeout),
            write_back([buffer]))

    # -- all to all ----------------------------------------------------------------------

    def all_gather(self, tensor_list: Sequence[Any], tensor: Any, timeout: Timeout = None,
                   algorithm: str | None = None) -> Plan:
        """Copy member i's `tensor` into `tensor_list[i]` on every member.

        Sizes may differ between members: `tensor_list[i]` must have as many
        elements as member i's tensor. `algorithm` is "ring", "arena" or
        "links"; chosen by size when None.
        """
        what = "all_gather"
        self.check_member(what)
        buffers = check.outputs(check.tensor_list(tensor_list, self.size, "tensor_list", what),
                                "tensor_list", what)
        return blockwise.all_gather(self._core, what, as_source(tensor, what), buffers,
                                    [b.flat for b in buffers], timeout, algorithm)

    def all_gather_into_tensor(self, output: Any, input: Any, timeout: Timeout = None,
                               algorithm: str | None = None) -> Plan:
        """Gather every member's `input` into `output`, block i from member i.

        `output` has group-size times as many elements as `input`.
        """
        what = "all_gather_into_tensor"
        self.check_member(what)
        buffer = as_buffer(output, what)
        mine = as_source(input, what)
        count = mine.size
        check.same_size(buffer.flat, count * self.size, "output", what,
                        f"group size {self.size} x the input's {count}")
        return blockwise.all_gather(
            self._core, what, mine, [buffer], blockwise.blocks(buffer.flat, count, self.size),
            timeout, algorithm, (repeat_key(what, (buffer.flat, mine)),
                                 functools.partial(blockwise.output_cut, count, self.size)))

    def all_to_all(self, output_list: Sequence[Any], input_list: Sequence[Any],
                   timeout: Timeout = None) -> Plan:
        """Copy member i's `input_list[j]` into member j's `output_list[i]`."""
        what = "all_to_all"
        self.check_member(what)
        buffers = check.outputs(check.tensor_list(output_list, self.size, "output_list", what),
                                "output_list", what)
        inputs = check.sources(check.tensor_list(input_list, self.size, "input_list", what),
                               "input_list", what)
        return blockwise.all_to_all(self._core, what, buffers, [b.flat for b in buffers],
                                    inputs, timeout)

    def all_to_all_single(self, output: Any, input: Any,
                          output_split_sizes: Sequence[int] | None = None,
                          input_split_sizes: Sequence[int] | None = None,
                          timeout: Timeout = None) -> Plan:
        """Split `input` along its first dimension, send part j to member j, and
        gather the parts received into `output` in member order.

        Split sizes count rows (first-dimension entries); None splits evenly.
        """
        what = "all_to_all_single"
        self.check_member(what)
        buffer = as_buffer(output, what)
        flat_in = as_source(input, what)
        out_rows, out_width = check.rows_of(output, buffer.flat)
        in_rows, in_width = check.rows_of(input, flat_in)
        out_splits = check.split_sizes(output_split_sizes, out_rows, self.size,
                                       "output_split_sizes", what)
        in_splits = check.split_sizes(input_split_sizes, in_rows, self.size,
                                      "input_split_sizes", what)
        if in_rows and out_rows and in_width != out_width:
            raise ConfigurationError(f"{what}: input rows have {in_width} elements but output "
                                     f"rows have {out_width}; they must match")
        return blockwise.all_to_all(self._core, what, [buffer],
                                    blockwise.cut(buffer.flat, out_splits, out_width),
                                    blockwise.cut(flat_in, in_splits, in_width), timeout)

    # -- barriers ------------------------------------------------------------------------

    def barrier(self, timeout: Timeout = None, algorithm: str | None = None) -> Plan:
        """Wait until every member has called barrier, after this rank's earlier operations.

        It runs on the data plane, in line with the group's other operations:
        through the group's arena or links where it has them, else as a
        recursive-doubling all-reduce of one byte (`algorithm` forces
        "arena", "links" or "recursive_doubling").

        Raises:
            ConfigurationError: this process is not a member.
            CollectiveError: a member failed, or the deadline passed.
        """
        what = "barrier"
        self.check_member(what)
        return self.plan(what, Signature(what, Kind.BARRIER), None, 0, timeout, algorithm,
                         repeat=(repeat_key(what, None), None))

    def monitored_barrier(self, timeout: Timeout = None) -> Plan:
        """A barrier through the coordinator, whose timeout names every rank that is missing.

        Raises:
            ConfigurationError: this process is not a member.
            CollectiveError: a member left, or the deadline passed.
        """
        what = "monitored_barrier"
        self.check_member(what)
        limit = seconds(timeout, self.timeout)
        # The coordinator's deadline is the one that can name who did not arrive,
        # and the request's own (one grace later) comes next: this one is the last.
        return self.plan_on_transport(what, Signature(what, Kind.BARRIER),
                                      spread(_through_coordinator),
                                      (self._session, self.group_id, limit),
                                      limit + 2 * COORDINATOR_GRACE_S)

    def monitored_barrier_by_first(self, timeout: float | timedelta,
                                   wait_all_ranks: bool = False) -> Plan:
        """torch's monitored barrier as gloo runs it, over the group's own connections.

        Member 0 hears from every member in turn within `timeout` and names
        the first that did not arrive (every one, with `wait_all_ranks`),
        in gloo's words (asyncoll._algorithms.monitored): any group, and no
        coordinator. `timeout` may be 0 (member 0 then fails at once, as on gloo).

        Raises:
            ConfigurationError: not a member, or a negative timeout.
            MonitoredBarrierError: a member did not arrive in time.
        """
        what = "monitored_barrier"
        self.check_member(what)
        limit = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (
                0 <= limit < float("inf")):
            raise ConfigurationError(f"{what}: timeout must be 0 or more seconds, got "
                                     f"{timeout!r}")
        # The operation's own deadline comes after the barrier's, which names who is late.
        return self.plan_on_transport(what, Signature(what, Kind.BARRIER, root=0),
                                      spread(monitored.monitored_barrier),
                                      (limit, wait_all_ranks), limit + COORDINATOR_GRACE_S)

    # -- helpers -------------------------------------------------------------------------

    def _reduce_op(self, op: Any, what: str) -> ReduceOp:
        reduce_op = coerce_op(op)
        if self._me < 0:  # (the core says why; a member's call needs no detour through it)
            self.check_member(what)
        return reduce_op


async def _through_coordinator(team: Team, session: Membership, group_id: int,
                               limit: float) -> None:
    """A barrier the coordinator keeps (monitored_barrier): it names who did not arrive."""
    await session.barrier(group_id, limit)


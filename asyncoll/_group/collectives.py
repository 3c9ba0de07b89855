"""AsyncProcessGroup: the collectives of one group, as coroutines.

Every collective method checks its arguments at once, in the caller's
thread, so bad input raises before anything is sent, chooses its algorithm,
and returns the coroutine that does the work (GroupCore runs it in turn,
under its deadline). ``src`` and ``dst`` are global ranks, as in torch.
Point-to-point messages (send, recv) are not sequenced with the collectives;
they are matched per (peer, tag) in call order, as MPI's are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

from asyncoll._group import arguments as check
from asyncoll._group import objects
from asyncoll._algorithms import arena as in_arena
from asyncoll._algorithms import monitored
from asyncoll._algorithms import selection
from asyncoll._algorithms.direct import direct_all_to_all, direct_gather, direct_scatter
from asyncoll._algorithms.doubling import (
    recursive_doubling_all_reduce,
    DoublingOnLinks,
)
from asyncoll._algorithms.ops import check_op, finish
from asyncoll._algorithms.ring import (
    all_reduce_scratch_elements,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    ring_scratch_elements,
)
from asyncoll._algorithms.team import Team
from asyncoll._algorithms.tree import (
    chain_broadcast,
    chain_reduce,
    tree_broadcast,
    tree_reduce,
)
from asyncoll._group.arena_path import ArenaStep
from asyncoll._group.links_path import LinksStep
from asyncoll._group.core import GroupCore, Operation, seconds
from asyncoll._group.core import algorithm_code as _algorithm_code
from asyncoll._group.core import fingerprint_of as _fingerprint
from asyncoll._group.objects import dump
from asyncoll._group.point_to_point import MAX_TAG
from asyncoll._settings import COORDINATOR_GRACE_S
from asyncoll._group.tensors import as_buffer, as_source
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp




class WorldGroup:
    """The type of :data:`WORLD`."""

    def __repr__(self) -> str:
        return "asyncoll.group.WORLD"


#: torch's ``dist.group.WORLD``: as ``group=``, the world of the blocking API.
WORLD = WorldGroup()


class AsyncProcessGroup(GroupCore):
    """A set of ranks that run collectives together (torch's ProcessGroup).

    Every rank of the job holds one for each group created, members or not;
    on a non-member, :attr:`rank` is -1 and collectives refuse to run.
    """

    # -- reductions --------------------------------------------------------------------

    def all_reduce(self, tensor: Any, op: Any = ReduceOp.SUM,
                   timeout: float | timedelta | None = None,
                   algorithm: str | None = None) -> Operation:
        """Reduce ``tensor`` across the group, in place, on every member.

        Args:
            tensor: a numpy array or CPU torch tensor; holds the result afterwards,
                bitwise identical on every member.
            op: a ReduceOp (torch's ReduceOp is accepted too).
            timeout: seconds or a timedelta; the group's timeout by default.
            algorithm: "ring", "recursive_doubling" or "arena" (members on one
                host: in the calling thread, through shared memory); chosen by
                size when None.

        Raises:
            ConfigurationError: bad tensor, dtype/op pair, timeout or algorithm;
                not a member.
            CollectiveError: the operation failed (see its subclasses).
        """
        what = "all_reduce"
        reduce_op = self._reduce_op(op, what)
        buffer = as_buffer(tensor, what)
        flat = buffer.flat
        check_op(reduce_op, flat.dtype)
        name = self._choose(what, flat.nbytes, algorithm)

        transport = self._over_transport(what, name, flat.nbytes)

        async def over_transport(team: Team, array: np.ndarray) -> None:
            if transport == "ring":
                scratch = self._scratch_of(array.dtype,
                                           all_reduce_scratch_elements(array.size, team.size))
                await ring_all_reduce(team, array, reduce_op, scratch, selection.SEGMENT_BYTES)
            else:
                await recursive_doubling_all_reduce(team, array, reduce_op,
                                                    self._scratch_of(array.dtype, array.size))

        async def body(team: Team) -> None:
            await over_transport(team, flat)
            buffer.write_back()

        # On the arena, made ready once (a repeat keeps it).
        on_the_arena = in_arena.AllReduce(
            reduce_op, flat.dtype, flat.size,
            flat.nbytes >= selection.ARENA_SPLIT_FROM_BYTES) if name == selection.ARENA else None

        def on_arena(step: ArenaStep, array: np.ndarray) -> None:
            assert on_the_arena is not None
            on_the_arena.run(step.arena, step.operation, array, step.fingerprint, step.waiter)

        def here(step: ArenaStep) -> None:
            on_arena(step, flat)
            buffer.write_back()

        # Over direct links, recursive doubling in plain calls, made ready once.
        direct = name == selection.LINKS and transport == "recursive_doubling"
        on_links = DoublingOnLinks(self.rank, self.size, flat.dtype, flat.size, reduce_op,
                                   self._scratch_of).run if direct else None

        def here_on_links(step: LinksStep) -> None:
            assert on_links is not None
            on_links(step, flat)
            buffer.write_back()

        operation = self._run(what, timeout, body, _fingerprint(
            Kind.ALL_REDUCE, flat.dtype, reduce_op, -1, flat.size, _algorithm_code(what, name)),
            self._fast_body(name, here, body, here_on_links if direct else None), flat.nbytes)
        return self._repeatable(operation, name, timeout, algorithm,
                                (what, flat.dtype, flat.size, reduce_op), on_arena, over_transport,
                                on_links)

    def reduce(self, tensor: Any, dst: int, op: Any = ReduceOp.SUM,
               timeout: float | timedelta | None = None,
               algorithm: str | None = None) -> Operation:
        """Reduce ``tensor`` across the group into global rank ``dst``'s tensor.

        The other members' tensors are left as they were.

        Args:
            algorithm: "chain", "tree" or "arena"; chosen by size when None.
        """
        what = "reduce"
        reduce_op = self._reduce_op(op, what)
        root = check.member_index(self.ranks, dst, "dst", what)
        buffer = as_buffer(tensor, what)
        flat = buffer.flat
        check_op(reduce_op, flat.dtype)
        name = self._choose(what, flat.nbytes, algorithm)

        transport = self._over_transport(what, name, flat.nbytes)

        async def over_transport(team: Team, array: np.ndarray) -> None:
            if transport == "chain":
                await chain_reduce(team, array, reduce_op, root, self._scratch_of(
                    array.dtype, array.size), selection.SEGMENT_BYTES)
            else:
                await tree_reduce(team, array, reduce_op, root,
                                  self._scratch_of(array.dtype, 2 * array.size))

        async def body(team: Team) -> None:
            await over_transport(team, flat)
            if team.me == root:
                buffer.write_back()

        def on_arena(step: ArenaStep, array: np.ndarray) -> None:
            in_arena.reduce(step.arena, step.operation, array, reduce_op, root,
                            step.fingerprint, step.waiter)

        def here(step: ArenaStep) -> None:
            on_arena(step, flat)
            if step.arena.me == root:
                buffer.write_back()

        operation = self._run(what, timeout, body, _fingerprint(
            Kind.REDUCE, flat.dtype, reduce_op, root, flat.size, _algorithm_code(what, name)),
            self._fast_body(name, here, body), flat.nbytes)
        return self._repeatable(operation, name, timeout, algorithm,
                                (what, flat.dtype, flat.size, dst, reduce_op), on_arena,
                                over_transport)

    def reduce_scatter(self, output: Any, input_list: Sequence[Any], op: Any = ReduceOp.SUM,
                       timeout: float | timedelta | None = None,
                       algorithm: str | None = None) -> Operation:
        """Reduce ``input_list[i]`` across the group into member i's ``output``.

        Sizes may differ between members: ``input_list[i]`` must have as many
        elements as member i's output, on every member. ``algorithm`` is
        "ring" or "arena"; chosen by size when None.
        """
        what = "reduce_scatter"
        reduce_op = self._reduce_op(op, what)
        inputs = check.sources(check.tensor_list(input_list, self.size, "input_list", what),
                               "input_list", what)
        return self._reduce_scatter(what, output, inputs, reduce_op, timeout, algorithm)

    def reduce_scatter_tensor(self, output: Any, input: Any, op: Any = ReduceOp.SUM,
                              timeout: float | timedelta | None = None,
                              algorithm: str | None = None) -> Operation:
        """Reduce ``input`` across the group; member i gets block i of the result.

        ``input`` has group-size times as many elements as ``output``.
        """
        what = "reduce_scatter_tensor"
        reduce_op = self._reduce_op(op, what)
        flat = as_source(input, what)
        count = as_buffer(output, what).flat.size
        check.same_size(flat, count * self.size, "input", what,
                        f"group size {self.size} x the output's {count}")
        inputs = _blocks(flat, count, self.size)
        # A repeat (GroupCore.remember) is given (output, input), 1-D: the input cut as here.
        return self._reduce_scatter(what, output, inputs, reduce_op, timeout, algorithm,
                                    lambda arrays: (arrays[0], _blocks(arrays[1], count,
                                                                        self.size)))

    def _reduce_scatter(self, what: str, output: Any, inputs: list[np.ndarray],
                        reduce_op: ReduceOp, timeout: float | timedelta | None,
                        algorithm: str | None,
                        cut: Callable[[Any], tuple[np.ndarray, list[np.ndarray]]] | None = None
                        ) -> Operation:
        """The reduce-scatter of ``inputs`` (block i for member i) into ``output``.

        With ``cut``, which turns a repeat's arrays into (output, input blocks),
        the call is remembered to run again (GroupCore.remember).
        """
        buffer = as_buffer(output, what)
        out = buffer.flat
        me = self.rank
        dtype = check.same_dtype([out, *inputs], ["output"] + [
            f"input {i}" for i in range(len(inputs))], what)
        check_op(reduce_op, dtype)
        check.same_size(out, inputs[me].size, "output", what,
                        f"the size of this member's input block, {inputs[me].size}")
        sizes = [block.size for block in inputs]
        name = self._choose("reduce_scatter", sum(sizes) * dtype.itemsize, algorithm)

        async def over_transport(team: Team, arrays: tuple[np.ndarray, list[np.ndarray]]
                                 ) -> None:
            result, blocks = arrays
            partial = sum(sizes) - sizes[me]
            scratch = self._scratch_of(dtype, partial + ring_scratch_elements(sizes))
            accumulators, offset = [], 0
            for i, size in enumerate(sizes):
                if i == me:
                    accumulators.append(result)
                else:
                    accumulators.append(scratch[offset:offset + size])
                    offset += size
            await ring_reduce_scatter(team, blocks, accumulators, reduce_op,
                                      scratch[partial:], selection.SEGMENT_BYTES)
            finish(reduce_op, result, team.size)

        async def body(team: Team) -> None:
            await over_transport(team, (out, inputs))
            buffer.write_back()

        def on_arena(step: ArenaStep, arrays: tuple[np.ndarray, list[np.ndarray]]) -> None:
            in_arena.reduce_scatter(step.arena, step.operation, arrays[1], arrays[0],
                                    reduce_op, step.fingerprint, step.waiter)

        def here(step: ArenaStep) -> None:
            on_arena(step, (out, inputs))
            buffer.write_back()

        operation = self._run(what, timeout, body, _fingerprint(
            Kind.REDUCE_SCATTER, dtype, reduce_op, count=sum(sizes),
            algorithm=_algorithm_code("reduce_scatter", name)),
            self._fast_body(name, here, body), sum(sizes) * dtype.itemsize)
        if cut is None:
            return operation
        return self._repeatable(operation, name, timeout, algorithm,
                                (what, out.dtype, out.size, dtype, sum(sizes), reduce_op),
                                lambda step, arrays: on_arena(step, cut(arrays)),
                                lambda team, arrays: over_transport(team, cut(arrays)))

    # -- one to all, all to one ----------------------------------------------------------

    def broadcast(self, tensor: Any, src: int, timeout: float | timedelta | None = None,
                  algorithm: str | None = None) -> Operation:
        """Copy global rank ``src``'s ``tensor`` into every member's ``tensor``.

        Args:
            algorithm: "chain", "tree" or "arena"; chosen by size when None.
        """
        what = "broadcast"
        self._check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        buffer = as_buffer(tensor, what)
        name = self._choose(what, buffer.flat.nbytes, algorithm)

        transport = self._over_transport(what, name, buffer.flat.nbytes)

        async def over_transport(team: Team, array: np.ndarray) -> None:
            if transport == "chain":
                await chain_broadcast(team, array, root, selection.SEGMENT_BYTES)
            else:
                await tree_broadcast(team, array, root)

        async def body(team: Team) -> None:
            await over_transport(team, buffer.flat)
            if team.me != root:
                buffer.write_back()

        def on_arena(step: ArenaStep, array: np.ndarray) -> None:
            in_arena.broadcast(step.arena, step.operation, array, root, step.fingerprint,
                               step.waiter)

        def here(step: ArenaStep) -> None:
            on_arena(step, buffer.flat)
            if step.arena.me != root:
                buffer.write_back()

        flat = buffer.flat
        operation = self._run(what, timeout, body, _fingerprint(
            Kind.BROADCAST, flat.dtype, None, root, flat.size, _algorithm_code(what, name)),
            self._fast_body(name, here, body), flat.nbytes)
        return self._repeatable(operation, name, timeout, algorithm,
                                (what, flat.dtype, flat.size, src), on_arena, over_transport)

    def gather(self, tensor: Any, gather_list: Sequence[Any] | None, dst: int,
               timeout: float | timedelta | None = None) -> Operation:
        """Copy every member's ``tensor`` into ``gather_list[i]`` on global rank ``dst``.

        ``gather_list`` (one tensor per member) is given on ``dst`` only; others pass None.
        """
        what = "gather"
        self._check_member(what)
        root = check.member_index(self.ranks, dst, "dst", what)
        mine = as_source(tensor, what)
        buffers = self._root_list(gather_list, root, "gather_list", what)
        if buffers is not None:
            flats = [b.flat for b in buffers]
            check.same_dtype([mine, *flats], ["tensor"] + [
                f"gather_list[{i}]" for i in range(len(flats))], what)
            check.same_size(flats[root], mine.size, f"gather_list[{root}]", what,
                            "the size of this rank's tensor")

        async def body(team: Team) -> None:
            await direct_gather(team, mine, root,
                                None if buffers is None else [b.flat for b in buffers])
            for b in buffers or ():
                b.write_back()

        return self._run(what, timeout, body, _fingerprint(Kind.GATHER, mine.dtype,
                                                           root=root))

    def scatter(self, tensor: Any, scatter_list: Sequence[Any] | None, src: int,
                timeout: float | timedelta | None = None) -> Operation:
        """Copy ``scatter_list[i]`` on global rank ``src`` into member i's ``tensor``.

        ``scatter_list`` (one tensor per member) is given on ``src`` only; others pass None.
        """
        what = "scatter"
        self._check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        buffer = as_buffer(tensor, what)
        blocks = None
        if self.rank == root:
            blocks = check.sources(check.tensor_list(scatter_list, self.size, "scatter_list",
                                                     what), "scatter_list", what)
            check.same_dtype([buffer.flat, *blocks], ["tensor"] + [
                f"scatter_list[{i}]" for i in range(len(blocks))], what)
            check.same_size(blocks[root], buffer.flat.size, f"scatter_list[{root}]", what,
                            "the size of this rank's tensor")
        elif scatter_list is not None:
            raise ConfigurationError(f"{what}: scatter_list must be None on rank "
                                     f"{self.global_rank}, which is not src {src}")

        async def body(team: Team) -> None:
            await direct_scatter(team, buffer.flat, root, blocks)
            buffer.write_back()

        return self._run(what, timeout, body, _fingerprint(Kind.SCATTER, buffer.flat.dtype,
                                                           root=root))

    # -- all to all ----------------------------------------------------------------------

    def all_gather(self, tensor_list: Sequence[Any], tensor: Any,
                   timeout: float | timedelta | None = None,
                   algorithm: str | None = None) -> Operation:
        """Copy member i's ``tensor`` into ``tensor_list[i]`` on every member.

        Sizes may differ between members: ``tensor_list[i]`` must have as many
        elements as member i's tensor. ``algorithm`` is "ring" or "arena";
        chosen by size when None.
        """
        what = "all_gather"
        self._check_member(what)
        buffers = check.outputs(check.tensor_list(tensor_list, self.size, "tensor_list", what),
                                "tensor_list", what)
        return self._all_gather(what, tensor, buffers, timeout, algorithm)

    def all_gather_into_tensor(self, output: Any, input: Any,
                               timeout: float | timedelta | None = None,
                               algorithm: str | None = None) -> Operation:
        """Gather every member's ``input`` into ``output``, block i from member i.

        ``output`` has group-size times as many elements as ``input``.
        """
        what = "all_gather_into_tensor"
        self._check_member(what)
        buffer = as_buffer(output, what)
        count = as_source(input, what).size
        check.same_size(buffer.flat, count * self.size, "output", what,
                        f"group size {self.size} x the input's {count}")
        return self._all_gather(what, input, [buffer], timeout, algorithm, count)

    def _all_gather(self, what: str, tensor: Any, buffers: list[Any],
                    timeout: float | timedelta | None, algorithm: str | None,
                    block: int | None = None) -> Operation:
        """Member i's ``tensor`` into output i on every member.

        With ``block``, one output cut into equal blocks; the call is then
        remembered to run again (GroupCore.remember) on (output, input), 1-D.
        """
        mine = as_source(tensor, what)
        flats = [b.flat for b in buffers]
        if block is not None:  # one output cut into equal blocks
            flats = _blocks(flats[0], block, self.size)
        me = self.rank
        check.same_dtype([mine, *flats], ["tensor"] + [f"output {i}" for i in range(len(flats))],
                         what)
        check.same_size(flats[me], mine.size, f"output block {me}", what,
                        "the size of this rank's input")
        # The largest block, which every member agrees on (not its own input's size).
        name = self._choose("all_gather", max(f.nbytes for f in flats), algorithm)

        async def over_transport(team: Team, arrays: tuple[list[np.ndarray], np.ndarray]
                                 ) -> None:
            outputs, source = arrays
            if not (outputs[me].size and np.shares_memory(outputs[me], source)
                    and outputs[me].__array_interface__ == source.__array_interface__):
                np.copyto(outputs[me], source)
            await ring_all_gather(team, outputs, selection.SEGMENT_BYTES)

        async def body(team: Team) -> None:
            await over_transport(team, (flats, mine))
            for b in buffers:
                b.write_back()

        def on_arena(step: ArenaStep, arrays: tuple[list[np.ndarray], np.ndarray]) -> None:
            in_arena.all_gather(step.arena, step.operation, arrays[1], arrays[0],
                                step.fingerprint, step.waiter)

        def here(step: ArenaStep) -> None:
            on_arena(step, (flats, mine))
            for b in buffers:
                b.write_back()

        count = sum(f.size for f in flats)
        operation = self._run(what, timeout, body, _fingerprint(
            Kind.ALL_GATHER, mine.dtype, count=count,
            algorithm=_algorithm_code("all_gather", name)),
            self._fast_body(name, here, body), max(f.nbytes for f in flats))
        if block is None:
            return operation
        size = self.size

        def cut(arrays: tuple[np.ndarray, np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
            return _blocks(arrays[0], block, size), arrays[1]

        return self._repeatable(operation, name, timeout, algorithm,
                                (what, mine.dtype, count, mine.dtype, mine.size),
                                lambda step, arrays: on_arena(step, cut(arrays)),
                                lambda team, arrays: over_transport(team, cut(arrays)))

    def all_to_all(self, output_list: Sequence[Any], input_list: Sequence[Any],
                   timeout: float | timedelta | None = None) -> Operation:
        """Copy member i's ``input_list[j]`` into member j's ``output_list[i]``."""
        what = "all_to_all"
        self._check_member(what)
        buffers = check.outputs(check.tensor_list(output_list, self.size, "output_list", what),
                                "output_list", what)
        inputs = check.sources(check.tensor_list(input_list, self.size, "input_list", what),
                               "input_list", what)
        return self._all_to_all(what, buffers, [b.flat for b in buffers], inputs, timeout)

    def all_to_all_single(self, output: Any, input: Any,
                          output_split_sizes: Sequence[int] | None = None,
                          input_split_sizes: Sequence[int] | None = None,
                          timeout: float | timedelta | None = None) -> Operation:
        """Split ``input`` along its first dimension, send part j to member j, and
        gather the parts received into ``output`` in member order.

        Split sizes count rows (first-dimension entries); None splits evenly.
        """
        what = "all_to_all_single"
        self._check_member(what)
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
        return self._all_to_all(what, [buffer], _cut(buffer.flat, out_splits, out_width),
                                _cut(flat_in, in_splits, in_width), timeout)

    def _all_to_all(self, what: str, buffers: list[Any], outputs: list[np.ndarray],
                    inputs: list[np.ndarray], timeout: float | timedelta | None) -> Operation:
        check.same_dtype([*outputs, *inputs], [f"output {i}" for i in range(len(outputs))] + [
            f"input {i}" for i in range(len(inputs))], what)
        me = self.rank
        check.same_size(outputs[me], inputs[me].size, f"output block {me}", what,
                        "the size of the input block this rank sends itself")
        if any(np.may_share_memory(o, i) for o in outputs for i in inputs if o.size and i.size):
            inputs = [i.copy() for i in inputs]  # in place: keep the sent values intact

        async def body(team: Team) -> None:
            await direct_all_to_all(team, inputs, outputs)
            for b in buffers:
                b.write_back()

        return self._run(what, timeout, body, _fingerprint(Kind.ALL_TO_ALL,
                                                           outputs[0].dtype))

    def barrier(self, timeout: float | timedelta | None = None,
                algorithm: str | None = None) -> Operation:
        """Wait until every member has called barrier, after this rank's earlier operations.

        It runs on the data plane, in line with the group's other operations:
        through the group's arena where it has one, else as a
        recursive-doubling all-reduce of one byte (``algorithm`` forces
        "arena" or "recursive_doubling").

        Raises:
            ConfigurationError: this process is not a member.
            CollectiveError: a member failed, or the deadline passed.
        """
        self._check_member("barrier")
        token = np.zeros(1, dtype=np.uint8)
        name = self._choose("barrier", 0, algorithm)

        # A repeat (GroupCore.remember) reuses this call's token: barriers run one at a time.
        async def over_transport(team: Team, _: np.ndarray) -> None:
            await recursive_doubling_all_reduce(team, token, ReduceOp.MAX,
                                                self._scratch_of(token.dtype, 1))

        def on_arena(step: ArenaStep, _: np.ndarray) -> None:
            in_arena.barrier(step.arena, step.operation, step.fingerprint, step.waiter)

        doubling = DoublingOnLinks(self.rank, self.size, token.dtype, 1, ReduceOp.MAX,
                                   self._scratch_of) if name == selection.LINKS else None

        def on_links(step: LinksStep, _: np.ndarray) -> None:
            assert doubling is not None
            doubling.run(step, token)

        def body(team: Team) -> Awaitable[None]:
            return over_transport(team, token)

        operation = self._run("barrier", timeout, body, _fingerprint(
            Kind.BARRIER, None, None, -1, 0, _algorithm_code("barrier", name)),
            self._fast_body(name, lambda step: on_arena(step, token), body,
                            lambda step: on_links(step, token)))
        return self._repeatable(operation, name, timeout, algorithm, ("barrier",), on_arena,
                                over_transport, on_links)

    async def monitored_barrier(self, timeout: float | timedelta | None = None) -> None:
        """A barrier through the coordinator, whose timeout names every rank that is missing.

        Raises:
            ConfigurationError: this process is not a member.
            CollectiveError: a member left, or the deadline passed.
        """
        self._check_member("monitored_barrier")
        limit = seconds(timeout, self.timeout)

        async def body(team: Team) -> None:
            await self._session.barrier(self.group_id, limit)

        # The coordinator's deadline is the one that can name who did not arrive,
        # and the request's own (one grace later) comes next: this one is the last.
        await Operation(self, "monitored_barrier", limit + 2 * COORDINATOR_GRACE_S, body,
                        _fingerprint(Kind.BARRIER), None)

    def monitored_barrier_by_first(self, timeout: float | timedelta,
                                   wait_all_ranks: bool = False) -> Operation:
        """torch's monitored barrier as gloo runs it, over the group's own connections.

        Member 0 hears from every member in turn within ``timeout`` and names
        the first that did not arrive (every one, with ``wait_all_ranks``),
        in gloo's words (asyncoll._algorithms.monitored): any group, and no
        coordinator. ``timeout`` may be 0 (member 0 then fails at once, as on gloo).

        Raises:
            ConfigurationError: not a member, or a negative timeout.
            MonitoredBarrierError: a member did not arrive in time.
        """
        what = "monitored_barrier"
        self._check_member(what)
        limit = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (
                0 <= limit < float("inf")):
            raise ConfigurationError(f"{what}: timeout must be 0 or more seconds, got "
                                     f"{timeout!r}")
        # The operation's own deadline comes after the barrier's, which names who is late.
        return self._run(what, limit + COORDINATOR_GRACE_S,
                         lambda team: monitored.monitored_barrier(team, limit, wait_all_ranks),
                         _fingerprint(Kind.BARRIER, root=0))

    # -- objects ---------------------------------------------------------------------------

    def all_gather_object(self, object_list: list[Any], obj: Any,
                          timeout: float | timedelta | None = None) -> Operation:
        """Set ``object_list[i]`` to member i's ``obj`` on every member (pickled)."""
        what = "all_gather_object"
        self._check_member(what)
        check.tensor_list(object_list, self.size, "object_list", what)
        mine = dump(obj, what)
        return self._run(what, timeout, lambda team: objects.all_gather(team, object_list, mine),
                         _fingerprint(Kind.ALL_GATHER_OBJECT))

    def broadcast_object_list(self, object_list: list[Any], src: int,
                              timeout: float | timedelta | None = None) -> Operation:
        """Replace the items of ``object_list`` with global rank ``src``'s (pickled).

        Every member passes a list of the same length.
        """
        what = "broadcast_object_list"
        self._check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        if not isinstance(object_list, list):
            raise ConfigurationError(f"{what}: object_list must be a list, got "
                                     f"{type(object_list).__name__}")
        mine = [dump(o, what) for o in object_list] if self.rank == root else None
        return self._run(what, timeout,
                         lambda team: objects.broadcast(team, object_list, mine, root),
                         _fingerprint(Kind.BROADCAST_OBJECT_LIST, root=root,
                                      count=len(object_list)))

    def gather_object(self, obj: Any, object_gather_list: list[Any] | None, dst: int,
                      timeout: float | timedelta | None = None) -> Operation:
        """Set ``object_gather_list[i]`` on global rank ``dst`` to member i's ``obj``."""
        what = "gather_object"
        self._check_member(what)
        root = check.member_index(self.ranks, dst, "dst", what)
        if self.rank == root:
            check.tensor_list(object_gather_list, self.size, "object_gather_list", what)
        mine = dump(obj, what)
        return self._run(what, timeout,
                         lambda team: objects.gather(team, mine, object_gather_list, root),
                         _fingerprint(Kind.GATHER_OBJECT, root=root))

    def scatter_object_list(self, output_list: list[Any], input_list: list[Any] | None,
                            src: int, timeout: float | timedelta | None = None) -> Operation:
        """Set ``output_list[0]`` on member i to ``input_list[i]`` of global rank ``src``."""
        what = "scatter_object_list"
        self._check_member(what)
        root = check.member_index(self.ranks, src, "src", what)
        if not isinstance(output_list, list) or not output_list:
            raise ConfigurationError(f"{what}: scatter_object_output_list must be a list of at "
                                     f"least one item, got {output_list!r}")
        mine = None
        if self.rank == root:
            items = check.tensor_list(input_list, self.size, "scatter_object_input_list", what)
            mine = [dump(o, what) for o in items]
        return self._run(what, timeout,
                         lambda team: objects.scatter(team, output_list, mine, root),
                         _fingerprint(Kind.SCATTER_OBJECT_LIST, root=root))

    # -- point to point ----------------------------------------------------------------------

    def send(self, tensor: Any, dst: int, tag: int = 0,
             timeout: float | timedelta | None = None) -> Coroutine[Any, Any, None]:
        """Send ``tensor`` to global rank ``dst``, which calls recv with the same tag.

        Messages to one peer with one tag arrive in the order they were sent.
        """
        peer = self._peer(dst, "dst", tag, "send")
        data = as_source(tensor, "send")
        return self._messages.send(peer, tag, data, seconds(timeout, self.timeout))

    def recv(self, tensor: Any, src: int | None, tag: int = 0,
             timeout: float | timedelta | None = None) -> Coroutine[Any, Any, int]:
        """Receive into ``tensor`` what global rank ``src`` sends with ``tag``; return the sender.

        With ``src`` None (torch's receive from any source), the first message
        with ``tag`` to arrive from any other member is received, and its
        sender's global rank returned; one member's messages with one tag still
        arrive in the order it sent them, and receives with one tag match in
        the order they were called (see asyncoll._group.point_to_point).

        Raises:
            ConfigurationError: bad ``src`` or ``tag``, or ``src`` None in a group of one.
            CollectiveTimeoutError: no message within the timeout. One from any source
                that has not yet received breaks nothing; any other breaks the group's
                point-to-point messages.
        """
        if src is None:
            self._check_member("recv")
            _check_tag(tag, "recv")
            peers = [rank for rank in self.ranks if rank != self.global_rank]
            if not peers:
                raise ConfigurationError("recv without src in a group of one rank: no other "
                                         "member can send to it")
            buffer = as_buffer(tensor, "recv")
            return self._messages.recv_any(peers, tag, buffer, seconds(timeout, self.timeout))
        peer = self._peer(src, "src", tag, "recv")
        buffer = as_buffer(tensor, "recv")
        return self._messages.recv(peer, tag, buffer, seconds(timeout, self.timeout))

    def _peer(self, rank: int, role: str, tag: int, what: str) -> int:
        self._check_member(what)
        check.member_index(self.ranks, rank, role, what)
        if rank == self.global_rank:
            raise ConfigurationError(f"{what}: {role} {rank} is this process's own rank; "
                                     "a rank cannot send to or receive from itself")
        _check_tag(tag, what)
        return int(rank)


def _check_tag(tag: int, what: str) -> None:
    if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= MAX_TAG:
        raise ConfigurationError(f"{what}: tag must be an int from 0 to {MAX_TAG}, got {tag!r}")


def _cut(flat: np.ndarray, rows: list[int], width: int) -> list[np.ndarray]:
    """Consecutive blocks of ``rows[i] * width`` elements of ``flat``."""
    bounds = np.concatenate(([0], np.cumsum(rows))) * width
    return [flat[int(bounds[i]):int(bounds[i + 1])] for i in range(len(rows))]


def _blocks(flat: np.ndarray, block: int, count: int) -> list[np.ndarray]:
    """``flat`` cut into ``count`` consecutive blocks of ``block`` elements."""
    return [flat[i * block:(i + 1) * block] for i in range(count)]

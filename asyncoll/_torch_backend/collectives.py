"""TorchCollectives: torch's collective methods, run by an asyncoll group.

torch calls these methods with lists of tensors and an options object
(group ranks in ``rootRank``, ``reduceOp.op``, ``timeout``); each one checks
its arguments here, in the caller's thread (so bad input raises from the
torch call itself, before anything is sent), starts the asyncoll operation on
the world's loop thread and returns an AsyncollWork. An operation the
group's shared-memory arena takes (same-host members, small and medium
tensors) runs in the caller's thread instead, before the call returns, as the
blocking API's do; its Work is then already completed. An allreduce that
repeats an earlier one's signature runs again without being made anew
(asyncoll._torch_backend.repeats). Both the names torch's
Python functions call (``all_gather_single``, ``reduce_scatter_single``,
``all_to_all_single``) and the C++ names DDP reaches through torch's
trampoline (``_allgather_base``, ``_reduce_scatter_base``, ``alltoall_base``)
are defined.

What they raise, and what their Works raise, is torch's
(asyncoll._torch_backend.errors). An operation whose options name no
timeout has set_timeout's, else the asyncoll group's own.

The same methods serve torch's two shapes of a group: asyncoll's own
ProcessGroup (asyncoll._torch_backend.process_group), whose c10d Backend for
"cpu" forwards them to it (asyncoll._torch_backend.device_backend), and the
c10d Backend that a shrink_group gives, which torch runs under a plain
ProcessGroup (asyncoll._torch_backend.fault_tolerance).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import timedelta
from typing import Any

from asyncoll._torch_backend import dtypes, repeats, sparse
from asyncoll._torch_backend.errors import reraise, through_torch
from asyncoll._torch_backend.work import AsyncollWork
from asyncoll._torch_backend.world import TorchWorld
from asyncoll._group.core import DONE
from asyncoll.errors import AsyncollError, ConfigurationError
from asyncoll.group import AsyncProcessGroup
from asyncoll.types import ReduceOp

#: One step of an operation: the coroutine, and what to do once it has finished.
Step = tuple[Coroutine[Any, Any, Any], Callable[[], None] | None]


class TorchCollectives:
    """torch's collectives (the names its Python code and its C++ trampolines call) over
    ``self._group``, with the world ``self._world`` completing their Works."""

    _world: TorchWorld
    _group: AsyncProcessGroup
    #: How every Work names the group.
    _named: str
    #: The future of the operation started last (those of a group run in order).
    _latest: concurrent.futures.Future[Any] = DONE
    #: The deadline set_timeout gave the operations that name none, in seconds.
    _default_limit: float | None = None
    #: The asyncoll group and the error of the last operation that broke it in the caller's
    #: thread: the group's own record of it (GroupCore.failure) is made on the loop, later.
    _failed_here: tuple[AsyncProcessGroup, AsyncollError] | None = None
    #: numpy's view of the tensor the last repeated call took (made at the first).
    _flat: repeats.LastFlat | None = None

    # -- reductions ------------------------------------------------------------------------

    def allreduce(self, tensors: Sequence[Any], opts: Any = None) -> AsyncollWork | None:
        """Reduce each tensor across the group, in place (torch's allreduce).

        Sparse COO tensors are gathered and summed (asyncoll._torch_backend.sparse).
        None for a blocking call (``opts.asyncOp`` False, as torch's all_reduce
        sets it) that completed in this thread as a repeat: torch takes no Work
        as a backend that synchronized, and waits for nothing.
        """
        # Its errors become torch's here, not through through_torch: each small
        # allreduce that repeats would pay for the wrapper's call.
        try:
            if len(tensors) == 1 and opts is not None:
                ran, work = repeats.blocking_all_reduce(self, tensors[0], opts)
                if ran:
                    return work
            op, limit = _op(opts), self._limit(opts)
            if len(tensors) == 1:
                ran, work = repeats.again(self, "allreduce", tensors[0], "all_reduce",
                                          repeats.reduce_op(op), limit, _blocking(opts))
                if ran:
                    return work
            return self._start("allreduce", list(tensors), (
                self._sparse_sum(t, op, limit) if sparse.is_sparse(t) else
                _reducing(t, lambda s: self._group.all_reduce(s, op, limit))
                for t in tensors))
        except AsyncollError as exc:
            reraise(exc)

    def _sparse_sum(self, tensor: Any, op: Any, limit: float | None) -> Step:
        parts: list[Any] = [None] * self._group.size
        return (self._group.all_gather_object(parts, sparse.part_of(tensor, op), limit),
                sparse.summing_into(tensor, parts, self._group.ranks))

    @through_torch
    def allreduce_coalesced(self, tensors: Sequence[Any],
                            opts: Any = None) -> AsyncollWork | None:
        """allreduce of several tensors, one after another (None as allreduce's)."""
        return self.allreduce(tensors, opts)

    def reduce(self, tensors: Sequence[Any], opts: Any = None) -> AsyncollWork | None:
        """Reduce each tensor into group rank ``opts.rootRank``'s (None as allreduce's)."""
        try:
            op, limit, root = _op(opts), self._limit(opts), self._global(opts.rootRank, "rootRank")
            if len(tensors) == 1:
                ran, work = repeats.again(self, "reduce", tensors[0], "reduce",
                                          repeats.reduce_op(op), limit, _blocking(opts), root)
                if ran:
                    return work
            return self._start("reduce", list(tensors), (
                _reducing(t, lambda s: self._group.reduce(s, root, op, limit)) for t in tensors))
        except AsyncollError as exc:
            reraise(exc)

    @through_torch
    def reduce_scatter(self, output_tensors: Sequence[Any],
                       input_tensors: Sequence[Sequence[Any]], opts: Any = None) -> AsyncollWork:
        """Reduce ``input_tensors[k][i]`` across the group into member i's output k."""
        op, limit = _op(opts), self._limit(opts)
        steps = (_reducing_all([out, *ins], lambda s: self._group.reduce_scatter(
            s[0], s[1:], op, limit)) for out, ins in zip(output_tensors, input_tensors))
        return self._start("reduce_scatter", list(output_tensors), steps)

    @through_torch
    def reduce_scatter_single(self, output: Any, input: Any,
                              opts: Any = None) -> AsyncollWork:
        """Reduce ``input`` across the group; member i gets block i in ``output``."""
        op, limit = _op(opts), self._limit(opts)
        return self._start("reduce_scatter_tensor", [output], [_reducing_all(
            [output, input], lambda s: self._group.reduce_scatter_tensor(s[0], s[1], op,
                                                                         limit))])

    _reduce_scatter_base = reduce_scatter_single

    @through_torch
    def reduce_scatter_tensor_coalesced(self, outputs: Sequence[Any], inputs: Sequence[Any],
                                        opts: Any = None) -> AsyncollWork:
        """reduce_scatter_single of several pairs, one after another."""
        op, limit = _op(opts), self._limit(opts)
        return self._start("reduce_scatter_tensor", list(outputs), (_reducing_all(
            [o, i], lambda s: self._group.reduce_scatter_tensor(s[0], s[1], op, limit))
            for o, i in zip(outputs, inputs)))

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # -- data movement -----------------------------------------------------------------------

    def broadcast(self, tensors: Sequence[Any], opts: Any = None) -> AsyncollWork | None:
        """Copy group rank ``opts.rootRank``'s tensors into every member's (None as
        allreduce's)."""
        try:
            limit, root = self._limit(opts), self._global(opts.rootRank, "rootRank")
            if len(tensors) == 1:
                ran, work = repeats.again(self, "broadcast", tensors[0], "broadcast", None,
                                          limit, _blocking(opts), root)
                if ran:
                    return work
            return self._start("broadcast", list(tensors), (
                (self._group.broadcast(dtypes.movable(t), root, limit), None) for t in tensors))
        except AsyncollError as exc:
            reraise(exc)

    @through_torch
    def allgather(self, output_tensors: Sequence[Sequence[Any]], input_tensors: Sequence[Any],
                  opts: Any = None) -> AsyncollWork:
        """Copy member i's ``input_tensors[k]`` into ``output_tensors[k][i]`` everywhere."""
        return self._start("allgather", [list(outs) for outs in output_tensors],
                           self._gathers(output_tensors, input_tensors, opts))

    @through_torch
    def allgather_coalesced(self, output_lists: Sequence[Sequence[Any]],
                            input_tensors: Sequence[Any], opts: Any = None) -> AsyncollWork:
        """Copy member i's ``input_tensors[k]`` into ``output_lists[i][k]`` everywhere.

        torch orders a coalesced gather's outputs ``[rank][tensor]``, the
        transpose of ``allgather``'s ``[tensor][rank]``: each input is gathered
        into the column of ``output_lists`` that holds it.
        """
        size = self._group.size
        if len(output_lists) != size or any(len(outs) != len(input_tensors)
                                             for outs in output_lists):
            shape = [len(outs) for outs in output_lists]
            raise ConfigurationError(
                f"all_gather_coalesced needs one output list per rank of the group ({size}), "
                f"each with one tensor per input ({len(input_tensors)}); got lists of "
                f"lengths {shape}")
        by_input = [[output_lists[member][k] for member in range(size)]
                    for k in range(len(input_tensors))]
        return self._start("allgather_coalesced", [list(outs) for outs in output_lists],
                           self._gathers(by_input, input_tensors, opts))

    def _gathers(self, output_tensors: Sequence[Sequence[Any]], input_tensors: Sequence[Any],
                 opts: Any) -> Iterable[Step]:
        limit = self._limit(opts)
        return ((self._group.all_gather([dtypes.movable(o) for o in outs],
                                        dtypes.movable(inp), limit), None)
                for outs, inp in zip(output_tensors, input_tensors))

    @through_torch
    def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> AsyncollWork:
        """Gather every member's ``input`` into ``output``, in member order."""
        return self._start("all_gather_into_tensor", [output], [(
            self._group.all_gather_into_tensor(dtypes.movable(output), dtypes.movable(input),
                                               self._limit(opts)), None)])

    _allgather_base = all_gather_single

    @through_torch
    def allgather_into_tensor_coalesced(self, outputs: Sequence[Any], inputs: Sequence[Any],
                                        opts: Any = None) -> AsyncollWork:
        """all_gather_single of several pairs, one after another."""
        limit = self._limit(opts)
        return self._start("all_gather_into_tensor", list(outputs), (
            (self._group.all_gather_into_tensor(dtypes.movable(o), dtypes.movable(i), limit),
             None) for o, i in zip(outputs, inputs)))

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    @through_torch
    def gather(self, output_tensors: Sequence[Sequence[Any]], input_tensors: Sequence[Any],
               opts: Any = None) -> AsyncollWork:
        """Copy every member's input into ``output_tensors[0]`` on group rank ``rootRank``."""
        root = self._global(opts.rootRank, "rootRank")
        outs = ([dtypes.movable(t) for t in output_tensors[0]]
                if self._group.rank == opts.rootRank else None)
        return self._start("gather", [list(o) for o in output_tensors], [(
            self._group.gather(dtypes.movable(_single(input_tensors, "gather")), outs, root,
                               self._limit(opts)), None)])

    @through_torch
    def scatter(self, output_tensors: Sequence[Any], input_tensors: Sequence[Sequence[Any]],
                opts: Any = None) -> AsyncollWork:
        """Copy ``input_tensors[0][i]`` on group rank ``rootRank`` into member i's output."""
        root = self._global(opts.rootRank, "rootRank")
        ins = ([dtypes.movable(t) for t in input_tensors[0]]
               if self._group.rank == opts.rootRank else None)
        output = _single(output_tensors, "scatter")
        return self._start("scatter", [output], [(self._group.scatter(
            dtypes.movable(output), ins, root, self._limit(opts)), None)])

    @through_torch
    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: Sequence[int],
                          input_split_sizes: Sequence[int], opts: Any = None) -> AsyncollWork:
        """Send rows of ``input`` to each member, gather theirs into ``output``."""
        return self._start("all_to_all_single", [output], [(self._group.all_to_all_single(
            dtypes.movable(output), dtypes.movable(input), list(output_split_sizes) or None,
            list(input_split_sizes) or None, self._limit(opts)), None)])

    alltoall_base = all_to_all_single

    @through_torch
    def alltoall(self, output_tensors: Sequence[Any], input_tensors: Sequence[Any],
                 opts: Any = None) -> AsyncollWork:
        """Copy member i's ``input_tensors[j]`` into member j's ``output_tensors[i]``."""
        return self._start("all_to_all", list(output_tensors), [(self._group.all_to_all(
            [dtypes.movable(t) for t in output_tensors],
            [dtypes.movable(t) for t in input_tensors], self._limit(opts)), None)])

    def barrier(self, opts: Any = None) -> AsyncollWork | None:
        """Complete once every member has called barrier (None as allreduce's)."""
        try:
            limit = self._limit(opts)
            ran, work = repeats.again(self, "barrier", None, "barrier", None, limit,
                                      _blocking(opts))
            if ran:
                return work
            return self._start("barrier", [], [(self._group.barrier(limit), None)])
        except AsyncollError as exc:
            reraise(exc)

    @through_torch
    def monitored_barrier(self, timeout: timedelta | float | None = None,
                          wait_all_ranks: bool = False) -> None:
        """Block until every member has arrived; group rank 0 names who did not, as gloo.

        torch routes ``dist.monitored_barrier`` here, for a group with a backend for
        "cpu". It runs gloo's algorithm, with
        gloo's messages, on any group (asyncoll._algorithms.monitored).

        Raises:
            MonitoredBarrierError: a member did not arrive within ``timeout`` (a
                RuntimeError, as gloo's error is in torch).
        """
        limit = (self._default_limit or self._group.timeout) if timeout is None else timeout
        self._start("monitored_barrier", [], [
            (self._group.monitored_barrier_by_first(limit, wait_all_ranks), None)]).wait()

    # -- point to point ------------------------------------------------------------------

    @through_torch
    def send(self, tensors: Sequence[Any], dstRank: int, tag: int = 0) -> AsyncollWork:
        """Send the tensor to group rank ``dstRank``."""
        tensor = _single(tensors, "send")
        return self._start("send", [tensor], [(self._group.send(
            dtypes.movable(tensor), self._global(dstRank, "dst"), tag), None)])

    @through_torch
    def recv(self, tensors: Sequence[Any], srcRank: int, tag: int = 0) -> AsyncollWork:
        """Receive into the tensor what group rank ``srcRank`` sends with ``tag``."""
        tensor = _single(tensors, "recv")
        return self._start("recv", [tensor], [(self._group.recv(
            dtypes.movable(tensor), self._global(srcRank, "src"), tag), None)], source=srcRank)

    @through_torch
    def recv_anysource(self, tensors: Sequence[Any], tag: int = 0) -> AsyncollWork:
        """Receive into the tensor the first message with ``tag`` from any member.

        The work's ``_source_rank()`` is then the sender's group rank (torch's
        ``recv`` turns it into the global rank).
        """
        tensor = _single(tensors, "recv")
        receiving = self._group.recv(dtypes.movable(tensor), None, tag)
        sender: list[int] = []

        async def noting_the_sender() -> None:
            sender.append(self._group.ranks.index(await receiving))

        return self._start("recv", [tensor], [(noting_the_sender(), None)],
                           source=lambda: sender[0] if sender else -1)

    # -- timeout ------------------------------------------------------------------------------

    @through_torch
    def set_timeout(self, timeout: timedelta) -> None:
        """Make ``timeout`` the deadline of the group's later operations whose options name
        none (torch's ``ProcessGroup.set_timeout`` and ``Backend.set_timeout``).

        Raises:
            ConfigurationError: ``timeout`` is not a positive timedelta.
        """
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else -1.0
        if seconds <= 0:
            raise ConfigurationError(f"set_timeout takes a positive timedelta, got {timeout!r}")
        self._default_limit = seconds

    def _limit(self, opts: Any) -> float | None:
        """The deadline of an operation with options ``opts``, in seconds: theirs, else
        set_timeout's, else None (the asyncoll group's own timeout)."""
        # torch's "unset" timeout is negative.
        seconds = opts.timeout.total_seconds() if opts is not None else -1.0
        return float(seconds) if seconds > 0 else self._default_limit

    # -- plumbing ---------------------------------------------------------------------------

    def _global(self, group_rank: int, role: str) -> int:
        ranks = self._group.ranks
        if not 0 <= group_rank < len(ranks):
            raise ConfigurationError(f"{role} {group_rank} is not a rank of this group of "
                                     f"{len(ranks)}; use 0 to {len(ranks) - 1}")
        return ranks[group_rank]

    def _failed_in_this_thread(self, error: BaseException | None) -> None:
        # Only what breaks the group (a refused argument does not): get_error reads it
        # until the group's own record of it (GroupCore.failure), made on the loop, is there.
        if isinstance(error, AsyncollError) and not isinstance(error, ConfigurationError):
            self._failed_here = (self._group, error)

    def _start(self, what: str, outputs: list[Any], steps: Iterable[Step],
               source: int | Callable[[], int] = -1) -> AsyncollWork:
        made: list[Step] = []
        try:
            # Each step checks its arguments as it is made; a refusal must not
            # leave the steps made before it unawaited.
            made.extend(steps)
        except BaseException:
            for coro, _ in made:
                coro.close()
            raise
        future = self._group.submit([coro for coro, _ in made], self._world.runtime,
                                    [finish for _, finish in made])
        self._latest = future
        if future.done() and not future.cancelled():  # ran in this thread
            self._failed_in_this_thread(future.exception())
        return AsyncollWork(future, outputs, f"{what} on {self._named}", self._world, source)


#: The operations torch calls on a group or its c10d Backend: TorchCollectives' methods
#: under every name torch uses.
OPERATIONS = (
    "allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
    "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single_coalesced", "broadcast", "allgather", "allgather_coalesced",
    "all_gather_single", "_allgather_base", "allgather_into_tensor_coalesced",
    "all_gather_single_coalesced", "gather", "scatter", "all_to_all_single", "alltoall_base",
    "alltoall", "barrier", "monitored_barrier", "send", "recv", "recv_anysource",
    "set_timeout")


def _reducing(tensor: Any, make: Callable[[Any], Coroutine[Any, Any, Any]]) -> Step:
    staged, finish = dtypes.reducible(tensor)
    return make(staged), finish


def _reducing_all(tensors: list[Any], make: Callable[[list[Any]], Coroutine[Any, Any, Any]]
                  ) -> Step:
    """Stage every tensor (bfloat16 through float32); the first is the one written."""
    staged = [dtypes.reducible(t) for t in tensors]
    return make([s for s, _ in staged]), staged[0][1]


def _single(tensors: Sequence[Any], what: str) -> Any:
    if len(tensors) != 1:
        raise ConfigurationError(f"{what} takes exactly one tensor on the asyncoll backend, "
                                 f"got {len(tensors)}")
    return tensors[0]


def _op(opts: Any) -> Any:
    return ReduceOp.SUM if opts is None else opts.reduceOp.op


def _blocking(opts: Any) -> bool:
    """Whether torch waits for the call (``opts.asyncOp`` False): a backend that
    completed it may then give torch no Work."""
    return opts is not None and not opts.asyncOp



"""The blocking API: torch.distributed's functions over one background event loop.

Every function converts its arguments, has the group check them and make
the call's plan (asyncoll.group), and hands the plan to the group's
`execute` (blocking) or `submit` (`async_op`: a Work), which decides
where it runs: in the caller's thread where the group's fast path takes it
(its Work then done before the call returns), else on the runtime's loop
thread. A blocking call on numpy arrays with the signature of one made
before runs again without being made anew (`_ran_again`: the group's one
repeat check, asyncoll._group.repeats.ran_again).
`src` and `dst` are global ranks; `group_src` and `group_dst` are
ranks within `group`, as in torch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll import aio
from asyncoll._algorithms.compression import Compression
from asyncoll._runtime.runtime import runtime
from asyncoll._api import world
from asyncoll._api.work import Work
from asyncoll._group.repeats import ran_again
from asyncoll._api.world import (
    Group,
    get_global_rank as get_global_rank,
    get_group_rank as get_group_rank,
    get_process_group_ranks as get_process_group_ranks,
)
from asyncoll._wire.status import StragglerStatus
from asyncoll.errors import CollectiveError, ConfigurationError
from asyncoll.group import WORLD, AsyncProcessGroup, seconds
from asyncoll.types import ReduceOp

_lock = threading.Lock()


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: float | timedelta | None = None, world_size: int = -1,
                       rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None,
                       job_id: str | None = None, elastic: bool | None = None,
                       min_size: int | None = None, max_size: int | None = None) -> None:
    """Join the job and make its world the default group (see aio.init_process_group).

    `store`, `pg_options` and `device_id` are torch's; asyncoll refuses a
    store (it has its own coordinator) and ignores the others. With
    `elastic=True` (or ASYNCOLL_ELASTIC=1), joining a job that already runs
    blocks until its members call `reconfigure`, which admits this process.

    Raises:
        ConfigurationError: already initialized, or bad arguments or environment.
        RendezvousError: the coordinator refused this peer, is unreachable, or the
            rendezvous timed out (RendezvousTimeoutError).
    """
    if store is not None:
        raise ConfigurationError("asyncoll does not use a torch Store: pass init_method "
                                 "(env:// or tcp://host:port) instead")
    with _lock:
        if world.current is not None:
            raise ConfigurationError("init_process_group was called twice; call "
                                     "destroy_process_group() first")
        shared = runtime()
        world.current = shared.run(aio.init_process_group(
            backend, init_method, timeout, world_size, rank, job_id, elastic, min_size, max_size))
        # A program that forgets destroy_process_group still leaves the job
        # cleanly, so its peers and an embedded coordinator are not left waiting.
        shared.at_exit(destroy_process_group)


def destroy_process_group(group: Group = None) -> None:
    """Leave the job (group None) and close its connections; a sub-group is closed on this
    rank: its shared memory, links and thread go at once, and later calls on it raise
    ClosedError."""
    if group is not None and group is not WORLD and group is not world.current:
        if isinstance(group, AsyncProcessGroup):
            _run(group.destroy())
        return
    with _lock:
        ending, world.current = world.current, None
        if ending is not None:
            runtime().run(ending.destroy())


def membership_changed(timeout: float | timedelta | None = None) -> bool:
    """Whether a member was lost or left, or a process waits to join (an elastic job).

    A collective over the world: every live member calls it and all get the
    same answer, even members that heard of a loss at different moments.
    When none has heard of a change, it is one small all_reduce (in this
    thread, on one host); otherwise the coordinator decides (aio.World's).
    """
    default = world.default()
    heard = np.array([default.session.heard_of_change()], dtype=np.int32)
    try:
        all_reduce(heard, ReduceOp.MAX)
    except CollectiveError as exc:
        if not default.session.changed_membership(exc):
            raise
        heard[0] = 1  # lost or left, meanwhile or before: the coordinator gathers all
    return bool(heard[0]) and bool(_run(default.session.membership_changed(
        seconds(timeout, default.timeout))))


def reconfigure(timeout: float | timedelta | None = None) -> None:
    """Go on with the live members and admit the waiting processes (an elastic job).

    Every live member calls it. Afterwards get_rank() and get_world_size()
    answer for the new world (survivors in their old order from 0, newcomers
    after them); groups made before are closed: make them anew. After a
    PeerLostError this is how the survivors go on.

    Raises:
        ConfigurationError: the job is not elastic.
        RendezvousTimeoutError: fewer than min_size members took part in time.
        ExcludedError: the others went on without this process (it was late).
    """
    with _lock:
        world.current = _run(world.default().reconfigure(timeout))


def get_straggler_report(timeout: float | timedelta | None = None) -> list[StragglerStatus]:
    """Each group's straggler: the rank its other members wait for (empty: none).

    The coordinator finds it from every rank's heartbeats, which carry the
    times the rank entered a sample of its operations: a rank that came last,
    over 5 ms after the one before, in at least 10 % of a group's last
    sampled operations, and in far more of its late ones than its part of the
    group. Each entry names the group, the rank, how many of the sampled
    operations it came last in, of how many, and its median lateness in
    seconds.
    """
    return list(_run(world.default().straggler_report(timeout)))


def get_generation() -> int:
    """The job's membership generation: 0 at its start, one more per reconfigure.

    A process admitted into a running elastic job starts past 0.
    """
    return world.default().generation


def is_available() -> bool:
    """Always True: asyncoll needs nothing beyond its Python dependencies."""
    return True


def is_initialized() -> bool:
    """Whether init_process_group has succeeded and not been destroyed."""
    return world.current is not None


def get_rank(group: Group = None) -> int:
    """This process's rank in `group` (the world by default); -1 if not a member."""
    return world.resolve(group).rank


def get_world_size(group: Group = None) -> int:
    """The number of ranks in `group`; -1 on a process that is not a member, as torch."""
    resolved = world.resolve(group)
    return resolved.size if resolved.is_member else -1


def get_backend(group: Group = None) -> str:
    """The backend's name: always "asyncoll"."""
    world.resolve(group)
    return "asyncoll"


def new_group(ranks: Sequence[int] | None = None, timeout: float | timedelta | None = None,
              backend: str | None = None, pg_options: Any = None,
              use_local_synchronization: bool = False, group_desc: str | None = None,
              device_id: Any = None) -> AsyncProcessGroup:
    """Create a group of `ranks`; every rank of the job must call it, in the same order.

    Returns the group on every rank; on a rank outside it, collectives on it warn
    and do nothing, as torch's do.

    Raises:
        ConfigurationError: bad ranks.
        MismatchError: ranks passed different member lists to the same call.
        RendezvousTimeoutError: a rank did not call it in time.
    """
    group: AsyncProcessGroup = _run(world.default().new_group(ranks, timeout))
    return group


def all_reduce(tensor: Any, op: Any = ReduceOp.SUM, group: Group = None,
               async_op: bool = False,
               compression: str | Compression | None = None) -> Work | None:
    """Reduce `tensor` in place across `group`; every member gets the result.

    Args:
        tensor: a numpy array or CPU torch tensor of a supported dtype.
        op: a ReduceOp (default SUM).
        group: the group (the world by default).
        async_op: return a Work handle instead of blocking.
        compression: "bf16" or "int8": frames between hosts compressed, within a
            stated bound (the Compression guide); exact on one host. None: exact.

    Returns:
        None, or a Work when `async_op` is True. A process outside `group`
        gets a warning and None, and its tensor is untouched; so for every
        collective below.

    Raises:
        ConfigurationError: bad tensor or dtype/op pair, before anything is sent.
        CollectiveError: the operation failed (PeerLostError, CollectiveTimeoutError, ...).
    """
    if not async_op and compression is None and _ran_again(group, tensor, "all_reduce", op):
        return None
    return world.collective("all_reduce", group, async_op,
                            lambda g: g.all_reduce(tensor, op, compression=compression))


def _all_reduce_declined(tensor: Any, op: Any = ReduceOp.SUM) -> None:
    """`all_reduce(tensor, op)` on the world, which its compiled entry has just declined
    (asked by all_reduce's Front, asyncoll._api.front): the full path, unless another
    repeat runs it."""
    # (None only where the world ended meanwhile: default() says so; every process is a
    # member of the world, so its plan goes straight to execute)
    resolved = world.current or world.default()
    flat = _flat(tensor, writing=True)
    if flat is None or not ran_again(resolved, "all_reduce", flat, op, asked=True):
        resolved.execute(resolved.all_reduce(tensor, op), runtime())


def broadcast(tensor: Any, src: int | None = None, group: Group = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    """Copy global rank `src`'s `tensor` (or group rank `group_src`'s) to every member."""
    if (not async_op and group_src is None and type(src) is int
            and _ran_again(group, tensor, "broadcast", None, src)):
        return None
    return world.collective("broadcast", group, async_op, lambda g: g.broadcast(
        tensor, world.root(g, src, group_src, "src")))


def reduce(tensor: Any, dst: int | None = None, op: Any = ReduceOp.SUM, group: Group = None,
           async_op: bool = False, group_dst: int | None = None) -> Work | None:
    """Reduce `tensor` across `group` into `dst`'s tensor; the others' are unchanged."""
    if (not async_op and group_dst is None and type(dst) is int
            and _ran_again(group, tensor, "reduce", op, dst)):
        return None
    return world.collective("reduce", group, async_op, lambda g: g.reduce(
        tensor, world.root(g, dst, group_dst, "dst"), op))


def all_gather(tensor_list: list[Any], tensor: Any, group: Group = None,
               async_op: bool = False) -> Work | None:
    """Copy member i's `tensor` into `tensor_list[i]` on every member (sizes may differ)."""
    return world.collective("all_gather", group, async_op,
                       lambda g: g.all_gather(tensor_list, tensor))


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Group = None,
                           async_op: bool = False) -> Work | None:
    """Gather every member's `input_tensor` into `output_tensor`, in member order."""
    if not async_op and _ran_again_on_two(group, output_tensor, input_tensor,
                                          "all_gather_into_tensor"):
        return None
    return world.collective("all_gather_into_tensor", group, async_op,
                       lambda g: g.all_gather_into_tensor(output_tensor, input_tensor))


def reduce_scatter(output: Any, input_list: list[Any], op: Any = ReduceOp.SUM,
                   group: Group = None, async_op: bool = False) -> Work | None:
    """Reduce `input_list[i]` across `group` into member i's `output`."""
    return world.collective("reduce_scatter", group, async_op,
                       lambda g: g.reduce_scatter(output, input_list, op))


def reduce_scatter_tensor(output: Any, input: Any, op: Any = ReduceOp.SUM, group: Group = None,
                          async_op: bool = False) -> Work | None:
    """Reduce `input` across `group`; member i gets block i of the result in `output`."""
    if not async_op and _ran_again_on_two(group, output, input, "reduce_scatter_tensor", op):
        return None
    return world.collective("reduce_scatter_tensor", group, async_op,
                       lambda g: g.reduce_scatter_tensor(output, input, op))


def gather(tensor: Any, gather_list: list[Any] | None = None, dst: int | None = None,
           group: Group = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """Copy every member's `tensor` into `gather_list` on `dst` (None elsewhere)."""
    return world.collective("gather", group, async_op, lambda g: g.gather(
        tensor, gather_list, world.root(g, dst, group_dst, "dst")))


def scatter(tensor: Any, scatter_list: list[Any] | None = None, src: int | None = None,
            group: Group = None, async_op: bool = False,
            group_src: int | None = None) -> Work | None:
    """Copy `scatter_list[i]` on `src` into member i's `tensor`."""
    return world.collective("scatter", group, async_op, lambda g: g.scatter(
        tensor, scatter_list, world.root(g, src, group_src, "src")))


def all_to_all(output_tensor_list: list[Any], input_tensor_list: list[Any],
               group: Group = None, async_op: bool = False) -> Work | None:
    """Copy member i's `input_tensor_list[j]` into member j's `output_tensor_list[i]`."""
    return world.collective("all_to_all", group, async_op,
                       lambda g: g.all_to_all(output_tensor_list, input_tensor_list))


def all_to_all_single(output: Any, input: Any, output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None, group: Group = None,
                      async_op: bool = False) -> Work | None:
    """Send rows of `input` to each member and gather theirs into `output` (dim 0 splits)."""
    return world.collective("all_to_all_single", group, async_op, lambda g: g.all_to_all_single(
        output, input, output_split_sizes, input_split_sizes))


def barrier(group: Group = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Block until every member of `group` has called barrier."""
    if not async_op:
        # Resolved here, not by world.resolve: this runs on every blocking barrier.
        resolved = world.current if group is None or group is WORLD else group
        if isinstance(resolved, AsyncProcessGroup) and ran_again(resolved, "barrier", None):
            return None
    return world.collective("barrier", group, async_op, lambda g: g.barrier())


def _barrier_declined() -> None:
    """`barrier()` on the world, which its compiled entry has just declined (asked by
    barrier's Front, asyncoll._api.front): the full path, unless another repeat runs it."""
    resolved = world.current or world.default()  # (as _all_reduce_declined)
    if not ran_again(resolved, "barrier", None, asked=True):
        resolved.execute(resolved.barrier(), runtime())


def monitored_barrier(group: Group = None, timeout: float | timedelta | None = None,
                      wait_all_ranks: bool = False) -> None:
    """A barrier whose timeout error names the ranks that did not arrive (every barrier's does)."""
    world.collective("monitored_barrier", group, False, lambda g: g.monitored_barrier(timeout))


# -- point to point ----------------------------------------------------------------------


def send(tensor: Any, dst: int | None = None, group: Group = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send `tensor` to `dst`, which receives it with recv and the same tag."""
    world.collective("send", group, False, lambda g: g.send(
        tensor, world.root(g, dst, group_dst, "dst"), tag))


def recv(tensor: Any, src: int | None = None, group: Group = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into `tensor` what `src` sends with `tag`; return the sender's rank.

    A process outside `group` gets a warning and -1, as in torch.
    """
    resolved = world.resolve(group)
    if not resolved.is_member:
        world.warn_not_member("recv", resolved)
        return -1
    source = world.root(resolved, src, group_src, "src", None)
    sender: int = resolved.execute(resolved.recv(tensor, source, tag), runtime())
    return sender


def isend(tensor: Any, dst: int | None = None, group: Group = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Start sending `tensor` to `dst`; return its Work."""
    return world.collective("isend", group, True, lambda g: g.send(
        tensor, world.root(g, dst, group_dst, "dst"), tag))


def irecv(tensor: Any, src: int | None = None, group: Group = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Start receiving into `tensor` from `src`; return its Work."""
    return world.collective("irecv", group, True, lambda g: g.recv(
        tensor, world.root(g, src, group_src, "src", None), tag))


@dataclass(frozen=True)
class P2POp:
    """One send or receive for batch_isend_irecv, as torch's P2POp.

    Args:
        op: asyncoll.isend or asyncoll.irecv (torch's are accepted by name).
        tensor: what to send, or where to receive.
        peer: the other side's global rank.
        group: the group (the world by default).
        tag: the message tag.
    """

    op: Callable[..., Any]
    tensor: Any
    peer: int | None = None
    group: Group = None
    tag: int = 0
    group_peer: int | None = None


def batch_isend_irecv(p2p_op_list: list[P2POp]) -> list[Work]:
    """Start every send and receive of the list; return their Works, in the same order.

    Raises:
        ConfigurationError: an op that is neither isend nor irecv, or bad arguments
            (checked for every op before any starts).
    """
    starts = []
    for item in p2p_op_list:
        name = getattr(item.op, "__name__", "")
        if name not in ("isend", "irecv"):
            raise ConfigurationError(f"batch_isend_irecv takes P2POp(isend or irecv, ...), got "
                                     f"op {item.op!r}")
        resolved = world.resolve(item.group)
        peer = world.root(resolved, item.peer, item.group_peer, "peer", None)
        make = resolved.send if name == "isend" else resolved.recv
        starts.append((resolved, make(item.tensor, peer, item.tag), f"{name} on {resolved!r}"))
    return [Work(group.submit([coro], runtime()), what) for group, coro, what in starts]


# -- objects -------------------------------------------------------------------------------


def all_gather_object(object_list: list[Any], obj: Any, group: Group = None) -> None:
    """Set `object_list[i]` to member i's `obj` on every member (pickled, as torch)."""
    world.collective("all_gather_object", group, False,
                lambda g: g.all_gather_object(object_list, obj))


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: Group = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Replace `object_list`'s items with `src`'s on every member (same length everywhere)."""
    world.collective("broadcast_object_list", group, False, lambda g: g.broadcast_object_list(
        object_list, world.root(g, src, group_src, "src")))


def gather_object(obj: Any, object_gather_list: list[Any] | None = None,
                  dst: int | None = None, group: Group = None,
                  group_dst: int | None = None) -> None:
    """Set `object_gather_list[i]` on `dst` to member i's `obj`."""
    world.collective("gather_object", group, False, lambda g: g.gather_object(
        obj, object_gather_list, world.root(g, dst, group_dst, "dst")))


def scatter_object_list(scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None,
                        src: int | None = None, group: Group = None,
                        group_src: int | None = None) -> None:
    """Set `scatter_object_output_list[0]` on member i to `src`'s input item i."""
    world.collective("scatter_object_list", group, False, lambda g: g.scatter_object_list(
        scatter_object_output_list, scatter_object_input_list,
        world.root(g, src, group_src, "src")))


def _ran_again(group: Group, tensor: Any, what: str, op: Any = None, root: int = -1,
               asked: bool = False) -> bool:
    """Whether a blocking call on a numpy array ran in this thread as a repeat of an
    earlier one (the same collective, dtype, size, `op` and `root`: ran_again, which
    asks the group's compiled entry first unless `asked`).

    False, having done nothing, for anything else: the full path then checks
    the call and runs it (and remembers it for next time).
    """
    # _flat written out: this runs on every blocking call.
    if type(tensor) is not np.ndarray:
        return False
    flags = tensor.flags
    resolved = world.current if group is None or group is WORLD else group
    if not (flags.c_contiguous and flags.writeable) or not isinstance(resolved,
                                                                        AsyncProcessGroup):
        return False  # not an array it takes, or not initialized: the full path says so
    return ran_again(resolved, what, tensor if tensor.ndim == 1 else tensor.reshape(-1), op,
                     root, None, asked)


def _ran_again_on_two(group: Group, output: Any, input: Any, what: str,
                      op: Any = None) -> bool:
    """As `_ran_again`, for a call that writes `output` and reads `input`."""
    out, source = _flat(output, writing=True), _flat(input, writing=False)
    resolved = world.current if group is None or group is WORLD else group
    return out is not None and source is not None and isinstance(
        resolved, AsyncProcessGroup) and ran_again(resolved, what, (out, source), op)


def _flat(tensor: Any, writing: bool) -> NDArray[Any] | None:
    """A C-contiguous numpy array (writable if `writing`) as a 1-D view, or None."""
    if type(tensor) is not np.ndarray:
        return None
    flags = tensor.flags
    if not flags.c_contiguous or (writing and not flags.writeable):
        return None
    return tensor if tensor.ndim == 1 else tensor.reshape(-1)


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a control-plane coroutine (new_group, reconfigure, ...) on the runtime's loop."""
    return runtime().run(coro)

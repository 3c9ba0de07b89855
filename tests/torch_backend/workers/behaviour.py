"""Checks torch.distributed on backend='asyncoll' the differential test cannot: 3 processes.

Sub-groups (members only, in torch's member order, a non-member's call doing nothing), tensors
that require grad (as gloo), non-contiguous tensors (reduced right), bfloat16
through float32, async work and its torch future, and errors: a refused call raises
asyncoll's error as torch's (both classes) from the torch call, a timed-out one from
work.wait() and from the future, and the group then stays broken. It never calls
destroy_process_group: leaving at exit is asyncoll's atexit hook's job. Prints one JSON
object of named results.
"""

from __future__ import annotations

import faulthandler
import json
import os
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import asyncoll


def error_of(call: Any) -> dict[str, Any] | None:
    """What ``call`` raised: its asyncoll class (``type``: the class of asyncoll.errors it is
    one of, else its own), the torch class it is one of (``torch``), whether its cause is
    asyncoll's own error of that class (``cause``), and its message."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
        kind = next((k for k in type(exc).__mro__ if k.__module__ == "asyncoll.errors"),
                    type(exc))
        family = next((k.__name__ for k in type(exc).__mro__
                       if k.__module__ == "torch.distributed"), None)
        cause = exc.__cause__
        return {"type": f"{kind.__module__}.{kind.__name__}", "torch": family,
                "cause": type(cause) is kind if family else None, "message": str(exc)}
    return None


def _raise(exc: BaseException) -> None:
    raise exc


def main() -> None:
    # A stuck process dumps every thread's stack to stderr, which the test shows, and exits.
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "100")), exit=True)
    dist.init_process_group(backend="asyncoll")
    rank = dist.get_rank()
    results: dict[str, Any] = {"rank": rank, "torch": torch.__version__}
    gloo = dist.new_group(backend="gloo")

    # Sub-groups, created by every rank; the backend's creator runs on members only.
    pair = dist.new_group([0, 2])
    t = torch.tensor([rank + 1.0, rank + 2.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=pair)
    results["pair_max"] = t.tolist()
    results["non_member_warned"] = any("does not belong" in str(w.message) for w in caught)
    # torch sorts a new group's ranks: group rank 0 of [2, 1] is global rank 1, on gloo too.
    for name, backend in (("asyncoll", None), ("gloo", "gloo")):
        backwards = dist.new_group([2, 1], backend=backend)
        if rank in (1, 2):
            x = torch.full((3,), float(rank))
            dist.broadcast(x, group=backwards, group_src=0)
            ranks = torch.zeros(2, dtype=torch.int64)
            dist.all_gather_into_tensor(ranks, torch.tensor([rank]), group=backwards)
            results[f"backwards_{name}"] = [x.tolist(), ranks.tolist()]

    # Tensors that require grad: reduced in place, as gloo does.
    for name, group in (("asyncoll", None), ("gloo", gloo)):
        w = torch.ones(3, requires_grad=True)
        failed = error_of(lambda: dist.all_reduce(w, group=group))
        results[f"requires_grad_{name}"] = [w.detach().tolist(), w.requires_grad,
                                            failed is None]

    # Non-contiguous tensors (transposed, strided) are reduced right, element by element.
    base = torch.arange(12.0).reshape(3, 4)
    for name, view in (("transposed", lambda t: t.t()), ("strided", lambda t: t[:, ::2])):
        m = view(base * (rank + 1))
        dist.all_reduce(m)
        results[f"{name}_right"] = torch.equal(m, view(base * 6))

    # bfloat16, reduced through float32: 256 + 1 + 1 in bfloat16 steps would stay 256.
    b = torch.tensor([256.0 if rank == 0 else 1.0, 1.5 * (rank + 1)], dtype=torch.bfloat16)
    dist.all_reduce(b)
    results["bfloat16_sum"] = [b.dtype == torch.bfloat16, b.float().tolist()]

    # Sparse COO all_reduce (SUM), as gloo: overlapping and distinct non-zeros,
    # a dense dimension, the result coalesced in place; other ops refused.
    for name, group in (("asyncoll", None), ("gloo", gloo)):
        sparse = torch.sparse_coo_tensor(torch.tensor([[rank, 3], [0, rank]]),
                                         torch.tensor([[1.0 + rank, 2.0], [0.5, -rank]]),
                                         (4, 4, 2))
        dist.all_reduce(sparse, group=group)
        results[f"sparse_sum_{name}"] = [sparse.is_sparse, sparse.is_coalesced(),
                                        sparse.to_dense().tolist()]
    results["sparse_max"] = error_of(lambda: dist.all_reduce(
        torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (2,)),
        op=dist.ReduceOp.MAX))

    # Coalesced gathers: outputs ordered [rank][tensor] (the transpose of all_gather's),
    # with as many inputs as ranks (where a transposed answer still fits) and with fewer.
    for name, group in (("asyncoll", None), ("gloo", gloo)):
        gathered = []
        for count in (n_ranks := dist.get_world_size(), 2):
            inputs = [torch.full((k + 1,), 10.0 * k + rank) for k in range(count)]
            outputs = [[torch.zeros(k + 1) for k in range(count)] for _ in range(n_ranks)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the call
                dist.all_gather_coalesced(outputs, inputs, group=group)
            gathered.append([[t.tolist() for t in outs] for outs in outputs])
        results[f"gather_coalesced_{name}"] = gathered
    for name, group in (("asyncoll", None), ("gloo", gloo)):
        pair = [torch.full((2,), rank + 1.0), torch.full((3,), 10.0 * (rank + 1))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the call
            dist.all_reduce_coalesced(pair, op=dist.ReduceOp.SUM, group=group)
        results[f"reduce_coalesced_{name}"] = [t.tolist() for t in pair]
    results["gather_coalesced_short"] = error_of(lambda: dist.all_gather_coalesced(
        [[torch.zeros(1)]], [torch.zeros(1)]))

    # Async work and its torch future.
    a = torch.full((4,), float(rank))
    work = dist.all_reduce(a, async_op=True)
    value = work.get_future().wait()
    results["async"] = [work.wait(), work.is_completed(), work.is_success(),
                        value[0].tolist(), a.tolist()]

    # A small operation runs in the caller's thread through the group's arena
    # (these ranks share a host): its Work is complete when the call returns.
    # An 8 MiB one goes through the event loop; a small one queued behind it
    # waits its turn, and sees its result.
    dist.barrier()  # nothing of the group still runs on the loop
    small = torch.full((4,), float(rank))
    small_done = dist.all_reduce(small, async_op=True).is_completed()
    big = torch.full((1 << 21,), float(rank))
    big_work = dist.all_reduce(big, async_op=True)
    behind = dist.broadcast(big[:3], src=0, async_op=True)
    behind.wait()
    big_work.wait()
    results["fast_path"] = [small_done, small.tolist(), big[:3].tolist(), big[-1].item()]

    # An all_reduce repeating an earlier one's signature (dtype, size, op) runs
    # again without being made anew (the group's compiled entry, where the
    # extension is built, or its again), with the right result: on a 1-D tensor,
    # then on a 2-D one that requires grad.
    group = dist.distributed_c10d._get_default_group()._group  # asyncoll's AsyncProcessGroup
    real_run_again, real_express, ran, compiled = group.again, group.express, [], []

    def spy(*args):
        result = real_run_again(*args)
        ran.append(result)
        return result

    class SpyExpress:
        def all_reduce(self, array, op):
            result = real_express.all_reduce(array, op)
            ran.append(result)
            compiled.append(result)
            return result

        def barrier(self):
            return real_express.barrier()

    group.again = spy
    if real_express is not None:
        group.express = SpyExpress()
    dist.barrier()
    repeated, again = [], []

    def all_reduce(tensor, **options):
        ran.clear()
        dist.all_reduce(tensor, **options)
        again.append(any(ran))
        repeated.append(tensor.tolist())

    for k in range(3):
        all_reduce(torch.full((5,), float(rank + k)))
    for k in range(2):
        all_reduce(torch.full((2, 3), float(rank * 10 + k), requires_grad=True),
                   op=dist.ReduceOp.MAX)
    group.again, group.express = real_run_again, real_express
    results["repeats"] = [repeated, again, real_express is not None, sum(compiled)]

    # One tensor's repeats: a blocking one that ran in this thread gives torch no Work
    # (torch's all_reduce then waits for nothing), an asynchronous one a Work. After
    # set_ puts the tensor on other memory, the result lands there, not in the old.
    # (11 elements: a signature no call above had, so the first call is no repeat.)
    default_group, same = dist.distributed_c10d._get_default_group(), torch.full((11,), 0.0)
    same += rank
    blocking, asynchronous = dist.AllreduceOptions(), dist.AllreduceOptions()
    blocking.asyncOp = False
    works = [default_group.allreduce([same], blocking) for _ in range(3)]
    work = default_group.allreduce([same], asynchronous)
    values = [same.tolist(), work.wait(), work.result()[0] is same]
    same.set_(torch.ones(11))
    default_group.allreduce([same], blocking)
    values.append(same.tolist())
    results["one_tensor"] = [[w is None for w in works], isinstance(work, dist.Work), values]

    # The same for broadcast, reduce and barrier: a blocking repeat gives torch no Work,
    # and each repeat moves the data of that call (13 and 17 elements: new signatures).
    cast, casts = torch.zeros(13), []
    options = dist.BroadcastOptions()
    options.rootRank, options.asyncOp = 1, False
    for k in range(3):
        cast.fill_(float(rank + 10 * k))
        casts.append([default_group.broadcast([cast], options) is None, cast.tolist()])
    summed, sums = torch.zeros(17), []
    options = dist.ReduceOptions()
    options.rootRank, options.asyncOp = 2, False
    for k in range(3):
        summed.fill_(float(rank + 10 * k))
        sums.append([default_group.reduce([summed], options) is None,
                     summed.tolist() if rank == 2 else None])
    options = dist.BarrierOptions()
    options.asyncOp = False
    barriers = [default_group.barrier(options) is None for _ in range(3)]
    options.asyncOp = True
    barrier_work = default_group.barrier(options)
    barriers.append([isinstance(barrier_work, dist.Work), barrier_work.wait()])
    results["other_repeats"] = [casts, sums, barriers]

    # batch_isend_irecv around the ring.
    n = dist.get_world_size()
    outgoing, incoming = torch.full((2,), float(rank)), torch.zeros(2)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, (rank + 1) % n),
                                        dist.P2POp(dist.irecv, incoming, (rank - 1) % n)]):
        work.wait()
    results["ring_received"] = incoming.tolist()

    # Receiving from any source: ranks 1 and 2 race two messages each to rank 0, which
    # takes them in arrival order, each sender's in the order it sent them.
    if rank == 0:
        got = []
        for _ in range(4):
            t = torch.zeros(1)
            sender = dist.recv(t, tag=7)
            got.append([sender, t.item()])
        results["any_source"] = got
    else:
        for k in range(2):
            dist.send(torch.tensor([10.0 * rank + k]), 0, tag=7)
    # irecv without src, on a group whose ranks are not the global ones: torch reads
    # work._source_rank() (the group rank) and returns the global rank.
    odd = dist.new_group([1, 2])
    if rank == 1:
        t = torch.zeros(1)
        work = dist.irecv(t, group=odd, tag=8)
        work.wait()
        results["any_source_irecv"] = [work._source_rank(), t.item(),
                                       dist.recv(t, group=odd, tag=9), t.item()]
    elif rank == 2:
        dist.send(torch.tensor([8.0]), 1, group=odd, tag=8)
        dist.send(torch.tensor([9.0]), 1, group=odd, tag=9)

    # A refused call raises asyncoll's error, message intact, from the torch call.
    results["refused_op"] = error_of(lambda: dist.all_reduce(torch.ones(1),
                                                             op=dist.ReduceOp.BAND))

    # destroy_process_group of a sub-group (torch reads the group's name); the others go on.
    doomed = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.all_reduce(torch.ones(1), group=doomed)
        results["sub_group_name"] = doomed.group_name
    results["destroy_sub_group"] = error_of(lambda: dist.destroy_process_group(doomed))

    # monitored_barrier: torch 2.14 serves it for a group with a "cpu" backend (2.13:
    # gloo only), on any group, as gloo runs it.
    results["monitored_barrier"] = error_of(
        lambda: dist.monitored_barrier(timeout=timedelta(seconds=30)))
    watched = dist.new_group([0, 1])
    if rank in (0, 1):
        results["monitored_barrier_sub_group"] = error_of(
            lambda: dist.monitored_barrier(watched, timeout=timedelta(seconds=30)))

    # A barrier only rank 0 calls times out with words torch's callers match on.
    stalled = dist.new_group([0, 1], timeout=timedelta(seconds=1))
    if rank == 0:
        results["barrier_timeout"] = error_of(lambda: dist.barrier(group=stalled))

    # A collective only rank 0 calls: its group times out, and stays broken.
    lonely = dist.new_group([0, 1], timeout=timedelta(seconds=1))
    if rank == 0:
        work = dist.all_reduce(torch.ones(2), group=lonely, async_op=True)
        future = work.get_future()
        results["timeout_wait"] = error_of(work.wait)
        results["timeout_future"] = error_of(future.wait)
        results["broken_after"] = error_of(lambda: dist.all_reduce(torch.ones(2),
                                                                   group=lonely))
    results["asyncoll_error_classes"] = [asyncoll.CollectiveTimeoutError.__name__,
                                         asyncoll.GroupBrokenError.__name__]
    dist.barrier()
    # Last, as it breaks the default group: a monitored barrier ranks 1 and 2 never
    # call; rank 0 names them, as gloo does. Point-to-point messages go on.
    if rank == 0:
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
        except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
            results["monitored_barrier_error_is_runtime_error"] = isinstance(exc, RuntimeError)
            results["monitored_barrier_timeout"] = error_of(lambda error=exc: _raise(error))
        for peer in (1, 2):
            dist.send(torch.ones(1), peer, tag=99)
    else:
        dist.recv(torch.zeros(1), 0, tag=99)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()

"""Checks the c10d Backend of an asyncoll group, set_timeout and Work futures: 2 processes.

What torch's fault-tolerance suite does with ``dist.get_backend_impl(group, "cpu")`` (send,
recv, abort-free get_error, set_timeout), every other kind of operation on that backend,
when a Work's torch future is done, and errors in torch's terms. Prints one JSON object
of named results (the last line).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from asyncoll.errors import AsyncollError, CollectiveTimeoutError, ConfigurationError

#: Works whose futures the test checks right after wait().
FUTURES = 20


def described(exc: BaseException) -> dict[str, Any]:
    """How the test sees an error: torch's and asyncoll's classes it is one of, its cause."""
    return {"runtime": isinstance(exc, RuntimeError),
            "dist_backend": isinstance(exc, dist.DistBackendError),
            "timeout": isinstance(exc, CollectiveTimeoutError),
            "configuration": isinstance(exc, ConfigurationError),
            "cause_is_asyncolls": isinstance(exc.__cause__, AsyncollError)
            and not isinstance(exc.__cause__, dist.DistError),
            "message": str(exc)}


def raised(call: Any) -> dict[str, Any] | None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
        return described(exc)
    return None


def backend_operations(backend: Any, rank: int, results: dict[str, Any]) -> None:
    """Every kind of operation, run on the backend itself."""
    peer = 1 - rank
    mine = torch.full((4,), rank + 1.0)
    got = torch.zeros(4)
    # As the fault-tolerance suite orders them: one rank sends first, the other receives.
    if rank == 0:
        works = [backend.send([mine], peer, 0), backend.recv([got], peer, 0)]
    else:
        works = [backend.recv([got], peer, 0), backend.send([mine], peer, 0)]
    results["send_recv"] = [w.wait() for w in works] + [got.tolist()]

    summed = torch.full((3,), rank + 1.0)
    backend.allreduce([summed]).wait()
    pair = [torch.full((2,), rank + 1.0), torch.full((5,), 10.0 * (rank + 1))]
    backend.allreduce_coalesced(pair).wait()
    gathered = [torch.zeros(2) for _ in range(2)]
    backend.allgather([gathered], [torch.full((2,), float(rank))]).wait()
    whole = torch.zeros(4)
    backend._allgather_base(whole, torch.full((2,), float(rank))).wait()
    out = torch.zeros(2)
    backend.reduce_scatter_single(out, torch.arange(4.0) + rank).wait()
    backend.barrier().wait()
    anyone = torch.zeros(1)
    if rank == 0:
        backend.send([torch.tensor([7.0])], peer, 5).wait()
    else:
        backend.recv_anysource([anyone], 5).wait()
    results["collectives"] = [summed.tolist(), [t.tolist() for t in pair],
                              [t.tolist() for t in gathered], whole.tolist(), out.tolist(),
                              anyone.tolist()]
    results["refused_on_backend"] = raised(lambda: backend.send([mine], 5, 0))
    results["supports"] = {name: getattr(backend, name) for name in (
        "supports_coalescing", "supports_splitting", "supports_time_estimate",
        "supports_window", "supports_tensor_alloc", "supports_shrinking",
        "supports_reconfigure")}


def futures_done_after_wait(rank: int, results: dict[str, Any]) -> None:
    """Futures asked for before wait(), on the loop's path (large) and in this thread's."""
    loop_thread = [t.ident for t in threading.enumerate() if t.name == "asyncoll-loop"]
    ran_on: set[int | None] = set()
    done_after_wait = []
    for k in range(FUTURES):
        tensor = torch.full((1 << 18,) if k % 2 else (4,), 1.0)
        work = dist.all_reduce(tensor, async_op=True)
        future = work.get_future()
        future.then(lambda _: ran_on.add(threading.get_ident()))
        work.wait()
        done_after_wait.append(future.done() and future.value()[0][0].item() == 2.0)
    # Asked for after the operation completed: done when given.
    work = dist.all_reduce(torch.ones(3), async_op=True)
    work.wait()
    late = work.get_future()
    late_done = late.done()
    # is_completed() says True only once the future is done.
    polled = dist.all_reduce(torch.ones(1 << 18), async_op=True)
    polled_future = polled.get_future()
    deadline = time.monotonic() + 30
    while not polled.is_completed() and time.monotonic() < deadline:
        pass
    agree = [polled_future.done(), polled.exception() is None,
             polled.result()[0].data_ptr() == polled_future.value()[0].data_ptr()]
    results["futures"] = [sum(done_after_wait), late_done, late.value()[0].tolist(), agree]
    results["callbacks_on_loop"] = [len(loop_thread), len(ran_on),
                                    bool(set(loop_thread) & ran_on)]


def timeout_set_on_backend(backend: Any, rank: int, results: dict[str, Any]) -> None:
    """set_timeout(50 ms) governs the later operations; the group's own was 30 s."""
    sub = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(4))  # as the suite does first: a repeat for rank 1's call
    results["bad_timeout"] = raised(lambda: backend.set_timeout(timedelta(0)))
    backend.set_timeout(timedelta(milliseconds=50))
    if rank == 1:
        work = dist.all_reduce(torch.ones(4), async_op=True)
        future = work.get_future()
        started = time.monotonic()
        error = raised(work.wait)
        results["timeout"] = {"error": error, "seconds": time.monotonic() - started,
                              "future_done": future.done(),
                              "exception": described(work.exception()),
                              "get_error": str(backend.get_error())}
    # ProcessGroup.set_timeout (dist.set_timeout) reaches a sub-group's operations too.
    dist.set_timeout(timedelta(milliseconds=50), group=sub)
    if rank == 1:
        started = time.monotonic()
        results["group_timeout"] = {"error": raised(lambda: dist.barrier(group=sub)),
                                    "seconds": time.monotonic() - started}


def main() -> None:
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "60")), exit=True)
    rank = int(os.environ["RANK"])
    dist.init_process_group(backend="asyncoll", rank=rank, world_size=2,
                            timeout=timedelta(seconds=30))
    group = dist.distributed_c10d._get_default_group()
    backend = dist.get_backend_impl(group, torch.device("cpu"))
    results: dict[str, Any] = {"rank": rank,
                               "same_backend": group._get_backend(torch.device("cpu"))
                               is backend}
    backend_operations(backend, rank, results)
    futures_done_after_wait(rank, results)
    results["shrink_refused"] = raised(lambda: group.shrink([rank]))
    dist.barrier()
    timeout_set_on_backend(backend, rank, results)
    print(json.dumps(results), flush=True)
    # Rank 1 timed out alone: rank 0 (which hosts the store) stays until it has seen it.
    store = dist.distributed_c10d._get_default_store()
    if rank == 1:
        store.set("device_backend/done", "1")
    else:
        store.wait(["device_backend/done"], timedelta(seconds=30))
    # The groups are broken: leave without a goodbye that would wait on them.
    os._exit(0)


if __name__ == "__main__":
    main()

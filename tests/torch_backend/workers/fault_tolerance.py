"""torch's fault-tolerance API on asyncoll, as a torch program uses it (SCENARIO says which).

"story" (3 ranks under torchrun): enable_reconfigure; a reconfigure to every
handle (a list), an all_reduce; the last rank leaves, the others reconfigure
to their fresh handles (a set), an all_reduce; then shrink_group of rank 1,
an all_reduce on what is left.
"grow" (3 ranks, env://; rank 2 starts as a group of its own): ranks 0 and 1
and the new process reconfigure to the three handles, then an all_reduce.
"kill9" (3 ranks): rank 2 is killed with SIGKILL; the others meet the
PeerLostError, shrink_group it out, and all_reduce.
"rank0" (3 ranks, env://): a reconfigure of all three; rank 0, which hosts the
torch job's coordinator, is killed with SIGKILL; ranks 1 and 2 reconfigure
to the two of them (on rank 1's own coordinator), then an all_reduce.
"abort" (2 ranks): SHRINK_ABORT of a group with an operation in flight, which
fails at once, here and on the peer; then abort() of the default group with
the peer's operation in flight, which fails fast there.
Each rank prints what it saw, one "step ..." line per step.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

import asyncoll  # noqa: F401 - registers the backend

SCENARIO = os.environ["SCENARIO"]
LIMIT = timedelta(seconds=30)


def say(*words: object) -> None:
    # One write per line: under torchrun, the ranks share one stdout.
    sys.stdout.write(" ".join(map(str, ("step", *words))) + "\n")
    sys.stdout.flush()


def total(value: float) -> float:
    t = torch.tensor([value])
    dist.all_reduce(t)
    return float(t.item())


def until(condition: Callable[[], bool], what: str) -> None:
    """Return once ``condition()`` is true (checked every 10 ms, for at most LIMIT)."""
    deadline = time.monotonic() + LIMIT.total_seconds()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {LIMIT}")
        time.sleep(0.01)


def faults_of(group: dist.ProcessGroup) -> tuple[int, Any]:
    """The id of the asyncoll group under torch's ``group``, and this rank's GroupFaults."""
    inner = group._get_backend(torch.device("cpu"))._group()._group  # held weakly there
    return inner.group_id, inner._session.faults


def exchange(store: dist.Store, key: str, ranks: list[int], mine: str) -> list[str]:
    """Every listed rank's handle, in rank order (out of band: torch's store)."""
    store.set(f"{key}/{dist.get_rank() if key != 'grow' else os.environ['RANK']}", mine)
    return [store.get(f"{key}/{r}").decode() for r in ranks]


def story() -> None:
    dist.init_process_group("asyncoll", enable_reconfigure=True, timeout=LIMIT)
    store = c10d._get_default_store()
    rank = dist.get_rank()
    say("supports", dist._supports_reconfigure())
    handles = exchange(store, "first", [0, 1, 2], dist._get_reconfigure_handle())
    dist._reconfigure(1, handles, timeout=LIMIT).wait()
    say("first", dist.get_rank(), dist.get_world_size(), total(rank + 1.0))
    if rank == 2:
        dist.destroy_process_group()
        say("left")
        return
    handles = exchange(store, "second", [0, 1], dist._get_reconfigure_handle())
    dist._reconfigure(2, set(handles), timeout=LIMIT).wait()
    say("second", dist.get_rank(), dist.get_world_size(), total(rank + 1.0))
    if rank == 1:
        store.wait(["shrunk"], LIMIT)
        dist.destroy_process_group()
        return
    group = dist.shrink_group([1])
    store.set("shrunk", "1")
    say("shrunk", dist.get_rank(), dist.get_world_size(), group.size(), total(rank + 1.0))
    dist.destroy_process_group()


def grow() -> None:
    rank = int(os.environ["RANK"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=rank == 0, timeout=LIMIT)
    if rank < 2:
        dist.init_process_group("asyncoll", store=dist.PrefixStore("job", store), rank=rank,
                                world_size=2, enable_reconfigure=True, timeout=LIMIT)
    else:  # the new process: a group of its own first
        dist.init_process_group("asyncoll", store=dist.HashStore(), rank=0, world_size=1,
                                enable_reconfigure=True, timeout=LIMIT)
    handles = exchange(store, "grow", [0, 1, 2], dist._get_reconfigure_handle())
    dist._reconfigure(7, handles, timeout=LIMIT).wait()
    say("grown", dist.get_rank(), dist.get_world_size(), total(rank + 1.0))
    store.set(f"done/{rank}", "1")
    store.wait([f"done/{r}" for r in range(3)], LIMIT)
    dist.destroy_process_group()


def kill9() -> None:
    dist.init_process_group("asyncoll", timeout=LIMIT)
    rank = dist.get_rank()
    say("before", total(rank + 1.0))
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(50):
            total(1.0)
            time.sleep(0.1)
    except asyncoll.PeerLostError as exc:
        say("lost", exc.rank)
    dist.shrink_group([2])
    say("after", dist.get_rank(), dist.get_world_size(), total(rank + 1.0))
    dist.destroy_process_group()


def rank0() -> None:
    dist.init_process_group("asyncoll", enable_reconfigure=True, timeout=LIMIT)
    store = c10d._get_default_store()
    rank = dist.get_rank()
    handles = exchange(store, "all", [0, 1, 2], dist._get_reconfigure_handle())
    dist._reconfigure(1, handles, timeout=LIMIT).wait()
    say("all", total(rank + 1.0))
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    # Rank 0 is gone by then, and with it torch's store (env:// hosts it there):
    # this rank waits until it heard so.
    until(lambda: 0 in faults_of(c10d._get_default_group())[1].gone(),
          "rank 0's loss reaching this rank")
    dist._reconfigure(2, handles[1:], timeout=LIMIT).wait()
    say("without rank 0", dist.get_rank(), dist.get_world_size(), total(rank + 1.0))
    dist.destroy_process_group()


def abort() -> None:
    dist.init_process_group("asyncoll", timeout=LIMIT)
    store = c10d._get_default_store()
    rank = dist.get_rank()
    sub = dist.new_group([0, 1])
    sub_id, faults = faults_of(sub)
    if rank == 0:
        t = torch.ones(4)
        work = dist.all_reduce(t, group=sub, async_op=True)  # rank 1 never joins it
        until(lambda: faults.progress(sub_id)[0] > 0, "the sub-group's all_reduce beginning")
        started = time.monotonic()
        shrunk = dist.shrink_group([1], group=sub, shrink_flags=c10d.SHRINK_ABORT)
        store.set("abort/shrunk", "1")  # the sub-group is broken here
        say("shrunk", shrunk.size())
        try:
            work.wait()
            say("in flight", "NO ERROR")
        except asyncoll.AbortedError as exc:
            say("in flight", type(exc).__name__, round(time.monotonic() - started) < 5)
    else:
        # Rank 0 broke the sub-group first: this rank's first call on it hears so from rank 0.
        store.wait(["abort/shrunk"], LIMIT)
        try:
            dist.all_reduce(torch.ones(4), group=sub)
            say("peer", "NO ERROR")
        except asyncoll.AbortedError as exc:
            say("peer", type(exc).__name__)
    # abort() of the default group: rank 1's operation in flight fails fast, and so
    # does anything rank 0 does on it after.
    pg = c10d._get_default_group()
    cpu = pg._get_backend(torch.device("cpu"))
    dist.barrier()
    if rank == 1:
        # A small all_reduce runs in the caller's thread: rank 0's abort arrives while
        # it waits in it, or (rarely) just before it begins; it fails fast either way.
        store.set("abort/calling", "1")
        started = time.monotonic()
        work = dist.all_reduce(torch.ones(4), async_op=True)  # rank 0 never joins it
        try:
            work.wait()
            say("peer's in flight", "NO ERROR")
        except asyncoll.CollectiveError as exc:
            say("peer's in flight", type(exc).__name__, time.monotonic() - started < 5)
        say("peer's error", cpu.get_error())
        # It leaves now: rank 0 aborted the group before this rank's operation failed, so
        # nothing rank 0 sees after depends on this rank.
    else:
        store.wait(["abort/calling"], LIMIT)
        say("error before", cpu.get_error())
        pg.abort()
        try:
            dist.all_reduce(torch.ones(4))
            say("after abort", "NO ERROR")
        except asyncoll.AsyncollError as exc:
            say("after abort", type(exc).__name__)
        say("error after", cpu.get_error())


{"story": story, "grow": grow, "kill9": kill9, "rank0": rank0,
 "abort": abort}[SCENARIO]()

"""Make and end jobs, groups or generations many times; report what the process holds.

Usage: cycles.py COORDINATOR JOB MODE CYCLES

MODE is one of:

- ``jobs``: CYCLES times init_process_group (job JOB-i, 2 ranks),
  collectives, destroy_process_group;
- ``groups``: one job; CYCLES times new_group of both ranks, collectives
  on it, destroy_process_group(group);
- ``reconfigures``: one elastic job; CYCLES times reconfigure, then
  collectives on the new world.

The collectives of each cycle: an all_reduce and a broadcast through the
group's shared-memory arena, and a 1 MiB send and recv through the shared-memory
rings; every result is checked (a wrong one exits 1). The garbage collector is
off: what is closed must go when it is closed. Before the first cycle
and after the last cycle the process prints

    HELD <cycles done> <mappings> <shared-memory fds> <threads> <fds>

where the first two count asyncoll's shared memory in /proc/self/maps and
/proc/self/fd (asyncoll._transport.shm.segment.held), threads are
/proc/self/task's and fds every open file. The first cycle's collectives
also print ``DURING`` and the same counts, while its group is open. A ``jobs`` process also
prints one after the first cycle, once the runtime holds what it keeps for
later jobs; a ``groups`` or ``reconfigures`` process prints its first line
once the job's world has mapped its arena and rings. The last line waits up
to 5 s for the counts to come down to the first's (or the second's) (a
closed group's thread ends just after its close returns).
"""

from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np

import asyncoll as dist
from asyncoll._transport.shm import segment

address, job, mode, cycles = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# Whatever the garbage collector would free in the end must go when it is closed.
gc.disable()
MESSAGE = 1 << 18  # float32 elements: 1 MiB, past the rings' threshold


def held() -> tuple[int, int, int, int]:
    maps, files = segment.held()
    return maps, files, len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def report(done: int, settle_to: tuple[int, int, int, int] | None = None) -> None:
    """Print what the process holds; with ``settle_to``, first wait up to 5 s for it to
    come down to that (a closed group's thread ends once it reads that it may)."""
    now = held()
    deadline = time.monotonic() + 5
    while settle_to is not None and now != settle_to and time.monotonic() < deadline:
        time.sleep(0.01)
        now = held()
    print("HELD", done, *now, flush=True)


def settled() -> tuple[int, int, int, int]:
    """What the process holds once it has held the same for 200 ms (5 s at most): the
    first job's closed group's thread ends just after its close returns, and a count
    taken before it ended would be one thread too many for every later job."""
    last = held()
    since = time.monotonic()
    deadline = since + 5
    while time.monotonic() < deadline and time.monotonic() - since < 0.2:
        time.sleep(0.01)
        now = held()
        if now != last:
            last, since = now, time.monotonic()
    return last


def exercise(group: object | None, cycle: int) -> None:
    """Collectives through the arena and the rings, each result checked."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x = np.full(64, float(rank + cycle), dtype=np.float64)
    dist.all_reduce(x, group=group)
    want = sum(r + cycle for r in range(size))
    if not np.all(x == want):
        sys.exit(f"all_reduce of cycle {cycle} gave {x[:4]}, not {want}")
    y = np.full(1000, rank, dtype=np.int32)
    dist.broadcast(y, src=size - 1, group=group)
    if not np.all(y == size - 1):
        sys.exit(f"broadcast of cycle {cycle} gave {y[:4]}")
    big = np.full(MESSAGE, float(cycle), dtype=np.float32)
    if rank == 0:
        dist.send(big, dst=1, group=group)
    elif rank == 1:
        got = np.zeros(MESSAGE, dtype=np.float32)
        dist.recv(got, src=0, group=group)
        if not np.all(got == cycle):
            sys.exit(f"recv of cycle {cycle} gave {got[:4]}")
    if cycle == 1:
        print("DURING", *held(), flush=True)
        # Until both have counted: a peer that ends its group closes the rings on both sides.
        dist.barrier(group=group)


def join(name: str, elastic: bool = False) -> None:
    dist.init_process_group(init_method=f"tcp://{address}", world_size=2, job_id=name,
                            timeout=60, elastic=elastic or None, min_size=2 if elastic else None)


if mode == "jobs":
    report(0)
    for cycle in range(1, cycles + 1):
        join(f"{job}-{cycle}")
        exercise(None, cycle)
        dist.destroy_process_group()
        if cycle == 1:
            # What the runtime keeps from the first job on (its loop's thread, say).
            start = settled()
            report(1, start)
    report(cycles, start)
elif mode == "groups":
    join(job)
    exercise(None, 0)
    start = held()
    report(0)
    for cycle in range(1, cycles + 1):
        group = dist.new_group([0, 1])
        exercise(group, cycle)
        dist.destroy_process_group(group)
    report(cycles, start)
    dist.barrier()  # the peer's world, and its rings, stay until both have counted
    dist.destroy_process_group()
elif mode == "reconfigures":
    join(job, elastic=True)
    exercise(None, 0)
    start = held()
    report(0)
    for cycle in range(1, cycles + 1):
        dist.reconfigure()
        exercise(None, cycle)
    report(cycles, start)
    dist.barrier()
    dist.destroy_process_group()
else:
    sys.exit(f"unknown mode {mode!r}: jobs, groups or reconfigures")

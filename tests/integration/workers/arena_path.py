"""Blocking collectives of a same-host job: where they run, their order, their failures.

Usage (under asyncoll-run, 2 ranks): arena_path.py MODE

Modes, each printing "RESULT <rank> <words>" lines the test reads:

- ``paths``: every small blocking collective runs in the calling thread (a
  spy on Runner.here counts), with the right result; an async one
  with nothing pending completes before the call returns; a blocking one
  after an async operation still on the loop goes to the loop behind it,
  in order (an all_reduce of the array an all_to_all writes sums its result).
- ``nowhere``: counts the same, for a run with shared memory off.
- ``repeats``: calls repeated with the same signature (collective, dtypes,
  sizes, op or root) run again without being made anew (Repeats.again, or
  the compiled entry: a spy counts both), on other arrays of that signature
  too, with the right results: all_reduce,
  broadcast, barrier, reduce, all_gather_into_tensor, reduce_scatter_tensor.
- ``express``: the compiled entry's repeats (asyncoll._group.express) with a
  member late, and behind an operation still on the loop, and what they
  leave for the Python path to read.
- ``asks``: how often a first all_reduce and a first barrier, through the
  package's compiled fronts, ask the world's compiled entry (its own count,
  the real entry in place), and what Python code a repeat it takes runs.
- ``threads``: two threads repeat all_reduces and barriers at once, each on
  a group of its own.
- ``desync_repeats``: rank 0 repeats an all_reduce, rank 1 a broadcast of
  the same dtype and size.
- ``desync``: rank 0 calls all_reduce, rank 1 broadcast (both arena sizes).
- ``desync_mixed``: rank 0 all_reduces an arena size, rank 1 a large array.
- ``timeout``: rank 1 calls 3 s late in a group with a 1 s timeout.
- ``cpu``: rank 1 calls 2 s late; rank 0 says the CPU time it spent waiting.
- ``small_room``: /dev/shm is said to have no room, so the arena gets the
  smallest slot (1 MiB): operations larger than the slot run on the arena
  in pieces, repeated too, with the right results, as smaller ones do.
"""

import sys
import time

import numpy as np

import asyncoll as dist
from asyncoll._api import world
from asyncoll._group.repeats import Repeats
from asyncoll._group.runner import Runner

mode = sys.argv[1]
if mode == "small_room":
    from asyncoll._transport.shm import segment

    segment.room = lambda: 0  # read by member 0 as it makes the group's arena
ran = {True: 0, False: 0}
again = {True: 0, False: 0}
real_here, real_run_again = Runner.here, Repeats.again


def spy(self, *args):
    result = real_here(self, *args)
    if len(args) < 6 or not args[5]:  # (not an operation the compiled entry started)
        ran[result] += 1
    return result


def spy_again(self, *args):
    result = real_run_again(self, *args)
    again[result] += 1
    return result


class SpyExpress:
    """The world's compiled entry (asyncoll._group.express), counting the calls it ran."""

    def __init__(self, express):
        self._express = express
        self.ran = 0

    @property
    def in_slots(self):
        return self._express.in_slots

    def all_reduce(self, tensor, op):
        ran = self._express.all_reduce(tensor, op)
        self.ran += ran
        return ran

    def barrier(self):
        ran = self._express.barrier()
        self.ran += ran
        return ran


Runner.here = spy
Repeats.again = spy_again
dist.init_process_group(init_method="env://", timeout=30)
rank, size = dist.get_rank(), dist.get_world_size()
quick = None
if world.current.express is not None and mode != "asks":
    quick = world.current.express = SpyExpress(world.current.express)


def express_ran():
    return 0 if quick is None else quick.ran


def check(condition, what):
    if not condition:
        print(f"RESULT {rank} wrong {what}", flush=True)
        sys.exit(4)


def raised(call):
    try:
        call()
    except dist.AsyncollError as exc:
        error = exc.__cause__ if isinstance(exc, dist.GroupBrokenError) and exc.__cause__ \
            else exc
        return f"{type(error).__name__}: {error}"
    return "nothing"


if mode in ("paths", "nowhere"):
    x = np.full(1000, rank + 1, np.float32)
    dist.all_reduce(x)
    check((x == size * (size + 1) / 2).all(), "all_reduce")
    y = np.full(10, rank, np.int64)
    dist.broadcast(y, src=1)
    check((y == 1).all(), "broadcast")
    out = [np.zeros(3, np.int32) for _ in range(size)]
    dist.all_gather(out, np.full(3, rank, np.int32))
    check(all((o == r).all() for r, o in enumerate(out)), "all_gather")
    block = np.zeros(4, np.float64)
    dist.reduce_scatter_tensor(block, np.arange(4 * size, dtype=np.float64))
    check((block == size * np.arange(4 * rank, 4 * rank + 4)).all(), "reduce_scatter")
    z = np.full(5, rank + 1.0)
    dist.reduce(z, dst=0)
    check((z == (size * (size + 1) / 2 if rank == 0 else rank + 1)).all(), "reduce")
    dist.barrier()
    here_before = ran[True]
    work = dist.all_reduce(x, async_op=True)
    print(f"RESULT {rank} async_done_at_return={work.is_completed()}", flush=True)
    work.wait()
    # An all_to_all on the loop (it has no calling-thread algorithm), then a
    # blocking all_reduce of its output: the all_reduce must come second, to
    # add up what the all_to_all wrote.
    sent = np.full(size << 20, rank + 1, np.float32)
    got = np.zeros_like(sent)
    work = dist.all_to_all_single(got, sent, async_op=True)
    dist.all_reduce(got)
    work.wait()
    check((got == size * np.repeat(np.arange(1, size + 1, dtype=np.float32), 1 << 20)).all(),
          "all_to_all then all_reduce, in order")
    dist.all_reduce(x)
    print(f"RESULT {rank} here={ran[True]} loop={ran[False]} here_before_async={here_before}",
          flush=True)
elif mode == "repeats":
    total = size * (size + 1) / 2
    for value in range(5):
        x = np.full(1000, rank + value, np.float32)  # a new array each time
        dist.all_reduce(x)
        check((x == total + size * (value - 1)).all(), f"all_reduce #{value}")
    grid = np.full((10, 100), rank + 1, np.float32)  # 2-D: the same signature, flattened
    dist.all_reduce(grid)
    check((grid == total).all(), "all_reduce of a 2-D array")
    for value in range(3):
        for src in (0, 1):
            y = np.full(10, 10 * rank + value, np.int64)
            dist.broadcast(y, src=src)
            check((y == 10 * src + value).all(), f"broadcast #{value} from {src}")
    for _ in range(3):
        dist.barrier()
    for value in range(3):
        for dst in (0, 1):
            z = np.full(10, rank + value, np.float64)
            dist.reduce(z, dst=dst)
            check((z == (total + size * (value - 1) if rank == dst else rank + value)).all(),
                  f"reduce #{value} into {dst}")
    for value in range(3):
        gathered = np.zeros((size, 3), np.int32)
        dist.all_gather_into_tensor(gathered, np.full(3, rank + value, np.int32))
        check((gathered == np.arange(size)[:, None] + value).all(), f"all_gather #{value}")
    for value in range(3):
        block = np.zeros(4, np.float32)
        dist.reduce_scatter_tensor(block, np.arange(4 * size, dtype=np.float32) + value)
        check((block == size * (np.arange(4 * rank, 4 * rank + 4) + value)).all(),
              f"reduce_scatter #{value}")
    # Another op, dtype or size is another signature: made anew.
    z = np.full(1000, rank + 1, np.float32)
    dist.all_reduce(z, op=dist.ReduceOp.MAX)
    check((z == size).all(), "all_reduce MAX")
    w = np.full(7, rank + 1, np.float64)
    dist.all_reduce(w)
    check((w == total).all(), "all_reduce of 7 float64")
    # A repeat the compiled entry ran passed neither Repeats.again nor Runner.here.
    print(f"RESULT {rank} repeated={again[True] + express_ran()} "
          f"here={ran[True] + express_ran()} loop={ran[False]} express={express_ran()}",
          flush=True)
elif mode == "small_room":
    total = size * (size + 1) / 2
    for value in range(3):  # 4 MiB: larger than the slot
        big = np.full(1 << 20, rank + value, np.float32)
        dist.all_reduce(big)
        check((big == total + size * (value - 1)).all(), f"4 MiB all_reduce #{value}")
    wide = np.full(1 << 19, 10 * rank, np.int32)  # 2 MiB
    dist.broadcast(wide, src=1)
    check((wide == 10).all(), "2 MiB broadcast")
    gathered = np.zeros((size, 1 << 18), np.float64)  # 2 MiB blocks
    dist.all_gather_into_tensor(gathered, np.full(1 << 18, rank, np.float64))
    check((gathered == np.arange(size)[:, None]).all(), "all_gather of 2 MiB blocks")
    for value in range(3):  # 256 KiB: fits the slot
        x = np.full(1 << 16, rank + value, np.float32)
        dist.all_reduce(x)
        check((x == total + size * (value - 1)).all(), f"256 KiB all_reduce #{value}")
    print(f"RESULT {rank} repeated={again[True]} here={ran[True]} loop={ran[False]}",
          flush=True)
elif mode == "express":
    from asyncoll._algorithms.selection import ARENA_SPLIT_FROM_BYTES

    session = world.current.session
    x = np.ones(ARENA_SPLIT_FROM_BYTES // 8, np.float32)  # whole through the slots
    for value in range(3):
        dist.all_reduce(x)
        dist.barrier()
    taken = express_ran()
    # A late member: the step's brief wait ends, Runner.here waits on.
    if rank == 1:
        time.sleep(0.3)
    x[...] = rank + 1
    dist.all_reduce(x)
    check((x == size * (size + 1) / 2).all(), "a late member's all_reduce")
    if rank == 0:
        time.sleep(0.3)
    dist.barrier()
    late = express_ran() - taken
    # Behind an operation still on the loop, a repeat goes to the loop, in order.
    sent = np.full(size << 18, rank + 1, np.float32)
    got = np.zeros_like(sent)
    work = dist.all_to_all_single(got, sent, async_op=True)
    before = express_ran()
    dist.all_reduce(got[:x.size])
    work.wait()
    behind = express_ran() - before
    # (every member's first block came from rank 0: ones)
    check((got[:x.size] == size).all(), "all_reduce behind an all_to_all")
    # What the entry leaves is what the Python path reads.
    for _ in range(5):
        dist.all_reduce(x)
    runner = world.current._core._runner
    running, completed = session.faults.progress(0)
    numbered = runner.progress()[0]
    print(f"RESULT {rank} late={late} behind={behind} running={running} "
          f"completed_is_numbered={completed == numbered == runner._seq} "
          f"ops_at_least_seq={session.operations() >= runner._seq} "
          f"in_slots={sorted(world.current.express.in_slots)}", flush=True)
elif mode == "asks":
    entry = world.current.express  # None with the extension off: the test is skipped
    x = np.ones(4, np.float32)
    asked = entry.asked
    dist.all_reduce(x)  # a first call: the entry declines it, the full path runs it
    first = entry.asked - asked
    check((x == size).all(), "a first all_reduce")
    asked = entry.asked
    dist.barrier()
    first_barrier = entry.asked - asked
    for _ in range(2):  # the first repeat runs in Python, and teaches the entry
        dist.all_reduce(x)
    # Every Python function called during a repeat (the spies on Runner.here and
    # Repeats.again included) shows as a "call"; C functions as "c_call". C calls
    # Python itself on two occasions only: a repeat whose brief wait ends before
    # the other rank arrived is handed, begun, to Runner.here (the spy, then here),
    # and every SAMPLE_EVERY-th call opens a flight-recorder record (open_run).
    # Which repeats meet such an occasion is the scheduler's: eight are traced.
    runs: list[list[str]] = []
    for _ in range(8):
        asked = entry.asked
        events: list[str] = []
        sys.setprofile(lambda frame, event, arg: events.append(
            f"{event}:{getattr(arg, '__name__', frame.f_code.co_name)}"))
        dist.all_reduce(x)
        sys.setprofile(None)
        runs.append([*events, f"asks:{entry.asked - asked}"])
    check((x == size ** 11).all(), "a repeated all_reduce")
    only_c = ["c_call:setprofile"]
    from_c_only = all(run[:-1] == only_c or run[:2] == ["call:spy", "call:here"]
                      or run[0] == "call:open_run" for run in runs)
    print(f"RESULT {rank} first_asks={first} first_barrier_asks={first_barrier} "
          f"asks_per_repeat={sorted({run[-1] for run in runs})} "
          f"python_from_c_only={from_c_only} pure_c_repeats={sum(r[:-1] == only_c for r in runs)} "
          f"runs={runs}", flush=True)
elif mode == "threads":
    import threading

    # Two threads, each repeating small all_reduces and barriers on a group of its own,
    # at once: the compiled entry of each group waits with the GIL released.
    groups = [dist.new_group([0, 1]), dist.new_group([0, 1])]
    wrong = []

    def repeat(index):
        group = groups[index]
        x = np.zeros(16, np.int64)
        for step in range(3000):
            x[...] = rank + step + 1000 * index
            dist.all_reduce(x, group=group)
            if not (x == 2 * (step + 1000 * index) + 1).all():
                wrong.append((index, step))
                return
            if step % 100 == 0:
                dist.barrier(group=group)

    threads = [threading.Thread(target=repeat, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    taken = [g.express is not None and g.express.count for g in groups]
    print(f"RESULT {rank} wrong={wrong} alive={any(t.is_alive() for t in threads)} "
          f"taught={taken}", flush=True)
elif mode == "desync_repeats":
    x = np.ones(100, np.float32)
    for _ in range(2):
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
    print(f"RESULT {rank} " + raised(lambda: dist.all_reduce(x) if rank == 0 else
                            dist.broadcast(x, src=0)), flush=True)
elif mode == "desync":
    x = np.ones(100, np.float32)
    print(f"RESULT {rank} " + raised(lambda: dist.all_reduce(x) if rank == 0 else
                            dist.broadcast(x, src=0)), flush=True)
elif mode == "desync_mixed":
    x = np.ones(100 if rank == 0 else 1 << 22, np.float32)
    print(f"RESULT {rank} " + raised(lambda: dist.all_reduce(x)), flush=True)
elif mode == "timeout":
    group = dist.new_group([0, 1], timeout=1)
    x = np.ones(100, np.float32)
    for _ in range(3):  # so the late call is a repeat the compiled entry takes
        dist.all_reduce(x, group=group)
    if rank == 1:
        time.sleep(3)
    print(f"RESULT {rank} " + raised(lambda: dist.all_reduce(x, group=group)), flush=True)
elif mode == "cpu":
    x = np.ones(100, np.float32)
    for _ in range(3):
        dist.all_reduce(x)
    if rank == 1:
        time.sleep(2)
    began, cpu = time.monotonic(), time.process_time()
    dist.all_reduce(x)
    if rank == 0:
        print(f"RESULT {rank} waited={time.monotonic() - began:.2f} "
              f"cpu={time.process_time() - cpu:.3f}", flush=True)
dist.destroy_process_group()

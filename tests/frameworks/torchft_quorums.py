"""One rank of QUORUMS quorums in a row on ``ProcessGroupAsyncoll``, as torchft makes them.

``python torchft_quorums.py STORE RANK QUORUMS``: configure() with a new prefix
of the TCPStore at STORE (host:port) for each quorum, one all_reduce through
its arena checked, and after each, one line ``HELD <quorum> <asyncoll shared
memory mappings> <their fds> <threads> <fds>`` (given a moment to come down to the
first quorum's); after shutdown() a last
``HELD -1 ...``. The garbage collector is off: what the group held must go
when the next quorum's configure() aborts it, not when it is collected.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from datetime import timedelta

import torch
from torch.distributed import AllreduceOptions, ReduceOp

from asyncoll._transport.shm import segment
from asyncoll.torchft import ProcessGroupAsyncoll


def held() -> tuple[int, int, int, int]:
    maps, files = segment.held()
    return maps, files, len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def settled(to: tuple[int, int, int, int] | None) -> tuple[int, int, int, int]:
    """What the process holds, after up to 5 s for it to come down to ``to`` (the other
    rank's goodbye to this rank's coordinator ends a moment after its configure)."""
    deadline = time.monotonic() + 5
    now = held()
    while to is not None and now != to and time.monotonic() < deadline:
        time.sleep(0.01)
        now = held()
    return now


def main() -> None:
    store, rank, quorums = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    gc.disable()
    pg = ProcessGroupAsyncoll(timeout=timedelta(seconds=30))
    options = AllreduceOptions()
    options.reduceOp = ReduceOp.SUM
    first = None
    for quorum in range(quorums):
        pg.configure(f"{store}/torchft/{quorum}/0", "replica", rank, 2)
        data = torch.full((1 << 12,), float(rank + quorum))
        pg.allreduce([data], options).wait()
        if not torch.equal(data, torch.full_like(data, float(2 * quorum + 1))):
            raise SystemExit(f"quorum {quorum}: the all_reduce gave {data[:4]}")
        now = settled(first)
        first = first or now
        print("HELD", quorum, *now, flush=True)
    pg.shutdown()
    print("HELD", -1, *held(), flush=True)


if __name__ == "__main__":
    main()

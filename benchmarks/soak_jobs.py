#!/usr/bin/env python3
"""Many jobs, and many reconfigures of one elastic job, from one process: nothing grows.

    python benchmarks/soak_jobs.py [--jobs 10000] [--reconfigures 1000] [--every 1000]

First ``--jobs`` 2-rank jobs in a row through asyncoll.testing.run_ranks
(both ranks in this process, the way a test suite or a notebook runs
them): each maps its world's shared-memory arena and a ring each way,
all_reduces through the arena and sends 1 MiB through the rings, every
result checked. Then one elastic 2-rank job, both ranks in this process on
an asyncoll-coordinator daemon, reconfigured ``--reconfigures`` times, each
generation all_reducing and sending the same way. The garbage collector
runs as it normally does.

At the start, every ``--every`` jobs or reconfigures and at the end, it
prints what the process holds: the machine's Shmem (/proc/meminfo, which
counts every tmpfs page, other programs' too), asyncoll's mappings and fds
(/proc/self/maps and /proc/self/fd, asyncoll._transport.shm.segment.held),
threads, all open fds and RSS; and the rate. Before asyncoll gave each
group's memory back when it was closed, a process running 2-rank jobs in a
row was killed by the OOM killer after about 730 (32 MiB of Shmem a job).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from asyncoll import aio
from asyncoll._transport.shm import segment
from asyncoll.testing import run_ranks

MESSAGE = 1 << 18  # float32 elements: 1 MiB, past the rings' threshold
HEADER = (f"{'':>14} {'done':>6} {'per s':>6} {'Shmem MiB':>9} {'maps':>5} {'shm fds':>7} "
          f"{'threads':>7} {'fds':>4} {'RSS MiB':>7}")


def held() -> tuple[float, int, int, int, int, float]:
    """(Shmem MiB, asyncoll mappings, asyncoll fds, threads, fds, RSS MiB) now."""
    with open("/proc/meminfo") as meminfo:
        shmem_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("Shmem:"))
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    maps, files = segment.held()
    return (shmem_kib / 1024, maps, files, len(os.listdir("/proc/self/task")),
            len(os.listdir("/proc/self/fd")), rss)


def report(label: str, done: int, began: float) -> None:
    shmem, maps, files, threads, fds, rss = held()
    rate = done / (time.perf_counter() - began) if done else 0.0
    print(f"{label:>14} {done:>6} {rate:>6.1f} {shmem:>9.1f} {maps:>5} {files:>7} "
          f"{threads:>7} {fds:>4} {rss:>7.1f}", flush=True)


async def exercise(world: aio.AsyncProcessGroup, cycle: int) -> None:
    """An all_reduce through the arena and 1 MiB through the rings, checked."""
    x = np.full(64, float(world.rank + cycle))
    await world.all_reduce(x)
    if not np.all(x == 2 * cycle + 1):
        raise SystemExit(f"all_reduce of cycle {cycle} gave {x[:4]}")
    big = np.full(MESSAGE, float(cycle), dtype=np.float32)
    if world.rank == 0:
        await world.send(big, 1)
    else:
        got = np.zeros(MESSAGE, dtype=np.float32)
        await world.recv(got, 0)
        if not np.all(got == cycle):
            raise SystemExit(f"recv of cycle {cycle} gave {got[:4]}")


async def jobs(count: int, every: int) -> None:
    began = time.perf_counter()
    report("jobs, start", 0, began)
    for done in range(1, count + 1):
        await run_ranks(2, lambda world, cycle=done: exercise(world, cycle))
        if done % every == 0 or done == count:
            report("jobs", done, began)


async def reconfigures(count: int, every: int, address: str) -> None:
    worlds = await asyncio.gather(*(aio.init_process_group(
        init_method=f"tcp://{address}", world_size=2, rank=rank, job_id="soak", timeout=60,
        elastic=True, min_size=2) for rank in range(2)))
    await asyncio.gather(*(exercise(world, 0) for world in worlds))
    began = time.perf_counter()
    report("reconf, start", 0, began)
    for done in range(1, count + 1):
        worlds = await asyncio.gather(*(world.reconfigure() for world in worlds))
        await asyncio.gather(*(exercise(world, done) for world in worlds))
        if done % every == 0 or done == count:
            report("reconfigures", done, began)
    await asyncio.gather(*(world.destroy() for world in worlds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--reconfigures", type=int, default=1_000)
    parser.add_argument("--every", type=int, default=1_000)
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, pid {os.getpid()}\n{HEADER}", flush=True)
    if args.jobs:
        asyncio.run(jobs(args.jobs, args.every))
    if args.reconfigures:
        with tempfile.TemporaryDirectory() as directory:
            port_file = Path(directory) / "port"
            daemon = subprocess.Popen(
                [sys.executable, "-m", "asyncoll.coordinator", "--host", "127.0.0.1",
                 "--port", "0", "--port-file", str(port_file)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 30
                while not port_file.exists() or not port_file.read_text().strip():
                    if time.monotonic() > deadline or daemon.poll() is not None:
                        raise SystemExit("the coordinator did not start")
                    time.sleep(0.05)
                address = f"127.0.0.1:{int(port_file.read_text())}"
                asyncio.run(reconfigures(args.reconfigures, args.every, address))
            finally:
                daemon.terminate()
                daemon.wait(30)


if __name__ == "__main__":
    main()

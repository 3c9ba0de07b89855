"""The flight recorder's cost on the fast path: end to end, and in one thread.

End to end (the default): two ranks on this host run 4-byte all_reduces in
blocks, the recorder on in every other block and off in the rest, both in
the same processes, so that the two are timed side by side under the same
conditions (this machine's times differ more from one run to the next than
the recorder costs). Each block's time is the median of its operations';
printed are both sides' medians and quartiles, and the median of the
differences between each block with it on and the block before it, off::

    python benchmarks/flight_recorder_cost.py [--blocks 60] [--ops 2000]

``--one-thread`` times what Runner.here does per operation for the
recorder, with nothing else around it (a million calls, best of five).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from typing import Any

import numpy as np


def _rank(blocks: int, ops: int) -> None:
    """One rank: blocks of timed all_reduces, the recorder on in every other one."""
    import asyncoll as dist
    from asyncoll._api import world

    dist.init_process_group("asyncoll")
    runner: Any = world.current._runner  # type: ignore[union-attr]
    recorder = runner.recorder
    if recorder is None:
        raise SystemExit("the recorder is off (ASYNCOLL_TRACE_BUFFER=0): nothing to compare")
    x = np.zeros(1, np.float32)
    for _ in range(ops):
        dist.all_reduce(x)
    medians: dict[bool, list[float]] = {False: [], True: []}
    clock = time.perf_counter_ns
    times = np.empty(ops)
    for block in range(blocks):
        on = block % 2 == 1
        runner.recorder = recorder if on else None
        for i in range(ops):
            began = clock()
            dist.all_reduce(x)
            times[i] = clock() - began
        medians[on].append(float(np.median(times)) / 1e3)
    runner.recorder = recorder
    if dist.get_rank() == 0:
        off, on = medians[False], medians[True]
        differences = [b - a for a, b in zip(off, on)]
        for name, values in (("off", off), ("on", on)):
            low, high = np.percentile(values, [25, 75])
            print(f"recorder {name:3}: median {statistics.median(values):.3f} us per "
                  f"all_reduce (quartiles {low:.3f} to {high:.3f}) over {len(values)} blocks")
        print(f"on - off: median {statistics.median(differences):+.3f} us; on slower in "
              f"{sum(d > 0 for d in differences)} of {len(differences)} pairs of blocks")
    dist.destroy_process_group()


def end_to_end(blocks: int, ops: int) -> int:
    """Start two ranks of :func:`_rank` on this host; return the first failure's code."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", "--blocks", str(blocks),
                               "--ops", str(ops)],
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for rank in range(2)]
    codes = [proc.wait(timeout=600) for proc in procs]
    return next((code for code in codes if code), 0)


class _Group:
    """A runner's part in recording: the fingerprint of its open run."""

    run_fingerprint: Any = None

    def progress(self) -> tuple[int, int, int, float]:
        return 0, 0, 0, 0.0


def one_thread() -> None:
    """Print the nanoseconds per operation of Runner.here's recording, off and on."""
    from asyncoll._group.recorder import Recorder
    from asyncoll._wire.frames import Fingerprint
    from asyncoll._wire.frames import Operation as Kind
    from asyncoll._defaults import SAMPLE_EVERY

    recorder = Recorder(2000, 0, tempfile.gettempdir())
    fingerprint = Fingerprint(Kind.ALL_REDUCE, 11, 1, 3, -1, 1)
    group = _Group()
    seqs = iter(range(1, 1 << 62))

    def on() -> None:  # as in Runner.here
        seq = next(seqs)
        if recorder is not None:
            if fingerprint is not group.run_fingerprint:
                recorder.open_run(group, 0, seq, "all_reduce", fingerprint, "arena", 30.0)
            elif not seq % SAMPLE_EVERY:
                recorder.sample(0, seq)

    off_recorder = None

    def off() -> None:
        next(seqs)
        if off_recorder is not None:
            pass

    for name, body in (("off", off), ("on", on)) * 2:
        best = min(timeit.repeat(body, number=1_000_000, repeat=5)) / 1_000_000 * 1e9
        print(f"recorder {name:3}: {best:6.0f} ns per operation")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--ops", type=int, default=2000, help="all_reduces per block")
    parser.add_argument("--one-thread", action="store_true")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        _rank(args.blocks, args.ops)
        return 0
    if args.one_thread:
        one_thread()
        return 0
    return end_to_end(args.blocks, args.ops)


if __name__ == "__main__":
    sys.exit(main())

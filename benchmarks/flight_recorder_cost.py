"""The flight recorder's cost per operation on the fast path, in one thread.

What Runner.here adds per operation with the recorder on: entering the
operation (Recorder.started) and marking it completed; with it off, one
test of None. Each is timed over a million calls, best of five:

    python benchmarks/flight_recorder_cost.py
"""

from __future__ import annotations

import tempfile
import time
import timeit

from asyncoll._group.recorder import ENDED, Recorder
from asyncoll._wire.frames import Fingerprint
from asyncoll._wire.frames import Operation as Kind

CALLS = 1_000_000


def main() -> None:
    """Print the nanoseconds per operation with the recorder off and on."""
    recorder = Recorder(2000, 0, tempfile.gettempdir())
    fingerprint = Fingerprint(Kind.ALL_REDUCE, 11, 1, 3, -1, 1)
    now = time.time_ns

    def on() -> None:
        entry = recorder.started(0, 1, "all_reduce", fingerprint, "arena", 30.0)
        if entry is not None:
            entry[ENDED] = now()

    off_recorder = None

    def off() -> None:
        entry = None if off_recorder is None else off_recorder
        if entry is not None:
            entry[ENDED] = now()

    for name, body in (("off", off), ("on", on)) * 2:
        best = min(timeit.repeat(body, number=CALLS, repeat=5)) / CALLS * 1e9
        print(f"recorder {name:3}: {best:6.0f} ns per operation")


if __name__ == "__main__":
    main()

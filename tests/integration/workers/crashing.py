"""A job of two ranks whose rank 1 ends between collectives, one way or another.

Usage: crashing.py COORDINATOR RANK JOB HOW ELEMENTS WHEN

Both ranks all_reduce ELEMENTS float32s once and print "READY". Then rank 1
reads a line from stdin and ends as HOW says: "raise" (an uncaught
ValueError), "sigint" (it is blocked reading when the test sends SIGINT:
KeyboardInterrupt) or "destroy" (destroy_process_group, then its end); it
never calls destroy_process_group otherwise. Rank 0 runs a second
all_reduce, at once (WHEN "inside": it waits in it when rank 1 ends) or
after a line from stdin ("after": the test sends it once rank 1 is gone),
printing "CALLING" just before it and, "inside", "WAITING" once its main
thread waits in asyncoll (a thread watches its stack); then it prints
"RAISED <class> peer_lost=<bool> rank=<rank named> :: <message>", or
"COMPLETED".
"""

import os
import signal
import sys
import threading
import time

import numpy as np

import asyncoll as dist

# Ctrl-C is what "sigint" plays: a program started in the background by a shell
# without job control (nohup, `&` in a script) inherits SIGINT ignored, and Python
# then installs no handler for it.
signal.signal(signal.SIGINT, signal.default_int_handler)

#: The functions an all_reduce's caller waits in: the arena's waiter and its sleep,
#: direct links' wait, a future's (the event loop's paths).
WAITS = {"until", "rest", "_wait", "wait_received", "wait"}
PACKAGE = os.path.dirname(dist.__file__) + os.sep


def say_when_waiting(main: int) -> None:
    """Print WAITING once thread ``main`` waits inside asyncoll (at most 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        frame, stack = sys._current_frames().get(main), []
        while frame is not None:
            stack.append(frame.f_code)
            frame = frame.f_back
        if stack and stack[0].co_name in WAITS and any(
                code.co_filename.startswith(PACKAGE) for code in stack):
            print("WAITING", flush=True)
            return
        time.sleep(0.001)

address, rank, job, how, elements, when = sys.argv[1:7]
dist.init_process_group(init_method=f"tcp://{address}", world_size=2, rank=int(rank),
                        job_id=job, timeout=30)
data = np.ones(int(elements), dtype=np.float32)
dist.all_reduce(data)
print("READY", flush=True)
if rank == "1":
    sys.stdin.readline()  # SIGINT interrupts it ("sigint")
    if how == "raise":
        raise ValueError("boom between collectives")
    if how == "destroy":
        dist.destroy_process_group()
    sys.exit(0)
if when == "after":
    sys.stdin.readline()
print("CALLING", flush=True)
if when == "inside":
    threading.Thread(target=say_when_waiting, args=(threading.get_ident(),),
                     daemon=True).start()
try:
    dist.all_reduce(data)
except dist.AsyncollError as exc:
    print(f"RAISED {type(exc).__name__} peer_lost={isinstance(exc, dist.PeerLostError)} "
          f"rank={getattr(exc, 'rank', None)} :: {exc}", flush=True)
else:
    print("COMPLETED", flush=True)
dist.destroy_process_group()

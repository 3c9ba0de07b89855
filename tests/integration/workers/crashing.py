"""A job of two ranks whose rank 1 ends between collectives, one way or another.

Usage: crashing.py COORDINATOR RANK JOB HOW ELEMENTS WHEN

Both ranks all_reduce ELEMENTS float32s once and print "READY". Then rank 1
reads a line from stdin and ends as HOW says: "raise" (an uncaught
ValueError), "sigint" (it is blocked reading when the test sends SIGINT:
KeyboardInterrupt) or "destroy" (destroy_process_group, then its end); it
never calls destroy_process_group otherwise. Rank 0 runs a second
all_reduce, at once (WHEN "inside": it waits in it when rank 1 ends) or
after a line from stdin ("after": the test sends it once rank 1 is gone),
printing "CALLING" just before it, and prints "RAISED <class>
peer_lost=<bool> rank=<rank named> :: <message>", or "COMPLETED".
"""

import sys

import numpy as np

import asyncoll as dist

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
try:
    dist.all_reduce(data)
except dist.AsyncollError as exc:
    print(f"RAISED {type(exc).__name__} peer_lost={isinstance(exc, dist.PeerLostError)} "
          f"rank={getattr(exc, 'rank', None)} :: {exc}", flush=True)
else:
    print("COMPLETED", flush=True)
dist.destroy_process_group()

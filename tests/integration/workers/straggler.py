"""A rank of a job with a straggler, or a rank that skips an all_reduce (issue 29).

Usage: straggler.py COORDINATOR WORLD_SIZE RANK JOB MODE COUNT

MODE "sleep:R": rank R sleeps 50 ms before every 5th of COUNT all_reduces;
"none": nobody sleeps; "skip:R": rank R skips the last all_reduce, which the
others then wait in (for up to 60 s). Each rank prints "DONE" after its
all_reduces and leaves once it reads "GO" on stdin; told "REPORT" first, it
prints get_straggler_report()'s entries ("STRAGGLER group G rank R last N of
M late S"), then "REPORTED".
"""

import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, rank, job, mode, count = sys.argv[1:7]
me, count = int(rank), int(count)
kind, _, who = mode.partition(":")
dist.init_process_group(init_method=f"tcp://{address}", world_size=int(world_size),
                        rank=me, job_id=job, timeout=60)
data = np.ones(1, dtype=np.float32)
for i in range(1, count + 1):
    if kind == "sleep" and me == int(who) and i % 5 == 0:
        time.sleep(0.05)
    if kind == "skip" and me == int(who) and i == count:
        break
    data[:] = 1
    dist.all_reduce(data)
print("DONE", flush=True)
line = sys.stdin.readline().strip()
if line == "REPORT":
    for found in dist.get_straggler_report():
        print(f"STRAGGLER group {found.group_id} rank {found.rank} last {found.last} of "
              f"{found.operations} late {found.median_late_s:.3f}", flush=True)
    print("REPORTED", flush=True)
    line = sys.stdin.readline().strip()
if line == "GO":
    dist.destroy_process_group()

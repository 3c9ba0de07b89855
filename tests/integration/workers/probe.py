"""A worker for the integration tests: join, optionally reduce, report one line.

Prints ``OK rank=R world=W sum=[...]`` or ``ERROR <ExceptionType>: <message>``
and exits 0 or 2, so tests can assert on both the outcome and the message.
"""

import argparse
import os
import signal
import sys

import numpy as np

import asyncoll as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init", default=None)
parser.add_argument("--world-size", type=int, default=-1)
parser.add_argument("--rank", type=int, default=-1)
parser.add_argument("--timeout", type=float, default=30.0)
parser.add_argument("--job", default=None)
parser.add_argument("--group", default=None, help="comma-separated ranks of a sub-group")
parser.add_argument("--exit-code-on-rank", type=int, nargs=2, metavar=("RANK", "CODE"),
                    help="this rank exits with CODE right after joining, as a crash does "
                         "(no cleanup, so it is the first process to end)")
parser.add_argument("--kill-on-rank", type=int, help="this rank SIGKILLs itself after joining")
args = parser.parse_args()

try:
    dist.init_process_group(init_method=args.init, world_size=args.world_size, rank=args.rank,
                            timeout=args.timeout, job_id=args.job)
    rank = dist.get_rank()
    if args.exit_code_on_rank and rank == args.exit_code_on_rank[0]:
        os._exit(args.exit_code_on_rank[1])
    if args.kill_on_rank == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    group = None
    if args.group:
        group = dist.new_group([int(r) for r in args.group.split(",")])
    x = np.array([rank + 1, 10 * (rank + 1)], dtype=np.int64)
    dist.all_reduce(x, group=group)
    print(f"OK rank={rank} world={dist.get_world_size()} sum={x.tolist()}", flush=True)
    dist.destroy_process_group()
except dist.AsyncollError as exc:
    print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
    sys.exit(2)

"""A worker that prints many lines at once with the others, in pieces, for asyncoll-run.

Usage: chatty.py LINES [--die-mid-line]

Joins the job, then prints LINES lines ``line I of rank R`` to stdout and
``err I of rank R`` to stderr, each print in several writes (run it with
PYTHONUNBUFFERED=1), and a last ``partial of rank R`` with no newline. With
--die-mid-line it then kills itself (SIGKILL) instead of ending the line.
"""

import os
import signal
import sys

import asyncoll as dist

lines = int(sys.argv[1])
dist.init_process_group(init_method="env://", timeout=30)
rank = dist.get_rank()
dist.barrier()  # every worker starts printing at the same time
for i in range(lines):
    print("line", i, "of rank", rank)
    print("err", i, "of rank", rank, file=sys.stderr)
sys.stdout.write(f"partial of rank {rank}")
sys.stdout.flush()
if "--die-mid-line" in sys.argv:
    os.kill(os.getpid(), signal.SIGKILL)
dist.destroy_process_group()
os._exit(0)

"""A rank of the liveness tests (test_liveness.py): all_reduces, then reports how it went.

Usage: liveness.py COORDINATOR WORLD_SIZE RANK JOB ELEMENTS TIMEOUT MODE [LATE]

Prints "READY" after its first all_reduce, then waits for a line on stdin
(the test may have killed the coordinator meanwhile). Then, by MODE:

- "until_failure": all_reduces once and prints "LOOPING", then goes on
  all_reducing until one fails (at most 60 s), and prints
  "FAILED <error class> rank=<rank named> at=<unix time> waiting_for=<ranks> <message>";
- "late": rank 1 first computes in pure Python for LATE seconds (its event
  loop's thread only gets the interpreter between switches), then every
  rank all_reduces three times and prints "OK sums=<sums> spun_until=<t>
  done=<t>" (times on the machine's monotonic clock, which all ranks
  share; spun_until is 0 but on rank 1), or FAILED as above.

Either way it then leaves the job only once its stdin closes, so that no
rank leaving is what another one sees fail.
"""

import sys
import time

import numpy as np

import asyncoll as dist

address, world_size, rank, job, elements, timeout, mode = sys.argv[1:8]
size, me = int(world_size), int(rank)
dist.init_process_group(init_method=f"tcp://{address}", world_size=size, rank=me,
                        job_id=job, timeout=float(timeout))
data = np.ones(int(elements), dtype=np.float32)
dist.all_reduce(data)
print("READY", flush=True)
sys.stdin.readline()


def failed(exc: dist.AsyncollError) -> None:
    error = exc.__cause__ if isinstance(exc, dist.GroupBrokenError) else exc
    named = getattr(error, "rank", -1)
    waiting_for = ",".join(map(str, getattr(error, "waiting_for", ())))
    print(f"FAILED {type(error).__name__} rank={named} at={time.time():.3f} "
          f"waiting_for={waiting_for} {error}", flush=True)


try:
    if mode == "until_failure":
        deadline = time.monotonic() + 60
        data.fill(1)
        dist.all_reduce(data)
        print("LOOPING", flush=True)  # every rank got this far: the loop runs
        while time.monotonic() < deadline:
            data.fill(1)
            dist.all_reduce(data)
        print("NO FAILURE", flush=True)
    else:
        spun_until = 0.0
        if me == 1:
            until = time.monotonic() + float(sys.argv[8])
            spins = 0
            while time.monotonic() < until:
                spins += sum(range(1000))  # pure Python: the GIL is held but for switches
            spun_until = time.monotonic()
        sums = []
        for _ in range(3):
            data.fill(1)
            dist.all_reduce(data)
            sums.append(float(data.min()) + float(data.max()))
        print(f"OK sums={sums} spun_until={spun_until:.6f} done={time.monotonic():.6f}",
              flush=True)
except dist.AsyncollError as exc:
    failed(exc)
sys.stdin.read()
dist.destroy_process_group()

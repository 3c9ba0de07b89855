"""An elastic job's member or newcomer, driven by the test through stdin and stdout.

    elastic.py HOST:PORT JOB member        # joins the 2-process job, prints READY, then
                                           # "go": waits for pending newcomers,
                                           #   reconfigures, all_reduces, reports;
                                           # "check": reports membership_changed()
    elastic.py HOST:PORT JOB newcomer [T]  # joins the running job (timeout T s), then
                                           # all_reduces with the members and reports

Every job is elastic with max_size 4. Exit codes: 3 refused (max_size), 4 not
admitted in time.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import asyncoll as dist


def report_sum() -> None:
    total = np.array([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    print(f"RANK {dist.get_rank()} SIZE {dist.get_world_size()} SUM {total[0]}", flush=True)


def main() -> int:
    address, job, role = sys.argv[1:4]
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
    try:
        dist.init_process_group(init_method=f"tcp://{address}", world_size=2, job_id=job,
                                elastic=True, max_size=4, timeout=timeout)
    except dist.RendezvousTimeoutError as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 4
    except dist.RendezvousError as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 3
    if role == "newcomer":
        report_sum()
        dist.destroy_process_group()
        return 0
    print("READY", flush=True)
    command = sys.stdin.readline().strip()
    if command == "go":
        while not dist.membership_changed():
            time.sleep(0.05)
        dist.reconfigure()
        report_sum()
    elif command == "check":
        print(f"CHANGED {dist.membership_changed()} SIZE {dist.get_world_size()}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

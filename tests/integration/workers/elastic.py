"""An elastic job's member or newcomer, driven by the test through stdin and stdout.

    elastic.py HOST:PORT JOB member [--size N] [--min-size M]
        joins the job of N (default 2) processes, prints READY RANK r, then does one command:
        "go": waits for a change (a newcomer pending), reconfigures, all_reduces, reports;
        "check": reports membership_changed();
        "reconfigure T": reconfigures within T s, all_reduces, reports;
        "sum": all_reduces and reports (what a member excluded meanwhile gets)
    elastic.py HOST:PORT JOB newcomer [--timeout T]
        joins the running job (within T s), then all_reduces with the members and reports

Every job is elastic with max_size 4. A report is "RANK r SIZE n SUM s". Exit
codes: 3 refused (max_size), 4 timed out (not admitted, or a reconfigure below
min_size), 5 excluded, 6 another asyncoll error; each prints the error's class and message first.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import asyncoll as dist

#: What each error ends the process with, most specific first.
EXIT_CODES = ((dist.ExcludedError, 5), (dist.RendezvousTimeoutError, 4),
              (dist.RendezvousError, 3))


def report_sum() -> None:
    total = np.array([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    print(f"RANK {dist.get_rank()} SIZE {dist.get_world_size()} SUM {total[0]}", flush=True)


def member(command: list[str]) -> None:
    """Do the test's one command, as a member of the job."""
    if command[0] == "go":
        while not dist.membership_changed():
            time.sleep(0.05)
        dist.reconfigure()
        report_sum()
    elif command[0] == "check":
        print(f"CHANGED {dist.membership_changed()} SIZE {dist.get_world_size()}", flush=True)
    elif command[0] == "reconfigure":
        dist.reconfigure(timeout=float(command[1]))
        report_sum()
    elif command[0] == "sum":
        report_sum()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("job")
    parser.add_argument("role", choices=("member", "newcomer"))
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--min-size", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    try:
        dist.init_process_group(init_method=f"tcp://{args.address}", world_size=args.size,
                                job_id=args.job, elastic=True, min_size=args.min_size,
                                max_size=4, timeout=args.timeout)
        if args.role == "newcomer":
            report_sum()
        else:
            print(f"READY RANK {dist.get_rank()}", flush=True)
            member(sys.stdin.readline().split())
    except dist.AsyncollError as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return next((code for kind, code in EXIT_CODES if isinstance(exc, kind)), 6)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

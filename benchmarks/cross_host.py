"""asyncoll-bench between network-namespace hosts: one rank per host, side by side with gloo.

Needs root, iproute2 and unshare (tests/multihost/netns-cluster.sh makes the
hosts: namespaces on one private bridge, hostnames h0, h1, ...). Each rank
runs ``python -m asyncoll.bench --worker SYSTEM`` inside its own host, so
every byte crosses the (virtual) network between hosts; rank 0's host also
runs the coordinator (asyncoll) or the TCP store (gloo). Nothing connects to
a namespace address from the root namespace.

    sudo python benchmarks/cross_host.py --sizes 4,1K,64K,1M --compare gloo
    sudo python benchmarks/cross_host.py --sizes 16M,64M --rate 1gbit --compare gloo

``--rate`` limits every host's egress (tbf), as a real link would; with it,
``busbw`` against the rate says how much of the link a system uses.
Columns as asyncoll-bench's; time is the median over ops of the max over ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from asyncoll.bench import COLUMNS

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "tests" / "multihost" / "netns-cluster.sh"
NET = "10.79.0"
ENV = dict(os.environ, NC_PREFIX="acb", NC_BRIDGE="acbbr0", NC_NET=NET)
PORT = 29600


def cluster(*args: str) -> str:
    result = subprocess.run(["bash", str(SCRIPT), *args], env=ENV, capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"netns-cluster.sh {' '.join(args)} failed:\n{result.stdout}"
                         f"{result.stderr}")
    return result.stdout


def run(system: str, hosts: int, forwarded: list[str], timeout: float,
        python: str = sys.executable) -> list[dict[str, object]]:
    """One run of ``system``: rank i in host i; rank 0's rows."""
    procs = []
    for rank in range(hosts):
        env = {**ENV, "RANK": str(rank), "WORLD_SIZE": str(hosts), "MASTER_ADDR": f"{NET}.1",
               "MASTER_PORT": str(PORT), "PYTHONUNBUFFERED": "1"}
        if system == "asyncoll-loop":  # no calling-thread path: through the event loop
            env.update(ASYNCOLL_ARENA_BYTES="0", ASYNCOLL_LINKS_BYTES="0")
        worker = "asyncoll" if system.startswith("asyncoll") else system
        procs.append(subprocess.Popen(
            ["bash", str(SCRIPT), "exec", str(rank), python, "-m", "asyncoll.bench",
             *forwarded, "--worker", worker], env=env, text=True,
            # Not this checkout's directory: `-m` would import its asyncoll
            # first, whatever version the interpreter has installed.
            cwd="/",
            stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL))
    rows = []
    try:
        out, _ = procs[0].communicate(timeout=timeout)
        for line in out.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                row["system"] = system
                rows.append(row)
        for proc in procs[1:]:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    if any(proc.returncode for proc in procs):
        raise SystemExit(f"a {system} rank failed: exit codes {[p.returncode for p in procs]}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2, help="hosts, one rank each (default 2)")
    parser.add_argument("--collectives", default="all_reduce")
    parser.add_argument("--sizes", default="4,1K,64K,1M")
    parser.add_argument("--target-s", default="1.0")
    parser.add_argument("--rate", help="egress limit of every host, e.g. 1gbit (tbf)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose asyncoll the ranks run (another "
                        "version's venv, to compare two in one sitting)")
    parser.add_argument("--label", default="asyncoll",
                        help="the name of the asyncoll rows (say, which version)")
    parser.add_argument("--compare", action="append", default=[],
                        choices=["asyncoll-loop", "gloo"])
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("cross_host.py needs root (network namespaces)")
    forwarded = ["--collectives", args.collectives, "--sizes", args.sizes, "--target-s",
                 args.target_s]
    cluster("down")
    cluster("up", str(args.hosts))
    try:
        if args.rate:
            for host in range(args.hosts):
                cluster("rate", str(host), args.rate)
        print(f"# cross_host.py: {args.hosts} namespace hosts, one rank each"
              + (f", egress {args.rate} per host" if args.rate else ""))
        print("# " + " ".join(f"{c:>12}" for c in COLUMNS))
        for system in ("asyncoll", *args.compare):
            for row in run(system, args.hosts, forwarded, 1800, args.python):
                if system == "asyncoll":
                    row["system"] = args.label
                print("  " + " ".join(f"{row[c]!s:>12}" for c in COLUMNS), flush=True)
    finally:
        cluster("down")
    return 0


if __name__ == "__main__":
    sys.exit(main())

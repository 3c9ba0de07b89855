"""asyncoll-bench between network-namespace hosts, one or more ranks per host, beside gloo.

Needs root, iproute2 and unshare (tests/multihost/netns-cluster.sh makes the
hosts: namespaces on one private bridge, hostnames acb0, acb1, ...). Each
rank runs ``python -m asyncoll.bench --worker SYSTEM`` inside its host, so
every byte between hosts crosses the (virtual) network; rank 0's host also
runs the coordinator (asyncoll) or the TCP store (gloo). Nothing connects to
a namespace address from the root namespace.

    sudo python benchmarks/cross_host.py --sizes 4,1K,64K,1M --compare gloo
    sudo python benchmarks/cross_host.py --sizes 16M,64M --rate 1gbit --compare gloo
    sudo python benchmarks/cross_host.py --sizes 64M --rate 1gbit --compression bf16 \\
        --compression int8 --compare gloo
    sudo python benchmarks/cross_host.py --hosts 4 --ranks-per-host 4 \\
        --sizes 4,64K,1M,16M,64M --compare asyncoll-flat --compare gloo

``--ranks-per-host P`` runs ranks h*P .. h*P+P-1 in host h (WORLD_SIZE is
hosts x P), each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set. That is what torchrun gives the processes it
starts on each host, and gloo's env:// init reads no more, so starting them
directly is equivalent; asyncoll tells which ranks share a host from their
hostnames.

``--compare asyncoll-flat`` runs asyncoll with ASYNCOLL_HIERARCHY=0 (no
per-host hierarchy: groups that span hosts run flat algorithms over direct
links); ``--compare asyncoll-loop`` runs it with both calling-thread paths
off (every operation through the event loop).

Beside asyncoll-bench's columns, each row shows the ranks' open descriptors
once its size's ops are timed, where the worker reports them: ``sockets``
is the most sockets any rank but 0 holds (rank 0 also holds the
coordinator's or the store's connection to every rank: ``sockets_r0``),
``sockets_min`` the fewest any rank holds, ``fds`` the most descriptors of
any kind.

``--rate`` limits every host's egress (tbf), as a real link would; with it,
``busbw`` against the rate says how much of the link a system uses.
Columns as asyncoll-bench's; time is the median over ops of the max over ranks.

``--compare tcp`` (two hosts) adds what plain TCP does on the same link: the
two hosts send each other ``size`` bytes at once over one connection, as
each rank of a 2-rank ring all_reduce sends ``size`` bytes in all, so its
busbw is the most an all_reduce could use of that link (TCP's headers and
the kernel's pacing take their share of the rate). It is timed as
asyncoll-bench times a collective: ops back to back, each op's time the
slower host's, then the median.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from asyncoll._algorithms.compression import MODES
from asyncoll.bench import COLUMNS, parse_size

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "tests" / "multihost" / "netns-cluster.sh"
NET = "10.79.0"
ENV = dict(os.environ, NC_PREFIX="acb", NC_BRIDGE="acbbr0", NC_NET=NET)
PORT = 29600
#: The environment each asyncoll system's ranks get on top of the launch's.
SYSTEM_ENV = {
    # No calling-thread path: every operation through the event loop.
    "asyncoll-loop": {"ASYNCOLL_ARENA_BYTES": "0", "ASYNCOLL_LINKS_BYTES": "0"},
    # No per-host hierarchy: flat algorithms over direct links across hosts.
    "asyncoll-flat": {"ASYNCOLL_HIERARCHY": "0"},
}
#: The asyncoll systems whose all_reduce compresses its frames (--compression), by mode.
COMPRESSED = {f"asyncoll-{mode}": mode for mode in MODES}


def cluster(*args: str) -> str:
    result = subprocess.run(["bash", str(SCRIPT), *args], env=ENV, capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"netns-cluster.sh {' '.join(args)} failed:\n{result.stdout}"
                         f"{result.stderr}")
    return result.stdout


def rank_env(host: int, local: int, per_host: int, hosts: int) -> dict[str, str]:
    """The environment of the ``local``-th rank in host ``host``, as torchrun would set it.

    Rank 0's host hosts the rendezvous.
    """
    return {**ENV, "RANK": str(host * per_host + local), "WORLD_SIZE": str(hosts * per_host),
            "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_host),
            "MASTER_ADDR": f"{NET}.1", "MASTER_PORT": str(PORT), "PYTHONUNBUFFERED": "1"}


def run(system: str, hosts: int, forwarded: list[str], timeout: float,
        python: str = sys.executable, per_host: int = 1) -> list[dict[str, object]]:
    """One run of ``system``: ``per_host`` ranks in each host, in rank order; rank 0's rows."""
    procs = []
    for host in range(hosts):
        for local in range(per_host):
            env = {**rank_env(host, local, per_host, hosts), **SYSTEM_ENV.get(system, {})}
            worker = "asyncoll" if system.startswith("asyncoll") else system
            command = [python, "-m", "asyncoll.bench", *forwarded, "--worker", worker]
            if system in COMPRESSED:
                command += ["--compression", COMPRESSED[system]]
            if system == "tcp":
                command = [python, str(Path(__file__).resolve()), *forwarded, "--tcp-worker"]
            first = not procs
            procs.append(subprocess.Popen(
                ["bash", str(SCRIPT), "exec", str(host), *command], env=env, text=True,
                # Not this checkout's directory: `-m` would import its asyncoll
                # first, whatever version the interpreter has installed.
                cwd="/",
                stdout=subprocess.PIPE if first else subprocess.DEVNULL))
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


def tcp_worker(sizes: list[int], target_s: float) -> None:
    """Rank RANK of the plain-TCP anchor: both hosts send each size both ways at once."""
    rank = int(os.environ["RANK"])
    address = (os.environ["MASTER_ADDR"], PORT)
    if rank == 0:
        with socket.create_server(address) as server:
            server.settimeout(60)
            peer, _ = server.accept()
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                peer = socket.create_connection(address, timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    peer.settimeout(60)
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sink = bytearray(1 << 20)

    def receive(nbytes: int) -> None:
        """Read the next ``nbytes`` bytes from the other host, into ``sink`` (dropped)."""
        while nbytes:
            got = peer.recv_into(sink, min(nbytes, len(sink)))
            if not got:
                raise ConnectionError("the other host closed the connection")
            nbytes -= got

    def receive_exactly(nbytes: int) -> bytes:
        """The next ``nbytes`` bytes from the other host."""
        data = bytearray(nbytes)
        view, got = memoryview(data), 0
        while got < nbytes:
            more = peer.recv_into(view[got:])
            if not more:
                raise ConnectionError("the other host closed the connection")
            got += more
        return bytes(data)

    def both_ways(payload: bytes) -> float:
        """Seconds until this host's payload is sent and the other's is in."""
        failed: list[BaseException] = []

        def read() -> None:
            try:
                receive(len(payload))
            except BaseException as exc:  # raised below, in this thread
                failed.append(exc)

        began = time.perf_counter()
        reader = threading.Thread(target=read)
        reader.start()
        peer.sendall(payload)
        reader.join()  # the socket's 60 s timeout bounds it
        if failed:
            raise failed[0]
        return time.perf_counter() - began

    def agree() -> None:
        """Both hosts here: a start the two agree on."""
        peer.sendall(b"g")
        receive(1)

    with peer:
        for size in sizes:
            payload = bytes(size)
            agree()
            estimate = both_ways(payload)
            # Rank 0's count, so both run as many.
            if rank == 0:
                count = int(min(1000, max(5, target_s / max(estimate, 1e-6))))
                peer.sendall(count.to_bytes(4, "little"))
            else:
                count = int.from_bytes(receive_exactly(4), "little")
            # Timed as asyncoll-bench times a collective: back to back, each
            # op's time the slower host's, the median of those.
            agree()
            times = [both_ways(payload) for _ in range(count)]
            if rank == 1:
                peer.sendall(struct.pack(f"<{count}d", *times))
                continue
            theirs = struct.unpack(f"<{count}d", receive_exactly(8 * count))
            seconds = statistics.median(max(a, b) for a, b in zip(times, theirs))
            print(json.dumps({"system": "tcp", "ranks": 2, "collective": "both_ways",
                              "size": size, "count": size, "type": "byte", "redop": "none",
                              "root": -1, "time_us": round(seconds * 1e6, 2),
                              "algbw_GBps": round(size / seconds / 1e9, 4),
                              "busbw_GBps": round(size / seconds / 1e9, 4), "wrong": 0}),
                  flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2, help="hosts (default 2)")
    parser.add_argument("--ranks-per-host", type=int, default=1, metavar="P",
                        help="ranks in each host (default 1)")
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
                        choices=["asyncoll-loop", "asyncoll-flat", "gloo", "tcp"])
    parser.add_argument("--compression", action="append", default=[], choices=MODES,
                        help="also run asyncoll with its all_reduce compressed so")
    parser.add_argument("--tcp-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tcp_worker:
        tcp_worker([parse_size(size) for size in args.sizes.split(",")], float(args.target_s))
        return 0
    if args.hosts < 1 or args.ranks_per_host < 1:
        raise SystemExit("--hosts and --ranks-per-host must be at least 1")
    if "tcp" in args.compare and (args.hosts, args.ranks_per_host) != (2, 1):
        raise SystemExit("--compare tcp is between two hosts, one rank each: pass --hosts 2 "
                         "--ranks-per-host 1")
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
        print(f"# cross_host.py: {args.hosts} namespace hosts, {args.ranks_per_host} "
              f"rank(s) each" + (f", egress {args.rate} per host" if args.rate else ""))
        columns: tuple[str, ...] | None = None
        compressed = [f"asyncoll-{mode}" for mode in args.compression]
        for system in ("asyncoll", *compressed, *args.compare):
            rows = run(system, args.hosts, forwarded, 1800, args.python, args.ranks_per_host)
            if columns is None:
                # The worker's columns beyond asyncoll-bench's (the descriptor
                # counts), from its rows: an older asyncoll's, with --python, has none.
                columns = COLUMNS + tuple(dict.fromkeys(
                    key for row in rows for key in row if key not in COLUMNS))
                print("# " + " ".join(f"{c:>12}" for c in columns))
            for row in rows:
                if system == "asyncoll":
                    row["system"] = args.label
                print("  " + " ".join(f"{row.get(c, '-')!s:>12}" for c in columns),
                      flush=True)
    finally:
        cluster("down")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`asyncoll-bench`: collective benchmarks in the nccl-tests format, beside gloo's. For example:

    asyncoll-bench --collectives all_reduce,broadcast --world-sizes 2,4 \\
        --sizes 4,1K,64K,1M,16M,64M --compare gloo --csv out.csv --plot out.png

For every world size and every system (asyncoll, then each `--compare`
one), it starts that many ranks on this machine and times
float32 operations size by size, two ways. One op at a time: each op's time
is the maximum over ranks, and `median` is the median of those, as
nccl-tests shows. Then a batch of as many ops back to back: `mean` is the
batch's time (the slowest rank's) divided by its count, what a job making
one call after another feels, stalls included. Columns: system, ranks, size
(bytes of the largest buffer: all_gather's output, reduce_scatter's input),
count (elements per rank's input), type, redop, root, median and mean (us),
algbw = size / median and busbw = algbw x the collective's bus factor (GB/s,
1e9 bytes), and #wrong (ranks whose check failed; each size is checked once
before it is timed). With more than one system, a summary follows: for each
world size, collective and size, the systems from the fastest mean to the
slowest, with asyncoll's mean over each other one's.

`--busy N` runs N busy-looping processes (pure Python, `while True: pass`)
beside the ranks for the whole invocation, every system compared meeting
the same contention in the same sitting: a training job's data loaders,
compute threads and neighbours, in miniature. Each row also carries
the ranks' open file descriptors once the size's ops are timed (`FD_COLUMNS`,
in the CSV; Linux only).

Systems: `asyncoll` with its default paths (shared memory between ranks
on one host, unless ASYNCOLL_SHM=0: small and medium collectives in each
caller's thread through a group arena, larger ones through rings),
`asyncoll-loop` (the same with both calling-thread paths off: every
operation through the event loop thread, as before they existed),
`asyncoll-tcp` (loopback TCP only), `asyncoll-python` (the default
paths with the compiled extension off: ASYNCOLL_PURE_PYTHON=1), `gloo` (torch.distributed over
loopback TCP; needs torch) and `mpi` (Open MPI through mpi4py, started
with mpirun; it uses shared memory on one host). `--plot` needs matplotlib (`pip install
asyncoll[plot]`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from asyncoll._algorithms.compression import MODES, error_bound
from asyncoll._bench_report import by_mean, format_row, plot
from asyncoll._stdout import ends_quietly_on_a_closed_pipe
from asyncoll._version import add_version_option

#: nccl-tests' bus bandwidth factor of each collective, for n ranks.
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "barrier": lambda n: 0.0,  # moves no data: one row of size 0, whatever --sizes says
}
#: asyncoll with its default paths (a shared-memory arena and rings between
#: same-host ranks), asyncoll with no calling-thread path (no arena, no direct
#: links: every operation through the event loop), asyncoll over TCP only,
#: asyncoll with its compiled extension off (asyncoll._native), and the systems to
#: compare with.
SYSTEMS = ("asyncoll", "asyncoll-loop", "asyncoll-tcp", "asyncoll-python", "gloo", "mpi")
#: The environment each asyncoll system's ranks get.
_SYSTEM_ENV = {"asyncoll-loop": {"ASYNCOLL_ARENA_BYTES": "0", "ASYNCOLL_LINKS_BYTES": "0"},
               "asyncoll-tcp": {"ASYNCOLL_SHM": "0"},
               "asyncoll-python": {"ASYNCOLL_PURE_PYTHON": "1"}}
COLUMNS = ("system", "ranks", "collective", "size", "count", "type", "redop", "root",
           "time_us", "mean_us", "algbw_GBps", "busbw_GBps", "wrong")
#: Open descriptors after a size's timed ops: the most sockets any rank but 0
#: holds (rank 0 also holds the coordinator's or the store's connection to
#: every rank), the fewest any rank holds, rank 0's, and the most descriptors
#: of any kind any rank holds.
FD_COLUMNS = ("sockets", "sockets_min", "sockets_r0", "fds")
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_JOB_TIMEOUT_S = 1800


def parse_size(text: str) -> int:
    """Bytes from "4", "64K", "1M", "1GiB"..."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _SUFFIXES else ""
    try:
        return int(float(value[:len(value) - len(unit)]) * _SUFFIXES[unit])
    except ValueError:
        raise SystemExit(f"asyncoll-bench: size {text!r} is not a number of bytes "
                         "(use 4, 64K, 1M...)") from None


def open_descriptors() -> tuple[int, int] | None:
    """(sockets, all) among this process's open file descriptors; None without /proc."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    sockets = total = 0
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # listdir's own descriptor, closed since
            continue
        total += 1
        sockets += target.startswith("socket:")
    return sockets, total


# -- one rank ---------------------------------------------------------------------------


class _Rank:
    """This process's side of a run: the system's API on float32 buffers."""

    def __init__(self, system: str, compression: str | None = None) -> None:
        self.dist: Any
        self._torch: Any = None
        #: asyncoll's all_reduce sends its frames between hosts compressed so.
        self.compression = compression if system == "asyncoll" else None
        if system == "mpi":
            self.dist = _MpiDist()
        elif system == "gloo":
            import torch
            import torch.distributed as tdist
            tdist.init_process_group("gloo", init_method="env://")
            self.dist = tdist
            self._torch = torch
        else:
            import asyncoll
            asyncoll.init_process_group(init_method="env://")
            self.dist = asyncoll
        self.rank: int = self.dist.get_rank()
        self.size: int = self.dist.get_world_size()

    def buffer(self, count: int) -> Any:
        array = np.zeros(count, dtype=np.float32)
        return self._torch.from_numpy(array) if self._torch is not None else array

    def max_across(self, values: NDArray[Any]) -> NDArray[Any]:
        out = values.astype(np.float64, copy=True)
        self.dist.all_reduce(self._torch.from_numpy(out) if self._torch is not None else out,
                             op=self.dist.ReduceOp.MAX)
        return out

    def descriptors(self) -> dict[str, int]:
        """`FD_COLUMNS` across the ranks (one all_reduce); {} without /proc."""
        counts = open_descriptors()
        if counts is None:
            return {}
        sockets, total = counts
        # -1 never wins a MAX: a rank's slot that is not its own.
        others = sockets if self.rank or self.size == 1 else -1
        top = self.max_across(np.array([others, -sockets,
                                        sockets if self.rank == 0 else -1, total]))
        return dict(zip(FD_COLUMNS, (int(top[0]), -int(top[1]), int(top[2]), int(top[3]))))

    def prepare(self, collective: str, count: int) -> tuple[Callable[[], None],
                                                            Callable[[], bool]]:
        """(one op, a check that runs one op on known data and says if it was right)."""
        n, me, dist = self.size, self.rank, self.dist
        total = n * (n + 1) / 2
        # torch 2.13 renamed these (the old names warn); asyncoll has torch's older names.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        # The n-block buffers only where the collective takes them: at 64 MiB on 16
        # ranks they are 1 GiB each, and the check writes them.
        wide = count * n if collective in ("all_gather", "reduce_scatter", "all_to_all") else 0
        small, large, sent = self.buffer(count), self.buffer(wide), self.buffer(wide)
        view_small, view_large, view_sent = np.asarray(small), np.asarray(large), np.asarray(sent)
        mode = self.compression
        # Compressed, a sum is right within its bound (its magnitude: the sum itself).
        bound = 0.0 if mode is None else float(error_bound(mode, np.dtype(np.float32), n,
                                                           np.array([total]))[0])
        ops: dict[str, tuple[Callable[[], None], Callable[[], bool]]] = {
            "all_reduce": ((lambda: dist.all_reduce(small)) if mode is None else
                           (lambda: dist.all_reduce(small, compression=mode)),
                           lambda: bool((np.abs(view_small - total) <= bound).all())),
            "broadcast": (lambda: dist.broadcast(small, src=0),
                          lambda: bool((view_small == 1).all())),
            "reduce": (lambda: dist.reduce(small, dst=0),
                       lambda: me != 0 or bool((view_small == total).all())),
            "all_gather": (lambda: gather(large, small),
                           lambda: bool((view_large == np.repeat(np.arange(1, n + 1),
                                                                 count)).all())),
            "reduce_scatter": (lambda: scatter(small, large),
                               lambda: bool((view_small == total).all())),
            "all_to_all": (lambda: dist.all_to_all_single(large, sent),
                           lambda: bool((view_large == np.repeat(np.arange(1, n + 1),
                                                                 count)).all())),
            "barrier": (lambda: dist.barrier(), lambda: True),
        }
        run, right = ops[collective]

        def check() -> bool:
            for view in (view_small, view_large, view_sent):
                view.fill(me + 1)
            run()
            ok = right()
            for view in (view_small, view_large, view_sent):
                view.fill(0)  # timed sums of zeros never overflow
            return ok

        return run, check

    def time(self, run: Callable[[], None], target_s: float,
             size: int) -> tuple[float, float]:
        """(median microseconds of one op, each op's time the max over ranks;
        mean microseconds of an op in a batch, the slowest rank's batch time
        over its count).

        As OSU's micro-benchmarks do, small ops warm up longer (100 ops to
        64 KiB, 10 to 1 MiB, 2 above) and are timed more often (up to 10000
        ops each way, as many as half of `target_s` allows): a few ms of
        timing left the first size of a run to the processor's and caches'
        warming up.
        """
        warmup = 100 if size <= (64 << 10) else 10 if size <= (1 << 20) else 2
        began = time.perf_counter()
        for _ in range(warmup):
            run()
        estimate = float(self.max_across(np.array([(time.perf_counter() - began) / warmup]))[0])
        iterations = int(min(10000, max(5, target_s / 2 / max(estimate, 1e-9))))
        times = np.empty(iterations)
        self.dist.barrier()
        for i in range(iterations):
            start = time.perf_counter_ns()
            run()
            times[i] = time.perf_counter_ns() - start
        median = float(np.median(self.max_across(times))) / 1e3
        self.dist.barrier()
        start = time.perf_counter_ns()
        for _ in range(iterations):
            run()
        batch = self.max_across(np.array([time.perf_counter_ns() - start], dtype=np.float64))
        return median, float(batch[0]) / iterations / 1e3


class _MpiDist:
    """The few torch.distributed calls the benchmark makes, over mpi4py (Open MPI)."""

    def __init__(self) -> None:
        from mpi4py import MPI
        self._mpi: Any = MPI
        self._comm: Any = MPI.COMM_WORLD
        self.ReduceOp: Any = type("ReduceOp", (), {"SUM": MPI.SUM, "MAX": MPI.MAX})

    def get_rank(self) -> int:
        return int(self._comm.Get_rank())

    def get_world_size(self) -> int:
        return int(self._comm.Get_size())

    def all_reduce(self, x: NDArray[Any], op: Any = None) -> None:
        self._comm.Allreduce(self._mpi.IN_PLACE, x, op=op or self._mpi.SUM)

    def broadcast(self, x: NDArray[Any], src: int) -> None:
        self._comm.Bcast(x, root=src)

    def reduce(self, x: NDArray[Any], dst: int) -> None:
        if self.get_rank() == dst:
            self._comm.Reduce(self._mpi.IN_PLACE, x, op=self._mpi.SUM, root=dst)
        else:
            self._comm.Reduce(x, None, op=self._mpi.SUM, root=dst)

    def all_gather_into_tensor(self, out: NDArray[Any], x: NDArray[Any]) -> None:
        self._comm.Allgather(x, out)

    def reduce_scatter_tensor(self, out: NDArray[Any], x: NDArray[Any]) -> None:
        self._comm.Reduce_scatter_block(x, out, op=self._mpi.SUM)

    def all_to_all_single(self, out: NDArray[Any], x: NDArray[Any]) -> None:
        self._comm.Alltoall(x, out)

    def barrier(self) -> None:
        self._comm.Barrier()

    def destroy_process_group(self) -> None:
        pass  # MPI finalizes at exit


def _rank_main(args: argparse.Namespace) -> int:
    me = _Rank(args.worker, args.compression)
    n = me.size
    for collective in args.collectives.split(","):
        sizes = [0] if collective == "barrier" else [parse_size(s)
                                                      for s in args.sizes.split(",")]
        for size in sizes:
            per_rank = size // 4 // (n if collective in
                                     ("all_gather", "reduce_scatter", "all_to_all") else 1)
            count = 0 if collective == "barrier" else max(1, per_rank)
            run, check = me.prepare(collective, count)
            wrong = int(me.max_across(np.array([0.0 if check() else 1.0]))[0])
            median_us, mean_us = me.time(run, args.target_s, size)
            descriptors = me.descriptors()
            nbytes = count * 4 * (n if collective in
                                  ("all_gather", "reduce_scatter", "all_to_all") else 1)
            if me.rank == 0:
                algbw = nbytes / max(median_us * 1e-6, 1e-12) / 1e9
                system = f"{args.worker}-{me.compression}" if me.compression else args.worker
                row = {"system": system, "ranks": n, "collective": collective,
                       "size": nbytes, "count": count, "type": "float",
                       "redop": "sum" if collective in ("all_reduce", "reduce",
                                                        "reduce_scatter") else "none",
                       "root": 0 if collective in ("broadcast", "reduce") else -1,
                       "time_us": round(median_us, 2), "mean_us": round(mean_us, 2),
                       "algbw_GBps": round(algbw, 4),
                       "busbw_GBps": round(algbw * BUS_FACTORS[collective](n), 4),
                       "wrong": wrong, **descriptors}
                print(json.dumps(row), flush=True)
    me.dist.barrier()
    me.dist.destroy_process_group()
    return 0


# -- the driver ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(system: str, world_size: int, argv: Sequence[str]) -> list[dict[str, Any]]:
    """Start `world_size` ranks of `system`; return rank 0's rows as they came."""
    if system == "mpi":
        return _run_mpi(world_size, argv)
    port = str(_free_port())
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env.update(_SYSTEM_ENV.get(system, {}))  # read by the worker's asyncoll at join
        procs.append(subprocess.Popen([sys.executable, "-m", "asyncoll.bench", *argv,
                                       "--worker", system], env=env,
                                      stdout=subprocess.PIPE if rank == 0 else
                                      subprocess.DEVNULL, text=True))
    return _collect(system, procs)


def _run_mpi(world_size: int, argv: Sequence[str]) -> list[dict[str, Any]]:
    """Start `world_size` mpi4py ranks under mpirun (Open MPI picks shared memory)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("asyncoll-bench: --compare mpi needs mpirun on PATH (Open MPI) "
                         "and mpi4py installed")
    command = [mpirun, "-n", str(world_size)]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    if world_size > (os.cpu_count() or 1):
        command += ["--oversubscribe", "--bind-to", "none"]
    command += [sys.executable, "-m", "asyncoll.bench", *argv, "--worker", "mpi"]
    # mpirun forwards its stdin to rank 0 and fails when it cannot (under pytest).
    return _collect("mpi", [subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, text=True)])


def _collect(system: str, procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    """Print and return the rows rank 0 (`procs[0]`) writes; wait for every rank."""
    rows = []
    try:
        assert procs[0].stdout is not None
        for line in procs[0].stdout:
            if line.startswith("{"):
                row = json.loads(line)
                rows.append(row)
                print(format_row(row), flush=True)
        for proc in procs:
            if proc.wait(_JOB_TIMEOUT_S) != 0:
                raise SystemExit(f"asyncoll-bench: a {system} rank exited with "
                                 f"{proc.returncode}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return rows


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run `count` busy-looping processes while the block runs; stop them after."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


@ends_quietly_on_a_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `asyncoll-bench`."""
    parser = argparse.ArgumentParser(prog="asyncoll-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version_option(parser, "asyncoll-bench")
    parser.add_argument("--collectives", default="all_reduce",
                        help=f"comma list of {', '.join(BUS_FACTORS)} (default all_reduce)")
    parser.add_argument("--world-sizes", default="2", help="comma list (default 2)")
    parser.add_argument("--sizes", default="4,1K,64K,1M,16M,64M",
                        help="comma list of bytes, K/M/G binary suffixes")
    parser.add_argument("--target-s", type=float, default=1.0,
                        help="timed seconds per size, about (default 1.0)")
    parser.add_argument("--compare", action="append", default=[], choices=SYSTEMS[1:],
                        help="also run this system, in the same invocation")
    parser.add_argument("--csv", help="write every row to this CSV file")
    parser.add_argument("--plot", help="draw bandwidth and latency against size (PNG)")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="run N busy-looping processes beside the ranks throughout "
                             "(default 0)")
    parser.add_argument("--compression", choices=MODES,
                        help="asyncoll's all_reduce compresses its frames between hosts "
                             "(exact on one host: see cross_host.py)")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    bad = [c for c in args.collectives.split(",") if c not in BUS_FACTORS]
    if bad:
        raise SystemExit(f"asyncoll-bench: unknown collective(s) {', '.join(bad)}; choose "
                         f"from {', '.join(BUS_FACTORS)}")
    if args.busy < 0:
        raise SystemExit(f"asyncoll-bench: --busy {args.busy} is not a number of "
                         "processes; give 0 or more")
    if args.worker:
        return _rank_main(args)
    passed = list(argv) if argv is not None else sys.argv[1:]
    forwarded = _without(passed, ("--compare", "--csv", "--plot", "--world-sizes", "--busy"))
    print(f"# asyncoll-bench: float32, one host, {os.cpu_count()} CPUs; median: of the ops' "
          "times (each the max over ranks); mean: a batch's time over its count")
    print(f"#{'system':>12} {'ranks':>5} {'collective':>14} {'size':>11} {'count':>10} "
          f"{'type':>6} {'redop':>5} {'root':>4} {'median(us)':>11} {'mean(us)':>11} "
          f"{'algbw':>8} {'busbw':>8} {'#wrong':>6}")
    rows = []
    with busy_processes(args.busy) as busy:
        if busy:
            print(f"# beside the ranks throughout: {len(busy)} busy-looping process(es), "
                  f"pid(s) {' '.join(str(p.pid) for p in busy)}")
        for world_size in (int(w) for w in args.world_sizes.split(",")):
            for system in ("asyncoll", *args.compare):
                rows += _run(system, world_size, forwarded)
    if args.compare:
        for line in by_mean(rows):
            print(line)
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            extra = [c for c in FD_COLUMNS if any(c in row for row in rows)]
            writer = csv.DictWriter(out, fieldnames=[*COLUMNS, *extra])
            writer.writeheader()
            writer.writerows(rows)
    if args.plot:
        plot(rows, args.plot)
    return 1 if any(row["wrong"] for row in rows) else 0


def _without(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """`argv` less the driver-only options (and their values)."""
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in options:
            skip = "=" not in item
            continue
        kept.append(item)
    return kept


if __name__ == "__main__":
    sys.exit(main())

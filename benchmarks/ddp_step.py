"""A DDP training step on gloo and on asyncoll, and the same step's compute alone.

    python benchmarks/ddp_step.py                        # 2 and 4 ranks, 1 and 2 threads
    python benchmarks/ddp_step.py --world-sizes 2 --threads 1 --busy 1

The model is an MLP of about 4.2M parameters (four Linear(1024, 1024), ReLU
between them) on a batch of 64, as the contention issue measured it. A step
is zero_grad, forward, backward (DDP's bucket all_reduces start during it)
and an SGD step. Each case runs in fresh processes on this host (env://):

- `alone`: one process, the plain model, no process group: the compute a
  step cannot do without;
- `gloo` and `asyncoll`: `world size` ranks, DistributedDataParallel.

Each case reports the mean ms of a step over `--steps` steps (the slowest
rank's, as a job waits for it) and its median, and, on the two backends, the
mean µs of a blocking 4-byte all_reduce through torch.distributed over a
batch of calls. Cases alternate in `--rounds` rounds, and the table gives
each round's figures side by side: asyncoll over alone (what the overlap did
not hide, plus the compute's own slowdown from sharing the cores) and
asyncoll over gloo. `--busy N` runs N busy-looping processes beside the
ranks throughout, for every case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: How long one case's processes may run before they are killed.
CASE_TIMEOUT_S = 600.0
SMALL_CALLS = 2000


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model() -> Any:
    """The benchmark's MLP: four Linear(1024, 1024), ReLU between them."""
    import torch

    layers: list[Any] = []
    for i in range(4):
        layers += [torch.nn.Linear(1024, 1024)] + ([torch.nn.ReLU()] if i < 3 else [])
    return torch.nn.Sequential(*layers)


def rank_main(backend: str, steps: int, threads: int) -> None:
    """One rank of a case: print a JSON line of its step times (and 4 B all_reduce µs)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = model()
    small_us = 0.0
    if backend != "alone":
        if backend == "asyncoll":
            import asyncoll  # noqa: F401 - registers the backend
        dist.init_process_group(backend)
        net = torch.nn.parallel.DistributedDataParallel(net)
        one = torch.ones(1)
        for _ in range(SMALL_CALLS // 10):
            dist.all_reduce(one)
        dist.barrier()
        began = time.perf_counter()
        for _ in range(SMALL_CALLS):
            dist.all_reduce(one)
        small_us = (time.perf_counter() - began) / SMALL_CALLS * 1e6
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 1024), torch.randn(64, 1024)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()

    for _ in range(5):
        step()
    if backend != "alone":
        dist.barrier()
    times = []
    began = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    mean_ms = (time.perf_counter() - began) / steps * 1e3
    print(json.dumps({"mean_ms": mean_ms, "median_ms": statistics.median(times),
                      "small_us": small_us}), flush=True)
    if backend != "alone":
        dist.destroy_process_group()


def run_case(backend: str, world: int, threads: int, steps: int) -> dict[str, float]:
    """Run one case in fresh processes; the slowest rank's figures."""
    ranks = 1 if backend == "alone" else world
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(ranks), OMP_NUM_THREADS=str(threads))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank-of", backend,
                               "--steps", str(steps), "--threads", str(threads)],
                              env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(ranks)]
    deadline = time.monotonic() + CASE_TIMEOUT_S
    results = []
    try:
        for rank, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise SystemExit(f"ddp_step: {backend} on {ranks} rank(s) did not finish "
                                 f"within {CASE_TIMEOUT_S:.0f} s") from None
            lines = [line for line in out.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"ddp_step: rank {rank} of {backend} exited with code "
                                 f"{proc.returncode}:\n{err[-4000:]}")
            results.append(json.loads(lines[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {key: max(r[key] for r in results) for key in results[0]}


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments; run the cases, round by round; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-sizes", default="2,4", help="comma-separated (default 2,4)")
    parser.add_argument("--threads", default="1,2",
                        help="torch threads per rank, comma-separated (default 1,2)")
    parser.add_argument("--backends", default="alone,gloo,asyncoll",
                        help="cases to run, from alone, gloo, asyncoll (default all three)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per case")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every case")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="run N busy-looping processes beside the ranks throughout")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--rank-of", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_of:
        rank_main(args.rank_of, args.steps, int(args.threads))
        return
    backends = args.backends.split(",")
    unknown = sorted(set(backends) - {"alone", "gloo", "asyncoll"})
    if unknown or args.steps < 1 or args.rounds < 1 or args.busy < 0:
        raise SystemExit(f"ddp_step: give --backends from alone, gloo, asyncoll (not "
                         f"{unknown}), and --steps and --rounds of 1 or more, --busy of 0 or "
                         "more")
    from asyncoll.bench import busy_processes

    cases = [(w, t) for t in map(int, args.threads.split(","))
             for w in map(int, args.world_sizes.split(","))]
    figures: dict[str, list[dict[str, float]]] = {}
    with busy_processes(args.busy) as busy:
        print(f"# DDP step, 4.2M-parameter MLP, batch 64; busy-looping processes beside the "
              f"ranks: {len(busy)}", flush=True)
        for _ in range(args.rounds):
            for world, threads in cases:
                for backend in backends:
                    key = f"{world}/{threads}/{backend}"
                    figures.setdefault(key, []).append(
                        run_case(backend, world, threads, args.steps))
    print(table(figures, cases, backends))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


def table(figures: dict[str, list[dict[str, float]]], cases: list[tuple[int, int]],
          backends: list[str]) -> str:
    """A Markdown row per (world size, threads): each backend's mean ms per round, the
    ratios, the 4 B all_reduce µs."""
    def each(key: str, field: str, form: str = "{:.1f}") -> str:
        return " / ".join(form.format(f[field]) for f in figures.get(key, [])) or "-"

    def ratio(top: str, bottom: str) -> str:
        pairs = zip(figures.get(top, []), figures.get(bottom, []))
        return " / ".join(f"{a['mean_ms'] / b['mean_ms']:.2f}x" for a, b in pairs) or "-"

    lines = ["| ranks | threads | " + " | ".join(f"{b} ms" for b in backends) +
             " | asyncoll / alone | asyncoll / gloo | 4 B gloo µs | 4 B asyncoll µs |",
             "|---|---|" + "---|" * (len(backends) + 4)]
    for world, threads in cases:
        key = f"{world}/{threads}/"
        lines.append(f"| {world} | {threads} | " +
                     " | ".join(each(key + b, "mean_ms") for b in backends) +
                     f" | {ratio(key + 'asyncoll', key + 'alone')}"
                     f" | {ratio(key + 'asyncoll', key + 'gloo')}"
                     f" | {each(key + 'gloo', 'small_us')}"
                     f" | {each(key + 'asyncoll', 'small_us')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

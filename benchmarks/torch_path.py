"""Through torch.distributed: small calls and a DDP step, on one backend.

Run the same program on "asyncoll" and on "gloo" in one sitting, 2 ranks on
this host (torchrun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set by hand):

    torchrun --nproc-per-node 2 benchmarks/torch_path.py asyncoll
    torchrun --nproc-per-node 2 benchmarks/torch_path.py gloo

Rank 0 prints the median µs of a blocking 4-byte all_reduce, of a barrier
and of a 4-byte broadcast from rank 0 (over batches of calls), and the
median ms of one DDP training step (forward, backward with its gradient
all_reduces, optimizer step) of an MLP of about 4.2M parameters. Compare
versions and backends side by side, alternating runs.

The backend "nothing" is a Python ProcessGroup whose all_reduce does
nothing (as do its barrier and broadcast): its figures are what torch itself
costs a Python backend's call (no DDP step on it).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

import asyncoll  # noqa: F401 - registers the backend


def call_us(call: Callable[[], object], batches: int = 200, calls: int = 200) -> float:
    """The median µs per ``call()``, over ``batches`` batches of ``calls``."""
    for _ in range(calls):
        call()
    per_batch = []
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        per_batch.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(per_batch)


class _DoneWork(dist.distributed_c10d.Work):  # type: ignore[misc]
    def wait(self, timeout: object = None) -> bool:
        return True


class _Nothing(dist.ProcessGroup):  # type: ignore[misc]
    """A process group whose all_reduce, barrier and broadcast do nothing and are done
    at once."""

    def allreduce(self, tensors: object, opts: object = None) -> _DoneWork:
        return _DoneWork()

    def barrier(self, opts: object = None) -> _DoneWork:
        return _DoneWork()

    def broadcast(self, tensors: object, opts: object = None) -> _DoneWork:
        return _DoneWork()


def _register_nothing() -> None:
    dist.Backend.register_backend(
        "nothing", lambda options, backend_options=None: _Nothing(options.group_rank,
                                                                  options.group_size),
        extended_api=True, devices=["cpu"])


def ddp_step_ms(steps: int = 60) -> float:
    """The median ms of one DDP step of a 4.2M-parameter MLP on a batch of 64."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 1024))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(64, 1024), torch.randn(64, 1024)
    times = []
    for step in range(steps + 5):
        began = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        if step >= 5:
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncoll"
    torch.set_num_threads(1)
    if backend == "nothing":
        _register_nothing()
    dist.init_process_group(backend)
    t = torch.ones(1)
    small = call_us(lambda: dist.all_reduce(t))
    barrier = call_us(dist.barrier)
    cast = call_us(lambda: dist.broadcast(t, 0))
    step = ddp_step_ms() if backend != "nothing" else float("nan")
    if dist.get_rank() == 0:
        print(f"{backend}: 4 B all_reduce {small:.1f} us; barrier {barrier:.1f} us; 4 B "
              f"broadcast {cast:.1f} us; DDP step {step:.2f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

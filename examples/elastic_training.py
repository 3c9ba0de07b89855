"""An elastic numpy training loop: it survives a kill -9 and admits a new worker.

    asyncoll-run --nproc-per-node 4 --max-restarts 1 examples/elastic_training.py

asyncoll-run makes the job elastic (ASYNCOLL_ELASTIC=1) and, when a worker
dies, starts one replacement that joins the running job. Kill a worker
(``kill -9 <pid>``) while it trains: the survivors go on in a world of 3,
then admit the replacement, and the job ends with 4 workers holding
identical weights.

The pattern: the state is the application's. After every membership change
(``reconfigure()``, or joining a job that already runs) rank 0 broadcasts it
(the weights and the step) to everyone; a newcomer starts from that.

    python examples/elastic_training.py --steps 400

Options: ``--steps`` (default 300), ``--size`` (parameters, default 100000),
``--pause`` (seconds per step, default 0.01: slow enough to kill one).
Each worker prints its pid and rank when it starts, one line per membership
change, one when its first step in each world is done (with the time, to
measure the pause a change costs) and, at the end, the checksum of its weights.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

import numpy as np

import asyncoll as dist


def gradient(weights: np.ndarray, step: int) -> np.ndarray:
    """This worker's gradient of a toy loss (pulling the weights towards a moving target)."""
    rng = np.random.default_rng(step * 1000 + dist.get_rank())
    target = rng.standard_normal(weights.size).astype(weights.dtype)
    return weights - target


def share_state(weights: np.ndarray, step: np.ndarray) -> None:
    """Everyone takes rank 0's weights and step (after a membership change)."""
    dist.broadcast(weights, src=0)
    dist.broadcast(step, src=0)


def go_on(weights: np.ndarray, step: np.ndarray, why: str) -> None:
    """Reconfigure with the survivors and the newcomers, then share the state.

    Another member lost meanwhile fails the sharing: reconfigure again.
    """
    before = dist.get_world_size()
    began = time.monotonic()
    while True:
        dist.reconfigure()
        try:
            share_state(weights, step)
            break
        except dist.CollectiveError:
            continue
    print(f"[pid {os.getpid()}] {why}: world {before} -> {dist.get_world_size()}, now rank "
          f"{dist.get_rank()}, at step {int(step[0])}, in {time.monotonic() - began:.2f} s",
          flush=True)


def first_step_done() -> None:
    """Say when this worker completed its first step in a new world (Unix time)."""
    print(f"[pid {os.getpid()}] first step in a world of {dist.get_world_size()} done at "
          f"{time.time():.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--pause", type=float, default=0.01)
    args = parser.parse_args()

    dist.init_process_group(init_method="env://", elastic=True)
    weights = np.zeros(args.size, dtype=np.float32)
    step = np.zeros(1, dtype=np.int64)
    if dist.get_generation() == 0:
        print(f"[pid {os.getpid()}] rank {dist.get_rank()} of {dist.get_world_size()} "
              "training", flush=True)
    else:
        share_state(weights, step)  # a newcomer, admitted into a running job
        print(f"[pid {os.getpid()}] joined as rank {dist.get_rank()} of "
              f"{dist.get_world_size()} at step {int(step[0])}", flush=True)
    new_world = True  # its first step is said, in this world as in each one after
    while step[0] < args.steps:
        try:
            if dist.membership_changed():
                go_on(weights, step, "membership changed")
                new_world = True
                continue
            grad = gradient(weights, int(step[0]))
            dist.all_reduce(grad)
            weights -= 0.1 * grad / dist.get_world_size()
            step += 1
            if new_world:
                first_step_done()
                new_world = False
            time.sleep(args.pause)
        except dist.CollectiveError as exc:  # a peer died mid-step: the step is redone
            go_on(weights, step, f"{type(exc).__name__} at step {int(step[0])}")
            new_world = True
    digest = hashlib.sha256(weights.tobytes()).hexdigest()[:16]
    print(f"[pid {os.getpid()}] rank {dist.get_rank()} of {dist.get_world_size()} done at "
          f"step {int(step[0])}: weights {digest}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

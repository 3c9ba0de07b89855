"""examples/elastic_training.py's loop, with a new_group every 50 steps (issue 28's chaos test).

Usage (under asyncoll-run --max-restarts 1): chaos_training.py --steps N [--pause S]

The coordinator is killed and restarted under it, and one worker is
killed: every 50 steps the job makes a group of all its ranks and reduces
over it, so each restart must have taken the job back, groups included.
Prints what the example prints, plus "GROUP <id> at step <step>" lines.
"""

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

import asyncoll as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from elastic_training import go_on, gradient, share_state  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
parser.add_argument("--pause", type=float, default=0.01)
args = parser.parse_args()

dist.init_process_group(init_method="env://", elastic=True)
weights = np.zeros(20_000, dtype=np.float32)
step = np.zeros(1, dtype=np.int64)
if dist.get_generation() == 0:
    print(f"[pid {os.getpid()}] rank {dist.get_rank()} of {dist.get_world_size()} training",
          flush=True)
else:
    share_state(weights, step)
    print(f"[pid {os.getpid()}] joined as rank {dist.get_rank()} of {dist.get_world_size()} "
          f"at step {int(step[0])}", flush=True)
while step[0] < args.steps:
    try:
        if dist.membership_changed():
            go_on(weights, step, "membership changed")
            continue
        if step[0] % 50 == 0:
            group = dist.new_group(list(range(dist.get_world_size())))
            count = np.ones(1)
            dist.all_reduce(count, group=group)
            assert count[0] == dist.get_world_size(), count
            if dist.get_rank() == 0:
                print(f"GROUP {group.group_id} at step {int(step[0])}", flush=True)
        grad = gradient(weights, int(step[0]))
        dist.all_reduce(grad)
        weights -= 0.1 * grad / dist.get_world_size()
        step += 1
    except dist.CollectiveError as exc:  # a peer died mid-step: the step is redone
        go_on(weights, step, f"{type(exc).__name__} at step {int(step[0])}")
    time.sleep(args.pause)
digest = hashlib.sha256(weights.tobytes()).hexdigest()[:16]
print(f"[pid {os.getpid()}] rank {dist.get_rank()} of {dist.get_world_size()} done at "
      f"step {int(step[0])}: weights {digest}", flush=True)
dist.destroy_process_group()

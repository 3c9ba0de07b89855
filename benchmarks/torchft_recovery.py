"""torchft's recovery from a killed replica, on asyncoll and on gloo, side by side.

The program of tests/frameworks/torchft_train.py: 2 and 3 replica groups
of one process each, a lighthouse (heartbeat timeout 1 s), replica 0 killed
with SIGKILL at a fixed step while the others wait for its gradients, then
restarted at once. Each configuration runs ``--runs`` times, asyncoll and gloo
alternating; the table gives medians (thrown-away steps: the largest):

    python benchmarks/torchft_recovery.py --runs 3

Columns: steps thrown away (every replica's, summed); the stall from the
kill to a survivor's next committed step, and within it the kill's detection
(the survivor throwing its step away) and the survivors' configure() of the
next quorum; the restarted replica's time from its Manager being ready to its
first step committed with all; the time between two committed steps before
the kill; whether every replica ended with the same parameters (all runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "frameworks"))

import torchft_train  # noqa: E402 - after the path above


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--steps", type=int, default=40, help="steps to train")
    parser.add_argument("--kill-at", type=int, default=10, help="the step replica 0 dies at")
    parser.add_argument("--width", type=int, default=4096,
                        help="the model's hidden width (parameters: 72 per unit)")
    args = parser.parse_args()
    print("| replicas | backend | thrown away | stall (ms) | detect (ms) | configure (ms) "
          "| heal and join (ms) | step, no fault (ms) | identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for replicas in (2, 3):
        outcomes: dict[str, list[torchft_train.Outcome]] = {"asyncoll": [], "gloo": []}
        for _ in range(args.runs):
            for backend in outcomes:
                outcomes[backend].append(torchft_train.scenario(
                    backend, replicas, args.steps, args.kill_at, width=args.width))
        for backend, runs in outcomes.items():
            def ms(field: str) -> str:
                return f"{1000 * statistics.median(getattr(o, field) for o in runs):.0f}"

            print(f"| {replicas} | {backend} | {max(o.thrown_away for o in runs)} "
                  f"| {ms('stall_s')} | {ms('detect_s')} | {ms('configure_s')} "
                  f"| {ms('heal_s')} | {ms('step_s')} "
                  f"| {'yes' if all(o.identical for o in runs) else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()

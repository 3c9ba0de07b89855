"""torch's fault-tolerance API on asyncoll: reconfigure, shrink_group, abort, get_error.

Real torch programs (workers/fault_tolerance.py), one per scenario: the
story of issue 42 under torchrun (enable_reconfigure, a reconfigure to every
handle, another to the survivors' fresh handles after one leaves, then a
shrink_group gloo cannot do), a new process joining through a reconfigure,
a shrink after a kill -9, and SHRINK_ABORT and abort() with operations in
flight. torch 2.13 has none of this API: there only its absence is checked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import conftest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

JOB_TIMEOUT_S = 120
needs_the_api = pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                                   reason="this torch has no fault-tolerance API (2.14 has)")
WORKER = conftest.WORKERS / "fault_tolerance.py"


def steps(out: str) -> list[str]:
    return [line[len("step "):] for line in out.splitlines() if line.startswith("step ")]


def run_scenario(scenario: str, world_size: int, entry_point_dir: Path
                 ) -> tuple[list[int], list[list[str]], str]:
    """Each rank's exit code and steps, and the report, of ``scenario`` on env://."""
    env = conftest.environment(entry_point_dir, SCENARIO=scenario, WORLD_SIZE=str(world_size),
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(conftest.free_port()))
    outcomes, report = conftest.run_ranks(WORKER, world_size, env, JOB_TIMEOUT_S)
    return [code for code, _, _ in outcomes], [steps(out) for _, out, _ in outcomes], report


def launch(scenario: str, world_size: int, entry_point_dir: Path) -> list[list[str]]:
    codes, seen, report = run_scenario(scenario, world_size, entry_point_dir)
    assert all(code == 0 for code in codes), report
    return seen


@needs_the_api
@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_reconfigure_to_every_handle_then_the_survivors_then_shrink_under_torchrun(
        entry_point_dir: Path) -> None:
    env = conftest.environment(entry_point_dir, SCENARIO="story")
    done = conftest.run(conftest.torchrun(3, [str(WORKER)]), env, JOB_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = sorted(steps(done.stdout))
    assert seen == sorted(["supports True"] * 3 + [f"first {r} 3 6.0" for r in range(3)] +
                          ["left", "second 0 2 3.0", "second 1 2 3.0",
                           "shrunk 0 1 1 1.0"]), done.stdout + done.stderr


@needs_the_api
@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_a_new_process_joins_through_reconfigure(entry_point_dir: Path) -> None:
    # Ranks 0 and 1 form a job; rank 2 starts alone, and the list ranks it third.
    assert launch("grow", 3, entry_point_dir) == [[f"grown {r} 3 6.0"] for r in range(3)]


@needs_the_api
@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_shrink_group_goes_on_after_a_kill_9(entry_point_dir: Path) -> None:
    codes, seen, report = run_scenario("kill9", 3, entry_point_dir)
    assert codes == [0, 0, -9], report
    assert seen[:2] == [["before 6.0", "lost 2", f"after {r} 2 3.0"] for r in range(2)], report


@needs_the_api
@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_the_others_reconfigure_without_rank_0_after_its_kill_9(entry_point_dir: Path) -> None:
    # Rank 0 hosted the torch job's coordinator: the two left meet on rank 1's.
    codes, seen, report = run_scenario("rank0", 3, entry_point_dir)
    assert codes == [-9, 0, 0], report
    assert seen[1:] == [
        ["all 6.0", f"without rank 0 {r} 2 5.0"] for r in range(2)], report


@needs_the_api
@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_shrink_abort_and_abort_fail_operations_in_flight_here_and_on_the_peer(
        entry_point_dir: Path) -> None:
    first, second = launch("abort", 2, entry_point_dir)
    assert first == ["shrunk 1", "in flight AbortedError True", "error before ErrorType.SUCCESS",
                     "after abort ClosedError", "error after ErrorType.COMM_ERROR"]
    assert second == ["peer AbortedError", "peer's in flight AbortedError True",
                      "peer's error ErrorType.REMOTE_ERROR"]


@pytest.mark.skipif(hasattr(dist, "_reconfigure"), reason="this torch has the API")
def test_torch_without_the_api_has_nothing_to_call() -> None:
    code = ("import torch.distributed as d, asyncoll; "
            "print(hasattr(d, '_supports_reconfigure'), hasattr(d, 'shrink_group'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert re.fullmatch(r"False (True|False)\n", done.stdout), done.stdout

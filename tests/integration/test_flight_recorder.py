"""The flight recorder across processes: who dumps when, and who reads the dumps.

A job whose rank 2 skips an all_reduce: the others time out, every rank
writes its recorder to ASYNCOLL_TRACE_DIR, and torch's analyzer
(torchfrtrace) and ``asyncoll trace`` (without torch) both name rank 2.
A rank held in an operation writes its recorder on SIGUSR1, or when
``asyncoll status --dump`` asks through the coordinator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from asyncoll._group import flight
from tests.integration.conftest import WORKERS, Daemon, finish

pytestmark = pytest.mark.timeout(180)

# asyncoll trace with torch made unimportable: it must not need it.
_WITHOUT_TORCH = ("import sys; sys.modules['torch'] = None; from asyncoll.cli import main; "
                  "sys.exit(main(['trace', sys.argv[1]]))")


def _start(daemon: Daemon, world: int, job: str, skipper: int, trace: Path,
           *extra: str) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, ASYNCOLL_TRACE_DIR=str(trace))
    return [subprocess.Popen([sys.executable, str(WORKERS / "skipper.py"), daemon.address,
                              str(world), str(rank), job, str(skipper), *extra],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for rank in range(world)]


def _torchfrtrace() -> list[str]:
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    script = Path(sys.executable).with_name("torchfrtrace")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from torch.distributed.flight_recorder.fr_trace import "
            "main; main()"]


def _wait_for(path: Path, test: object = None, timeout: float = 30.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            dump = flight.load(str(path))
            if test is None or test(dump):  # type: ignore[operator]
                return dump
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear (or not as expected) within {timeout} s")


def test_a_skipped_all_reduce_is_named_by_torchfrtrace_and_asyncoll_trace(
        daemon: Daemon, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    procs = _start(daemon, 3, "skip", 2, trace)
    outcomes = [finish(p, 60) for p in procs]

    assert [o[1].split() for o in outcomes] == [["READY", "RAISED", "CollectiveTimeoutError"],
                                               ["READY", "RAISED", "CollectiveTimeoutError"],
                                               ["READY", "DUMPED"]], outcomes
    assert sorted(os.listdir(trace)) == [f"asyncoll_trace_rank_{r}" for r in range(3)]
    analyzed = subprocess.run([*_torchfrtrace(), str(trace)], capture_output=True, text=True,
                              timeout=120)
    said = analyzed.stdout + analyzed.stderr
    assert analyzed.returncode == 0, said
    assert "Not all ranks joining collective, sequence number: 4" in said
    assert "missing ranks: {2}" in said
    ours = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, str(trace)],
                          capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines()[-1].startswith("ranks 0, 1 wait for rank 2, which did "
                                                   "not reach their operation")


def _held(dump: dict[str, object]) -> bool:
    entries = dump["entries"]
    return bool(entries) and entries[-1]["collective_seq_id"] == 4 and \
        entries[-1]["state"] == "started"  # type: ignore[index]


def _two_ranks_held(daemon: Daemon, tmp_path: Path, job: str
                    ) -> tuple[list[subprocess.Popen[str]], Path]:
    """Rank 0 held in its fourth all_reduce (60 s timeout), rank 1 skipping it."""
    trace = tmp_path / "trace"
    procs = _start(daemon, 2, job, 1, trace, "signal")
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return procs, trace


def _ask_until_held(ask: Callable[[], object], path: Path) -> dict[str, object]:
    """Ask (again, until rank 0 is held in its fourth all_reduce) for rank 0's dump."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ask()
        try:
            return _wait_for(path, _held, timeout=1.0)
        except AssertionError:
            pass
    raise AssertionError(f"{path} never showed rank 0 held in its fourth all_reduce")


def _let_go(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    """The skipper, dumped, leaves; rank 0's all_reduce then fails."""
    assert procs[1].stdout is not None and procs[1].stdout.readline().strip() == "DUMPED"
    assert procs[1].stdin is not None
    procs[1].stdin.write("GO\n")
    procs[1].stdin.flush()
    outcomes = [finish(p, 60) for p in procs]
    assert outcomes[0][1].split()[0] == "RAISED", outcomes
    return outcomes


def test_sigusr1_makes_a_rank_held_in_an_operation_dump(daemon: Daemon,
                                                        tmp_path: Path) -> None:
    procs, trace = _two_ranks_held(daemon, tmp_path, "signal")

    dump = _ask_until_held(lambda: procs[0].send_signal(signal.SIGUSR1),
                           trace / "asyncoll_trace_rank_0")

    assert dump["asyncoll"]["reason"] == "SIGUSR1"  # type: ignore[index]
    assert procs[0].poll() is None, "SIGUSR1 must not end the rank"
    procs[1].send_signal(signal.SIGUSR1)
    _let_go(procs)


def test_status_dump_asks_every_member_through_the_coordinator(daemon: Daemon,
                                                               tmp_path: Path) -> None:
    procs, trace = _two_ranks_held(daemon, tmp_path, "asked")
    answers: list[subprocess.CompletedProcess[str]] = []

    dump = _ask_until_held(lambda: answers.append(subprocess.run(
        [sys.executable, "-m", "asyncoll", "status", "--coordinator", daemon.address, "--job",
         "asked", "--dump"], capture_output=True, text=True, timeout=60)),
        trace / "asyncoll_trace_rank_0")

    assert answers[-1].returncode == 0, answers[-1].stderr
    assert "asked 2 running members" in answers[-1].stderr
    assert "status --dump" in dump["asyncoll"]["reason"]  # type: ignore[index]
    _let_go(procs)

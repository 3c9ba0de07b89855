"""Helpers for the torch backend's tests: launching torch programs as real processes.

The backend reaches torch through the ``torch.backends`` entry point of an
installed asyncoll. A development checkout may be imported from PYTHONPATH
while another copy's metadata is installed, so the processes started here
get a small distribution on their path that declares the same entry points
as pyproject.toml (test_registration checks that the two agree); where the
real one is installed too, registering twice is harmless.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"
ENTRY_POINT = "asyncoll._torch_backend:load"
#: torch >= 2.14's lookup by backend name (Backend._ensure_backend_registered).
REGISTRAR = "asyncoll._torch_backend:register"

#: Variables a launcher sets; none may leak from the environment running the tests.
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                    "LOCAL_WORLD_SIZE", "GROUP_RANK", "ASYNCOLL_JOB_ID",
                    "ASYNCOLL_COORDINATOR", "TORCHELASTIC_RUN_ID")


@pytest.fixture(scope="session")
def entry_point_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a distribution that declares asyncoll's torch entry point."""
    root = tmp_path_factory.mktemp("entry_point")
    info = root / "asyncoll_torch_backend_entry-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: asyncoll-torch-backend-entry"
                                   "\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\nasyncoll = {ENTRY_POINT}\n\n"
                                           "[torch.distributed.backends]\n"
                                           f"asyncoll = {REGISTRAR}\n")
    return root


def environment(entry_point_dir: Path, **extra: str) -> dict[str, str]:
    """The test's environment without launcher variables, this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    path = [str(REPO), str(entry_point_dir), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def free_port() -> int:
    """A free TCP port of 127.0.0.1 below the kernel's ephemeral range, for torch's store.

    A port from the ephemeral range (what binding port 0 gives) can be taken,
    while rank 0 is still importing torch, as the source port of another
    rank's attempt to reach the store there, which then connects to itself:
    that rank waits on a store that is not there until the job times out.
    """
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found below {low}")


def torchrun(nproc: int, script: Sequence[str]) -> list[str]:
    """The command line that runs ``script`` under torchrun on ``nproc`` processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), *script]


def asyncoll_run(nproc: int, script: Sequence[str]) -> list[str]:
    """The command line that runs ``script`` under asyncoll-run on ``nproc`` processes."""
    return [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", str(nproc), *script]


def run(command: Sequence[str], env: dict[str, str], timeout: float,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a launcher to the end (bounded); a timeout fails with what it printed."""
    proc = subprocess.Popen(list(command), env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"{command} did not finish in {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(list(command), proc.returncode, out, err)


def run_ranks(script: Path, world_size: int, env: dict[str, str], timeout: float,
              tails: tuple[int, int] = (3000, 5000)) -> tuple[list[tuple[int, str, str]], str]:
    """Run ``script`` as ranks 0..world_size-1; return (exit code, out, err) of each and a report.

    Each rank gets RANK and LOCAL_RANK on top of ``env``; one still running
    after ``timeout`` seconds is killed, and the report says so. The report
    holds the last ``tails`` characters of each rank's stdout and stderr.
    """
    procs = [subprocess.Popen([sys.executable, str(script)],
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(world_size)]
    outcomes = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate(timeout=10)
                err += f"\n(killed after {timeout} s)"
            outcomes.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    report = "\n".join(f"--- rank {rank} exited {code}\n{out[-tails[0]:]}\n{err[-tails[1]:]}"
                       for rank, (code, out, err) in enumerate(outcomes))
    return outcomes, report

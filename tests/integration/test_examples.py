"""The example programs, run as real processes, print what real torch prints.

Each example is one of the four torch.distributed programs asyncoll was first
built to run (tests/torch_backend/test_seed_programs.py runs them verbatim).
It runs under `asyncoll-run` on numpy arrays and, where torch is installed,
on torch tensors (`--torch`: the torch program's own form). The workers of
one job share the launcher's stdout, so their lines can arrive in any order:
each rank's lines are picked out by their "Process R" prefix and compared
with what torch prints with gloo, rank by rank.

The last tests start examples/sum.py by hand with env:// variables and no
launcher or daemon, so rank 0 hosts the coordinator itself.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from . import conftest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

#: Limit on one job (all its processes); a 4-process torch job takes seconds.
JOB_TIMEOUT_S = 120
#: Limit on each test, above JOB_TIMEOUT_S so a stuck job is killed and reported
#: by the test itself rather than by pytest-timeout.
TEST_TIMEOUT_S = 180
#: Limit on collecting a killed job's remaining output.
REAP_TIMEOUT_S = 10

#: Variables a launcher sets; none may leak from the environment running the tests.
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                    "LOCAL_WORLD_SIZE", "ASYNCOLL_JOB_ID")

# One record per print(): "Process R text", ended by a newline or, where two
# ranks' writes interleave, by the next record.
RECORD = re.compile(r"Process (\d+) (.*?)(?=Process \d+ |\n|\Z)")

SUM_LINES = {
    0: ["Process 0 before all_reduce: tensor([1., 2.])",
        "Process 0 after all_reduce: tensor([3., 5.])"],
    1: ["Process 1 before all_reduce: tensor([2., 3.])",
        "Process 1 after all_reduce: tensor([3., 5.])"],
}
PRODUCT_LINES = {
    0: ["Process 0 before all_reduce: tensor([1., 2.])",
        "Process 0 after all_reduce: tensor([2., 6.])"],
    1: ["Process 1 before all_reduce: tensor([2., 3.])",
        "Process 1 after all_reduce: tensor([2., 6.])"],
}
CUSTOM_GROUP_MAX_LINES: dict[int, list[str]] = {
    0: ["Process 0 before all_reduce: tensor([1., 2.])",
        "Process 0 after all_reduce: tensor([3., 4.])"],
    1: [],
    2: ["Process 2 before all_reduce: tensor([3., 4.])",
        "Process 2 after all_reduce: tensor([3., 4.])"],
}
# What real torch prints with gloo for this program.
AVERAGE_ACCURACY_LINES = {
    rank: [f"Process {rank} local accuracy: {local}",
           f"Process {rank} global average accuracy: 0.88"]
    for rank, local in enumerate(["0.84", "0.95", "0.88", "0.86"])
}


def lines_by_rank(stdout: str) -> dict[int, list[str]]:
    """Each rank's "Process R ..." lines, in the order that rank printed them.

    Raises AssertionError if anything else is in ``stdout``.
    """
    by_rank: dict[int, list[str]] = {}
    for match in RECORD.finditer(stdout):
        by_rank.setdefault(int(match.group(1)), []).append(match.group(0))
    leftover = RECORD.sub("", stdout)
    assert not leftover.strip(), f"unexpected output besides the ranks' lines: {leftover!r}"
    return by_rank


def clean_environment(**variables: str) -> dict[str, str]:
    """This process's environment without launcher variables, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update(variables)
    return env


def launcher() -> list[str]:
    """The command that starts ``asyncoll-run`` with this interpreter."""
    # The console script sits next to the interpreter in a virtual environment;
    # elsewhere (an interpreter without scripts on disk) the module does the same.
    script = Path(sys.executable).with_name("asyncoll-run")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncoll.run"]


def start(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Start ``command`` in its own process group, so a stuck job can be killed whole."""
    return subprocess.Popen(list(command), cwd=REPO, env=dict(env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = JOB_TIMEOUT_S) -> tuple[str, str]:
    """Wait up to ``timeout`` s for ``proc`` and return its (stdout, stderr).

    A process still running then is killed with its whole process group (the
    launcher's workers too) and the test fails with what it had printed.
    """
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        stdout, stderr = proc.communicate(timeout=REAP_TIMEOUT_S)
        pytest.fail(f"{proc.args} did not finish within {timeout} s\n"
                    f"stdout:\n{stdout}\nstderr:\n{stderr}")


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group that :func:`start` gave ``proc``, if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_example(script: Path, nproc: int, args: Sequence[str] = (),
                options: Sequence[str] = ()) -> dict[int, list[str]]:
    """Run ``script args`` under asyncoll-run ``options`` with ``nproc`` workers; return each
    rank's lines.

    Fails the test unless the job exits 0 without a traceback.
    """
    proc = start([*launcher(), *options, "--nproc-per-node", str(nproc), str(script), *args],
                 clean_environment())
    stdout, stderr = finish(proc)
    assert proc.returncode == 0, (f"asyncoll-run exited {proc.returncode}\n"
                                  f"stdout:\n{stdout}\nstderr:\n{stderr}")
    assert "Traceback" not in stderr, stderr
    return lines_by_rank(stdout)


def expect_every_rank(by_rank: Mapping[int, list[str]], expected: Mapping[int, list[str]]
                      ) -> None:
    """Assert each rank of ``expected`` printed exactly its lines, and no other rank printed."""
    assert set(by_rank) <= set(expected), f"lines from unknown ranks: {dict(by_rank)}"
    for rank, lines in expected.items():
        assert by_rank.get(rank, []) == lines, f"rank {rank}"


@pytest.fixture(params=["numpy", "torch"])
def form(request: pytest.FixtureRequest) -> list[str]:
    """The arguments of one form of the examples: numpy arrays, or torch tensors (--torch)."""
    if request.param == "numpy":
        return []
    # find_spec, not importorskip: importing torch here would cost seconds for nothing.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed; the torch forms of the examples need it")
    return ["--torch"]


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    return conftest.free_port()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """A list to put started processes in; any still running at teardown is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        kill_group(proc)
        try:
            proc.communicate(timeout=REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_sum_example_prints_seed_lines_on_every_rank(form: list[str]) -> None:
    by_rank = run_example(EXAMPLES / "sum.py", nproc=2, args=form)

    expect_every_rank(by_rank, SUM_LINES)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_torchruns_standalone_flag_runs_the_job_on_an_embedded_coordinator() -> None:
    by_rank = run_example(EXAMPLES / "sum.py", nproc=2, options=["--standalone"])

    expect_every_rank(by_rank, SUM_LINES)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_product_example_prints_seed_lines_on_every_rank(form: list[str]) -> None:
    by_rank = run_example(EXAMPLES / "product.py", nproc=2, args=form)

    expect_every_rank(by_rank, PRODUCT_LINES)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_custom_group_max_example_reduces_ranks_0_and_2_and_rank_1_prints_nothing(
        form: list[str]) -> None:
    by_rank = run_example(EXAMPLES / "custom_group_max.py", nproc=3, args=form)

    assert 1 not in by_rank, f"rank 1 is outside the group but printed {by_rank[1]}"
    expect_every_rank(by_rank, CUSTOM_GROUP_MAX_LINES)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_average_accuracy_example_prints_torchs_accuracies_and_their_average(
        form: list[str]) -> None:
    by_rank = run_example(EXAMPLES / "average_accuracy.py", nproc=4, args=form)

    expect_every_rank(by_rank, AVERAGE_ACCURACY_LINES)


def start_sum_rank(rank: int, port: int) -> subprocess.Popen[str]:
    """Start examples/sum.py as ``rank`` of a 2-process env:// job on 127.0.0.1:``port``."""
    env = clean_environment(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                            RANK=str(rank))
    return start([sys.executable, str(EXAMPLES / "sum.py")], env)


def expect_sum_job_output(ranks: Mapping[int, subprocess.Popen[str]]) -> None:
    """Assert every rank of the sum job exits 0 after printing its own lines."""
    # Wait for every rank before judging any, so a failure shows all their output.
    outputs = {rank: finish(proc) for rank, proc in ranks.items()}
    report = "\n".join(f"rank {rank} exited {ranks[rank].returncode}\nstdout:\n{stdout}\n"
                       f"stderr:\n{stderr}" for rank, (stdout, stderr) in outputs.items())
    for rank, (stdout, _) in outputs.items():
        assert ranks[rank].returncode == 0, report
        assert lines_by_rank(stdout) == {rank: SUM_LINES[rank]}, report


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_env_job_without_launcher_runs_on_the_coordinator_rank_0_hosts(
        free_port: int, processes: list[subprocess.Popen[str]]) -> None:
    rank_0 = start_sum_rank(0, free_port)
    processes.append(rank_0)
    rank_1 = start_sum_rank(1, free_port)
    processes.append(rank_1)

    expect_sum_job_output({0: rank_0, 1: rank_1})


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_env_job_rank_1_started_first_waits_for_rank_0s_coordinator(
        free_port: int, processes: list[subprocess.Popen[str]]) -> None:
    rank_1 = start_sum_rank(1, free_port)
    processes.append(rank_1)
    # Long enough for rank 1 to have found no coordinator on the port and,
    # were it not retrying, to have failed.
    time.sleep(1.0)
    assert rank_1.poll() is None, f"rank 1 exited {rank_1.returncode} before rank 0 started"
    rank_0 = start_sum_rank(0, free_port)
    processes.append(rank_0)

    expect_sum_job_output({0: rank_0, 1: rank_1})

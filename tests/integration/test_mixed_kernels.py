"""A job whose ranks run different kernels: the compiled arena steps beside pure Python.

Real processes under asyncoll-run (workers/mixed_kernels.py): even ranks run
with ASYNCOLL_PURE_PYTHON=1, odd ranks with the compiled extension, in one
shared-memory arena.
"""

from __future__ import annotations

import re

import pytest

from asyncoll import _native
from asyncoll._transport.shm import arena

from .conftest import WORKERS
from .test_examples import JOB_TIMEOUT_S, TEST_TIMEOUT_S, clean_environment, finish, launcher, \
    start

pytestmark = [pytest.mark.timeout(TEST_TIMEOUT_S),
              pytest.mark.skipif(not arena.supported(),
                                 reason="the arena needs POSIX shared memory on x86-64"),
              pytest.mark.skipif(_native.arena is None,
                                 reason=f"the compiled extension is off: {_native.describe()}")]


def run(ranks: int, *args: str) -> dict[int, str]:
    proc = start([*launcher(), "--nproc-per-node", str(ranks),
                  str(WORKERS / "mixed_kernels.py"), *args], clean_environment())
    stdout, stderr = finish(proc, JOB_TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return {int(rank): text
            for rank, text in re.findall(r"RESULT (\d+) (.*?)(?=RESULT \d|\n|$)", stdout)}


# 4 ranks: a compiled member past the first two (rank 3), whose result goes through the stack.
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_native_and_python_ranks_compute_the_same_results_in_one_arena(ranks):
    results = run(ranks)

    assert sorted(results) == list(range(ranks)), results
    for rank, text in results.items():
        kernels = "python" if rank % 2 == 0 else "native"
        assert text == f"{kernels} ok=120", (rank, text)


def test_a_desync_between_a_native_and_a_python_rank_raises_mismatch_on_both():
    results = run(2, "desync")

    assert results[0].startswith("python MismatchError"), results
    assert results[1].startswith("native MismatchError"), results
    for text in results.values():
        assert "broadcast on rank 1, all_reduce on rank 0" in text, text

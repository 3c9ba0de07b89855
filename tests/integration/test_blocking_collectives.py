"""Every collective of the blocking API in real processes under asyncoll-run.

workers/collectives.py runs each collective blocking and with async_op=True
(Work.wait), on the world and on a sub-group of every other rank, checking
results and untouched non-members on every rank.
"""

from __future__ import annotations

import re

import pytest

from .conftest import WORKERS
from .test_examples import JOB_TIMEOUT_S, TEST_TIMEOUT_S, clean_environment, finish, launcher, \
    start

pytestmark = pytest.mark.timeout(TEST_TIMEOUT_S)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
def test_every_collective_blocking_and_async_is_right_on_every_rank(world_size):
    proc = start([*launcher(), "--nproc-per-node", str(world_size),
                  str(WORKERS / "collectives.py")], clean_environment())
    stdout, stderr = finish(proc, JOB_TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    checked = {int(rank): int(count) for rank, count in
               re.findall(r"Process (\d+) checked (\d+) results", stdout)}
    assert sorted(checked) == list(range(world_size)), stdout
    # Members of both groups check every collective twice on each; none is skipped.
    assert min(checked.values()) >= 2 * 10, checked

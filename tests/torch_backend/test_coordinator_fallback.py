"""torch's backend passes ASYNCOLL_COORDINATOR's addresses on (issue 28): when the
coordinator that rank 0 hosts goes, a standing one takes the job back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Daemon

from . import conftest

pytest.importorskip("torch")

JOB_TIMEOUT_S = 90
pytestmark = pytest.mark.timeout(JOB_TIMEOUT_S + 30)


def test_a_standing_coordinator_takes_the_job_back_when_rank_0s_goes(
        entry_point_dir: Path, tmp_path: Path) -> None:
    standing = Daemon(tmp_path)
    try:
        env = conftest.environment(entry_point_dir, MASTER_ADDR="127.0.0.1",
                                   MASTER_PORT=str(conftest.free_port()), WORLD_SIZE="2",
                                   ASYNCOLL_COORDINATOR=standing.address)
        outcomes, report = conftest.run_ranks(conftest.WORKERS / "fallback.py", 2, env,
                                              JOB_TIMEOUT_S)
        log = standing.log()
    finally:
        standing.stop()
    assert [code for code, _, _ in outcomes] == [0, 0], report
    assert [out.strip().splitlines()[-1] for _, out, _ in outcomes] == [
        "OK rank=0 addresses=2 group=1", "OK rank=1 addresses=2 group=1"], report
    assert "adopted job 'torch-" in log and ": 2 members, generation 0" in log, log

"""A job whose Welcome leaves the ports out: its members look them up, and work.

The daemon runs with ``--ports-in-welcome-up-to 0``, as it would for a job
of thousands of ranks: each Welcome lists only its rank's partners' ports
(rank XOR 2^k, rank +- 2^k), and a connection to any other needs a lookup
first (a dial to port 0 would fail the collective). In a world of 6, ranks 0
and 3 are not each other's partners: their sub-group's ring needs one.
"""

from __future__ import annotations

import re

import pytest

from .conftest import WORKERS, Daemon
from .test_examples import JOB_TIMEOUT_S, TEST_TIMEOUT_S, clean_environment, finish, launcher, \
    start

pytestmark = pytest.mark.timeout(TEST_TIMEOUT_S)


@pytest.mark.parametrize("path", ["loop", "arena"])
def test_every_collective_is_right_with_the_ports_looked_up(tmp_path, path):
    daemon = Daemon(tmp_path, "--ports-in-welcome-up-to", "0")
    try:
        # Without the arena, every operation goes over the data connections.
        env = clean_environment(COLLECTIVES_SUBGROUP="0,3", **(
            {"ASYNCOLL_ARENA_BYTES": "0", "ASYNCOLL_LINKS_BYTES": "0"} if path == "loop"
            else {}))
        proc = start([*launcher(), "--nproc-per-node", "6", "--coordinator", daemon.address,
                      str(WORKERS / "collectives.py")], env)
        stdout, stderr = finish(proc, JOB_TIMEOUT_S)
    finally:
        daemon.stop()
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    checked = {int(rank): int(count) for rank, count in
               re.findall(r"Process (\d+) checked (\d+) results", stdout)}
    assert sorted(checked) == list(range(6)), stdout
    assert min(checked.values()) >= 2 * 10, checked

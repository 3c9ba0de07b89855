"""torchft, from PyPI and unchanged, recovers on asyncoll as on gloo, and each quorum's group
gives back what the one before held.

The recovery test runs torchft_train.py's scenario twice in one sitting, on
torchft's ProcessGroupGloo and on asyncoll's ProcessGroupAsyncoll: two replica
groups, replica 0 (which hosts asyncoll's coordinator of the quorum) killed
with SIGKILL at a fixed step while the other waits for its gradients, then
restarted. asyncoll must throw away no more steps than gloo did in that run;
the restarted replica must heal and train with the other; both must end with
the same parameters.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from . import torchft_train

QUORUMS = 12


@pytest.mark.timeout(200)
def test_torchft_recovers_from_a_killed_replica_throwing_away_no_more_steps_than_gloo():
    pytest.importorskip("torchft")
    gloo = torchft_train.scenario("gloo", replicas=2, steps=30, kill_at=8, limit_s=90)
    ours = torchft_train.scenario("asyncoll", replicas=2, steps=30, kill_at=8, limit_s=90)
    assert gloo.finished == 2 and gloo.identical, gloo
    assert ours.finished == 2, ours
    assert ours.identical, ours
    assert ours.thrown_away <= gloo.thrown_away, (ours, gloo)
    # The survivor went on after the kill, and the restarted replica joined it.
    assert ours.stall_s < float("inf") and ours.heal_s >= 0, ours


@pytest.mark.timeout(120)
@pytest.mark.skipif(sys.platform != "linux", reason="it reads what a process holds in /proc")
def test_each_torchft_quorum_gives_back_what_the_last_one_held_on_every_rank():
    pytest.importorskip("torchft")
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    procs = [subprocess.Popen([sys.executable, str(torchft_train.HERE.with_name(
        "torchft_quorums.py")), f"127.0.0.1:{store.port}", str(rank), str(QUORUMS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err[-4000:]}"
        held = [tuple(map(int, line.split())) for line in
                re.findall(r"^HELD (-?[\d ]+)$", out, re.MULTILINE)]
        assert [h[0] for h in held] == [*range(QUORUMS), -1]
        first, *later, end = (h[1:] for h in held)
        # The group of one quorum, and only it: its arena mapped, once.
        assert first[:2] == (1, 1), first
        assert all(h[:3] == first[:3] for h in later), later
        # Its fds: a socket of the quorum before may close a moment later on one rank (CI
        # saw 17 and 19 in turn), so they are not counted exactly; but they must not grow,
        # quorum after quorum, as a leak of even one a quorum would.
        early = max(h[3] for h in (first, *later[:2]))
        assert max(h[3] for h in later[-3:]) <= early, later
        # shutdown(): no shared memory left, and fewer threads and fds than a quorum held.
        assert end[:2] == (0, 0) and end[2] < first[2] and end[3] < first[3], end

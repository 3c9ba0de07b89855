"""asyncoll-run removes a shared-memory segment a dead worker could not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from asyncoll._transport.shm import segment as shm

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(shm._posixshmem is None, reason="no POSIX shared memory")]

WORKER = '''
import os, signal
from asyncoll._transport.shm import segment as shm
name = shm.new_name()
shm.create(name, 4096)
print(name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # before any peer could map and unlink it
'''


def test_asyncoll_run_removes_the_segments_of_a_worker_killed_before_its_peer_mapped_them(
        tmp_path):
    script = tmp_path / "dies_holding_a_segment.py"
    script.write_text(WORKER)
    result = subprocess.run([sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "1",
                             str(script)], capture_output=True, text=True, timeout=50)
    name = result.stdout.strip()
    assert name.startswith(shm.PREFIX), result
    assert "was killed by SIGKILL" in result.stderr
    assert f"removed /dev/shm/{name}" in result.stderr
    assert not os.path.exists(f"/dev/shm/{name}")

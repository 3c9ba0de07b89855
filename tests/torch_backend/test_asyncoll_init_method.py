"""init_method "asyncoll://": torch groups over the blocking API's world, and after reconfigure.

workers/init_method.py runs one elastic rank; the torch DDP example across real
processes with a kill -9 is tests/integration/test_elastic.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from . import conftest

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


def test_torch_group_follows_the_world_through_reconfigure_and_refuses_what_misleads(
        entry_point_dir: Path) -> None:
    env = conftest.environment(entry_point_dir, MASTER_PORT=str(conftest.free_port()))
    result = conftest.run([sys.executable, str(conftest.WORKERS / "init_method.py")], env, 90)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert lines["rank given"].startswith(" ConfigurationError: init_process_group was given "
                                          "rank=1, but asyncoll's world has rank 0")
    assert lines["init barrier"].startswith(" ConfigurationError: TORCH_DIST_INIT_BARRIER=1")
    assert lines["old group after reconfigure"].startswith(" ClosedError: ")
    assert lines["stale rendezvous"].startswith(" RuntimeError: asyncoll's world was "
                                                "reconfigured or destroyed")
    assert lines["blocking world still runs"] == " True"
    assert "generation 0 backend asyncoll sum [1.0, 1.0, 1.0]" in result.stdout
    assert "generation 1 rank 0 size 1 sum [1.0, 1.0, 1.0]" in result.stdout

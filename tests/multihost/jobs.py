"""The coordinator daemon and the collectives worker on namespace hosts, shared by the
multi-host tests."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from integration.conftest import finish

#: What a test needs to make namespace hosts (CI has it: it runs as root).
NAMESPACE_HOSTS = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI is root)"),
    pytest.mark.skipif(not (shutil.which("ip") and shutil.which("unshare")),
                       reason="needs iproute2 (ip) and util-linux (unshare)"),
]

#: Seconds the daemon may take to write its port file.
START_TIMEOUT_S = 30
COLLECTIVES = Path(__file__).resolve().parents[1] / "integration" / "workers" / "collectives.py"


@contextlib.contextmanager
def daemon_on_host_0(on_host: Callable[..., subprocess.Popen[str]], address: str,
                     port_file: Path) -> Iterator[Path]:
    """Run ``asyncoll.coordinator`` on host 0 (``on_host(0, ...)``) at ``address`` port
    29500 until the block ends; yield its port file once written."""
    daemon = on_host(0, sys.executable, "-m", "asyncoll.coordinator", "--host", address,
                     "--port", "29500", "--port-file", str(port_file))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists():
            assert daemon.poll() is None, daemon.communicate()
            assert time.monotonic() < deadline, "the coordinator did not start on host 0"
            time.sleep(0.05)
        yield port_file
    finally:
        daemon.terminate()
        finish(daemon, timeout=30)


def every_collective(on_host: Callable[..., subprocess.Popen[str]], first: int, nodes: int,
                     coordinator: str) -> str:
    """Run the collectives worker on hosts ``first`` .. ``first + nodes - 1``, two ranks
    each; check that every rank checked its results; return what they printed."""
    procs = [on_host(first + node, sys.executable, "-m", "asyncoll.run", "--nnodes",
                     str(nodes), "--node-rank", str(node), "--nproc-per-node", "2",
                     "--coordinator", coordinator, "--job-id", "collectives", str(COLLECTIVES))
             for node in range(nodes)]
    outcomes = [finish(p, timeout=120) for p in procs]
    for code, out, err in outcomes:
        assert code == 0, out + err
    text = "".join(out for _, out, _ in outcomes)
    checked = dict(re.findall(r"Process (\d+) checked (\d+) results", text))
    assert sorted(map(int, checked)) == list(range(2 * nodes)), text
    return text

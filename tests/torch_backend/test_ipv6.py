"""torch.distributed on backend 'asyncoll' over IPv6 loopback: MASTER_ADDR=::1."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from . import conftest

pytest.importorskip("torch")

JOB_TIMEOUT_S = 90
pytestmark = pytest.mark.timeout(JOB_TIMEOUT_S + 30)


def _free_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6) as sock:
        try:
            sock.bind(("::1", 0))
        except OSError:
            pytest.skip("this host has no IPv6 loopback (::1)")
        return int(sock.getsockname()[1])


def test_all_reduce_with_master_addr_ipv6_loopback(entry_point_dir: Path) -> None:
    env = conftest.environment(entry_point_dir, MASTER_ADDR="::1",
                               MASTER_PORT=str(_free_ipv6_port()), WORLD_SIZE="2")
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "ipv6.py", 2, env, JOB_TIMEOUT_S)
    assert [code for code, _, _ in outcomes] == [0, 0], report
    # Rank 0 hosts asyncoll's coordinator on the address of the route to torch's
    # store: ::1.
    assert [out.strip().splitlines()[-1] for _, out, _ in outcomes] == [
        "OK rank=0 sum=3.0 advertised=::1", "OK rank=1 sum=3.0 advertised=::1"], report

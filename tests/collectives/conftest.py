"""Every test here runs on every transport: TCP, and shared memory for same-host peers.

In the shared-memory run every payload of at least one byte goes through a
ring of 8 KiB, so larger payloads travel as many pieces, wrap around the ring
and wait for the receiver to free it, as payloads over the ring size do in
real use.
"""

from __future__ import annotations

import pytest

from asyncoll._transport.shm import segment as shm


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request, monkeypatch):
    if request.param == "tcp":
        monkeypatch.setenv("ASYNCOLL_SHM", "0")
    else:
        if shm._posixshmem is None:
            pytest.skip("no POSIX shared memory on this platform")
        monkeypatch.setenv("ASYNCOLL_SHM", "1")
        monkeypatch.setenv("ASYNCOLL_SHM_MIN_BYTES", "1")
        monkeypatch.setenv("ASYNCOLL_SHM_BYTES", "8192")
    return request.param

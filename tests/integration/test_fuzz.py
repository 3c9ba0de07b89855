"""Malformed, truncated, oversized and random input at the daemon and a data port.

A real two-rank job runs through the daemon (workers/steady.py, checking
every result) while hypothesis throws inputs at the daemon's port and at
one worker's data port, each on its own connection. The daemon must survive,
the job must complete with every result right, and a new job must still
rendezvous afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncoll._wire.frames import FrameKind, pack_header
from asyncoll._wire.messages import Barrier, Heartbeat, Join, Leave, NewGroup, Status, encode

from .conftest import WORKERS, Daemon, finish, start_probe

pytestmark = pytest.mark.timeout(180)

EXAMPLES = 300

_VALID = [encode(m, 1) for m in (
    Join(job="fuzz", rank=0, world_size=2, host="127.0.0.1", port=1, hostname="h", pid=1,
         version=2, timeout=1.0),
    Status(job=""), Heartbeat(ops=1), NewGroup.of(ranks=(0, 1), timeout=1.0),
    Barrier(group_id=0, seq=1, timeout=1.0), Leave())]
_JUNK_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                         st.floats(), st.text(max_size=20), st.binary(max_size=20),
                         st.lists(st.integers(-2**63, 2**63 - 1), max_size=5))


def _prefixed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


CONTROL_INPUTS = st.one_of(
    st.binary(max_size=512),
    st.builds(lambda n, rest: struct.pack(">I", n) + rest, st.integers(0, 2**32 - 1),
              st.binary(max_size=64)),
    st.sampled_from(_VALID).flatmap(lambda m: st.integers(0, len(m) - 1).map(lambda k: m[:k])),
    st.dictionaries(st.text(max_size=10), _JUNK_VALUES, max_size=8).map(
        lambda d: _prefixed(msgpack.packb(d, use_bin_type=True))),
    st.builds(lambda kind, d: _prefixed(msgpack.packb({"t": kind, "id": 1, **d})),
              st.sampled_from(["join", "status", "barrier", "new_group", "proof", "leave",
                               "welcome", "heartbeat"]),
              st.dictionaries(st.sampled_from(["job", "rank", "ranks", "timeout", "nonce",
                                               "world_size", "response", "ops"]),
                              _JUNK_VALUES, max_size=6)),
)
DATA_INPUTS = st.one_of(
    st.binary(max_size=512),
    st.builds(lambda fields, tail: struct.pack("<2sBBIIIQQBBBBiQ", *fields) + tail,
              st.tuples(st.sampled_from([b"AC", b"XX"]), st.integers(0, 3), st.integers(0, 9),
                        st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                        st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1),
                        st.integers(0, 2**64 - 1), st.integers(0, 255), st.integers(0, 255),
                        st.integers(0, 255), st.integers(0, 255), st.integers(-2**31, 2**31 - 1),
                        st.integers(0, 2**64 - 1)),
              st.binary(max_size=64)),
    st.builds(lambda kind, rank, payload: pack_header(kind, 0, 0, rank, len(payload)) + payload,
              st.sampled_from(list(FrameKind)), st.integers(0, 3), st.binary(max_size=64)),
)


def throw(port: int, data: bytes) -> None:
    """One connection: send ``data``, read briefly whatever comes back, close."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        try:
            sock.sendall(data)
            sock.settimeout(0.01)
            sock.recv(4096)
        except OSError:
            pass  # refused, reset or nothing to read: all fine


def worker_data_port(daemon: Daemon, job: str) -> int:
    status = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                             daemon.address, "--job", job, "--json"],
                            capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    (entry,) = json.loads(status.stdout)
    return int(entry["members"][0]["port"])


def test_daemon_and_data_port_survive_fuzzing_while_a_job_runs(tmp_path):
    daemon = Daemon(tmp_path)
    stop_file = tmp_path / "stop"
    workers = [subprocess.Popen([sys.executable, str(WORKERS / "steady.py"), daemon.address,
                                 "2", "steady", str(stop_file)], env=dict(os.environ),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    tried = {"daemon": 0, "data port": 0}
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "READY"
        data_port = worker_data_port(daemon, "steady")
        quick = settings(max_examples=EXAMPLES, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))

        @quick
        @given(CONTROL_INPUTS)
        def at_daemon(data: bytes) -> None:
            tried["daemon"] += 1
            throw(daemon.port, data)

        @quick
        @given(DATA_INPUTS)
        def at_data_port(data: bytes) -> None:
            tried["data port"] += 1
            throw(data_port, data)

        at_daemon()
        at_data_port()
        assert daemon.proc.poll() is None, "the daemon died"
        stop_file.touch()
        for worker in workers:
            code, out, err = finish(worker, timeout=60)
            assert code == 0 and "DONE" in out, f"{out}\n{err}"
        after = [start_probe("--init", f"tcp://{daemon.address}", "--world-size", "2",
                             "--job", "after") for _ in range(2)]
        assert [finish(p)[0] for p in after] == [0, 0]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        daemon.stop()
    print(f"inputs tried: {tried}")
    assert tried["daemon"] >= EXAMPLES // 2 and tried["data port"] >= EXAMPLES // 2

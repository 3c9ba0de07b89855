"""The daemon's ports under idle unauthenticated sockets, with 1024 descriptors (issue 56).

The daemon raises its soft open-files limit to the hard one. A daemon
limited to 1024 open files (soft and hard), with a token and an
HTTP port, is held by 1,500 idle sockets on each port, kept open (those it
closes are opened again): a new job still joins and reduces, and an
authorised HTTP request is still answered. Before the daemon bounded what
had not authenticated, a new job failed with "did not greet like an asyncoll
coordinator" and authorised requests were reset.
"""

from __future__ import annotations

import json
import resource
import selectors
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import Daemon, finish, start_probe

pytestmark = pytest.mark.timeout(120)
TOKEN = "under-load"
IDLE = 1500
DAEMON_FILES = 1024
#: Descriptors this test needs: its idle sockets on both ports, and some.
NEEDED = 2 * IDLE + 512


class IdleSockets:
    """``count`` idle connections to each port, kept open from a thread: those the
    daemon closes are opened again, once per ``refill_s``."""

    def __init__(self, ports: list[int], count: int, refill_s: float = 1.0) -> None:
        self._ports, self._count, self._refill_s = ports, count, refill_s
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        #: Connections the daemon closed, per port.
        self.closed = {port: 0 for port in ports}
        for port in ports:
            for _ in range(count):
                self._open(port)
        self._thread = threading.Thread(target=self._refill, daemon=True)
        self._thread.start()

    def _open(self, port: int) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ, port)

    def _refill(self) -> None:
        while not self._stop.is_set():
            deadline = time.monotonic() + self._refill_s
            gone: dict[int, int] = {}
            while (left := deadline - time.monotonic()) > 0:
                for key, _ in self._selector.select(left):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(4096)
                    except OSError:
                        data = b""
                    if not data:  # closed by the daemon
                        self._selector.unregister(sock)
                        sock.close()
                        gone[key.data] = gone.get(key.data, 0) + 1
                        self.closed[key.data] += 1
            for port, n in gone.items():
                if not self._stop.is_set():
                    for _ in range(n):
                        self._open(port)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


@pytest.fixture
def room_for_sockets():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < NEEDED:
        pytest.skip(f"this test opens {NEEDED} sockets and the hard open-files limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, NEEDED), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_sockets_on_both_ports_leave_a_new_job_and_an_authorised_request_served(
        tmp_path: Path, room_for_sockets: None) -> None:
    (tmp_path / "token").write_text(TOKEN)
    daemon = Daemon(tmp_path, "--token-file", str(tmp_path / "token"), "--http-port", "0",
                    "--http-port-file", str(tmp_path / "http.port"),
                    open_files=(DAEMON_FILES, DAEMON_FILES))
    idle = None
    try:
        http_port = int((tmp_path / "http.port").read_text())
        idle = IdleSockets([daemon.port, http_port], IDLE)
        daemon.wait_for_log("the rendezvous port holds at most")
        daemon.wait_for_log("the HTTP port holds at most")
        probes = [start_probe("--init", f"tcp://{daemon.address}", "--world-size", "2",
                              "--rank", str(rank), "--job", "loaded", "--timeout", "30",
                              env={"ASYNCOLL_TOKEN": TOKEN}) for rank in range(2)]
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/jobs",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=20) as reply:
            assert reply.status == 200 and "jobs" in json.loads(reply.read())
        outcomes = [finish(probe, 60) for probe in probes]
        assert [out.strip() for _, out, _ in outcomes] == [
            "OK rank=0 world=2 sum=[3, 30]", "OK rank=1 world=2 sum=[3, 30]"], outcomes
        # The daemon closed idle sockets to make room, on both ports, and said so.
        assert all(n >= IDLE - DAEMON_FILES // 2 for n in idle.closed.values()), idle.closed
        assert daemon.proc.poll() is None
        assert "Traceback" not in daemon.log()
    finally:
        if idle is not None:
            idle.close()
        daemon.stop()


def test_the_daemon_raises_its_soft_open_files_limit_to_the_hard_one(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, open_files=(256, DAEMON_FILES))
    try:
        daemon.wait_for_log(f"raised the open-files limit from 256 to {DAEMON_FILES}")
        limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
        (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
        assert line.split()[3:5] == [str(DAEMON_FILES), str(DAEMON_FILES)], line
    finally:
        daemon.stop()

"""Helpers for tests that run real processes."""

from __future__ import annotations

import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daemon:
    """An asyncoll-coordinator subprocess on a free port of 127.0.0.1 (or of ``host``), started
    with ``open_files`` (soft, hard) as its open-files limits when that is given."""

    def __init__(self, tmp_path: Path, *extra: str, host: str = "127.0.0.1",
                 open_files: tuple[int, int] | None = None) -> None:
        port_file = tmp_path / "coordinator.port"
        self.log_path = tmp_path / "coordinator.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "asyncoll.coordinator", "--host", host, "--port",
             "0", "--port-file", str(port_file), *extra],
            stdout=self._log, stderr=subprocess.STDOUT,
            preexec_fn=None if open_files is None else lambda: resource.setrlimit(
                resource.RLIMIT_NOFILE, open_files))
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the coordinator did not start: {self.log()}")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        #: HOST:PORT to reach it at: loopback of the family of the address it binds.
        self.host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        self.address = f"[{self.host}]:{self.port}" if ":" in self.host else \
            f"{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared in the coordinator log:\n"
                                     f"{self.log()}")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    try:
        yield d
    finally:
        d.stop()


def start_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start workers/probe.py with ``args``; read its outcome with finish()."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.Popen([sys.executable, str(WORKERS / "probe.py"), *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_ready(procs: list[subprocess.Popen[str]]) -> None:
    """Read each worker's first line, which must be READY (bounded: the test's timeout)."""
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.poll() else "")


def tell(proc: subprocess.Popen[str], line: str = "") -> None:
    """Write ``line`` and a newline to a worker's stdin (what it waits for to go on)."""
    assert proc.stdin is not None
    proc.stdin.write(f"{line}\n")
    proc.stdin.flush()


def end_all(procs: list[subprocess.Popen[str]], daemon: Daemon) -> None:
    """Kill every worker still running (or stopped), then stop ``daemon``."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    daemon.stop()


def stream_lines(stream: IO[str]) -> queue.Queue[str]:
    """The lines of ``stream`` (a process's stdout or stderr) as they come (a reader thread)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> tuple[int, str, str]:
    """Wait (bounded) for a process; return (exit code, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"process did not finish in {timeout} s:\n{out}\n{err}")
    return proc.returncode, out, err

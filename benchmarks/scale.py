"""The coordinator at scale: rendezvous and new_group of N light members.

    python benchmarks/scale.py --members 1024,4096,16384
    /tmp/oldvenv/bin/python benchmarks/scale.py --members 4096 --label main-before

The interpreter that runs it runs the daemon too, with its own asyncoll (so
an older asyncoll, installed in a venv, is measured by that venv's python).
A daemon (``asyncoll-coordinator``) serves one job of N light
members: coroutines in one client process, each with its own coordinator
connection and speaking the real protocol (``CoordinatorClient``, ``Join`` with
``world_size=N``, one new_group of all ranks, a monitored barrier, then
``Leave``). They open no data plane: what is timed is the coordinator's work.

Per N it prints one row: each phase's wall time and, in parentheses, the
CPU seconds the daemon spent in it (join: first Join sent to last Welcome;
new_group and barrier: first request to last answer; leave: first Leave to
the job closed), then the daemon's peak RSS and total CPU seconds. The client
process shares the machine (2 cores here), so wall times include its work:
the daemon's CPU is what grows with the coordinator's own cost.

With ``--dashboard`` the daemon serves its dashboard (``--http-port``) and a
thread of this process reads what an open page reads (the jobs, a page of
100 members of the job, and the events), every 0.1 s, twenty times as often
as the page, so that it overlaps every phase; the row then ends with the
largest answer, in KB (compare the phases' times with and without it).

With ``--restart`` the daemon is then killed (SIGKILL) and started again on
its port, and one more phase is timed, "adopt": from the new daemon
listening until every member has re-registered (the job is taken back, issue
28) and a second new_group of all ranks is answered.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from asyncoll._compat import loop_factory
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._wire.compact import pack_runs
from asyncoll._wire.messages import (
    Barrier,
    GroupCreated,
    GroupRecord,
    Join,
    Leave,
    Message,
    Rejoin,
    Status,
    StatusReply,
    Welcome,
)

TIMEOUT_S = 600.0
#: Print each phase's time as it ends (--verbose).
VERBOSE = False
#: Freeze the collector's view after the join (not with --default-gc).
FREEZE = True
#: Kill and restart the daemon after the barrier, and time the adoption (--restart).
RESTART = False
#: Connections opened at once (below asyncio's default listen backlog of 100).
CONNECTING = 64
#: Loopback source addresses the light members' connections are spread over
#: (--sources): one address has too few ephemeral ports for 16384 members.
SOURCES = 16


def new_group_request(ranks: tuple[int, ...], timeout: float) -> Message:
    """The NewGroup message of this asyncoll (its constructor changed with issue 25)."""
    from asyncoll._wire import messages
    make = getattr(messages.NewGroup, "of", None)
    return (make(ranks, timeout) if make is not None
            else messages.NewGroup(ranks=ranks, timeout=timeout))


async def dial_from_many(host: str, port: int, tls: object = None
                         ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection to ``host:port`` from one of SOURCES loopback addresses.

    Real members connect from as many hosts. From one address, Linux finds a
    free ephemeral port by a search that grows slow once half the range is in
    use, and the light members' process, not the daemon, would be timed.
    """
    assert tls is None, "the scale benchmark speaks plain TCP"
    dial_from_many.count += 1  # type: ignore[attr-defined]
    # Bound before the connect, to a port of its own on that address, by the
    # loop's own connect: binding at connect (IP_BIND_ADDRESS_NO_PORT) took
    # Python-level socket calls that the harness, not the daemon, paid for
    # (docs/design/coordinator-scale.md).
    source = f"127.0.0.{2 + dial_from_many.count % SOURCES}"  # type: ignore[attr-defined]
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    # Closed with a reset: a TIME_WAIT left on each of the source's ports would
    # make the binds of the next runs (within a minute) search past them.
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    return reader, writer


dial_from_many.count = 0  # type: ignore[attr-defined]


class Daemon:
    """An asyncoll-coordinator subprocess on a free port, with its /proc figures."""

    def __init__(self, python: str, dashboard: bool = False) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="asyncoll-scale-")
        self._python = python
        self.port = 0
        self._http = ["--http-port", "0", "--http-port-file",
                      str(Path(self._dir.name) / "http")] if dashboard else []
        self._start()

    def _start(self) -> None:
        port_file = Path(self._dir.name) / "port"
        port_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [self._python, "-m", "asyncoll.coordinator", "--port", str(self.port),
             "--port-file", str(port_file), "--log-level", "WARNING", *self._http],
            stdin=subprocess.DEVNULL,
            cwd=self._dir.name)  # not this checkout: -m would import its asyncoll first
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the coordinator did not start")
            time.sleep(0.005)
        self.port = int(port_file.read_text())

    def http_port(self) -> int:
        """The dashboard's port (with ``dashboard``)."""
        return int((Path(self._dir.name) / "http").read_text())

    def restart(self) -> None:
        """Kill the daemon (SIGKILL) and start a new one on its port."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._start()

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        self._dir.cleanup()


async def wait_until_idle(port: int, job: str) -> None:
    """Poll the daemon's status until ``job`` is gone (every member's leave handled)."""
    client = await CoordinatorClient.connect("127.0.0.1", port, TIMEOUT_S)
    try:
        while True:
            reply = await client.request(Status(job=job), TIMEOUT_S, "status")
            assert isinstance(reply, StatusReply)
            if not reply.jobs:
                return
            await asyncio.sleep(0.01)
    finally:
        await client.close()


class Phases:
    """Each phase's wall time, and the daemon's CPU seconds in it."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._began = (0.0, 0.0, 0.0)

    def begin(self) -> None:
        self._began = (time.perf_counter(), self._daemon.cpu_s(), time.process_time())

    def end(self, what: str, since: float | None = None) -> None:
        wall, cpu, own = self._began
        self.wall[what] = time.perf_counter() - (since if since is not None else wall)
        self.cpu[what] = self._daemon.cpu_s() - cpu
        if VERBOSE:
            # The light members' process shares the machine with the daemon.
            print(f"  {what}: {self.wall[what]:.2f} s, daemon CPU {self.cpu[what]:.2f} s, "
                  f"members' CPU {time.process_time() - own:.2f} s", file=sys.stderr, flush=True)


async def one_job(daemon: Daemon, members: int) -> Phases:
    """Join ``members`` light members, make a group of all, barrier, leave; the times."""
    job = f"scale-{members}"
    host = socket.gethostname()
    phases = Phases(daemon)
    first_join: list[float] = []
    directories: dict[str, bytes] = {}
    # Connections opened at once: more than the daemon's listen backlog would
    # leave handshakes to the kernel's retransmission timers.
    connecting = asyncio.Semaphore(CONNECTING)

    async def member(i: int) -> tuple[CoordinatorClient, tuple[int, bool]]:
        # A worker sends its join as soon as it is connected (the daemon drops
        # a connection that stays silent), so connections and joins overlap.
        async with connecting:
            client = await CoordinatorClient.connect("127.0.0.1", daemon.port, TIMEOUT_S)
        first_join.append(time.perf_counter())
        welcome = await client.request(Join(
            job=job, rank=-1, world_size=members, host="127.0.0.1", port=20000 + i % 40000,
            hostname=host, pid=os.getpid(), version=PROTOCOL_VERSION, timeout=TIMEOUT_S,
            heartbeat_timeout=TIMEOUT_S), TIMEOUT_S, "join")
        assert isinstance(welcome, Welcome), welcome
        # A member process keeps one directory; this one process stands in for
        # them all, and keeps its rank and whether its directory is the first's.
        directory = directories.setdefault(job, welcome.directory)
        return client, (welcome.rank, welcome.directory == directory)

    phases.begin()
    joined = await asyncio.gather(*(member(i) for i in range(members)))
    phases.end("join", since=min(first_join))
    if FREEZE:
        # The joined members' objects stay for the job: out of the collector's
        # sight, as they would be in N small processes, not scanned again in
        # every later phase (docs/design/coordinator-scale.md).
        gc.freeze()
    clients = [c for c, _ in joined]
    welcomes = [w for _, w in joined]
    assert all(same for _, same in welcomes), "the members got different directories"

    async def each(what: str, request: Message) -> list[Message]:
        phases.begin()
        replies = await asyncio.gather(*(c.request(request, TIMEOUT_S, what)
                                         for c in clients))
        phases.end(what)
        return replies

    ranks = sorted(rank for rank, _ in welcomes)
    assert ranks == list(range(members)), "the ranks are not 0 to N-1"
    by_rank = sorted(range(members), key=lambda i: welcomes[i][0])
    clients = [clients[i] for i in by_rank]
    # Every member sends the same request: made once, as a light member would
    # not spend the client process's time making it N times.
    created = await each("new_group", new_group_request(tuple(range(members)), TIMEOUT_S))
    assert all(isinstance(c, GroupCreated) and c.group_id == 1 for c in created)
    await each("barrier", Barrier(group_id=1, seq=1, timeout=TIMEOUT_S))
    if RESTART:
        digest = hashlib.blake2b(directories[job], digest_size=8).hexdigest()
        for rank, client in enumerate(clients):
            client.rejoin = functools.partial(rejoin_of, job, rank, members, digest, host)
        daemon.restart()
        phases.begin()
        while not all(c.up for c in clients):
            await asyncio.sleep(0.005)
        created = await asyncio.gather(*(c.request(
            new_group_request(tuple(range(members)), TIMEOUT_S), TIMEOUT_S, "new_group")
            for c in clients))
        assert all(isinstance(c, GroupCreated) and c.group_id == 2 for c in created)
        phases.end("adopt")
    phases.begin()
    await asyncio.gather(*(c.request(Leave(), TIMEOUT_S, "leave") for c in clients))
    await wait_until_idle(daemon.port, job)
    phases.end("leave")
    await asyncio.gather(*(c.close() for c in clients))
    return phases


def rejoin_of(job: str, rank: int, members: int, digest: str, host: str) -> Rejoin:
    """Light member ``rank``'s re-registration: after group 1 of everyone, and its barrier."""
    runs = pack_runs(tuple(range(members)))
    return Rejoin(job=job, rank=rank, world_size=members, generation=0,
                  version=PROTOCOL_VERSION, host="127.0.0.1", port=20000 + rank % 40000,
                  hostname=host, pid=os.getpid(), heartbeat_timeout=TIMEOUT_S, elastic=0,
                  min_size=0, max_size=0, directory_digest=digest,
                  groups=(GroupRecord(0, runs, 0), GroupRecord(1, runs, 1)),
                  new_group_calls=1, checks=0, gone=(), epoch=0)


PHASES = ("join", "new_group", "barrier", "leave")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", default="256,1024,4096",
                        help="comma-separated job sizes (default 256,1024,4096)")
    parser.add_argument("--label", default="asyncoll", help="the first column's text")
    parser.add_argument("--verbose", action="store_true", help="each phase's time as it ends")
    parser.add_argument("--restart", action="store_true",
                        help="kill and restart the daemon before the leave; time the adoption")
    parser.add_argument("--sources", type=int, default=16,
                        help="loopback source addresses the members connect from "
                             "(default 16; 0: the kernel's choice, 127.0.0.1)")
    parser.add_argument("--dashboard", action="store_true",
                        help="serve the dashboard, and read it every 0.1 s as an open page "
                             "does every 2 s")
    parser.add_argument("--default-gc", action="store_true",
                        help="leave this process's garbage collector at CPython's thresholds, "
                             "and nothing frozen after the join")
    args = parser.parse_args()
    if not args.default_gc:
        # This one process stands in for N member processes: with CPython's
        # thresholds its collector, traversing every member's objects again and
        # again, took most of its time at 16384 (the daemon sets its own).
        gc.set_threshold(50_000, 20, 100)
    global VERBOSE, RESTART, PHASES, SOURCES, FREEZE
    VERBOSE, RESTART, SOURCES = args.verbose, args.restart, args.sources
    FREEZE = not args.default_gc
    if SOURCES:
        from asyncoll._rendezvous import client
        client._dial = dial_from_many  # every connection, reconnections too
    if RESTART:
        PHASES = ("join", "new_group", "barrier", "adopt", "leave")
    print(f"{'daemon':<12} {'N':>6} " + " ".join(f"{p + ' s (CPU)':>18}" for p in PHASES)
          + f" {'RSS MB':>7} {'CPU s':>6}", flush=True)
    for members in (int(n) for n in args.members.split(",")):
        daemon = Daemon(sys.executable, args.dashboard)
        page = PageReader(daemon.http_port(), f"scale-{members}") if args.dashboard else None
        try:
            loop = loop_factory()()
            try:
                phases = loop.run_until_complete(one_job(daemon, members))
            finally:
                loop.close()
            largest = "" if page is None else f" {page.stop() / 1024:>8.1f}"
            print(f"{args.label:<12} {members:>6} " + " ".join(
                f"{phases.wall[p]:>10.2f} ({phases.cpu[p]:>5.2f})" for p in PHASES)
                + f" {daemon.peak_rss_mb():>7.0f} {daemon.cpu_s():>6.1f}{largest}", flush=True)
        finally:
            if page is not None:
                page.stop()
            daemon.stop()


class PageReader:
    """A thread that reads the dashboard's API as an open page does, every 0.1 s."""

    def __init__(self, port: int, job: str) -> None:
        self._paths = [f"http://127.0.0.1:{port}{p}" for p in
                       ("/api/jobs", f"/api/jobs/{job}?offset=0&limit=100", "/api/events")]
        self._done = threading.Event()
        self.largest = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._done.is_set():
            for url in self._paths:
                try:
                    with urllib.request.urlopen(url, timeout=10) as reply:
                        self.largest = max(self.largest, len(reply.read()))
                except OSError:
                    pass  # a job not there yet: 404
            self._done.wait(0.1)

    def stop(self) -> int:
        """Stop reading; the largest answer's size in bytes."""
        self._done.set()
        self._thread.join(15)
        return self.largest


if __name__ == "__main__":
    main()

"""`asyncoll`: the operator's command. `asyncoll status` shows a coordinator's jobs
(`--dump`: and asks their members to write out their flight recorders); `asyncoll trace
DIR` shows who waits for whom in the flight recorder dumps in DIR."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict

from asyncoll import _auth
from asyncoll._compat import loop_factory
from asyncoll._version import add_version_option
from asyncoll._stdout import ends_quietly_on_a_closed_pipe
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._runtime.settings import tls_from_environment
from asyncoll._defaults import DEFAULT_PORT
from asyncoll._rendezvous.stragglers import Straggler
from asyncoll._wire.messages import DumpTrace, JobStatus, Status, StatusReply, StragglerStatus
from asyncoll._wire.endpoint import join_host_port, split_host_port
from asyncoll.errors import (
    AsyncollError,
    ConfigurationError,
    RendezvousError,
    RendezvousTimeoutError,
)

_COLUMNS = ("JOB", "STATE", "RANK", "HOST", "DATA ADDRESS", "PID", "MEMBER", "GROUPS", "OPS",
            "HEARTBEAT", "OPERATION")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncoll", description=__doc__)
    add_version_option(parser, "asyncoll")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="show the jobs a coordinator serves")
    status.add_argument("--coordinator", default=f"127.0.0.1:{DEFAULT_PORT}",
                        metavar="HOST:PORT", help=f"default 127.0.0.1:{DEFAULT_PORT}; an IPv6 "
                        "address goes in brackets: [::1]:29500")
    status.add_argument("--job", default="", help="only this job")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--stragglers", action="store_true",
                        help="print each group's straggler instead: the rank its other "
                             "members wait for, from the heartbeats' sampled arrival times")
    status.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the coordinator's answer (default 5); a "
                             "refused connection fails at once")
    status.add_argument("--token-file",
                        help="file holding the coordinator's shared secret (default: "
                             "ASYNCOLL_TOKEN, if set)")
    status.add_argument("--dump", action="store_true",
                        help="also ask every running member to write out its flight "
                        "recorder (to its ASYNCOLL_TRACE_DIR)")
    trace = commands.add_parser("trace", help="show the last operation of every rank in "
                                "a folder of flight recorder dumps, and who waits for whom")
    trace.add_argument("directory", help="the dumps' folder (ASYNCOLL_TRACE_DIR)")
    return parser


async def _fetch(host: str, port: int, job: str, timeout: float, token: bytes | None,
                 dump: bool = False) -> tuple[JobStatus, ...]:
    # Only a client: a CA alone is enough to check the coordinator's certificate.
    tls = tls_from_environment(os.environ, listens=False)
    where = join_host_port(host, port)
    try:
        # Not patient: a coordinator asked for its status should be running already.
        client = await CoordinatorClient.connect(host, port, timeout, token, tls=tls,
                                                 patient=False)
    except RendezvousTimeoutError as exc:
        if not isinstance(exc.__cause__, OSError):
            raise  # the handshake's, not the connection's: its own words say it
        raise RendezvousTimeoutError(
            f"no coordinator answered at {where} within {timeout:g} s (last error: "
            f"{exc.__cause__}); give its address with --coordinator HOST:PORT, or a "
            "longer --timeout") from exc
    except RendezvousError as exc:
        if not isinstance(exc.__cause__, ConnectionRefusedError):
            raise
        raise RendezvousError(f"{exc}: is asyncoll-coordinator running there? Give its "
                              "address with --coordinator HOST:PORT") from exc
    try:
        request = DumpTrace(job=job) if dump else Status(job=job)
        reply = await client.request(request, timeout, "status")
    finally:
        await client.close()
    assert isinstance(reply, StatusReply)
    return reply.jobs


def table(jobs: Sequence[JobStatus]) -> str:
    """The jobs as a text table, one row per member."""
    rows = [_COLUMNS]
    for job in jobs:
        # The generation counts an elastic job's membership changes (reconfigures).
        state = (f"{job.state} {len(job.members)}/{job.world_size} gen {job.generation} "
                 f"{job.age_s:.0f}s")
        # Each rank's groups, in one pass over the groups' members (not one per rank).
        groups_of: dict[int, list[str]] = {}
        for g in job.groups:
            for rank in g.ranks:
                groups_of.setdefault(rank, []).append(str(g.group_id))
        for m in job.members:
            groups = ",".join(groups_of.get(m.rank, ())) if m.rank >= 0 else ""
            beat = f"{m.heartbeat_age_s:.1f}s ago" if m.heartbeat_age_s >= 0 else "-"
            rows.append((job.job, state, str(m.rank) if m.rank >= 0 else "-", m.hostname,
                         join_host_port(m.host, m.port), str(m.pid), m.state, groups or "-",
                         str(m.ops) if m.ops >= 0 else "-", beat, m.operation or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if not jobs:
        lines.append("(no jobs)")
    lines += [f"! job {job.job}: {line}" for job in jobs for line in job.stuck]
    return "\n".join(lines)


def straggler_lines(jobs: Sequence[JobStatus]) -> str:
    """Each job's stragglers in words, one line each (or that it has none)."""
    lines = []
    for job in jobs:
        found = [_straggler_text(s) for s in job.stragglers]
        lines += [f"job {job.job}: {text}" for text in found] or [
            f"job {job.job}: no straggler"]
    return "\n".join(lines) if lines else "(no jobs)"


def _straggler_text(s: StragglerStatus) -> str:
    return Straggler(s.group_id, s.rank, s.last, s.operations, s.median_late_s * 1e6).text()


@ends_quietly_on_a_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `asyncoll`."""
    args = _parser().parse_args(argv)
    if args.command == "trace":
        return _trace(args.directory)
    try:
        host, port = split_host_port(args.coordinator, "--coordinator")
        token = (_auth.read_token_file(args.token_file) if args.token_file else
                 _auth.token_from_environment(os.environ))
    except ConfigurationError as exc:
        print(f"asyncoll: {exc}", file=sys.stderr)
        return 2
    loop = loop_factory()()
    try:
        jobs = loop.run_until_complete(_fetch(host, port, args.job, args.timeout, token,
                                              args.dump))
    except AsyncollError as exc:
        print(f"asyncoll: {exc}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    if args.json:
        print(json.dumps([asdict(job) for job in jobs], indent=2))
    elif args.stragglers:
        print(straggler_lines(jobs))
    else:
        print(table(jobs))
    if args.dump:
        asked = sum(1 for job in jobs for m in job.members if m.state == "running")
        print(f"asked {asked} running members to write out their flight recorders",
              file=sys.stderr)
    return 0


def _trace(directory: str) -> int:
    """`asyncoll trace DIR`: the table of who waits for whom, from the dumps in DIR."""
    import pickle

    from asyncoll._group import flight, waits  # the data plane's: loaded only here

    try:
        dumps = flight.read_dir(directory)
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        print(f"asyncoll: cannot read the flight recorder dumps in {directory}: {exc}",
              file=sys.stderr)
        return 1
    if not dumps:
        print(f"asyncoll: {directory} holds no flight recorder dump (files named "
              f"{flight.PREFIX}<rank>)", file=sys.stderr)
        return 1
    print(waits.summary(dumps))
    return 0

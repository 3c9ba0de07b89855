"""``asyncoll``: the operator's command. ``asyncoll status`` shows a coordinator's jobs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict

from asyncoll import _auth
from asyncoll._compat import loop_factory
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._runtime.settings import tls_from_environment
from asyncoll._defaults import DEFAULT_PORT
from asyncoll._wire.messages import JobStatus, Status, StatusReply
from asyncoll._wire.endpoint import join_host_port, split_host_port
from asyncoll.errors import AsyncollError, ConfigurationError

_COLUMNS = ("JOB", "STATE", "RANK", "HOST", "DATA ADDRESS", "PID", "MEMBER", "GROUPS", "OPS",
            "HEARTBEAT")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncoll", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="show the jobs a coordinator serves")
    status.add_argument("--coordinator", default=f"127.0.0.1:{DEFAULT_PORT}",
                        metavar="HOST:PORT", help=f"default 127.0.0.1:{DEFAULT_PORT}; an IPv6 "
                        "address goes in brackets: [::1]:29500")
    status.add_argument("--job", default="", help="only this job")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the coordinator (default 5)")
    return parser


async def _fetch(host: str, port: int, job: str, timeout: float) -> tuple[JobStatus, ...]:
    # Only a client: a CA alone is enough to check the coordinator's certificate.
    client = await CoordinatorClient.connect(host, port, timeout,
                                             _auth.token_from_environment(os.environ),
                                             tls_from_environment(os.environ, listens=False))
    try:
        reply = await client.request(Status(job=job), timeout, "status")
    finally:
        await client.close()
    assert isinstance(reply, StatusReply)
    return reply.jobs


def table(jobs: Sequence[JobStatus]) -> str:
    """The jobs as a text table, one row per member."""
    rows = [_COLUMNS]
    for job in jobs:
        # An elastic job's generation counts its membership changes (reconfigures).
        generation = f" gen {job.generation}" if job.elastic else ""
        state = f"{job.state} {len(job.members)}/{job.world_size}{generation} {job.age_s:.0f}s"
        for m in job.members:
            groups = ",".join(str(g.group_id) for g in job.groups if m.rank in g.ranks)
            beat = f"{m.heartbeat_age_s:.1f}s ago" if m.heartbeat_age_s >= 0 else "-"
            rows.append((job.job, state, str(m.rank) if m.rank >= 0 else "-", m.hostname,
                         join_host_port(m.host, m.port), str(m.pid), m.state, groups or "-",
                         str(m.ops) if m.ops >= 0 else "-", beat))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if not jobs:
        lines.append("(no jobs)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``asyncoll``."""
    args = _parser().parse_args(argv)
    try:
        host, port = split_host_port(args.coordinator, "--coordinator")
    except ConfigurationError as exc:
        print(f"asyncoll: {exc}", file=sys.stderr)
        return 2
    loop = loop_factory()()
    try:
        jobs = loop.run_until_complete(_fetch(host, port, args.job, args.timeout))
    except AsyncollError as exc:
        print(f"asyncoll: {exc}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    if args.json:
        print(json.dumps([asdict(job) for job in jobs], indent=2))
    else:
        print(table(jobs))
    return 0

"""`asyncoll-coordinator`: run the coordinator daemon until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence

from asyncoll import _auth
from asyncoll._compat import loop_factory
from asyncoll._defaults import DEFAULT_PORT
from asyncoll._rendezvous.directory import PORTS_IN_WELCOME_UP_TO
from asyncoll._tls import context as tls_context
from asyncoll._wire.endpoint import host_literal, is_loopback, join_host_port
from asyncoll.coordinator.admission import raise_descriptor_limit
from asyncoll.coordinator.probe import probe
from asyncoll.coordinator.server import Coordinator
from asyncoll.errors import ConfigurationError
from asyncoll._version import add_version_option
from asyncoll._stdout import ends_quietly_on_a_closed_pipe

log = logging.getLogger("asyncoll.coordinator")

#: The daemon's garbage collector thresholds (gc.set_threshold). CPython's defaults
#: (700, 10, 10) suit a program of a few thousand objects; the daemon keeps a few
#: dozen per member, which its collector traversed again and again as thousands
#: joined. Its state holds few reference cycles, so collecting rarer costs little
#: memory (benchmarks/scale.py; docs/design/coordinator-scale.md).
GC_THRESHOLDS = (50_000, 20, 100)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncoll-coordinator",
        description="Run the asyncoll coordinator daemon: rendezvous, groups and barriers "
                    "for any number of jobs.")
    add_version_option(parser, "asyncoll-coordinator")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; 0.0.0.0 for every IPv4 "
                             "interface, :: for every interface, ::1 for IPv6 loopback)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to bind (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--port-file",
                        help="write the bound port to this file once listening (for --port 0)")
    parser.add_argument("--token-file",
                        help="file holding the shared secret every peer must prove "
                             "(default: ASYNCOLL_TOKEN, if set)")
    parser.add_argument("--http-port", type=int, default=None,
                        help="serve the dashboard on http://HTTP_HOST:PORT/, the same facts "
                             "as JSON on /api/..., and Prometheus metrics on /metrics (with "
                             "prometheus_client); under the coordinator's token and TLS (0 "
                             "picks a free one)")
    parser.add_argument("--http-host", default="127.0.0.1",
                        help="address the dashboard binds (default 127.0.0.1: this host only; "
                             "put it behind a reverse proxy, or give 0.0.0.0 with a token; "
                             "without one, other hosts get /metrics only, see --http-public)")
    parser.add_argument("--http-public", action="store_true",
                        help="without a token, show the dashboard and /api to every client "
                             "that reaches the HTTP port, not only to this host's (/metrics "
                             "answers every client in any case)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="answer only HTTP requests whose Host is NAME (repeat it for "
                             "several names, without ports; others get 421), against DNS "
                             "rebinding; default: any Host")
    parser.add_argument("--http-port-file",
                        help="write the bound dashboard port to this file once listening")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="the same server on --host (its old name; needs "
                             "prometheus_client)")
    parser.add_argument("--metrics-port-file",
                        help="write the bound metrics port to this file once listening")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help="this coordinator's certificate: TLS on every connection "
                             "(default: ASYNCOLL_TLS_CERT, if set)")
    parser.add_argument("--tls-key", metavar="PEM",
                        help="the certificate's private key (default: ASYNCOLL_TLS_KEY)")
    parser.add_argument("--tls-ca", metavar="PEM",
                        help="the CA that signed every peer's certificate: mutual TLS, "
                             "peers without such a certificate are refused (default: "
                             "ASYNCOLL_TLS_CA)")
    parser.add_argument("--ports-in-welcome-up-to", type=int, default=PORTS_IN_WELCOME_UP_TO,
                        metavar="N",
                        help="a job of more than N ranks learns its members' data ports on "
                             "demand, not all in the rendezvous reply, which would grow with "
                             f"N for each member (default {PORTS_IN_WELCOME_UP_TO})")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--probe", action="store_true",
                        help="serve nothing: check that a coordinator on --host:--port "
                             "greets (exit 0) or not (exit 1, saying why), reading its "
                             "greeting and closing cleanly, which it does not log: a health "
                             "check (a coordinator without TLS)")
    return parser


def _write_port_file(path: str, port: int) -> None:
    # Write then rename, so a reader never sees a half-written file.
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as tmp:
        tmp.write(f"{port}\n")
    os.replace(tmp.name, path)


def open_ports(rendezvous: tuple[str, int], http: tuple[str, int, bool] | None,
               guarded: bool) -> list[str]:
    """Each port open to the network without a shared secret, in words: the rendezvous
    port (host, port) and the HTTP one (host, port, --http-public), where not on loopback;
    none where every client must prove a token or a certificate (`guarded`)."""
    if guarded:
        return []
    found = []
    if not is_loopback(rendezvous[0]):
        found.append(f"the rendezvous port {join_host_port(*rendezvous)}, where anyone who "
                     "reaches it can join any job, read its addresses and disturb it")
    if http is not None and not is_loopback(http[0]):
        served = ("the dashboard, /api and /metrics to every client (--http-public)"
                  if http[2] else "/metrics to every client, the dashboard and /api to "
                  "this host only (--http-public would open them)")
        found.append(f"the HTTP port {join_host_port(http[0], http[1])}, which serves "
                     f"{served}")
    return found


def _tls(args: argparse.Namespace) -> tls_context.Tls | None:
    """TLS as the flags say, each flag not given taken from its ASYNCOLL_TLS_* variable."""
    settings = tls_context.TlsSettings.from_environment({
        tls_context.CERT_VARIABLE: args.tls_cert or os.environ.get(tls_context.CERT_VARIABLE, ""),
        tls_context.KEY_VARIABLE: args.tls_key or os.environ.get(tls_context.KEY_VARIABLE, ""),
        tls_context.CA_VARIABLE: args.tls_ca or os.environ.get(tls_context.CA_VARIABLE, "")})
    return tls_context.load(settings) if settings is not None else None


async def _serve(args: argparse.Namespace) -> int:
    try:
        host = host_literal(args.host, "--host")
        token = (_auth.read_token_file(args.token_file) if args.token_file
                 else _auth.token_from_environment(os.environ))
        tls = _tls(args)
    except ConfigurationError as exc:
        log.error("%s", exc)
        return 2
    try:
        coordinator = Coordinator(host, args.port, token, tls, metrics_port=args.metrics_port,
                                  ports_in_welcome_up_to=args.ports_in_welcome_up_to,
                                  http_port=args.http_port,
                                  http_host=host_literal(args.http_host, "--http-host"),
                                  allowed_hosts=args.allowed_host,
                                  http_public=args.http_public)
        await coordinator.start()
    except ConfigurationError as exc:
        log.error("%s", exc)
        return 2
    except OSError as exc:
        log.error("cannot listen on %s: %s", join_host_port(host, args.port), exc)
        await coordinator.stop()
        return 1
    guarded = token is not None or (tls is not None and tls.mutual)
    http = coordinator.http
    exposed = open_ports((host, coordinator.port), None if http is None else (
        http.host, http.port, args.http_public), guarded)
    if exposed:
        log.warning("*** open to the network WITHOUT a shared secret: %s. Pass --token-file "
                    "(and give the workers ASYNCOLL_TOKEN) unless this network is trusted. ***",
                    "; ".join(exposed))
    if args.port_file:
        _write_port_file(args.port_file, coordinator.port)
    for port_file in (args.metrics_port_file, args.http_port_file):
        if port_file and coordinator.http is not None:
            _write_port_file(port_file, coordinator.http.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received; shutting down")
    await coordinator.stop()
    return 0


def _probe(host: str, port: int) -> int:
    failure = probe(host, port)
    if failure is not None:
        print(f"asyncoll-coordinator --probe: {failure}", file=sys.stderr)
        return 1
    print(f"a coordinator greets on {join_host_port(host, port)}")
    return 0


@ends_quietly_on_a_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `asyncoll-coordinator`."""
    args = _parser().parse_args(argv)
    if args.probe:
        return _probe(args.host, args.port)
    gc.set_threshold(*GC_THRESHOLDS)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Each connection is a descriptor: 1024, a common soft limit, is few for a
    # daemon of many jobs, while the hard limit is often far higher.
    raised = raise_descriptor_limit()
    if raised is not None:
        log.info("raised the open-files limit from %d to %d", *raised)
    loop = loop_factory()()
    try:
        return loop.run_until_complete(_serve(args))
    finally:
        loop.close()

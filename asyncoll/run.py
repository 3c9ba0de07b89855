"""`asyncoll-run`: start N worker processes of one job, as torchrun does.

```bash
asyncoll-run --nproc-per-node 4 train.py --epochs 3
asyncoll-run --nproc-per-node 2 --coordinator 10.0.0.5:29500 -m mypkg.worker

# two machines, 4 workers each; node 0 hosts the coordinator
asyncoll-run --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr 10.0.0.5 train.py
asyncoll-run --nnodes 2 --node-rank 1 --nproc-per-node 4 --coordinator 10.0.0.5:29500 train.py
```

Without `--coordinator` an embedded coordinator is started on a free port of
this machine (torchrun's `--standalone` says the same, and is accepted). Each
worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
ASYNCOLL_COORDINATOR (the coordinator's HOST:PORT), ASYNCOLL_JOB_ID,
MASTER_ADDR and MASTER_PORT; MASTER_PORT is a different, free port (the
coordinator's + 1 with several nodes), so a torch.distributed program, whose
rank 0 binds its store there, runs unchanged too. Its output passes through
asyncoll-run a whole line at a time, in order per worker, so that lines of
workers printing at once never mix (`--prefix`: each line starts `[rank N]`);
workers get PYTHONUNBUFFERED=1 unless it is set, so that a Python worker's
lines come out as it prints them. When a worker fails, the others are stopped
and asyncoll-run exits non-zero, saying which rank failed and how.

Where the workers' OpenMP threads would outnumber this machine's processors
(several workers, and OMP_NUM_THREADS unset, as torch then takes a thread per
core in each, or set that high), they get OMP_WAIT_POLICY=PASSIVE unless it
is set: an OpenMP thread that spins between torch's parallel regions takes
the processor from another worker's compute and from its collectives
(docs/guides/benchmarks.md, "A DDP step": 2 ranks of 2 threads each on 2
processors took 2-3x as long per step with the spinning default).

With `--max-restarts N` (torchrun's name) the job is elastic
(ASYNCOLL_ELASTIC=1 for every worker) and a worker that fails is not the
end: the others go on (the program calls asyncoll.reconfigure(), see
examples/elastic_training.py) and asyncoll-run starts one replacement, which
joins the running job and is admitted at its next reconfigure; up to N
replacements in all, then a failure stops the job as before. Elastic jobs
need the coordinator to outlive every worker: asyncoll-run's own, or a daemon.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from asyncoll import _auth, _native
from asyncoll._runtime import hosting
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.settings import tls_from_environment
from asyncoll._defaults import DEFAULT_JOB_ID, DEFAULT_PORT, EMBEDDED_DRAIN_TIMEOUT_S
from asyncoll._relay import LineRelay
from asyncoll._transport.shm import segment as shm
from asyncoll._wire.endpoint import host_literal, join_addresses, join_host_port, split_addresses
from asyncoll.coordinator import Coordinator
from asyncoll.errors import ConfigurationError
from asyncoll._version import add_version_option
from asyncoll._stdout import ends_quietly_on_a_closed_pipe

#: Seconds the other workers get to exit after SIGTERM before SIGKILL.
_GRACE_S = 5.0
#: Seconds a worker's output may still come after it exited (from a process it
#: started, which holds its pipes) before asyncoll-run stops relaying it.
_OUTPUT_GRACE_S = 1.0
_POLL_S = 0.05


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncoll-run",
        description="Start the worker processes of an asyncoll job on this machine.")
    add_version_option(parser, "asyncoll-run")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                        help="number of worker processes to start (default 1)")
    parser.add_argument("--nnodes", type=int, default=1,
                        help="number of machines in the job, each running asyncoll-run "
                             "(default 1)")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0,
                        help="this machine's index, 0 to nnodes-1 (default 0)")
    parser.add_argument("--standalone", action="store_true",
                        help="one machine, on an embedded coordinator on a free port, as "
                             "torchrun's --standalone (what asyncoll-run does on one node "
                             "without --coordinator anyway)")
    parser.add_argument("--coordinator", metavar="HOST:PORT[,HOST:PORT...]",
                        help="use this coordinator instead of starting an embedded one "
                             "(required on every node but node 0); an IPv6 address goes in "
                             "brackets: [::1]:29500. Several, comma-separated: the workers "
                             "move to the next when one cannot be reached, and a restarted "
                             "one takes the job back")
    parser.add_argument("--master-addr", default=None,
                        help="address the embedded coordinator binds and the workers use "
                             "(IPv4, IPv6 such as ::1, or a host name); with --nnodes > 1 it "
                             "must be node 0's address that the other nodes reach (default "
                             "127.0.0.1 on one node)")
    parser.add_argument("--master-port", type=int, default=None,
                        help=f"port of the embedded coordinator (default: a free one on one "
                             f"node, {DEFAULT_PORT} with --nnodes > 1)")
    parser.add_argument("--token-file",
                        help="file holding the job's shared secret: the embedded coordinator "
                             "requires it and the workers get it as ASYNCOLL_TOKEN")
    parser.add_argument("--max-restarts", "--max_restarts", type=int, default=0,
                        help="make the job elastic and replace a worker that fails, up to "
                             "this many times; each replacement joins the running job "
                             "(default 0: a failure stops the job)")
    parser.add_argument("--job-id", help="job id on the coordinator (default: unique per run "
                                         f"on one node, {DEFAULT_JOB_ID!r} with --nnodes > 1)")
    parser.add_argument("--prefix", action="store_true",
                        help="start each line a worker prints with [rank N] (default: "
                             "the lines as the workers print them)")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run the target as a module, as python -m does")
    # Optional for argparse, so that no arguments get a usage line of asyncoll-run's own
    # (_check), not "the following arguments are required: script, script_args".
    parser.add_argument("script", nargs="?", help="the worker program (or module, with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, default=[],
                        help="arguments passed to every worker")
    return parser


def _openmp_waits(workers: int, environ: Mapping[str, str], processors: int) -> dict[str, str]:
    """OMP_WAIT_POLICY=PASSIVE where `workers` on `processors` would run more OpenMP
    threads than processors and the variable is unset; else nothing."""
    if workers < 2 or "OMP_WAIT_POLICY" in environ:
        return {}
    try:
        threads = int(environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        threads = processors  # unset (torch's default: one a core) or not a number
    return {"OMP_WAIT_POLICY": "PASSIVE"} if workers * threads > processors else {}


def _split_address(text: str) -> tuple[tuple[str, int], ...]:
    try:
        return split_addresses(text, "--coordinator")
    except ConfigurationError as exc:
        raise SystemExit(f"asyncoll-run: {exc}") from exc


def _free_port(host: str) -> int:
    """A port of `host` that nothing listens on now (torch's store binds it later).

    It is taken below the kernel's ephemeral range where it can: until rank 0
    listens there, another rank's attempt to connect could otherwise get the
    same port as its source port and connect to itself.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = _ephemeral_low()
    for port in [random.randrange(max(1024, low - 12000), low) for _ in range(50)] + [0]:
        with socket.socket(family) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                if port == 0:  # a --coordinator on another machine: any port here
                    sock.bind(("", 0))
                else:
                    continue
            return int(sock.getsockname()[1])
    raise AssertionError("unreachable: binding port 0 either works or raises")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _describe(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_any(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes] | None:
    """Block until some running worker exits; return it (reaped), or None if none runs."""
    running = {p.pid: p for p in procs if p.returncode is None}
    if not running:
        return None
    if hasattr(os, "waitid"):
        # Wait without reaping, so Popen still reaps and records the status
        # itself; the first worker to exit is the one reported.
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        proc = running.get(info.si_pid) if info is not None else None
        if proc is not None:
            proc.wait()
            return proc
    while True:
        for proc in running.values():
            if proc.poll() is not None:
                return proc
        time.sleep(_POLL_S)


def _supervise(procs: list[subprocess.Popen[bytes]],
               replace: Callable[[int], subprocess.Popen[bytes]] | None = None,
               restarts: int = 0,
               exited: Callable[[subprocess.Popen[bytes]], None] = lambda proc: None) -> int:
    """Wait for every worker; on the first failure stop the rest. Return the exit code.

    With `replace`, the first `restarts` failures start `replace(slot)` in the
    failed worker's place instead. `exited(proc)` runs as each worker is found
    to have exited, before anything is said of it.
    """
    while (proc := _wait_any(procs)) is not None:
        exited(proc)
        code = proc.returncode
        if code != 0 and replace is not None and restarts > 0:
            restarts -= 1
            slot = procs.index(proc)
            procs[slot] = replace(slot)
            print(f"asyncoll-run: worker {slot} (pid {proc.pid}) {_describe(code)}; started "
                  f"pid {procs[slot].pid} to join the running job in its place ({restarts} "
                  "restart(s) left)", file=sys.stderr, flush=True)
            continue
        if code != 0:
            rank = procs.index(proc)
            others = sum(1 for p in procs if p.poll() is None)
            print(f"asyncoll-run: rank {rank} (pid {proc.pid}) {_describe(code)}; "
                  f"stopping the {others} other running worker(s)", file=sys.stderr,
                  flush=True)
            _stop(procs)
            return code if code > 0 else 128 - code
    return 0


def _check(args: argparse.Namespace) -> None:
    if args.script is None:
        raise SystemExit("asyncoll-run: name the worker program to start, as in\n"
                         "  asyncoll-run --nproc-per-node 4 train.py --epochs 3\n"
                         "(asyncoll-run --help lists the options)")
    if args.standalone and (args.coordinator or args.nnodes > 1
                            or args.master_port is not None):
        raise SystemExit("asyncoll-run: --standalone runs one machine's job on an embedded "
                         "coordinator on a free port: leave out --coordinator, --nnodes and "
                         "--master-port with it")
    if args.max_restarts < 0:
        raise SystemExit(f"asyncoll-run: --max-restarts must be 0 or more, got "
                         f"{args.max_restarts}")
    if args.nproc_per_node < 1:
        raise SystemExit(f"asyncoll-run: --nproc-per-node must be at least 1, got "
                         f"{args.nproc_per_node}")
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        raise SystemExit(f"asyncoll-run: --node-rank {args.node_rank} must be between 0 and "
                         f"--nnodes - 1 ({args.nnodes - 1})")
    if args.coordinator is None and args.node_rank > 0:
        raise SystemExit("asyncoll-run: every node but node 0 needs --coordinator HOST:PORT "
                         "(node 0's --master-addr and --master-port)")
    if args.coordinator is None and args.nnodes > 1 and args.master_addr is None:
        raise SystemExit("asyncoll-run: with --nnodes > 1, node 0 needs --master-addr: the "
                         "address of this machine that the other nodes reach")


def _start_coordinator(args: argparse.Namespace, token: bytes | None) -> Coordinator:
    try:
        host = host_literal(args.master_addr or "127.0.0.1", "--master-addr")
        # The workers inherit the ASYNCOLL_TLS_* variables; the coordinator they
        # reach must speak TLS as they do.
        tls = tls_from_environment(os.environ)
    except ConfigurationError as exc:
        raise SystemExit(f"asyncoll-run: {exc}") from exc
    port = args.master_port if args.master_port is not None else (
        DEFAULT_PORT if args.nnodes > 1 else 0)
    try:
        return runtime().run(hosting.start(host, port, token, tls))
    except OSError as exc:
        raise SystemExit(f"asyncoll-run: cannot start a coordinator on "
                         f"{join_host_port(host, port)}: {exc}") from exc


@ends_quietly_on_a_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `asyncoll-run`."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="asyncoll-run: %(name)s: %(message)s")
    _check(args)
    token = _auth.token_from_environment(os.environ)
    #: What every worker gets on top of this process's environment.
    passed: dict[str, str] = {}
    if _native.missing():
        # Said once for the job, here, instead of by every worker.
        print(f"asyncoll-run: {_native.MISSING_WORDS}", file=sys.stderr, flush=True)
        passed[_native.ENVIRONMENT] = "1"
    if args.token_file:
        try:
            token = _auth.read_token_file(args.token_file)
        except ConfigurationError as exc:
            raise SystemExit(f"asyncoll-run: {exc}") from exc
        passed[_auth.TOKEN_VARIABLE] = token.decode(errors="surrogateescape")
    embedded: Coordinator | None = None
    if args.coordinator:
        coordinators = _split_address(args.coordinator)
    else:
        embedded = _start_coordinator(args, token)
        coordinators = ((embedded.host, embedded.port),)
    host, port = coordinators[0]
    default_job = (DEFAULT_JOB_ID if args.nnodes > 1 else
                   f"run-{socket.gethostname()}-{os.getpid()}-{time.time_ns()}")
    job = args.job_id or default_job
    # MASTER_PORT is for a torch program's store (torch.distributed with any
    # backend), which rank 0 binds: not the coordinator's port. Every node
    # must agree on it, so with several nodes it is the coordinator's + 1.
    store_port = _free_port(host) if args.nnodes == 1 else port + 1
    target = ["-m", args.script] if args.module else [args.script]
    n = args.nproc_per_node
    passed.update(_openmp_waits(n, os.environ, len(os.sched_getaffinity(0))))
    world_size = n * args.nnodes
    procs: list[subprocess.Popen[bytes]] = []
    relay = LineRelay(args.prefix)
    # Workers stop on SIGTERM; the launcher forwards SIGINT/SIGTERM to them.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def forward(signum: int, frame: object) -> None:
        print(f"asyncoll-run: got {signal.Signals(signum).name}; stopping the workers",
              file=sys.stderr, flush=True)
        _stop(procs)
        raise SystemExit(128 + signum)

    try:
        for sig in previous:
            signal.signal(sig, forward)
        if args.max_restarts:
            passed["ASYNCOLL_ELASTIC"] = "1"

        def worker(local: int, replacement: bool = False) -> subprocess.Popen[bytes]:
            env = dict(os.environ, **passed, RANK=str(args.node_rank * n + local),
                       LOCAL_RANK=str(local), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(n),
                       GROUP_RANK=str(args.node_rank), MASTER_ADDR=host,
                       MASTER_PORT=str(store_port), ASYNCOLL_JOB_ID=job,
                       ASYNCOLL_COORDINATOR=join_addresses(coordinators))
            env.setdefault("PYTHONUNBUFFERED", "1")
            if replacement:
                del env["RANK"]  # the job numbers it when it admits it
            proc = subprocess.Popen([sys.executable, *target, *args.script_args], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            runtime().run(relay.attach(proc, env.get("RANK", f"? (replacing {local})")))
            return proc

        def relayed(proc: subprocess.Popen[bytes]) -> None:
            runtime().run(relay.finish([proc.pid], _OUTPUT_GRACE_S))

        procs.extend(worker(local) for local in range(n))
        code = _supervise(procs, lambda slot: worker(slot, replacement=True),
                          args.max_restarts, relayed)
        if embedded is not None and code == 0:
            # Workers of other nodes may still be leaving: let them.
            runtime().run(embedded.wait_until_idle(job, EMBEDDED_DRAIN_TIMEOUT_S))
        return code
    finally:
        _stop(procs)
        runtime().run(relay.finish_all(_OUTPUT_GRACE_S))
        # A worker killed between making a shared-memory ring and its peer
        # mapping it leaves the segment behind; no one else would remove it.
        for name in shm.sweep([proc.pid for proc in procs]):
            print(f"asyncoll-run: removed /dev/shm/{name}, left by a worker that died",
                  file=sys.stderr, flush=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if embedded is not None:
            runtime().run(embedded.stop())


if __name__ == "__main__":
    sys.exit(main())

"""A torchft training program, and the harness that kills one of its replicas and restarts it.

``python torchft_train.py replica BACKEND ID LIGHTHOUSE STEPS REPLICAS DIE_AT COMPUTE GO
WIDTH`` is one replica group of one process: a two-layer model WIDTH wide
under torchft's Manager, which averages its gradients with torchft's
allreduce, on ``ProcessGroupAsyncoll`` (BACKEND "asyncoll") or torchft's
``ProcessGroupGloo`` ("gloo"); each step sleeps COMPUTE seconds (a forward
pass worth the name). The first replicas wait for the file GO ("-": none).
It trains until it commits step STEPS or later with all REPLICAS replicas
taking part, printing one JSON line per step (committed or thrown away) and
its final parameters; at step DIE_AT (-1: never), or the first step after it
that all replicas took part in, it kills itself with SIGKILL before its
backward pass, while the others wait for its gradients.

(torchft 0.2.0's DistributedDataParallel is not used: its communication hook
fails with an AssertionError when an allreduce fails, on gloo as on asyncoll,
and the survivor dies with the replica it lost.)

``scenario()`` runs REPLICAS of them around a lighthouse of its own, restarts
the killed one at once, and measures what the test and the benchmark
(benchmarks/torchft_recovery.py) report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve()
#: The lighthouse's heartbeat timeout: how soon it forms a quorum without a dead replica.
HEARTBEAT_TIMEOUT_MS = 1000
#: A replica trains at most this many times STEPS before it gives up waiting for the others.
GIVE_UP_FACTOR = 40


def emit(**event: object) -> None:
    print(json.dumps({"t": time.time(), **event}), flush=True)


def replica(backend: str, ident: int, lighthouse: str, steps: int, replicas: int,
            die_at: int, compute_s: float, go: str, width: int) -> None:
    import torch
    from torch import nn
    from torch.distributed import TCPStore
    from torch.nn.utils import parameters_to_vector, vector_to_parameters
    from torchft import Manager, ProcessGroupGloo

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if backend == "asyncoll":
        from asyncoll.torchft import ProcessGroupAsyncoll
        pg = ProcessGroupAsyncoll(timeout=timedelta(seconds=10))
    else:
        pg = ProcessGroupGloo(timeout=timedelta(seconds=10))
    configure = pg.configure

    def timed_configure(*args: object, **kwargs: object) -> None:
        began = time.monotonic()
        configure(*args, **kwargs)
        emit(event="configured", seconds=time.monotonic() - began)

    pg.configure = timed_configure  # what making each quorum's group takes
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=pg, min_replica_size=1,
        load_state_dict=lambda state: (model.load_state_dict(state["model"]),
                                       optimizer.load_state_dict(state["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": optimizer.state_dict()},
        replica_id=f"replica_{ident}", lighthouse_addr=lighthouse,
        store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
        timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=30))
    emit(event="ready")
    # The first replicas start together (the harness says when all are ready), so that
    # the first quorum has them all.
    started = time.monotonic()
    while go != "-" and not os.path.exists(go) and time.monotonic() - started < 60:
        time.sleep(0.01)
    together = False
    attempts = participants = 0
    while not together and attempts < GIVE_UP_FACTOR * steps:
        attempts += 1
        step = manager.current_step()
        data = torch.Generator().manual_seed(1000 * step + ident)
        inputs, target = torch.randn(32, 64, generator=data), torch.randn(32, 8, generator=data)
        optimizer.zero_grad()
        manager.start_quorum()
        loss = nn.functional.mse_loss(model(inputs), target)
        time.sleep(compute_s)  # the forward pass of a model worth training
        if 0 <= die_at <= step and participants == replicas:
            emit(event="dying", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()
        # The replicas' mean gradient; a failed allreduce is reported to the manager.
        grads = parameters_to_vector(p.grad for p in model.parameters())
        manager.allreduce(grads).wait()
        vector_to_parameters(grads, (p.grad for p in model.parameters()))
        committed = manager.should_commit()
        if committed:
            optimizer.step()
        participants = manager.num_participants()
        together = committed and participants == replicas and manager.current_step() >= steps
        emit(event="commit" if committed else "discard", step=step,
             participants=participants)
    emit(event="final", step=manager.current_step(),
         parameters=[p.detach().flatten().tolist() for p in model.parameters()])
    manager.shutdown(wait=False)
    pg.shutdown()


@dataclass
class Outcome:
    """What one scenario measured."""

    backend: str
    replicas: int
    #: Steps a replica took and threw away (should_commit said no), every process summed.
    thrown_away: int
    #: From the kill to the first step a survivor committed after it (s).
    stall_s: float
    #: From the kill to a survivor throwing its step away (s).
    detect_s: float
    #: The longest a survivor's configure took, for the quorum after the kill (s).
    configure_s: float
    #: From the restarted replica's Manager being ready to its first committed step (s).
    heal_s: float
    #: The median time between two committed steps of all replicas, before the kill (s).
    step_s: float
    #: Whether every replica ended with the same parameters.
    identical: bool
    #: How many replicas finished.
    finished: int


def _events(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.startswith("{")]


def scenario(backend: str, replicas: int, steps: int, kill_at: int, compute_s: float = 0.01,
             limit_s: float = 120.0, width: int = 256) -> Outcome:
    """Train ``replicas`` replicas of a model ``width`` wide on ``backend``; kill replica 0
    (the one hosting the quorum's coordinator) at step ``kill_at``, restart it at once;
    measure.

    Raises:
        RuntimeError: a replica failed or did not finish within ``limit_s``.
    """
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=200,
                                  heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    workdir = Path(tempfile.mkdtemp(prefix=f"torchft-{backend}-"))
    procs: dict[str, subprocess.Popen[bytes]] = {}

    go = workdir / "go"

    def start(ident: int, life: str, die_at: int, wait_for: str) -> None:
        log, err_log = workdir / f"{life}.log", workdir / f"{life}.err"
        with open(log, "wb") as out, open(err_log, "wb") as err:
            procs[life] = subprocess.Popen(
                [sys.executable, str(HERE), "replica", backend, str(ident), lighthouse.address(),
                 str(steps), str(replicas), str(die_at), str(compute_s), wait_for, str(width)],
                stdout=out, stderr=err)

    deadline = time.monotonic() + limit_s
    try:
        for ident in range(replicas):
            start(ident, f"r{ident}", kill_at if ident == 0 else -1, str(go))
        while not all(any(e["event"] == "ready" for e in _events(workdir / f"r{i}.log"))
                      for i in range(replicas)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                raise RuntimeError(f"{backend}: the replicas did not all start; logs in {workdir}")
            time.sleep(0.05)
        go.touch()
        procs["r0"].wait(timeout=limit_s)
        start(0, "r0-restarted", -1, "-")
        for life, proc in procs.items():
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if life != "r0" and code != 0:
                raise RuntimeError(f"{backend} replica {life} exited {code}: "
                                   f"{(workdir / f'{life}.err').read_text()[-3000:]}")
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{backend}: the replicas did not finish within {limit_s:g} s; "
                           f"logs in {workdir}") from exc
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lighthouse.shutdown()
    outcome = _outcome(backend, replicas,
                       {life: _events(workdir / f"{life}.log") for life in procs})
    shutil.rmtree(workdir)  # kept when something failed, for its logs
    return outcome


def _outcome(backend: str, replicas: int, lives: dict[str, list[dict[str, object]]]) -> Outcome:
    died = next(e for e in lives["r0"] if e["event"] == "dying")
    kill = float(died["t"])  # type: ignore[arg-type]
    survivors = [lives[f"r{i}"] for i in range(1, replicas)]
    # The survivors' steps from the one the replica died in: one committed later is a
    # step the replica no longer held up.
    after = [float(e["t"]) for events in survivors for e in events  # type: ignore[arg-type]
             if e["event"] == "commit" and int(e["step"]) >= int(died["step"])  # type: ignore
             and float(e["t"]) > kill]  # type: ignore[arg-type]
    detected = [float(e["t"]) for events in survivors for e in events  # type: ignore[arg-type]
                if e["event"] == "discard" and float(e["t"]) > kill]  # type: ignore[arg-type]
    configured = [float(e["seconds"]) for events in survivors for e in events  # type: ignore[arg-type]
                  if e["event"] == "configured" and float(e["t"]) > kill  # type: ignore[arg-type]
                  and (not after or float(e["t"]) < min(after))]
    restarted = lives["r0-restarted"]
    ready = next(float(e["t"]) for e in restarted if e["event"] == "ready")  # type: ignore[arg-type]
    joined = next(float(e["t"]) for e in restarted  # type: ignore[arg-type]
                  if e["event"] == "commit" and e["participants"] == replicas)
    before = [float(e["t"]) for e in lives["r1"]  # type: ignore[arg-type]
              if e["event"] == "commit" and e["participants"] == replicas
              and float(e["t"]) < kill]  # type: ignore[arg-type]
    finals = [e["parameters"] for events in [*survivors, restarted] for e in events
              if e["event"] == "final"]
    return Outcome(
        backend=backend, replicas=replicas,
        thrown_away=sum(e["event"] == "discard" for events in lives.values() for e in events),
        stall_s=min(after) - kill if after else float("inf"),
        detect_s=min(detected) - kill if detected else float("inf"),
        configure_s=max(configured, default=float("nan")),
        heal_s=joined - ready,
        step_s=statistics.median(b - a for a, b in zip(before, before[1:])),
        identical=len(finals) == replicas and all(f == finals[0] for f in finals),
        finished=len(finals))


if __name__ == "__main__" and sys.argv[1] == "replica":
    replica(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]),
            int(sys.argv[7]), float(sys.argv[8]), sys.argv[9], int(sys.argv[10]))

"""The coordinator as a real daemon process, with workers as real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from .conftest import WORKERS, Daemon, finish, free_port, stream_lines, start_probe

pytestmark = pytest.mark.timeout(120)


def test_daemon_serves_two_jobs_at_once_and_logs_joins_groups_and_leaves(daemon: Daemon):
    init = f"tcp://{daemon.address}"
    job_a = [start_probe("--init", init, "--world-size", "2", "--rank", str(r), "--job", "a")
             for r in range(2)]
    job_b = [start_probe("--init", init, "--world-size", "3", "--job", "b", "--group", "0,2")
             for _ in range(3)]
    outcomes_a = [finish(p) for p in job_a]
    outcomes_b = [finish(p) for p in job_b]
    assert sorted(out for _, out, _ in outcomes_a) == [
        "OK rank=0 world=2 sum=[3, 30]\n", "OK rank=1 world=2 sum=[3, 30]\n"]
    lines_b = sorted(out.strip() for _, out, _ in outcomes_b)
    assert lines_b[0] == "OK rank=0 world=3 sum=[4, 40]"
    assert lines_b[1] == "OK rank=1 world=3 sum=[2, 20]"  # not a member: untouched
    assert lines_b[2] == "OK rank=2 world=3 sum=[4, 40]"
    assert all(code == 0 for code, _, _ in outcomes_a + outcomes_b)
    daemon.wait_for_log("job 'b': every rank has left")
    log = daemon.log()
    assert "job 'a': rendezvous complete with 2 ranks" in log
    assert "job 'b': group 1 created with ranks [0, 2]" in log
    assert "job 'a': rank 1 on" in log and "left;" in log
    assert daemon.stop() == 0
    assert "coordinator on 127.0.0.1" in daemon.log() and "stopped" in daemon.log()


def test_daemon_exits_cleanly_on_sigint(daemon: Daemon):
    assert daemon.stop(signal.SIGINT) == 0
    assert "shutting down" in daemon.log()


def test_daemon_stops_on_sigterm_with_members_connected_without_waiting_out_a_deadline(
        daemon: Daemon, tmp_path):
    # A running job of 2 and a job still waiting for its third peer, all connected.
    stop_file = tmp_path / "stop"
    running = [subprocess.Popen([sys.executable, str(WORKERS / "steady.py"), daemon.address,
                                 "2", "running", str(stop_file)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    waiting = [start_probe("--init", f"tcp://{daemon.address}", "--world-size", "3",
                           "--job", "waiting") for _ in range(2)]
    try:
        daemon.wait_for_log("job 'running': rendezvous complete")
        daemon.wait_for_log("job 'waiting': peer from")
        assert daemon.stop() == 0
        log = daemon.log()
        assert "stopped" in log
        # Each deadline of the daemon's stop, had it expired, says so in a warning.
        assert "after they were closed" not in log and "still open" not in log, log
    finally:
        stop_file.touch()
        for proc in running + waiting:
            proc.kill()
            proc.communicate(timeout=20)


@pytest.mark.parametrize("bad, reason", [
    (("--world-size", "3", "--rank", "2"),
     "world size 3 disagrees with the world size 2 of the peers already in job 'default'"),
    (("--world-size", "2", "--rank", "5"),
     "requested rank 5 is out of range for world size 2: use 0 to 1"),
    (("--world-size", "2", "--rank", "0"), "rank 0 is already taken in job 'default'"),
])
def test_a_refused_rank_fails_the_waiting_ranks_within_2_s_naming_it_and_why(
        daemon: Daemon, bad: tuple[str, ...], reason: str):
    init = f"tcp://{daemon.address}"
    first = start_probe("--init", init, "--world-size", "2", "--rank", "0", "--timeout", "60")
    daemon.wait_for_log("1 of 2 present")
    assert first.stdout is not None
    said = stream_lines(first.stdout)
    refused = start_probe("--init", init, *bad)
    code, out, _ = finish(refused)
    assert code == 2 and out.startswith("ERROR ConfigurationError: ") and reason in out
    # The waiting rank was failed when the coordinator refused the other, before that
    # process printed and exited.
    out = said.get(timeout=2)
    assert finish(first)[0] == 2
    assert out.startswith(f"ERROR RendezvousError: the rendezvous of job 'default' failed: "
                          f"the coordinator refused a peer from {socket.gethostname()} (pid "
                          f"{refused.pid}) asking for rank {bad[3]} of world size {bad[1]}: ")
    assert reason in out


def test_an_elastic_rendezvous_goes_on_without_a_refused_process(daemon: Daemon):
    init = f"tcp://{daemon.address}"
    elastic = {"ASYNCOLL_ELASTIC": "1"}
    first = start_probe("--init", init, "--world-size", "2", "--rank", "0", env=elastic)
    daemon.wait_for_log("1 of 2 present")
    code, out, _ = finish(start_probe("--init", init, "--world-size", "3", env=elastic))
    assert code == 2 and "world size 3 disagrees with the world size 2" in out
    second = start_probe("--init", init, "--world-size", "2", "--rank", "1", env=elastic)
    assert finish(first)[:2] == (0, "OK rank=0 world=2 sum=[3, 30]\n")
    assert finish(second)[:2] == (0, "OK rank=1 world=2 sum=[3, 30]\n")


def test_an_out_of_range_rank_with_no_coordinator_fails_alone_within_seconds():
    code, out, _ = finish(start_probe("--init", f"tcp://127.0.0.1:{free_port()}",
                                      "--world-size", "2", "--rank", "5"), timeout=30)
    assert code == 2
    assert out.startswith("ERROR ConfigurationError: rank 5 is out of range for world size 2")
    assert "did not answer within 5 s, so the other ranks could not be told" in out


def test_rendezvous_timeout_tells_every_waiting_peer_who_is_present(daemon: Daemon):
    init = f"tcp://{daemon.address}"
    # Long enough for both processes to start and join on a loaded machine.
    procs = [start_probe("--init", init, "--world-size", "3", "--rank", str(r), "--timeout",
                         "5") for r in (0, 2)]
    for proc in procs:
        code, out, _ = finish(proc)
        assert code == 2
        assert out.startswith("ERROR RendezvousTimeoutError: rendezvous of job 'default' "
                              "timed out after")
        assert "2 of 3 peers joined (ranks 0, 2 present); 1 missing" in out


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the daemon sends until it closes the connection (5 s at most)."""
    sock.settimeout(5)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_daemon_survives_a_client_that_sends_garbage(daemon: Daemon):
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x05hello")
        assert b"protocol" in read_until_closed(sock)
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as sock:
        sock.sendall(b"\xff\xff\xff\xff")
        assert b"over the limit" in read_until_closed(sock)
    procs = [start_probe("--init", f"tcp://{daemon.address}", "--world-size", "2")
             for _ in range(2)]
    assert sorted(finish(p)[0] for p in procs) == [0, 0]
    daemon.wait_for_log("closing the connection from")


def test_unreachable_coordinator_gives_a_rendezvous_timeout_naming_the_address():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        code, out, _ = finish(start_probe("--init", f"tcp://127.0.0.1:{port}", "--world-size",
                                          "2", "--rank", "1", "--timeout", "1"))
    assert code == 2
    assert f"could not reach the coordinator at 127.0.0.1:{port} within 1.0 s" in out


def test_launcher_stops_the_others_and_names_the_rank_that_failed():
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "3",
         str(WORKERS / "probe.py"), "--exit-code-on-rank", "1", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, out, err = finish(proc, timeout=60)
    assert code == 3
    assert "asyncoll-run: rank 1 (pid" in err and "exited with code 3" in err


def test_launcher_uses_a_running_daemon_with_coordinator_option(daemon: Daemon):
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "2", "--coordinator",
         daemon.address, str(WORKERS / "probe.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, out, err = finish(proc)
    assert code == 0, err
    # Two workers share the pipe and write unbuffered: lines may interleave.
    assert sorted(re.findall(r"OK rank=\d world=\d sum=\[[\d, ]*\]", out)) == [
        "OK rank=0 world=2 sum=[3, 30]", "OK rank=1 world=2 sum=[3, 30]"]
    daemon.wait_for_log("rendezvous complete with 2 ranks")


def test_blocking_api_semantics_in_a_real_job():
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "3",
         str(WORKERS / "sync_api.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, out, err = finish(proc, timeout=90)
    assert code == 0, out + err
    assert sorted(re.findall(r"rank \d OK", out)) == ["rank 0 OK", "rank 1 OK", "rank 2 OK"]


def test_launcher_names_the_signal_that_killed_a_worker():
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncoll.run", "--nproc-per-node", "2",
         str(WORKERS / "probe.py"), "--kill-on-rank", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, _, err = finish(proc, timeout=60)
    assert code == 128 + signal.SIGKILL
    assert "asyncoll-run: rank 0 (pid" in err and "was killed by SIGKILL" in err


def test_two_node_launch_with_node_0_hosting_the_coordinator():
    port = str(free_port())
    common = [sys.executable, "-m", "asyncoll.run", "--nnodes", "2", "--nproc-per-node", "2"]
    node0 = subprocess.Popen(common + ["--node-rank", "0", "--master-addr", "127.0.0.1",
                                       "--master-port", port, str(WORKERS / "probe.py")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node1 = subprocess.Popen(common + ["--node-rank", "1", "--coordinator", f"127.0.0.1:{port}",
                                       str(WORKERS / "probe.py")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [finish(node0), finish(node1)]
    assert [code for code, _, _ in outputs] == [0, 0], outputs
    found = [re.findall(r"OK rank=(\d) world=4 sum=\[10, 100\]", out) for _, out, _ in outputs]
    assert sorted(found[0]) == ["0", "1"] and sorted(found[1]) == ["2", "3"]


def test_status_shows_a_waiting_job_and_the_waiting_peer_says_who_is_missing(daemon: Daemon):
    waiting = start_probe("--init", f"tcp://{daemon.address}", "--world-size", "3", "--rank",
                          "2", "--job", "demo", "--timeout", "7")
    daemon.wait_for_log("job 'demo': peer from")
    status = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                             daemon.address], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.splitlines()
    assert header.split()[:4] == ["JOB", "STATE", "RANK", "HOST"]
    assert row.startswith("demo  waiting 1/3") and " 2 " in row and "waiting" in row
    as_json = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                              daemon.address, "--json"], capture_output=True, text=True,
                             timeout=30)
    (job,) = json.loads(as_json.stdout)
    assert (job["job"], job["state"], job["world_size"]) == ("demo", "waiting", 3)
    assert [m["rank"] for m in job["members"]] == [2]
    code, out, err = finish(waiting)
    assert code == 2 and "RendezvousTimeoutError" in out
    assert "waiting for 2 of 3 ranks of job 'demo': ranks 0, 1 have not joined" in err


def test_status_of_an_unreachable_coordinator_fails_with_the_address():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                             f"127.0.0.1:{port}", "--timeout", "0.5"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 1
    # A refused connection is final at once for status: nothing to wait for.
    assert f"nothing listens at 127.0.0.1:{port} (Connection refused)" in result.stderr


def test_status_of_a_running_job_counts_operations_and_shows_heartbeats(daemon: Daemon):
    busy = [subprocess.Popen([sys.executable, str(WORKERS / "busy.py"),
                              f"tcp://{daemon.address}", "2", "busy", "6"])
            for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run([sys.executable, "-m", "asyncoll", "status",
                                     "--coordinator", daemon.address, "--json"],
                                    capture_output=True, text=True, timeout=30)
            jobs = json.loads(result.stdout)
            members = jobs[0]["members"] if jobs and jobs[0]["state"] == "running" else []
            if members and all(m["ops"] == 3 for m in members):
                break
            assert time.monotonic() < deadline, result.stdout
            time.sleep(0.3)
        assert all(0 <= m["heartbeat_age_s"] < 5 for m in members)
        table = subprocess.run([sys.executable, "-m", "asyncoll", "status", "--coordinator",
                                daemon.address], capture_output=True, text=True, timeout=30)
        rows = table.stdout.splitlines()[1:]
        assert len(rows) == 2 and all(" 3 " in row and "s ago" in row for row in rows)
    finally:
        for proc in busy:
            proc.wait(30)


@pytest.mark.skipif(shutil.which("mpirun") is None,
                    reason="Open MPI's mpirun is not installed (.ci/run installs openmpi-bin)")
def test_mpirun_launches_a_job_through_ompi_variables():
    # No RANK or WORLD_SIZE: OMPI_COMM_WORLD_RANK/SIZE give them, and the process
    # with rank 0 hosts the coordinator at MASTER_ADDR:MASTER_PORT.
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ASYNCOLL_JOB_ID")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    result = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3", "-x", "MASTER_ADDR",
         "-x", "MASTER_PORT", "-x", "PATH", sys.executable, str(WORKERS / "probe.py")],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(re.findall(r"OK rank=\d world=3 sum=\[6, 60\]", result.stdout)) == [
        f"OK rank={r} world=3 sum=[6, 60]" for r in range(3)]

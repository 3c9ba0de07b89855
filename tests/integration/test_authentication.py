"""A shared secret keeps strangers out of the coordinator and the data ports.

The daemon runs with --token-file; peers prove the secret (ASYNCOLL_TOKEN)
by answering a challenge, so the secret never crosses the wire. Peers with
a wrong or missing secret are refused with AuthenticationError before any
request is read, and the daemon logs why.
"""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll._transport.settings import TransportSettings
from asyncoll._wire.messages import Join, Status, encode
from asyncoll.errors import AuthenticationError

from .conftest import Daemon, finish, start_probe
from .test_coordinator_daemon import read_until_closed

pytestmark = pytest.mark.timeout(60)

SECRET = "correct horse battery staple"


@pytest.fixture
def guarded(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    daemon = Daemon(tmp_path, "--token-file", str(token_file))
    yield daemon
    daemon.stop()


def probes(daemon, token, n=2):
    """Run ``n`` probes of one job with ``token`` (None: none set); their outcomes."""
    env = {"ASYNCOLL_TOKEN": token or ""}
    started = [start_probe("--init", f"tcp://{daemon.address}", "--world-size", "2",
                           "--timeout", "10", env=env) for _ in range(n)]
    return [finish(proc) for proc in started]


def test_peers_with_the_secret_run_the_job(guarded):
    outcomes = probes(guarded, SECRET)
    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    assert SECRET not in guarded.log()


@pytest.mark.parametrize("token, expected", [
    (None, "requires the job's shared secret: set ASYNCOLL_TOKEN"),
    ("wrong", "wrong shared secret")])
def test_peer_with_a_wrong_or_missing_secret_is_refused_with_authentication_error(
        guarded, token, expected):
    (code, out, _), = probes(guarded, token, n=1)
    assert code == 2
    assert out.startswith("ERROR AuthenticationError") and expected in out, out
    if token is not None:
        guarded.wait_for_log("refused the connection from")
        assert "wrong shared secret" in guarded.log()


@pytest.mark.parametrize("first", [
    Join(job="j", rank=0, world_size=1, host="127.0.0.1", port=1, hostname="h", pid=1,
         version=2, timeout=5.0), Status(job="")])
def test_nothing_is_accepted_before_the_proof(guarded, first):
    with socket.create_connection(("127.0.0.1", guarded.port), timeout=5) as sock:
        sock.sendall(encode(first, 1))
        received = read_until_closed(sock)
    assert b"challenge" in received and b"authentication" in received
    assert b"welcome" not in received and b"status_reply" not in received
    assert "job 'j'" not in guarded.log(), "the join was handled before the proof"


def test_peer_with_a_secret_refuses_a_coordinator_that_cannot_prove_it(daemon):
    (code, out, _), = probes(daemon, SECRET, n=1)
    assert code == 2
    assert "asks for no shared secret, but this peer has ASYNCOLL_TOKEN set" in out, out


def test_daemon_bound_beyond_loopback_without_a_secret_warns_loudly(tmp_path):
    daemon = Daemon(tmp_path, host="0.0.0.0")
    try:
        daemon.wait_for_log("WITHOUT a shared secret")
    finally:
        daemon.stop()


async def test_data_port_refuses_a_dialer_without_the_secret():
    results = await dial_with_tokens(b"right", [("wrong", b"wrong"), ("missing", None),
                                                ("right", b"right")])
    assert "did not prove the job's shared secret" in results["wrong"]
    assert "did not prove the job's shared secret" in results["missing"]
    assert results["right"] == "sent"


async def test_dialer_refuses_a_data_port_that_cannot_prove_the_secret():
    results = await dial_with_tokens(None, [("stranger", b"right")])
    assert "rank 1's data port did not prove the job's shared secret" in results["stranger"]


async def dial_with_tokens(server_token, clients):
    """Rank 0 dials rank 1 (``server_token``) once per (name, token); how each went."""
    server = TcpMesh("job", TransportSettings(token=server_token))
    port = await server.listen("127.0.0.1")
    results = {}
    for name, token in clients:
        client = TcpMesh("job", TransportSettings(token=token))
        client_port = await client.listen("127.0.0.1")
        directory = {0: ("127.0.0.1", client_port, "a"), 1: ("127.0.0.1", port, "b")}
        client.set_directory(0, directory)
        server.set_directory(1, directory)
        try:
            await asyncio.wait_for(client.send(1, (0, 1, 0), memoryview(np.ones(4).view(
                np.uint8))), 5)
            results[name] = "sent"
        except AuthenticationError as exc:
            results[name] = str(exc)
        await client.close()
    await server.close()
    return results

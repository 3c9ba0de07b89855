"""TLS on every connection: jobs run with it, and peers that cannot speak it are refused.

With ASYNCOLL_TLS_CERT, ASYNCOLL_TLS_KEY and ASYNCOLL_TLS_CA set (and the
daemon's --tls-cert, --tls-key, --tls-ca), the coordinator connection, the
data plane's mesh and the direct links all speak mutual TLS. A peer without
TLS, without a certificate, or with one another CA signed is refused, and
each side's error says what happened and what to set; none waits for a deadline.
"""

from __future__ import annotations

import asyncio
import signal
import ssl

import numpy as np
import pytest

from asyncoll._compat import timeout
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._runtime.settings import Settings
from asyncoll._tls.context import TlsSettings, load
from asyncoll._tls.handshake import TlsServer
from asyncoll._transport.settings import TransportSettings
from asyncoll._transport.tcp.mesh import TcpMesh
from asyncoll.errors import AuthenticationError
from asyncoll.testing import run_ranks

from . import certificates
from .conftest import Daemon, finish, start_probe
from .test_coordinator_restart import assert_made_a_group, run_workers, stop_all

pytestmark = [pytest.mark.timeout(120), certificates.NEEDS_OPENSSL]

SECRET = "correct horse battery staple"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certificates.make(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def tls_daemon(tmp_path, certs):
    daemon = Daemon(tmp_path, "--tls-cert", str(certs.cert), "--tls-key", str(certs.key),
                    "--tls-ca", str(certs.ca))
    yield daemon
    daemon.stop()


def inputs(rank: int, count: int) -> np.ndarray:
    return (np.arange(count, dtype=np.float32) % 5 + rank + 1).astype(np.float32)


async def every_collective(world):
    """all_reduce, broadcast and all_gather of 0, 7 and 300k elements; what the transport
    and the links ran over."""
    n, me = world.size, world.rank
    for count in (0, 7, 300_000):
        x = inputs(me, count)
        await world.all_reduce(x)
        np.testing.assert_allclose(x, sum(inputs(r, count) for r in range(n)), rtol=1e-6)
        y = inputs(me, count) if me == n - 1 else np.zeros(count, np.float32)
        await world.broadcast(y, src=n - 1)
        assert np.array_equal(y, inputs(n - 1, count))
        parts = [np.zeros(count, np.float32) for _ in range(n)]
        await world.all_gather(parts, inputs(me, count))
        for rank, part in enumerate(parts):
            assert np.array_equal(part, inputs(rank, count))
    links = world._core._fast.links
    link_sockets = [p.sock for p in links._peers.values()] if links is not None else []
    return type(world._session.mesh._server).__name__, link_sockets


@pytest.mark.parametrize("hosts", [1, 3], ids=["one host, mesh", "three hosts, links"])
@pytest.mark.parametrize("token", [None, SECRET], ids=["tls", "tls and token"])
async def test_a_job_runs_every_collective_over_tls(certs, monkeypatch, hosts, token):
    monkeypatch.setenv("ASYNCOLL_SHM", "0")  # every byte over TCP, so through TLS
    monkeypatch.setenv("ASYNCOLL_LINKS_BYTES", str(4 << 20))
    for name, value in certs.environment().items():
        monkeypatch.setenv(name, value)
    if token is not None:
        monkeypatch.setenv("ASYNCOLL_TOKEN", token)

    outcomes = await run_ranks(3, every_collective, hosts=hosts)

    assert [server for server, _ in outcomes] == ["TlsServer"] * 3
    link_sockets = [sock for _, socks in outcomes for sock in socks]
    if hosts > 1:
        assert link_sockets, "the direct links were not used"
    assert all(isinstance(sock, ssl.SSLSocket) for sock in link_sockets), link_sockets


def test_a_job_of_processes_runs_over_tls_with_the_daemon(tls_daemon, certs):
    started = [start_probe("--init", f"tcp://{tls_daemon.address}", "--world-size", "2",
                           "--timeout", "20", env=certs.environment()) for _ in range(2)]
    outcomes = [finish(proc) for proc in started]
    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    assert all(out.startswith("OK") for _, out, _ in outcomes), outcomes


# -- refusals at the coordinator -----------------------------------------------------------


def probe(daemon, env):
    (code, out, err), = [finish(start_probe("--init", f"tcp://{daemon.address}",
                                            "--world-size", "2", "--timeout", "20", env=env))]
    assert code == 2, (out, err)
    return out


NO_TLS = {"ASYNCOLL_TLS_CERT": "", "ASYNCOLL_TLS_KEY": "", "ASYNCOLL_TLS_CA": ""}


def test_a_peer_without_tls_is_told_the_coordinator_requires_it(tls_daemon):
    out = probe(tls_daemon, NO_TLS)

    assert out.startswith("ERROR AuthenticationError"), out
    assert f"the coordinator at {tls_daemon.address} refused this peer: the coordinator " \
           "requires TLS and this peer connected without it; set ASYNCOLL_TLS_CERT" in out
    # The peer, not greeted, nudged it with plain text, which the daemon refused at once.
    tls_daemon.wait_for_log("it sent plain text where a TLS hello belongs, so it does not "
                            "speak TLS")


def test_a_peer_whose_certificate_another_ca_signed_is_refused_on_both_sides(tls_daemon,
                                                                             certs):
    out = probe(tls_daemon, certs.stranger())

    assert out.startswith("ERROR AuthenticationError"), out
    assert f"the coordinator at {tls_daemon.address} showed a certificate that the CA in " \
           "ASYNCOLL_TLS_CA did not sign" in out
    tls_daemon.wait_for_log("closed the connection during the TLS handshake")


async def test_a_peer_without_a_certificate_is_refused_on_both_sides(tls_daemon, certs):
    ca_only = load(TlsSettings(ca=str(certs.ca)), listens=False)

    with pytest.raises(AuthenticationError, match="closed the connection right after the "
                                                  "TLS handshake: it did not accept this "
                                                  "process's certificate"):
        await CoordinatorClient.connect(tls_daemon.host, tls_daemon.port, 10, tls=ca_only)
    tls_daemon.wait_for_log("showed no certificate, and ASYNCOLL_TLS_CA makes this process "
                            "require one")


def test_a_tls_peer_is_told_the_coordinator_does_not_speak_tls(daemon, certs):
    out = probe(daemon, certs.environment())

    assert out.startswith("ERROR AuthenticationError"), out
    assert f"the coordinator at {daemon.address} does not speak TLS" in out
    daemon.wait_for_log("began a TLS handshake, but this process has no TLS")


def test_tls_and_the_shared_secret_together(tmp_path, certs):
    token_file = tmp_path / "token"
    token_file.write_text(SECRET)
    guarded = Daemon(tmp_path, "--token-file", str(token_file), "--tls-cert", str(certs.cert),
                     "--tls-key", str(certs.key), "--tls-ca", str(certs.ca))
    try:
        out = probe(guarded, dict(certs.environment(), ASYNCOLL_TOKEN="wrong"))
        assert "wrong shared secret" in out, out
        started = [start_probe("--init", f"tcp://{guarded.address}", "--world-size", "2",
                               "--timeout", "20",
                               env=dict(certs.environment(), ASYNCOLL_TOKEN=SECRET))
                   for _ in range(2)]
        outcomes = [finish(proc) for proc in started]
        assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    finally:
        guarded.stop()


# -- refusals on the data plane ------------------------------------------------------------


async def exchange(dialer: TransportSettings, acceptor: TransportSettings) -> None:
    """Rank 0 (``dialer``) sends rank 1 (``acceptor``) one frame, and rank 1 receives the
    bytes sent; what rank 0's send raises."""
    zero, one = TcpMesh("j", dialer), TcpMesh("j", acceptor)
    try:
        ports = [await zero.listen("127.0.0.1"), await one.listen("127.0.0.1")]
        directory = {rank: ("127.0.0.1", port, f"h{rank}") for rank, port in enumerate(ports)}
        zero.set_directory(0, directory)
        one.set_directory(1, directory)
        # Not zeros: a receive that wrote nothing into `out` fails the comparison below.
        sent = np.array([0x0102030405060708, -2, 2**40 + 3, 9], np.int64)
        out = np.zeros(4, np.int64)
        receive = asyncio.ensure_future(one.recv_into(0, (1, 1, 0), memoryview(out).cast("B")))
        try:
            async with timeout(10):
                await zero.send(1, (1, 1, 0), memoryview(sent).cast("B"))
                await receive
        finally:
            receive.cancel()
        assert out.tolist() == sent.tolist(), f"rank 1 received {out.tolist()}"
    finally:
        await zero.close()
        await one.close()


async def test_the_mesh_carries_frames_over_tls(certs):
    tls = TransportSettings(tls=load(TlsSettings(str(certs.cert), str(certs.key),
                                                 str(certs.ca))), shm_min_bytes=0)
    await exchange(tls, tls)


@pytest.mark.parametrize("dialer, acceptor, dialer_words, acceptor_words", [
    ("plain", "tls", "this rank's data port requires TLS and this peer connected without it",
     "it sent no TLS hello"),
    ("tls", "plain", "rank 1's data port at 127.0.0.1:", "a data connection began a TLS "
                                                         "handshake, but this process has no "
                                                         "TLS"),
    ("stranger", "tls", "showed a certificate that the CA in ASYNCOLL_TLS_CA did not sign",
     "closed the connection during the TLS handshake"),
    ("ca only", "tls", "closed the connection right after the TLS handshake",
     "showed no certificate"),
], ids=["plain to tls", "tls to plain", "another ca", "no certificate"])
async def test_a_data_port_refuses_a_peer_that_does_not_speak_its_tls(
        certs, caplog, dialer, acceptor, dialer_words, acceptor_words):
    member = load(TlsSettings(str(certs.cert), str(certs.key), str(certs.ca)))
    kinds = {"plain": None, "tls": member,
             "stranger": load(TlsSettings(str(certs.stranger_cert), str(certs.stranger_key),
                                          str(certs.other_ca))),
             "ca only": load(TlsSettings(ca=str(certs.ca)), listens=False)}
    settings = {name: TransportSettings(tls=tls, shm_min_bytes=0)
                for name, tls in kinds.items()}
    if dialer == "ca only":
        # It cannot listen; it only dials (its own server is a member's, unused).
        settings[dialer] = TransportSettings(tls=type(member)(
            kinds["ca only"].settings, kinds["ca only"].client, member.server), shm_min_bytes=0)

    with pytest.raises(AuthenticationError, match="TLS|certificate") as raised:
        await exchange(settings[dialer], settings[acceptor])

    assert dialer_words in str(raised.value)
    for _ in range(50):
        if acceptor_words in caplog.text:
            break
        await asyncio.sleep(0.1)
    assert acceptor_words in caplog.text


def test_tls_settings_reach_the_transport_and_the_coordinator(certs):
    settings = Settings.from_environment(certs.environment())
    assert settings.tls is not None and settings.transport.tls is settings.tls
    assert TlsServer.__name__ == "TlsServer"


def test_members_over_tls_are_taken_back_by_a_restarted_tls_coordinator(tmp_path, certs,
                                                                          monkeypatch):
    """Reconnection (issue 28, part 1) speaks TLS too, with the same certificates."""
    for name, value in certs.environment().items():
        monkeypatch.setenv(name, value)
    flags = ("--tls-cert", str(certs.cert), "--tls-key", str(certs.key), "--tls-ca",
             str(certs.ca))
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Daemon(tmp_path / "first", *flags)
    second = None
    go = tmp_path / "go"
    procs = run_workers(first.address, go)
    try:
        first.stop(signal.SIGKILL)
        second = Daemon(tmp_path / "second", *flags, "--port", str(first.port))
        second.wait_for_log("adopted job 'restarted': 2 members, generation 0")
        go.touch()
        outcomes = [finish(proc, timeout=60) for proc in procs]
    finally:
        stop_all(procs, first, second)
    assert_made_a_group(outcomes, second.address)


async def test_idle_connections_to_a_tls_coordinator_past_its_bound_are_closed_at_once(certs):
    """The handshakes a TLS coordinator waits for count as not authenticated (issue 56):
    past the port's bound the oldest is closed, long before it would be taken for a peer
    without TLS, and a real peer still connects."""
    from asyncoll.coordinator.server import Coordinator
    from asyncoll._tls.handshake import SILENCE_S

    tls = load(TlsSettings(str(certs.cert), str(certs.key), str(certs.ca)))
    coordinator = Coordinator("127.0.0.1", 0, tls=tls)
    coordinator._door.bound = 4
    await coordinator.start()
    idle = [await asyncio.open_connection("127.0.0.1", coordinator.port) for _ in range(20)]
    try:
        async def closed(reader: asyncio.StreamReader) -> bool:
            try:
                async with timeout(SILENCE_S / 2):
                    return await reader.read(1) == b""
            except TimeoutError:
                return False
        # Young, twice the bound are held; the rest are closed at once.
        assert sum(await asyncio.gather(*(closed(r) for r, _ in idle))) == 20 - 2 * 4
        client = await CoordinatorClient.connect("127.0.0.1", coordinator.port, 10.0, tls=tls)
        await client.close()
    finally:
        for _, writer in idle:
            writer.close()
        await coordinator.stop()

"""Health probes: the coordinator logs a connection that leaves without a word at debug
level only, and ``asyncoll-coordinator --probe`` greets it without a trace."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable

import pytest

from asyncoll._compat import timeout
from asyncoll.coordinator import Coordinator
from asyncoll.coordinator.cli import main
from asyncoll.coordinator.probe import probe

pytestmark = pytest.mark.timeout(30)

LOGGER = "asyncoll.coordinator"


@pytest.fixture(params=[None, b"secret"], ids=["no-token", "token"])
async def coordinator(request: pytest.FixtureRequest) -> AsyncIterator[Coordinator]:
    served = Coordinator("127.0.0.1", 0, token=request.param)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


async def _served(coordinator: Coordinator, caplog: pytest.LogCaptureFixture,
                  records: int = 0) -> None:
    """Wait until the coordinator has written ``records`` records and has finished with
    every connection it took (its handlers are the only sign of that)."""
    async with timeout(10):
        while len(caplog.records) < records or coordinator._handlers:
            await asyncio.sleep(0.01)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST), as a probe does that leaves data unread."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _connect_then_close(port: int) -> None:
    # The greeting comes at once and is never read: the close resets the connection.
    sock = _connect(port)
    sock.recv(1)
    sock.close()


def _connect_then_reset(port: int) -> None:
    _reset(_connect(port))


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno >= logging.INFO]


def _quiet(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.DEBUG]


@pytest.mark.parametrize("leave", [_connect_then_close, _connect_then_reset],
                         ids=["close-unread", "reset"])
async def test_a_connection_that_leaves_without_a_word_is_logged_at_debug_only(
        coordinator: Coordinator, leave: Callable[[int], None],
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for _ in range(3):  # a probe comes again and again
            await asyncio.to_thread(leave, coordinator.port)
        await _served(coordinator, caplog, records=3)
    assert _loud(caplog) == []
    quiet = _quiet(caplog)
    assert len(quiet) == 3 and all(" ended before it said anything: " in m for m in quiet)


def _half_a_message_then_close(port: int) -> None:
    sock = _connect(port)
    (size,) = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))
    sock.recv(size, socket.MSG_WAITALL)  # the whole greeting: the close is a FIN
    sock.sendall(b"\x00\x00\x00\x10abc")  # a frame of 16 bytes cut after 3
    sock.close()


async def test_a_connection_that_breaks_in_the_middle_of_a_message_still_logs(
        coordinator: Coordinator, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        await asyncio.to_thread(_half_a_message_then_close, coordinator.port)
        await _served(coordinator, caplog, records=1)
    [line] = _loud(caplog)
    assert line.startswith("connection from ('127.0.0.1', ") and " broke: " in line


async def test_the_probe_finds_the_coordinator_and_leaves_no_log_line(
        coordinator: Coordinator, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for _ in range(3):
            assert await asyncio.to_thread(probe, "127.0.0.1", coordinator.port) is None
        await _served(coordinator, caplog)
    assert _loud(caplog) == [] and _quiet(caplog) == []


async def test_the_probe_command_exits_0_on_a_coordinator_and_1_on_a_closed_port(
        coordinator: Coordinator, capsys: pytest.CaptureFixture[str]) -> None:
    port = str(coordinator.port)
    assert await asyncio.to_thread(main, ["--probe", "--port", port]) == 0
    assert capsys.readouterr().out == f"a coordinator greets on 127.0.0.1:{port}\n"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    assert await asyncio.to_thread(main, ["--probe", "--port", str(closed)]) == 1
    assert capsys.readouterr().err.startswith(
        f"asyncoll-coordinator --probe: cannot reach a coordinator at 127.0.0.1:{closed}: ")


async def _one_server(answer: bytes | None) -> tuple[asyncio.Server, int]:
    """A server that sends ``answer`` to each connection and closes it (None: says nothing
    and keeps it open)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if answer is None:
            await reader.read()
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("answer, words", [
    (b"HTTP/1.0 400 Bad Request\r\n\r\n", "is not an asyncoll coordinator: its greeting"),
    (b"", "closed the connection without a greeting: not a coordinator"),
    (None, "greeted within 0.5 s (a coordinator greets at once"),
], ids=["http", "closes", "silent"])
async def test_the_probe_says_why_what_answers_is_not_a_coordinator(
        answer: bytes | None, words: str) -> None:
    server, port = await _one_server(answer)
    async with server:
        failure = await asyncio.to_thread(probe, "127.0.0.1", port, 0.5)
    assert failure is not None and f"127.0.0.1:{port}" in failure and words in failure

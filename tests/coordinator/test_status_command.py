"""``asyncoll status`` as an operator meets it: refused at once, and told its own flags."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from asyncoll import cli
from asyncoll._runtime import hosting
from asyncoll._runtime.runtime import runtime
from asyncoll.coordinator import Coordinator

pytestmark = pytest.mark.timeout(120)

SECRET = b"status-secret"


@pytest.fixture
def guarded() -> Iterator[Coordinator]:
    """A coordinator that requires SECRET, on the runtime's loop thread."""
    coordinator = runtime().run(hosting.start("127.0.0.1", 0, SECRET))
    try:
        yield coordinator
    finally:
        runtime().run(coordinator.stop())


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_fails_at_once_and_advises_the_coordinator_flag(capsys) -> None:
    port = _closed_port()
    began = time.monotonic()

    code = cli.main(["status", "--coordinator", f"127.0.0.1:{port}", "--timeout", "60"])

    said = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - began < 30  # not at the 60 s deadline
    assert f"nothing listens at 127.0.0.1:{port}" in said
    assert "--coordinator HOST:PORT" in said and "MASTER_ADDR" not in said


def test_status_reads_the_secret_from_its_token_file(guarded, tmp_path, capsys,
                                                     monkeypatch) -> None:
    monkeypatch.delenv("ASYNCOLL_TOKEN", raising=False)
    token = tmp_path / "token"
    token.write_bytes(SECRET + b"\n")
    where = f"127.0.0.1:{guarded.port}"

    refused = cli.main(["status", "--coordinator", where])
    without = capsys.readouterr().err
    code = cli.main(["status", "--coordinator", where, "--token-file", str(token)])

    assert refused == 1 and "asyncoll status take --token-file" in without
    assert code == 0 and capsys.readouterr().out.strip().endswith("(no jobs)")

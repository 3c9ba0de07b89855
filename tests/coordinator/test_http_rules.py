"""The coordinator's HTTP server by HTTP's rules (issue 56): every malformed request gets its
4xx and at most one log line per period, never a traceback; the Bearer scheme in any case, a
token anywhere in the head and in UTF-8; 414 and 431 past the limits; the security headers;
the allowed hosts.

Requests are raw bytes on a socket, so that each case is exactly the one reported.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator
from importlib import resources

import pytest

from asyncoll._compat import timeout
from asyncoll.coordinator import http
from asyncoll.coordinator.request import MAX_HEAD_BYTES, MAX_TARGET_BYTES
from asyncoll.coordinator.server import Coordinator

pytestmark = pytest.mark.timeout(60)
TOKEN = "s3cret"
UTF8_TOKEN = "jeton-é-✓"


class Reply:
    """An HTTP answer: its status, its headers (lower-case names) and its body."""

    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {name.lower(): value.strip() for name, _, value in
                        (line.partition(":") for line in lines[1:])}

    def error(self) -> str:
        return str(json.loads(self.body)["error"])


async def send(port: int, raw: bytes) -> Reply:
    """Send ``raw`` as it is, and read the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        async with timeout(20):
            return Reply(await reader.read(-1))
    finally:
        writer.close()


def get(path: str, *headers: str, token: str | None = TOKEN) -> bytes:
    """A GET of ``path`` with ``headers`` (and the token as a Bearer one, unless None)."""
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def served(token: bytes | None, **options) -> AsyncIterator[int]:
    coordinator = Coordinator("127.0.0.1", 0, token, http_port=0, **options)
    await coordinator.start()
    try:
        assert coordinator.http is not None
        yield coordinator.http.port
    finally:
        await coordinator.stop()


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """The HTTP port of a coordinator with the token TOKEN."""
    async for port in served(TOKEN.encode()):
        yield port


async def test_an_invalid_absolute_target_before_authentication_gets_a_400(
        port: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, "asyncoll"):
        reply = await send(port, get("http://[", token=None))
    assert reply.status == 400 and "is not a valid URL" in reply.error()
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert [r.getMessage() for r in caplog.records
            if "refused an HTTP request" in r.getMessage()] != []


async def test_a_nul_in_a_page_name_gets_a_404(port: int) -> None:
    reply = await send(port, get("/index.html%00.html"))
    assert reply.status == 404 and "the dashboard is at /" in reply.error()


async def test_a_page_name_of_300_characters_gets_a_404(port: int) -> None:
    assert (await send(port, get("/" + "a" * 296 + ".css"))).status == 404
    assert (await send(port, get("/" + "b" * 300))).status == 404


async def test_two_thousand_malformed_requests_log_a_few_lines_and_no_traceback(
        port: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, "asyncoll"):
        for _ in range(20):
            replies = await asyncio.gather(*(send(port, get("http://[", token=None))
                                             for _ in range(100)))
            assert {reply.status for reply in replies} == {400}
    refused = [r for r in caplog.records if "refused an HTTP request" in r.getMessage()]
    assert 1 <= len(refused) <= 2, [r.getMessage() for r in refused]  # one per 10 s
    assert not any(r.exc_info for r in caplog.records) and "Traceback" not in caplog.text


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer", "bEaReR"])
async def test_the_bearer_scheme_is_case_insensitive(port: int, scheme: str) -> None:
    reply = await send(port, get("/api/jobs", f"Authorization: {scheme} {TOKEN}", token=None))
    assert reply.status == 200


async def test_a_token_after_the_first_8_kib_of_the_head_is_found(port: int) -> None:
    filler = [f"X-Filler-{i}: {'f' * 100}" for i in range(200)]  # about 22 KiB
    reply = await send(port, get("/api/jobs", *filler))
    assert reply.status == 200


async def test_a_head_over_the_limit_gets_431(port: int) -> None:
    filler = [f"X-Filler-{i}: {'f' * 1000}" for i in range(MAX_HEAD_BYTES // 1000 + 2)]
    reply = await send(port, get("/api/jobs", *filler))
    assert reply.status == 431 and f"over {MAX_HEAD_BYTES} bytes" in reply.error()


async def test_a_url_over_the_limit_gets_414(port: int) -> None:
    reply = await send(port, get("/api/jobs?x=" + "u" * (MAX_TARGET_BYTES + 10)))
    assert reply.status == 414
    # A request line that never ends is refused as soon as it passes the limit.
    reply = await send(port, b"GET /" + b"u" * (2 * MAX_HEAD_BYTES))
    assert reply.status == 414


async def test_a_utf8_token_is_accepted_in_the_header_and_in_the_query() -> None:
    async for port in served(UTF8_TOKEN.encode()):
        header = b"Authorization: Bearer " + UTF8_TOKEN.encode()
        raw = b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n\r\n"
        assert (await send(port, raw)).status == 200
        quoted = "".join(f"%{b:02X}" for b in UTF8_TOKEN.encode())
        assert (await send(port, get(f"/api/jobs?token={quoted}", token=None))).status == 200
        assert (await send(port, get("/api/jobs", token="jeton-e-?"))).status == 401


async def test_since_that_is_not_a_whole_number_gets_a_400_naming_it(port: int) -> None:
    reply = await send(port, get("/api/events?since=1e23"))
    assert reply.status == 400
    assert reply.error() == ("since must be a whole number of at most 18 digits, and "
                             "'1e23' is not one")
    assert (await send(port, get("/api/jobs/x?offset=" + "9" * 30))).status == 400


async def test_what_is_not_http_gets_a_400_or_405(port: int) -> None:
    assert (await send(port, b"GARBAGE\r\n\r\n")).status == 400
    assert (await send(port, b"GET / HTTP/x\r\n\r\n")).status == 400
    assert (await send(port, get("/api/jobs", "no colon here"))).status == 400
    assert (await send(port, get("/api/jobs", " folded: line"))).status == 400
    assert (await send(port, get("/api/jobs", "Host: twice"))).status == 400
    assert (await send(port, b"POST /api/jobs HTTP/1.1\r\n\r\n")).status == 405
    assert (await send(port, b"GET * HTTP/1.1\r\n\r\n")).status == 400


async def test_a_head_unfinished_at_the_deadline_gets_408(
        monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    monkeypatch.setattr(http, "HANDSHAKE_TIMEOUT_S", 0.5)
    reply = await send(port, b"GET /api/jobs HTTP/1.1\r\nHost: 127")
    assert reply.status == 408


def page_hashes(tag: str) -> set[str]:
    page = resources.files("asyncoll.coordinator").joinpath("dashboard", "index.html")
    return {"'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
            for m in re.findall(f"<{tag}>(.*?)</{tag}>", page.read_text(), re.DOTALL)}


async def test_every_answer_forbids_framing_and_sniffing_and_the_page_script_is_allowed(
        port: int) -> None:
    for reply in [await send(port, get("/")), await send(port, get("/api/jobs")),
                  await send(port, get("/nope")), await send(port, get("/", token=None))]:
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-frame-options"] == "DENY"
        policy = dict(part.strip().partition(" ")[::2]
                      for part in reply.headers["content-security-policy"].split(";"))
        assert policy["frame-ancestors"] == "'none'" and policy["default-src"] == "'none'"
        assert set(policy["script-src"].split()) == page_hashes("script") != set()
        assert set(policy["style-src"].split()) == page_hashes("style") != set()
        assert policy["connect-src"] == "'self'"


async def test_with_allowed_hosts_a_request_for_another_host_gets_421() -> None:
    async for port in served(None, allowed_hosts=["dash.example", "[::1]"]):
        def asking(host: str) -> bytes:
            return f"GET /api/jobs HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        for host in ("dash.example", "DASH.example:8080", "[::1]:80"):
            assert (await send(port, asking(host))).status == 200, host
        reply = await send(port, asking("rebound.attacker.example"))
        assert reply.status == 421 and "--allowed-host" in reply.error()
        assert (await send(port, b"GET /api/jobs HTTP/1.0\r\n\r\n")).status == 421
        absolute = b"GET http://rebound.example/api/jobs HTTP/1.1\r\nHost: dash.example\r\n\r\n"
        assert (await send(port, absolute)).status == 421

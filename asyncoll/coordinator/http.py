"""The coordinator's one HTTP server: its dashboard, its facts as JSON, its metrics.

``/`` is the dashboard (files shipped in ``asyncoll/coordinator/dashboard``),
``/api/...`` the facts it shows (asyncoll.coordinator.api), and ``/metrics``
Prometheus' (asyncoll.coordinator.metrics, with prometheus_client). Every
request is a GET, and none changes a job. A minimal HTTP/1.0 responder on
the coordinator's own event loop: the state is never shared with a thread.

Security follows the coordinator's: with its TLS the server speaks HTTPS
with the same certificate (and, with a CA, asks for a client certificate
too); with its token, every request must carry it, as ``Authorization:
Bearer <token>`` or as ``?token=<token>`` (the page's first load), or is
refused with 401.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.resources
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from asyncoll._compat import close_server, timeout as timeout_after
from asyncoll._defaults import HANDSHAKE_TIMEOUT_S
from asyncoll._rendezvous.state import RendezvousState
from asyncoll._tls.context import Tls
from asyncoll._wire.endpoint import join_host_port
from asyncoll.coordinator import api
from asyncoll.coordinator.metrics import Metrics

log = logging.getLogger("asyncoll.coordinator")

#: The most bytes of a request's head read before answering.
MAX_REQUEST_BYTES = 8192
#: The content type of each kind of the dashboard's files.
KINDS = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}

Answer = tuple[str, str, bytes]


class HttpServer:
    """The dashboard, ``/api`` and ``/metrics`` of a coordinator's state on ``host:port``.

    Args:
        state: the coordinator's state (read in its loop only).
        host, port: where to listen (port 0: a free one).
        token: the coordinator's secret; every request must carry it (None: none asked).
        tls: the coordinator's TLS (None: plain HTTP).
        metrics: serve ``/metrics`` (raises ConfigurationError without
            prometheus_client); else it is served only where prometheus_client is.
        address: the coordinator's own address, for the page.
    """

    def __init__(self, state: RendezvousState, host: str, port: int, token: bytes | None,
                 tls: Tls | None, metrics: bool, address: Callable[[], str]) -> None:
        self.host, self.port = host, port
        self._state = state
        self._token = token
        self._tls = tls
        self._address = address
        self._metrics = Metrics.of(state, required=metrics)
        self._history = api.History()
        self._server: asyncio.Server | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._started = time.monotonic()

    @property
    def scheme(self) -> str:
        """"https" with TLS, else "http"."""
        return "http" if self._tls is None else "https"

    async def start(self) -> None:
        """Bind and serve; ``self.port`` is then the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        context = None if self._tls is None else self._tls.server
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())
        log.info("dashboard on %s://%s/ (JSON on /api, metrics on /metrics)", self.scheme,
                 join_host_port(self.host, self.port))

    async def stop(self) -> None:
        """Stop serving."""
        if self._sampler is not None:
            self._sampler.cancel()
        if self._server is not None:
            await close_server(self._server, "the dashboard", HANDSHAKE_TIMEOUT_S, log)
            self._server = None

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._history.sample(self._state, loop.time())
            await asyncio.sleep(api.SAMPLE_EVERY_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, kind, body = self.answer(head[:MAX_REQUEST_BYTES].decode("latin-1"))
            writer.write(f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: "
                         f"{len(body)}\r\nCache-Control: no-store\r\nConnection: close"
                         "\r\n\r\n".encode() + body)
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, UnicodeDecodeError) as exc:
            log.debug("HTTP request from %s failed: %s", writer.get_extra_info("peername"), exc)
        finally:
            writer.close()

    def answer(self, head: str) -> Answer:
        """The status, content type and body that answer the request whose head is ``head``."""
        lines = head.split("\r\n")
        words = lines[0].split()
        if len(words) < 2 or words[0] != "GET":
            return _error("405 Method Not Allowed", "only GET is served: the dashboard and "
                          "its API read the coordinator's state, and change nothing")
        url = urlsplit(words[1])
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if not self._allowed(lines[1:], query.get("token")):
            return _error("401 Unauthorized", "this coordinator needs its token: send "
                          "'Authorization: Bearer <token>', or open the page with "
                          "?token=<token>")
        path = unquote(url.path)
        if path == "/metrics" and self._metrics is not None:
            return "200 OK", self._metrics.content_type, self._metrics.render()
        if path.startswith("/api/"):
            return self._api(path[len("/api/"):], query)
        return _page(path)

    def _allowed(self, headers: list[str], given: str | None) -> bool:
        if self._token is None:
            return True
        for line in headers:
            name, _, value = line.partition(":")
            if name.strip().lower() == "authorization" and value.strip().startswith("Bearer "):
                given = value.strip()[len("Bearer "):].strip()
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def _api(self, path: str, query: dict[str, str]) -> Answer:
        now = asyncio.get_running_loop().time()
        try:
            if path == "jobs":
                return _json(api.jobs_view(self._state, now, self._address(),
                                           time.monotonic() - self._started))
            if path.startswith("jobs/"):
                view = api.job_view(self._state, self._history, path[len("jobs/"):],
                                    int(query.get("offset", 0)),
                                    int(query.get("limit", api.DEFAULT_PAGE)), now)
                if view is None:
                    return _error("404 Not Found", f"no job {path[len('jobs/'):]!r} is "
                                  "waiting, running or being taken back on this coordinator")
                return _json(view)
            if path == "events":
                since = query.get("since")
                return _json(api.events_view(self._state, None if since is None else int(since),
                                             now))
        except ValueError:
            return _error("400 Bad Request", "offset, limit and since must be integers")
        return _error("404 Not Found", f"no /api/{path}: try /api/jobs, /api/jobs/<job> "
                      "or /api/events")


def _json(value: Any) -> Answer:
    return "200 OK", "application/json", json.dumps(value, separators=(",", ":")).encode()


def _error(status: str, text: str) -> Answer:
    return status, "application/json", json.dumps({"error": text}).encode()


def _page(path: str) -> Answer:
    """A file of the dashboard (``/`` is its index)."""
    name = "index.html" if path == "/" else path.rsplit("/", 1)[-1]
    kind = KINDS.get(name[name.rfind("."):]) if "." in name else None
    folder = importlib.resources.files("asyncoll.coordinator") / "dashboard"
    if kind is None or path not in ("/", f"/{name}", f"/dashboard/{name}"):
        return _error("404 Not Found", f"no {path}: the dashboard is at /")
    try:
        return "200 OK", kind, (folder / name).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return _error("404 Not Found", f"no {path}: the dashboard is at /")

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
refused with 401. Without a token or mutual TLS, only clients on this host
(loopback) get the page and the API, others a 403, unless the operator made
the server public (``--http-public``); ``/metrics`` answers every client, for
Prometheus, which scrapes from elsewhere and reads counts, not addresses. With allowed
hosts, a request for another Host is refused with 421 (DNS rebinding). A
malformed request gets its 4xx (asyncoll.coordinator.request) and one log
line, at most one per period.
Every answer forbids framing and sniffing, and its Content-Security-Policy
lets only the page's own script and style run (by their hashes).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import importlib.resources
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from asyncoll._compat import close_server, timeout as timeout_after
from asyncoll._defaults import HANDSHAKE_TIMEOUT_S
from asyncoll._rendezvous.state import RendezvousState
from asyncoll._tls.context import Tls
from asyncoll._wire.endpoint import is_loopback, join_host_port
from asyncoll.coordinator import api
from asyncoll.coordinator.admission import (
    HTTP_SHARE,
    LEAST_PENDING,
    LISTEN_BACKLOG,
    Budget,
    Door,
    Throttle,
    descriptor_budget,
)
from asyncoll.coordinator.metrics import Metrics
from asyncoll.coordinator.request import (
    MAX_HEAD_BYTES,
    Refusal,
    Request,
    end_of_head,
    parse,
    too_large,
)

log = logging.getLogger("asyncoll.coordinator")

#: The content type of each kind of the dashboard's files.
KINDS = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
#: Seconds a refused request's rest is read and dropped before closing, so that its
#: sender reads the refusal instead of a reset.
LINGER_S = 1.0
#: What a client on another host may read from a server without a token or mutual TLS that
#: is not public: Prometheus' scrapes come from elsewhere, and read counts, not addresses.
OPEN_TO_THE_NETWORK = frozenset({"/metrics"})
#: A whole number of at most 18 digits (what offset, limit and since take).
_WHOLE = re.compile(r"-?[0-9]{1,18}")

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
        budget: the coordinator's connections (None: this server's own).
        allowed_hosts: the names a request's Host may give (empty: any).
        public: without a token or mutual TLS, answer every client, not only this
            host's (``/metrics`` answers every client in any case).
    """

    def __init__(self, state: RendezvousState, host: str, port: int, token: bytes | None,
                 tls: Tls | None, metrics: bool, address: Callable[[], str],
                 budget: Budget | None = None, allowed_hosts: Sequence[str] = (),
                 public: bool = False) -> None:
        self.host, self.port = host, port
        self._state = state
        self._token = token
        #: Whether every client may read everything (it proves who it is, or may not need to).
        self.public = public or token is not None or (tls is not None and tls.mutual)
        self._tls = tls
        self._address = address
        self._metrics = Metrics.of(state, required=metrics)
        self._history = api.History()
        self._server: asyncio.Server | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._started = time.monotonic()
        self._allowed = frozenset(name.strip("[]").lower() for name in allowed_hosts)
        budget = budget if budget is not None else Budget(descriptor_budget())
        self._door = Door(budget, max(LEAST_PENDING, budget.capacity // HTTP_SHARE),
                          "the HTTP port")
        self._refusals = Throttle()
        self._files = _dashboard_files()
        self._headers = security_headers(self._files.get("index.html", b""))

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
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=context, backlog=LISTEN_BACKLOG,
            ssl_handshake_timeout=None if context is None else HANDSHAKE_TIMEOUT_S)
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
        loop = asyncio.get_running_loop()
        ticket = self._door.enter(writer.close, loop.time())
        if ticket is None:
            writer.write(self._response(_error(
                "503 Service Unavailable", "the coordinator is out of file descriptors; "
                "try again later, or raise its open-files limit (ulimit -n)")))
            writer.close()
            return
        peer = writer.get_extra_info("peername")
        try:
            status, kind, body = await self._answer_one(reader, ticket, peer)
            writer.write(self._response((status, kind, body)))
            async with timeout_after(HANDSHAKE_TIMEOUT_S):
                await writer.drain()
            if status[:3] in ("414", "431"):
                await _linger(reader, writer)
        except (OSError, TimeoutError) as exc:
            log.debug("HTTP request from %s failed: %s", peer, exc)
        finally:
            self._door.leave(ticket)
            writer.close()

    async def _answer_one(self, reader: asyncio.StreamReader, ticket: int,
                          peer: object) -> Answer:
        """Read one request and answer it.

        Raises:
            OSError, TimeoutError: there is none to answer (closed, or silent).
        """
        try:
            request = parse(await _read_head(reader))
            refusal = self._refusal(request, peer)
            if refusal is not None:
                return refusal
            self._door.admit(ticket)
            return self.answer(request)
        except Refusal as exc:
            self._refusals.warn(asyncio.get_running_loop().time(),
                                f"refused an HTTP request from {_peer(peer)} with "
                                f"{exc.status}: {exc.words}")
            return _error(exc.status, exc.words)
        except (OSError, TimeoutError):
            raise
        except Exception:  # a bug here must not cost a traceback per request
            if self._refusals.count(asyncio.get_running_loop().time()):
                log.exception("an HTTP request from %s failed", _peer(peer))
            return _error("500 Internal Server Error", "the coordinator failed to answer; "
                          "its log says why")

    def _refusal(self, request: Request, peer: object) -> Answer | None:
        """The answer that refuses ``request``, from ``peer``, for its host, its client or
        its credentials, or None."""
        if self._allowed and request.host not in self._allowed:
            raise Refusal("421 Misdirected Request", f"this coordinator answers requests for "
                          f"{', '.join(sorted(self._allowed))}, and this one is for "
                          f"{request.host or 'no host'}: use one of those names, or add it "
                          "with --allowed-host")
        if not (self.public or served_to(peer, request.path)):
            raise Refusal("403 Forbidden", "this coordinator has no token, so it shows its "
                          "dashboard and /api only to clients on its own host, and this one "
                          f"is {_peer(peer)}: reach it through an SSH tunnel or a reverse "
                          "proxy on that host, give the coordinator a token (--token-file), "
                          "or start it with --http-public to serve every client")
        if self._token is None or any(hmac.compare_digest(given, self._token)
                                      for given in request.credentials):
            return None
        return _error("401 Unauthorized", "this coordinator needs its token: send "
                      "'Authorization: Bearer <token>', or open the page with ?token=<token>")

    def answer(self, request: Request) -> Answer:
        """The status, content type and body that answer ``request`` (a permitted one)."""
        if request.path == "/metrics" and self._metrics is not None:
            return "200 OK", self._metrics.content_type, self._metrics.render()
        if request.path.startswith("/api/"):
            return self._api(request.path[len("/api/"):], request.query)
        return self._page(request.path)

    def _response(self, answer: Answer) -> bytes:
        status, kind, body = answer
        return (f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}"
                f"\r\n{self._headers}Connection: close\r\n\r\n").encode() + body

    def _api(self, path: str, query: dict[str, str]) -> Answer:
        now = asyncio.get_running_loop().time()
        if path == "jobs":
            return _json(api.jobs_view(self._state, now, self._address(),
                                       time.monotonic() - self._started))
        if path.startswith("jobs/"):
            view = api.job_view(self._state, self._history, path[len("jobs/"):],
                                _whole(query, "offset", 0),
                                _whole(query, "limit", api.DEFAULT_PAGE), now)
            if view is None:
                return _error("404 Not Found", f"no job {path[len('jobs/'):]!r} is "
                              "waiting, running or being taken back on this coordinator")
            return _json(view)
        if path == "events":
            since = None if "since" not in query else _whole(query, "since", 0)
            return _json(api.events_view(self._state, since, now))
        return _error("404 Not Found", f"no /api/{path[:100]}: try /api/jobs, "
                      "/api/jobs/<job> or /api/events")

    def _page(self, path: str) -> Answer:
        """A file of the dashboard (``/`` is its index)."""
        name = "index.html" if path == "/" else path.rsplit("/", 1)[-1]
        if name in self._files and path in ("/", f"/{name}", f"/dashboard/{name}"):
            return "200 OK", KINDS[name[name.rfind("."):]], self._files[name]
        return _error("404 Not Found", f"no {path[:100]!r}: the dashboard is at /")


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """A request's head, read within the handshake deadline.

    Raises:
        Refusal: it is over a limit, or unfinished at the deadline (408).
        ConnectionResetError: the client closed before a whole head (nothing to answer).
    """
    buffer = bytearray()
    try:
        async with timeout_after(HANDSHAKE_TIMEOUT_S):
            while True:
                start = len(buffer)
                chunk = await reader.read(MAX_HEAD_BYTES + 1 - len(buffer))
                if not chunk:
                    raise ConnectionResetError("closed before a whole request")
                buffer += chunk
                end = end_of_head(buffer, start)
                if end >= 0:
                    return bytes(buffer[:end])
                refusal = too_large(buffer)
                if refusal is not None:
                    raise refusal
    except TimeoutError:
        if not buffer:
            raise  # an idle connection: closed without a word
        raise Refusal("408 Request Timeout", f"the request's head was not whole within "
                      f"{HANDSHAKE_TIMEOUT_S} s") from None


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read and drop what the client still sends, for a moment, before closing."""
    with contextlib.suppress(OSError, TimeoutError):
        if writer.can_write_eof():
            writer.write_eof()
        async with timeout_after(LINGER_S):
            while await reader.read(MAX_HEAD_BYTES):
                pass


def served_to(peer: object, path: str) -> bool:
    """Whether a server that is not public answers ``path`` to a client at ``peer`` (its
    socket address): a client on this host anything, another one :data:`OPEN_TO_THE_NETWORK`."""
    host = peer[0] if isinstance(peer, tuple) and peer else None
    return path in OPEN_TO_THE_NETWORK or (isinstance(host, str) and is_loopback(host))


def _whole(query: dict[str, str], name: str, default: int) -> int:
    value = query.get(name)
    if value is None:
        return default
    if not _WHOLE.fullmatch(value):
        raise Refusal("400 Bad Request", f"{name} must be a whole number of at most 18 "
                      f"digits, and {value[:40]!r} is not one")
    return int(value)


def _json(value: Any) -> Answer:
    return "200 OK", "application/json", json.dumps(value, separators=(",", ":")).encode()


def _error(status: str, text: str) -> Answer:
    return status, "application/json", json.dumps({"error": text}).encode()


def _peer(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


def _dashboard_files() -> dict[str, bytes]:
    """The dashboard's files by name: the only names its pages can be."""
    folder = importlib.resources.files("asyncoll.coordinator") / "dashboard"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir()
            if entry.is_file() and entry.name[entry.name.rfind("."):] in KINDS}


def security_headers(page: bytes) -> str:
    """The header lines every answer carries, each ending in CRLF; the policy lets the inline
    script and style of ``page`` (the dashboard) run, and nothing else."""
    def hashes(tag: bytes) -> str:
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(m).digest()).decode()}'"
                        for m in re.findall(rb"<" + tag + rb">(.*?)</" + tag + rb">", page,
                                            re.DOTALL)) or "'none'"
    policy = (f"default-src 'none'; script-src {hashes(b'script')}; style-src "
              f"{hashes(b'style')}; connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")
    return (f"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            f"X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"
            f"Content-Security-Policy: {policy}\r\n")

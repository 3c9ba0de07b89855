"""The coordinator's dashboard page in headless Chromium (issue 43).

The server under test is the ``coordinator`` fixture: for now a stand-in of the
JSON API (``FakeCoordinator``, fixture data in the API's contract) that serves
the packaged page the way the coordinator does, token check included. Tests read
the page's DOM after Chromium ran its script for some seconds of virtual time
(``--dump-dom``), so they see what a person sees after a few polls.

The real coordinator's page is test_dashboard_live.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

import pytest

from asyncoll.coordinator.http import security_headers

pytestmark = pytest.mark.timeout(120)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium (or chromium-browser) on PATH: the dashboard page "
    "tests need a headless browser (Debian: apt-get install chromium)")

PAGE = resources.files("asyncoll.coordinator").joinpath("dashboard", "index.html")
TOKEN = "s3cret-token"
#: What the hang view must show verbatim: the words of `asyncoll status`.
STUCK_LINE = "rank 2 is at all_reduce #812 of group 0; ranks 0, 1 wait in #813 for 14 s"
TOKEN_MESSAGE = "this coordinator needs its token: open the page with ?token="
#: Seconds of the page's own (virtual) time Chromium runs before it reports.
VIRTUAL_TIME_MS = 8000
BROWSER_TIMEOUT_S = 60.0


# -- the fixture data, in the API's contract -----------------------------------------------

def member(rank: int, state: str = "running", operation: str = "") -> dict[str, Any]:
    return {"rank": rank, "host": "127.0.0.1", "hostname": "vm", "pid": 4000 + rank,
            "state": state, "ops": 400 + rank, "ops_per_s": 200.0 - rank,
            "heartbeat_age_s": 1.2, "operation": operation,
            "history": [190.0 + (i % 7) for i in range(60)]}


def job(name: str, members: list[dict[str, Any]], stuck: list[str],
        stragglers: list[dict[str, Any]]) -> dict[str, Any]:
    """A job's /api/jobs/<job> reply, with all its members (the server pages them)."""
    size = len(members)
    return {"job": name, "state": "running", "generation": 0, "world_size": size, "elastic": 0,
            "age_s": 64.2, "ops_per_s": 812.5,
            # One member gone for the last minute: the live line steps down.
            "history": [[300 - 2 * i, 700.0 + (i * 37) % 200, size - (i > 120)]
                        for i in range(150)],
            "states": {"running": size, "left": 0, "pending": 0, "waiting": 0, "adopting": 0},
            "members": members, "stuck": stuck, "stragglers": stragglers}


def small_job() -> dict[str, Any]:
    """3 members; rank 2 is behind: one stuck line and one straggler name it."""
    return job("train", [member(0, operation="all_reduce #813 of group 0, running for 14 s"),
                         member(1, operation="all_reduce #813 of group 0, running for 14 s"),
                         member(2, operation="all_reduce #812 of group 0, done")],
               stuck=[STUCK_LINE],
               stragglers=[{"group_id": 0, "rank": 2, "last": 5, "operations": 40,
                            "median_late_s": 0.012}])


def wide_job() -> dict[str, Any]:
    return job("wide 4096", [member(rank) for rank in range(4096)], stuck=[], stragglers=[])


EVENTS = [
    {"id": 1, "time": 1733360000.5, "job": "train", "kind": "started",
     "text": "job train started with 3 members."},
    {"id": 2, "time": 1733360004.0, "job": "train", "kind": "reconfigured",
     "text": "job train is in generation 0 with 3 members."},
]


# -- the server under test -----------------------------------------------------------------

class FakeCoordinator:
    """A stand-in for the coordinator's HTTP side: the page, the JSON API and its token.

    Serves ``jobs`` (full /api/jobs/<job> replies whose members it pages) and
    ``events`` on 127.0.0.1 from a thread, and records each request's path and
    Authorization header in ``requests``.
    """

    def __init__(self, jobs: list[dict[str, Any]], events: list[dict[str, Any]],
                 token: str | None) -> None:
        self.jobs = {entry["job"]: entry for entry in jobs}
        self.events = events
        self.token = token
        #: The token to want from the page's first API request on: a token that changed.
        self.token_after_page: str | None = None
        #: API paths answered with a server error, as a coordinator in trouble would.
        self.failing: set[str] = set()
        self.started = time.monotonic()
        self.requests: list[tuple[str, str | None]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/", **query: str) -> str:
        return f"http://{self.address}{path}" + (
            "?" + urllib.parse.urlencode(query) if query else "")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def reply(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        """(status, JSON body) for an API path: the contract's three endpoints."""
        if path == "/api/jobs":
            rows = [{key: entry[key] for key in ("job", "state", "generation", "world_size",
                                                 "age_s", "ops_per_s")}
                    | {"live": len(entry["members"]), "pending": 0, "left": 0, "hosts": 1,
                       "stuck": len(entry["stuck"]), "stragglers": len(entry["stragglers"])}
                    for entry in self.jobs.values()]
            return 200, {"coordinator": {"address": self.address,
                                         "uptime_s": time.monotonic() - self.started},
                         "jobs": rows[:200], "more": max(0, len(rows) - 200)}
        if path.startswith("/api/jobs/"):
            entry = self.jobs.get(urllib.parse.unquote(path[len("/api/jobs/"):]))
            if entry is None:
                return 404, {"error": "no such job"}
            offset, limit = int(query.get("offset", 0)), int(query.get("limit", 100))
            members = entry["members"]
            return 200, entry | {"members": {"total": len(members), "offset": offset,
                                             "limit": limit,
                                             "items": members[offset:offset + limit]}}
        if path == "/api/events":
            since = int(query.get("since", 0))
            after = [event for event in self.events if event["id"] >= since][:200]
            return 200, {"events": after,
                         "next": after[-1]["id"] + 1 if after else max(since, 1)}
        return 404, {"error": f"no such page: {path}"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                header = self.headers.get("Authorization")
                fake.requests.append((self.path, header))
                if fake.token is not None and header != f"Bearer {fake.token}" \
                        and query.get("token") != fake.token:
                    self.send_json(401, {"error": "this coordinator needs its token"})
                elif parsed.path in fake.failing:
                    self.send_json(500, {"error": "the coordinator failed"})
                elif parsed.path in ("/", "/index.html"):
                    self.send(200, "text/html; charset=utf-8", PAGE.read_bytes())
                    if fake.token_after_page is not None:
                        fake.token = fake.token_after_page
                else:
                    self.send_json(*fake.reply(parsed.path, query))

            def send_json(self, status: int, body: Any) -> None:
                self.send(status, "application/json", json.dumps(body).encode())

            def send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                # The coordinator's own headers: the page must run under its policy.
                for line in security_headers(PAGE.read_bytes()).splitlines():
                    self.send_header(*line.split(": ", 1))
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def coordinator() -> Iterator[FakeCoordinator]:
    """The server under test, with a token, a 3-member job and a 4096-member one."""
    server = FakeCoordinator([small_job(), wide_job()], EVENTS, TOKEN)
    yield server
    server.close()


# -- the browser ---------------------------------------------------------------------------

def chromium(*args: str) -> str:
    """Run headless Chromium with ``args`` for VIRTUAL_TIME_MS of page time; its stdout.

    A fresh profile each run, so that runs in parallel do not share one; its own
    process group, so that a timeout kills its helper processes too.
    """
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="asyncoll-chromium-") as profile:
        proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             f"--user-data-dir={profile}", f"--virtual-time-budget={VIRTUAL_TIME_MS}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=10)
            raise AssertionError(f"chromium ran past {BROWSER_TIMEOUT_S} s:\n{err}") from None
    assert proc.returncode == 0, f"chromium exited with {proc.returncode}:\n{err}"
    return out


class Dom(HTMLParser):
    """What a test asks of a dumped DOM: attributes of elements, and text by element id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.html = html
        self.elements: list[dict[str, str | None]] = []
        self._open: list[tuple[str, str | None]] = []  # (tag, id) of the elements we are in
        self._texts: dict[str, list[str]] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(dict(attrs, tag=tag))
        if tag not in ("br", "hr", "img", "input", "meta", "link", "polyline", "line"):
            self._open.append((tag, dict(attrs).get("id")))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self._texts.setdefault(ident, []).append(data)

    def text(self, ident: str) -> str:
        return "".join(self._texts.get(ident, []))

    def values(self, attribute: str) -> list[str | None]:
        return [element[attribute] for element in self.elements if attribute in element]

    def element(self, ident: str) -> dict[str, str | None]:
        (found,) = [element for element in self.elements if element.get("id") == ident]
        return found


def open_page(url: str) -> Dom:
    return Dom(chromium("--dump-dom", url))


# -- the tests -----------------------------------------------------------------------------

@needs_chromium
def test_the_page_shows_the_jobs_and_the_selected_jobs_members(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=train")
    assert {"train", "wide 4096"} <= set(dom.values("data-job"))
    assert dom.values("data-rank") == ["0", "1", "2"]
    assert dom.text("job-title") == "job train"
    assert dom.text("pager") == "1-3 of 3"
    assert dom.values("data-event") == ["2", "1"]  # newest first
    assert "job train started with 3 members." in dom.text("events")
    assert dom.values("data-straggler") == ["2"]
    assert dom.element("error").get("hidden") is not None
    assert "<title>stuck: asyncoll coordinator</title>" in dom.html
    # It polled (no reload), and every API call carried the token as a header.
    api = [(path, header) for path, header in coordinator.requests if path.startswith("/api/")]
    assert sum(path == "/api/jobs" for path, _ in api) >= 2, api
    assert all(header == f"Bearer {TOKEN}" and "token=" not in path for path, header in api), api


@needs_chromium
def test_the_hang_view_shows_the_stuck_line_naming_rank_2(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=train")
    assert STUCK_LINE in dom.text("hang")
    assert "alarm" in (dom.element("hang").get("class") or "")


@needs_chromium
def test_a_4096_member_job_renders_one_page_of_100_members(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=" + urllib.parse.quote("wide 4096"))
    assert dom.values("data-rank") == [str(rank) for rank in range(100)]
    assert dom.text("pager") == "1-100 of 4096"
    assert dom.element("prev").get("disabled") is not None
    assert dom.element("next").get("disabled") is None
    assert dom.text("hang") == "no rank is stuck"
    asked = [path for path, _ in coordinator.requests if path.startswith("/api/jobs/")]
    assert asked and all(path.endswith("?offset=0&limit=100") for path in asked), asked


@needs_chromium
def test_the_address_names_the_page_of_members_and_the_last_page_ends_the_pager(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=wide%204096&offset=4000")
    assert dom.values("data-rank") == [str(rank) for rank in range(4000, 4096)]
    assert dom.text("pager") == "4001-4096 of 4096"
    assert dom.element("prev").get("disabled") is None
    assert dom.element("next").get("disabled") is not None


@needs_chromium
def test_a_job_the_coordinator_does_not_know_shows_its_error_and_the_page_goes_on(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=gone")
    assert dom.text("job-title") == "job gone"
    assert dom.text("job-summary") == "no such job"
    assert dom.values("data-rank") == []
    assert {"train", "wide 4096"} <= set(dom.values("data-job"))
    assert dom.element("error").get("hidden") is not None


def test_the_api_and_the_page_refuse_a_request_without_the_token(coordinator):
    for path in ("/api/jobs", "/api/jobs/train", "/api/events?since=0", "/"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(coordinator.url(path), timeout=10)
        assert refused.value.code == 401
        assert "error" in json.loads(refused.value.read())
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with urllib.request.urlopen(urllib.request.Request(coordinator.url("/api/jobs"),
                                                       headers=headers), timeout=10) as reply:
        assert reply.status == 200


@needs_chromium
def test_the_page_says_it_needs_the_token_when_the_api_refuses_it(coordinator):
    # The page itself needs the token too, so the page meets a refusal when the
    # token it was opened with no longer holds (a coordinator restarted with a new one).
    coordinator.token_after_page = "a-new-token"
    dom = open_page(coordinator.url(token=TOKEN) + "#job=train")
    assert TOKEN_MESSAGE in dom.text("error"), dom.text("error")
    assert dom.element("error").get("hidden") is None
    assert dom.values("data-job") == []


@needs_chromium
def test_the_events_show_without_waiting_for_the_jobs_facts(coordinator):
    # The events were asked for last, after the jobs and the job's reply: a page
    # whose job could not be had showed none (and a screenshot at load, none yet).
    coordinator.failing.add("/api/jobs/train")
    dom = open_page(coordinator.url(token=TOKEN) + "#job=train")
    assert dom.values("data-event") == ["2", "1"]
    assert "job train started with 3 members." in dom.text("events")
    assert "the coordinator failed" in dom.text("error")


@needs_chromium
def test_an_empty_stragglers_table_says_there_is_no_straggler(coordinator):
    dom = open_page(coordinator.url(token=TOKEN) + "#job=" + urllib.parse.quote("wide 4096"))
    assert dom.values("data-straggler") == []
    assert dom.text("stragglers").strip().endswith(
        "no straggler: no rank arrives last, and late, in most of a group's sampled operations")


@needs_chromium
def test_a_screenshot_of_the_page_is_a_png(coordinator, tmp_path):
    path = tmp_path / "dashboard.png"
    chromium(f"--screenshot={path}", "--window-size=1280,900",
             coordinator.url(token=TOKEN) + "#job=train")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, len(data)


def test_the_page_loads_nothing_from_elsewhere():
    page = PAGE.read_text()
    # The one absolute URL is SVG's namespace, which is a name, never fetched.
    assert [part.split('"')[0] for part in page.split("http")[1:]] == ["://www.w3.org/2000/svg"]
    assert "<link" not in page and "<script src" not in page

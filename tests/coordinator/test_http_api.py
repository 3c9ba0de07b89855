"""The coordinator's HTTP server (``--http-port``): its JSON API, its events, its token.

A real coordinator and three real members in this process (one event loop);
requests go through urllib in a thread, as any HTTP client's would.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

from asyncoll._runtime.init_method import resolve
from asyncoll._runtime.runtime import runtime
from asyncoll._runtime.settings import Settings
from asyncoll.aio import World
from asyncoll.coordinator.server import Coordinator

pytestmark = pytest.mark.timeout(60)
TOKEN = b"s3cret"


async def get(port: int, path: str, headers: dict[str, str] | None = None,
              method: str = "GET") -> tuple[int, Any]:
    """(status, decoded JSON) of ``path`` on the coordinator's HTTP server."""
    def fetch() -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
    return await asyncio.to_thread(fetch)


@pytest.fixture
async def job() -> AsyncIterator[tuple[Coordinator, list[World]]]:
    """A coordinator with an HTTP server, and a running job "web" of three members."""
    settings = Settings.from_environment()
    coordinator = Coordinator("127.0.0.1", 0, settings.token, http_port=0)
    await coordinator.start()
    url = f"tcp://127.0.0.1:{coordinator.port}"
    worlds: list[World] = []
    try:
        worlds = [World(s) for s in await asyncio.gather(*(runtime().join(
            resolve(None, url, 3, r, 20.0, "web", settings.environment, True, 0, 0), settings)
            for r in range(3)))]
        yield coordinator, worlds
    finally:
        for world in worlds:
            await world.session.close()
        await coordinator.stop()


async def test_the_jobs_and_a_page_of_members(job) -> None:
    coordinator, _ = job
    assert coordinator.http is not None
    port = coordinator.http.port
    status, jobs = await get(port, "/api/jobs")
    assert status == 200 and jobs["more"] == 0
    assert jobs["coordinator"]["address"] == f"127.0.0.1:{coordinator.port}"
    (web,) = jobs["jobs"]
    assert (web["job"], web["state"], web["live"], web["world_size"], web["hosts"]) == (
        "web", "running", 3, 3, 1)
    status, page = await get(port, "/api/jobs/web?offset=1&limit=2")
    assert status == 200 and page["states"]["running"] == 3
    assert (page["members"]["total"], page["members"]["offset"]) == (3, 1)
    assert [m["rank"] for m in page["members"]["items"]] == [1, 2]
    assert page["stuck"] == [] and page["stragglers"] == []


async def test_events_tell_the_start_and_a_lost_member_in_order(job) -> None:
    coordinator, worlds = job
    port = coordinator.http.port
    status, first = await get(port, "/api/events")
    assert status == 200
    assert [(e["job"], e["kind"]) for e in first["events"]] == [("web", "started")]
    await worlds[2].session.client.close()  # lost: its link breaks without a goodbye
    for _ in range(100):
        status, later = await get(port, f"/api/events?since={first['next']}")
        if later["events"]:
            break
        await asyncio.sleep(0.05)
    assert [e["kind"] for e in later["events"]] == ["lost"]
    assert "rank 2" in later["events"][0]["text"] and later["next"] > first["next"]


async def test_what_is_not_a_read_of_something_that_exists_is_refused(job) -> None:
    port = job[0].http.port
    assert (await get(port, "/api/jobs/nope"))[0] == 404
    assert (await get(port, "/api/jobs/web?offset=x"))[0] == 400
    assert (await get(port, "/api/nothing"))[0] == 404
    status, body = await get(port, "/api/jobs", method="POST")
    assert status == 405 and "only GET" in body["error"]


async def test_with_a_token_every_request_needs_it() -> None:
    coordinator = Coordinator("127.0.0.1", 0, TOKEN, http_port=0)
    await coordinator.start()
    try:
        port = coordinator.http.port
        status, body = await get(port, "/api/jobs")
        assert status == 401 and "needs its token" in body["error"]
        assert (await get(port, "/api/jobs", {"Authorization": "Bearer wrong"}))[0] == 401
        assert (await get(port, "/", {}))[0] == 401
        assert (await get(port, "/api/jobs", {"Authorization": "Bearer s3cret"}))[0] == 200
        assert (await get(port, "/api/jobs?token=s3cret"))[0] == 200
    finally:
        await coordinator.stop()

"""deploy/grafana's dashboard imports as Grafana expects and names only exported metrics.

The metrics it may name are scraped from a real coordinator, in this event
loop, serving a running job: a renamed or mistyped metric shows no data in
Grafana, silently, so it is caught here instead.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncoll._defaults import PROTOCOL_VERSION
from asyncoll._rendezvous.client import CoordinatorClient
from asyncoll._wire.messages import Join, Leave
from asyncoll.coordinator import Coordinator

pytestmark = pytest.mark.timeout(30)

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "asyncoll-coordinator.json"
#: How every panel and query names its data source: the input "Import" asks for.
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

#: PromQL words that are not metric names: clauses, set operators, modifiers.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
            "or", "unless", "offset", "inf", "nan"}
#: What is never a metric name: strings, label matchers, ranges, grouping label lists.
NOT_NAMES = re.compile(r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]'
                       r"|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
#: An identifier not part of a number or a $variable, and not a function call.
IDENTIFIER = re.compile(r"(?<![\w.$:])([a-zA-Z_:][\w:]*)\b(?!\s*\()")
#: A templating query, label_values(series, label): its series is PromQL.
LABEL_VALUES = re.compile(r"label_values\((?P<series>.+),\s*\w+\s*\)")


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression (or a label_values(...) query) selects."""
    bare = NOT_NAMES.sub(" ", promql)
    return {name for name in IDENTIFIER.findall(bare) if name.lower() not in KEYWORDS}


def exported_names(exposition: str) -> set[str]:
    """Every series name a Prometheus text exposition offers, with or without samples.

    A family without samples (no straggler yet) shows only in its ``# TYPE``
    line; a histogram's series are its ``_bucket``, ``_count`` and ``_sum``.
    """
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every templating query's series."""
    for panel in board["panels"]:
        for target in panel["targets"]:
            yield f"panel {panel['title']!r} target {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        series = LABEL_VALUES.fullmatch(query)
        assert series, f"variable {variable['name']!r} is not a label_values query: {query}"
        yield f"variable {variable['name']!r}", series["series"]


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    with open(BOARD, encoding="utf-8") as file:
        return dict(json.load(file))


async def scrape_a_running_job() -> str:
    """The /metrics of a coordinator serving a running job of two members."""
    coordinator = Coordinator("127.0.0.1", 0, metrics_port=0)
    await coordinator.start()
    assert coordinator.http is not None
    url = f"http://127.0.0.1:{coordinator.http.port}/metrics"
    clients = [await CoordinatorClient.connect("127.0.0.1", coordinator.port, timeout=5)
               for _ in range(2)]
    try:
        await asyncio.gather(*(
            client.request(Join(job="j", rank=rank, world_size=2, host="127.0.0.1",
                                port=1 + rank, hostname="h", pid=1 + rank,
                                version=PROTOCOL_VERSION, timeout=10.0), 10, "rendezvous")
            for rank, client in enumerate(clients)))

        def fetch() -> str:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return str(reply.read().decode())

        # The server answers in this loop: the blocking read runs in a thread.
        return await asyncio.to_thread(fetch)
    finally:
        for client in clients:
            client.notify(Leave())
            await client.close()
        await coordinator.stop()


def test_the_board_is_an_importable_grafana_dashboard_asking_for_its_prometheus(board):
    assert board["title"] == "asyncoll coordinator"
    assert board["uid"] and board["schemaVersion"] >= 36 and board["refresh"] == "10s"
    [source] = board["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == (
        "DS_PROMETHEUS", "datasource", "prometheus")
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert "label_values(asyncoll_members" in variables["job"]["definition"]
    for variable in variables.values():
        assert variable["datasource"] == DATASOURCE, variable["name"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids), ids
    for panel in board["panels"]:
        assert panel["type"] in {"timeseries", "stat"} and panel["title"], panel
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"], panel["title"]


def test_metric_names_are_read_from_promql_but_not_functions_labels_or_ranges():
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(asyncoll_x_bucket'
                        '{instance=~"$instance", job="a b"}[$__rate_interval])))') == {
        "asyncoll_x_bucket"}
    assert metric_names("a / on (job) group_left b offset 5m") == {"a", "b"}


async def test_every_metric_the_board_names_is_one_the_coordinator_exports(board):
    exported = exported_names(await scrape_a_running_job())
    assert {"asyncoll_heartbeats_total", "asyncoll_rendezvous_seconds_bucket",
            "asyncoll_straggler_share"} <= exported, sorted(exported)
    unknown = []
    for where, promql in queries(board):
        names = metric_names(promql)
        assert names, f"{where} names no metric: {promql}"
        unknown += [f"{where}: {name}" for name in sorted(names - exported)]
    assert not unknown, f"the coordinator exports no such metric: {unknown}"

"""Shared by every test folder: a record of what skipped, and why, for CI.

With ``ASYNCOLL_SKIPPED_LOG`` set to a file, each test (or module) that
skipped adds a line ``node id<TAB>reason`` to it. .ci/run runs the README's
test command so, then runs again exactly the tests that skipped for want of
torch or Open MPI once it has installed them, instead of whole files.
"""

from __future__ import annotations

import os

import pytest


def _log_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    path = os.environ.get("ASYNCOLL_SKIPPED_LOG")
    if not path or not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{report.nodeid}\t{' '.join(reason.split())}\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _log_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _log_skip(report)

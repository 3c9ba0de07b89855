"""Shared by every test folder: a record of what skipped, and why, for CI; and
hypothesis without its per-example deadline.

With ``ASYNCOLL_SKIPPED_LOG`` set to a file, each test (or module) that
skipped adds a line ``node id<TAB>reason`` to it. .ci/run runs the README's
test command so, then runs again exactly the tests that skipped for want of
torch or Open MPI once it has installed them, instead of whole files.

hypothesis fails an example that takes over 200 ms by default: a wall-clock
threshold, which a busy machine crosses (CI runs the other Pythons' tests
beside the README's, at the lowest priority). What the properties check does
not depend on how long an example takes.
"""

from __future__ import annotations

import os

import pytest

try:
    from hypothesis import settings
except ImportError:  # the [test] extra brings it; without it no property test runs
    pass
else:
    settings.register_profile("asyncoll", deadline=None)
    settings.load_profile("asyncoll")


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

"""The suite runs strict: pyproject's pytest settings, tried on tests made to break them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

#: Tests that each break one of the settings, by file; the outcome pytest must give each.
BREAKERS = {
    "test_marked.py": '''
import pytest

@pytest.mark.nonesuch
def test_an_unregistered_marker():
    pass
''',
    "test_warned.py": '''
import types
import warnings

import pytest

from asyncoll._api.world import warn_not_member

OUTSIDER = types.SimpleNamespace(global_rank=3, ranks=[0, 1])

@pytest.mark.xfail(reason="it passes")
def test_an_xfail_that_passes():
    pass

def test_a_warning_from_asyncoll():
    warn_not_member("all_reduce", OUTSIDER, stacklevel=1)

def test_a_warning_from_asyncoll_the_test_expects():
    with pytest.warns(UserWarning, match="does not belong to the given group"):
        warn_not_member("all_reduce", OUTSIDER, stacklevel=1)

def test_a_warning_from_elsewhere():
    warnings.warn_explicit("not asyncoll's", UserWarning, "x.py", 1, module="asyncollx")
''',
}


def _outcomes(tmp_path: Path) -> dict[str, str]:
    """Each breaker's outcome under pyproject's settings, by file or test name."""
    for name, text in BREAKERS.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                           "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-rA",
                           "--continue-on-collection-errors", str(tmp_path)],
                          capture_output=True, text=True, timeout=50, cwd=tmp_path)
    found = {}
    for line in done.stdout.splitlines():
        outcome, _, where = line.partition(" ")
        if outcome in ("PASSED", "FAILED", "ERROR"):
            found[where.split(" ")[0].rpartition("::")[2] or where] = outcome
    return found


def test_the_settings_fail_an_unknown_marker_an_xpass_and_asyncolls_warnings(
        tmp_path: Path) -> None:
    found = _outcomes(tmp_path)

    assert found == {"test_marked.py": "ERROR",
                     "test_an_xfail_that_passes": "FAILED",
                     "test_a_warning_from_asyncoll": "FAILED",
                     "test_a_warning_from_asyncoll_the_test_expects": "PASSED",
                     "test_a_warning_from_elsewhere": "PASSED"}, found


def test_stacks_are_dumped_before_the_test_timeout_ends_a_hung_test(
        pytestconfig: pytest.Config) -> None:
    dump = float(pytestconfig.getini("faulthandler_timeout"))

    assert 0 < dump < float(pytestconfig.getini("timeout"))

"""Linters as tests: mypy --strict on the package, ruff's error rules on all code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_package_passes_mypy_strict():
    pytest.importorskip("mypy", reason="mypy is in the [test] extra; install it to run this")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                            text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_has_no_pyflakes_errors_or_lines_over_99_characters():
    pytest.importorskip("ruff", reason="ruff is in the [test] extra; install it to run this")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E9,E501",
                             "--line-length", "99", "asyncoll", "tests", "examples",
                             "benchmarks", "client"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

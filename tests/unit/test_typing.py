"""The package is mypy --strict clean (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


def test_package_passes_mypy_strict():
    pytest.importorskip("mypy", reason="mypy is in the [test] extra; install it to run this")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True,
                            text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr

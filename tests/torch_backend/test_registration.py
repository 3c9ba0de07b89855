"""Registering the backend: the entry point torch loads, and registration on import asyncoll."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import conftest

pytestmark = pytest.mark.timeout(60)


def test_pyproject_declares_the_entry_points_the_tests_use() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((conftest.REPO / "pyproject.toml").read_text())["project"]

    assert project["entry-points"]["torch.backends"] == {"asyncoll": conftest.ENTRY_POINT}
    assert project["entry-points"]["torch.distributed.backends"] == {
        "asyncoll": conftest.REGISTRAR}
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["torch"])


def test_entry_point_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncoll._torch_backend import registration

    def broken() -> bool:
        raise RuntimeError("no torch here")

    monkeypatch.setattr(registration, "register", broken)
    registration.load()  # an exception here would make `import torch` fail


def _run(code: str, env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=50)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_import_torch_registers_the_backend_through_the_entry_point(
        entry_point_dir: Path) -> None:
    pytest.importorskip("torch")
    code = ("import torch.distributed as d; "
            "print('ASYNCOLL' in d.Backend._plugins, d.Backend.default_device_backend_map"
            "['cpu'])")

    assert _run(code, conftest.environment(entry_point_dir)) == "True gloo"


def test_import_asyncoll_registers_the_backend_when_torch_is_loaded(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = conftest.environment(tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    code = ("import torch.distributed as d; before = 'ASYNCOLL' in d.Backend._plugins; "
            "import asyncoll; print(before, 'ASYNCOLL' in d.Backend._plugins)")

    assert _run(code, env) == "False True"


def test_import_asyncoll_does_not_import_torch(tmp_path: Path) -> None:
    code = "import sys, asyncoll, asyncoll._torch_backend; print('torch' in sys.modules)"

    assert _run(code, conftest.environment(tmp_path)) == "False"


def test_torch_finds_the_backend_by_name_without_the_autoload(entry_point_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch.distributed.Backend, "_ensure_backend_registered"):
        pytest.skip(f"torch {torch.__version__} looks backends up by name only from 2.14 on")
    env = conftest.environment(entry_point_dir, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # What init_process_group(backend="asyncoll") does first on torch 2.14 (BackendConfig).
    code = ("import torch.distributed as d; before = 'ASYNCOLL' in d.Backend._plugins; "
            "d.Backend._ensure_backend_registered('asyncoll'); "
            "print(before, 'ASYNCOLL' in d.Backend._plugins)")

    assert _run(code, env) == "False True"


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "1.13.1"])
def test_a_torch_older_than_2_14_is_refused_naming_the_version_and_the_fix(version: str) -> None:
    from asyncoll._torch_backend.registration import check_torch_version

    with pytest.raises(RuntimeError, match=re.escape(f"this is torch {version}: pip install "
                                                     "'torch>=2.14'")):
        check_torch_version(version)


@pytest.mark.parametrize("version", ["2.14.0", "2.14.1", "2.15.0+cu132", "3.0.0"])
def test_torch_2_14_and_newer_are_taken(version: str) -> None:
    from asyncoll._torch_backend.registration import check_torch_version

    check_torch_version(version)

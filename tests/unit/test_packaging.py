"""What the package says of itself matches what CI proves."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import asyncoll
from asyncoll import _native

ROOT = Path(__file__).resolve().parents[2]
#: The Python that CI's machine runs as python3, on which the whole suite runs.
CI_MAIN_PYTHON = "3.11"


def _ci_pythons() -> set[str]:
    script = (ROOT / ".ci" / "run").read_text()
    others = re.search(r"^OTHER_PYTHONS=\(([^)]*)\)", script, re.MULTILINE)
    assert others, ".ci/run no longer names OTHER_PYTHONS: update this test with it"
    return {CI_MAIN_PYTHON, *others.group(1).split()}


def test_the_python_classifiers_are_exactly_the_pythons_ci_runs_the_tests_on():
    pyproject = (ROOT / "pyproject.toml").read_text()
    classified = set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject))
    assert classified == _ci_pythons()


def test_the_oldest_python_ci_runs_is_the_one_pyproject_requires():
    pyproject = (ROOT / "pyproject.toml").read_text()
    required = re.search(r'^requires-python = ">=(3\.\d+)"', pyproject, re.MULTILINE)
    assert required, "pyproject.toml has no requires-python of the form >=3.N"
    oldest = min(_ci_pythons(), key=lambda version: tuple(map(int, version.split("."))))
    assert required.group(1) == oldest


@pytest.mark.parametrize("command, main", [
    ("asyncoll", "asyncoll.cli"), ("asyncoll-run", "asyncoll.run"),
    ("asyncoll-coordinator", "asyncoll.coordinator.cli"), ("asyncoll-bench", "asyncoll.bench")])
def test_every_command_prints_its_version_and_which_optional_parts_are_installed(
        command, main, capsys):
    with pytest.raises(SystemExit) as exited:
        importlib.import_module(main).main(["--version"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{command} (asyncoll) {asyncoll.__version__}"
    for part in ("torch", "prometheus_client", "TLS"):
        assert any(line.startswith(f"{part}: ") for line in lines), lines
    assert lines[-1] == f"kernels: {_native.describe()}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("main", ["asyncoll.cli", "asyncoll.run", "asyncoll.coordinator.cli",
                                  "asyncoll.bench"])
def test_a_command_whose_reader_closed_its_output_ends_without_a_traceback(main):
    """``asyncoll --version | head -1`` where head has gone before the command writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", f"import sys; from {main} import main; "
                               "sys.exit(main(['--version']))"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=100)
    finally:
        os.close(write)

    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.timeout(60)
def test_python_m_asyncoll_version_names_the_active_kernels_and_the_switch_turns_c_off():
    def kernels(**env: str) -> str:
        done = subprocess.run([sys.executable, "-m", "asyncoll", "--version"],
                              capture_output=True, text=True, timeout=50,
                              env={**os.environ, **env}, check=True)
        return done.stdout.splitlines()[-1]

    assert kernels(ASYNCOLL_PURE_PYTHON="1") == "kernels: pure Python (ASYNCOLL_PURE_PYTHON=1)"
    # Built or not, whatever this process's own switch says.
    built = importlib.util.find_spec("asyncoll._native._arena") is not None
    expected = "kernels: native (C)" if built else "kernels: pure Python"
    assert kernels(ASYNCOLL_PURE_PYTHON="0").startswith(expected)


@pytest.mark.timeout(60)
def test_all_reduce_and_barrier_are_the_python_functions_with_the_extension_off():
    check = ("import asyncoll; from asyncoll._api import blocking; "
             "assert asyncoll.all_reduce is blocking.all_reduce; "
             "assert asyncoll.barrier is blocking.barrier")
    subprocess.run([sys.executable, "-c", check], timeout=50, check=True,
                   env={**os.environ, "ASYNCOLL_PURE_PYTHON": "1"})


def test_the_version_is_written_once_and_the_installed_metadata_says_the_same():
    assert re.search(r'^version = "', (ROOT / "pyproject.toml").read_text(), re.MULTILINE) is None
    assert metadata.version("asyncoll") == asyncoll.__version__

"""torch's DistributedTest on the asyncoll backend passes every test gloo passes.

``suite_module.py`` is torch's own suite (``DistributedTest._DistTestBase``,
instantiated as pytorch's ``test_distributed_spawn.py`` does) with every
backend ``"gloo"`` swapped for ``"asyncoll"``. Each world size runs it in a
pytest of its own (the suite reads its environment at import) and reads
the outcome of every test from that run's JUnit XML.

What gloo passes on the same torch is read from ``gloo/<torch>-ws<N>.txt``
(written by ``python tests/torch_suite/record_gloo.py``, which runs the
same suite on gloo); for a torch with no such file the suite runs on gloo
here first, so a new torch is compared all the same, only slower.

A test gloo passes may fail on asyncoll only for a reason listed in
:data:`NOT_OURS`, and then only with that reason's message: each is a
test of the name or of torch's own refusal, not of what the backend does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest", reason="torch's test suite needs expecttest")

HERE = Path(__file__).parent
WORLD_SIZES = (2, 3)
#: Minutes one run of the suite may take (it takes about two at world size 2 here).
RUN_LIMIT_S = 1200

#: Tests gloo passes that fail on asyncoll for a reason not the backend's, with
#: the message (a regular expression) their failure must show, and the torch
#: versions it applies to (a predicate on the version's (major, minor)).
NOT_OURS: dict[str, tuple[str, object, str]] = {
    "test_get_backend": (
        r"String comparison failed: 'asyncoll' != 'gloo'",
        lambda version: True,
        "compares dist.get_backend() with the name the suite was started with, 'gloo': "
        "under the swap it is 'asyncoll', as it must be"),
    "test_monitored_barrier_gloo": (
        r"monitored_barrier is only implemented for GLOO backend",
        lambda version: version < (2, 14),
        "torch < 2.14 refuses monitored_barrier on any backend but gloo, before the "
        "backend is called (distributed_c10d.monitored_barrier)"),
    "test_monitored_barrier_gloo_rank_0_timeout": (
        r"monitored_barrier is only implemented for GLOO backend",
        lambda version: version < (2, 14),
        "as test_monitored_barrier_gloo"),
    "test_monitored_barrier_gloo_subgroup": (
        r"monitored_barrier is only implemented for GLOO backend",
        lambda version: version < (2, 14),
        "as test_monitored_barrier_gloo"),
}


def torch_version() -> str:
    """torch's version without its local part ("2.13.0", not "2.13.0+cpu")."""
    return str(torch.__version__).split("+")[0]


def run_suites(backend: str, world_sizes: tuple[int, ...],
               tmp_path: Path) -> dict[int, dict[str, tuple[str, str]]]:
    """Run the suite on ``backend`` at each world size, all at once (each test's ranks
    mostly wait, so two runs share two processors well); each test's (outcome,
    message) by name, by world size."""
    runs = {}
    for world_size in world_sizes:
        report = tmp_path / f"{backend}-ws{world_size}.xml"
        init = tmp_path / f"init-{backend}-{world_size}"
        init.mkdir()
        log = open(tmp_path / f"{backend}-ws{world_size}.log", "w+")
        env = {**os.environ, "BACKEND": "gloo", "WORLD_SIZE": str(world_size),
               # The suite's file:// tests run only when it is told it uses a file.
               "INIT_METHOD": f"file://{init}/shared_init_file",
               "ASYNCOLL_SUITE_BACKEND": backend,
               "PYTORCH_PRINT_REPRO_ON_FAILURE": "0"}
        command = [sys.executable, "-m", "pytest", str(HERE / "suite_module.py"), "-q",
                   "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
                   f"--junitxml={report}", f"--rootdir={HERE}", "-o", "addopts=",
                   # torch's tests run as torch runs them, not under this suite's rules.
                   "-o", "strict_markers=false", "-o", "filterwarnings="]
        runs[world_size] = (subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log,
                                             stderr=subprocess.STDOUT), report, log)
    results = {}
    for world_size, (proc, report, log) in runs.items():
        try:
            proc.wait(timeout=RUN_LIMIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with log:
            log.seek(0)
            text = log.read()
        if not report.exists():
            raise AssertionError(f"the suite on {backend} at world size {world_size} wrote "
                                 f"no report:\n{text[-12000:]}")
        results[world_size] = outcomes(report)
    return results


def run_suite(backend: str, world_size: int, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Run the suite on ``backend``; each test's (outcome, message) by name."""
    return run_suites(backend, (world_size,), tmp_path)[world_size]


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """(outcome, message) by test name, from a JUnit XML report."""
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "failed"}.get(child.tag, "skipped")
                message = f"{child.get('message', '')}\n{child.text or ''}"
                break
        results[case.get("name", "")] = (outcome, message)
    return results


def gloo_passes(world_size: int, tmp_path: Path) -> set[str]:
    """The tests gloo passes on this torch: recorded, or run now."""
    recorded = HERE / "gloo" / f"{torch_version()}-ws{world_size}.txt"
    if recorded.exists():
        return {line.strip() for line in recorded.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    return {name for name, (outcome, _) in run_suite("gloo", world_size, tmp_path).items()
            if outcome == "passed"}


@pytest.fixture(scope="module")
def asyncoll_runs(request, tmp_path_factory) -> dict[int, dict[str, tuple[str, str]]]:
    """The suite on asyncoll at every world size this session selected (run together):
    CI names one world size for each torch version."""
    selected = tuple(sorted({item.callspec.params["world_size"] for item in request.session.items
                             if item.module is request.module and hasattr(item, "callspec")}))
    return run_suites("asyncoll", selected, tmp_path_factory.mktemp("asyncoll"))


@pytest.mark.timeout(3 * RUN_LIMIT_S + 60)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_test_gloo_passes_passes_on_asyncoll(world_size, asyncoll_runs, tmp_path):
    ours = asyncoll_runs[world_size]
    theirs = gloo_passes(world_size, tmp_path)
    version = tuple(int(part) for part in torch_version().split(".")[:2])
    failed = {}
    for name in sorted(theirs):
        outcome, message = ours.get(name, ("missing", "not in asyncoll's run"))
        if outcome == "passed":
            continue
        excuse = NOT_OURS.get(name)
        if excuse is not None and excuse[1](version) and re.search(excuse[0], message):
            continue
        failed[name] = f"{outcome}: {message.strip()[:3000]}"
    passed = sum(1 for outcome, _ in ours.values() if outcome == "passed")
    assert not failed, (
        f"torch {torch_version()}, world size {world_size}: {len(failed)} of the {len(theirs)} "
        f"tests gloo passes do not pass on asyncoll (it passed {passed}):\n\n"
        + "\n\n".join(f"{name}: {why}" for name, why in failed.items()))
    # An empty record (or a suite that ran nothing) would make the check above vacuous.
    assert len(theirs) > 50, f"gloo passed only {len(theirs)} tests: is the suite running?"

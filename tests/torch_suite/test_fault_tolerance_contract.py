"""torch's fault-tolerance contract: asyncoll passes every scenario gloo passes.

``fault_tolerance_contract.py`` restates, scenario by scenario, every test of
the public versions of pytorch's ``test/distributed/test_c10d_fault_tolerance.py``
(3 ranks, a FileStore, ``enable_reconfigure=True``, ``dist._reconfigure``
to handles exchanged through the store); ``contract_runner.py`` runs them.
Here both backends run every scenario, side by side in two runner processes
(gloo's whole run takes seconds, so it is not recorded), and each scenario
is one test:

- upstream runs it on nccl2 or CUDA only: skipped on both, with the reason,
  as upstream skips it for gloo;
- gloo fails it on this torch (the early version's groups of one sharing a
  uuid, which later versions changed): skipped, with gloo's failure;
- otherwise it must pass on asyncoll.

The table of outcomes (scenario x backend) on the installed torch:
``PYTHONPATH=$PWD /work/venv-t14/bin/python tests/torch_suite/contract_runner.py``.
torch before 2.14 has no reconfigure API: there the module is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not hasattr(dist, "_reconfigure"):
    pytest.skip(f"torch {torch.__version__} has no reconfigure API (dist._reconfigure, "
                "which torch 2.14 added): nothing of the fault-tolerance suite runs on it",
                allow_module_level=True)

from .fault_tolerance_contract import SCENARIOS  # noqa: E402

HERE = Path(__file__).parent
REPO = HERE.parents[1]
#: The longest one backend's run may take (every scenario failing at its own
#: deadline would take longer; a run that does is hung, and fails here).
RUN_S = 900
BACKENDS = ("gloo", "asyncoll")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each backend's outcome of each scenario, by backend and scenario name."""
    workdir = tmp_path_factory.mktemp("fault_tolerance")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                         if p)}
    runs = {}
    for backend in BACKENDS:
        report, log = workdir / f"{backend}.json", open(workdir / f"{backend}.log", "w+")
        command = [sys.executable, str(HERE / "contract_runner.py"), "--backend", backend,
                   "--json", str(report)]
        runs[backend] = (subprocess.Popen(command, env=env, cwd=workdir, stdout=log,
                                          stderr=subprocess.STDOUT), report, log)
    found = {}
    for backend, (proc, report, log) in runs.items():
        try:
            proc.wait(timeout=RUN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with log:
            log.seek(0)
            text = log.read()
        if proc.returncode != 0 or not report.exists():
            raise AssertionError(f"the scenarios' run on {backend} ended with exit code "
                                 f"{proc.returncode} and no outcomes:\n{text[-8000:]}")
        found[backend] = json.loads(report.read_text())["outcomes"][backend]
    return found


@pytest.mark.timeout(RUN_S + 60)
@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_asyncoll_passes_the_scenario_where_gloo_does(
        name: str, outcomes: dict[str, dict[str, Any]]) -> None:
    gloo, ours = outcomes["gloo"][name], outcomes["asyncoll"][name]
    if gloo["status"] == "skipped":
        assert ours["status"] == "skipped", ours
        pytest.skip(gloo["detail"])
    if gloo["status"] != "passed":
        pytest.skip(f"gloo does not pass it on torch {torch.__version__} either: "
                    f"{gloo['reason']}")

    assert ours["status"] == "passed", (
        f"{name} passes on gloo and {ours['status']} on asyncoll ({ours['reason']}):\n"
        f"{ours['detail'][:6000]}")


@pytest.mark.timeout(RUN_S + 60)
def test_gloo_passes_every_scenario_the_current_versions_run_on_it(
        outcomes: dict[str, dict[str, Any]]) -> None:
    # Without this, a harness that could start no group would skip every test above.
    current = [s.name for s in SCENARIOS if not s.skip and not s.superseded]
    failed = {name: outcomes["gloo"][name]["reason"] for name in current
              if outcomes["gloo"][name]["status"] != "passed"}

    assert not failed, f"gloo fails {len(failed)} of {len(current)} scenarios: {failed}"

"""A real client: DistributedDataParallel trains the same with backend='asyncoll' as with gloo.

workers/ddp.py trains one small MLP for 40 steps twice in each process, once with DDP over a
gloo group and once over the asyncoll default group, on 2 and on 4 processes. DDP reaches
the backend from C++ (parameter broadcast at construction, one allreduce per gradient
bucket, through the futures of its reducer): the loss curves and the final parameters must
agree to float32 tolerance, and every rank must end with the same parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import conftest

torch = pytest.importorskip("torch")

JOB_TIMEOUT_S = 120
STEPS = 40
#: Summation order differs between the backends; over 40 steps the drift stays far below.
TOLERANCE = 1e-4


@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_losses_and_parameters_match_gloo(world_size: int, entry_point_dir: Path) -> None:
    port = conftest.free_port()
    env = conftest.environment(entry_point_dir, DUMP_AFTER_S=str(JOB_TIMEOUT_S - 15),
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                               WORLD_SIZE=str(world_size), STEPS=str(STEPS))
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "ddp.py", world_size, env,
                                          JOB_TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outcomes), report
    results = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outcomes]
    for rank, result in enumerate(results):
        gloo, ours = result["losses"]["gloo"], result["losses"]["asyncoll"]
        assert result["rank"] == rank and len(gloo) == len(ours) == STEPS, report
        assert torch.allclose(torch.tensor(ours), torch.tensor(gloo), rtol=TOLERANCE,
                              atol=TOLERANCE), (rank, gloo, ours)
        assert result["max_parameter_difference"] < TOLERANCE, report
        assert result["ranks_agree"], report
        assert sum(ours[-10:]) < sum(ours[:10])  # it trained


@pytest.mark.timeout(120)
def test_a_lost_peer_fails_ddps_backward_with_an_error_not_a_crash(entry_point_dir: Path) -> None:
    # torch's Future.set_exception completes the future with the exception as its
    # value; DDP's reducer took that for tensors and the process died of SIGSEGV.
    env = conftest.environment(entry_point_dir)
    result = conftest.run(conftest.asyncoll_run(2, [str(conftest.WORKERS /
                                                        "ddp_peer_lost.py")]), env, 90)
    assert "SIGSEGV" not in result.stderr, result.stdout + result.stderr
    raised = [line for line in result.stdout.splitlines() if line.startswith("RAISED")]
    assert len(raised) == 1, result.stdout + result.stderr
    assert raised[0].startswith("RAISED RuntimeError") and "rank 1" in raised[0] and \
        "was lost" in raised[0], raised

"""The c10d Backend of an asyncoll group runs operations; set_timeout; Work futures; errors.

workers/device_backend.py runs on 2 processes, on torch 2.14 and later (which can make a
Backend in Python; 2.13's group has none), and reports what it saw; see its docstring. The
last two tests read the classes only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from . import conftest

torch = pytest.importorskip("torch")

JOB_TIMEOUT_S = 60
#: The default group's own timeout in the worker; set_timeout makes it 50 ms.
GROUP_TIMEOUT_S = 30
#: Far below the group's timeout, far above 50 ms: the set timeout governed.
WELL_WITHIN_S = 10

pytestmark = pytest.mark.timeout(JOB_TIMEOUT_S + 30)


@pytest.fixture(scope="module")
def reports(entry_point_dir: Path) -> list[dict[str, Any]]:
    if tuple(int(n) for n in re.findall(r"\d+", torch.__version__)[:2]) < (2, 14):
        pytest.skip("torch before 2.14 cannot make a c10d Backend in Python: the group "
                    "has none")
    env = conftest.environment(entry_point_dir, DUMP_AFTER_S=str(JOB_TIMEOUT_S - 10),
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(conftest.free_port()),
                               WORLD_SIZE="2")
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "device_backend.py", 2, env,
                                          JOB_TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outcomes), report
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outcomes]


def _is_torchs_and_asyncolls(error: dict[str, Any]) -> bool:
    return error["runtime"] and error["dist_backend"] and error["cause_is_asyncolls"]


def test_get_backend_impl_is_the_groups_backend_and_sends_and_receives(reports):
    assert [r["same_backend"] for r in reports] == [True, True]
    # Rank 0 gets rank 1's [2.0] * 4, rank 1 rank 0's [1.0] * 4.
    assert [r["send_recv"] for r in reports] == [[True, True, [2.0] * 4],
                                                 [True, True, [1.0] * 4]]


def test_every_kind_of_operation_runs_on_the_backend(reports):
    expected_gather = [[0.0, 0.0], [1.0, 1.0]]
    for rank, r in enumerate(reports):
        summed, pair, gathered, whole, scattered, anyone = r["collectives"]
        assert summed == [3.0] * 3
        assert pair == [[3.0] * 2, [30.0] * 5]  # coalesced
        assert gathered == expected_gather
        assert whole == [0.0, 0.0, 1.0, 1.0]
        # (0..3) + (1..4) summed, block `rank` of two.
        assert scattered == [[1.0, 3.0], [5.0, 7.0]][rank]
    assert reports[1]["collectives"][5] == [7.0]  # from any source


def test_backend_refuses_a_bad_peer_with_torchs_error_caused_by_asyncolls(reports):
    for r in reports:
        error = r["refused_on_backend"]
        assert _is_torchs_and_asyncolls(error) and error["configuration"], error
        assert "dst 5 is not a rank of this group of 2" in error["message"]


def test_backend_answers_every_supports_question(reports):
    for r in reports:
        assert r["supports"] == {
            "supports_coalescing": False, "supports_splitting": True,
            "supports_time_estimate": False, "supports_window": False,
            "supports_tensor_alloc": False, "supports_shrinking": True,
            "supports_reconfigure": True}


def test_work_future_is_done_when_wait_returns_and_when_asked_after_completion(reports):
    for r in reports:
        done_after_wait, late_done, late_value, agree = r["futures"]
        assert done_after_wait == 20
        assert late_done and late_value == [2.0] * 3
        assert agree == [True, True, True]  # is_completed, exception and result agree


def test_future_callbacks_never_run_on_the_event_loop_thread(reports):
    for r in reports:
        loops, callback_threads, on_loop = r["callbacks_on_loop"]
        assert loops == 1 and callback_threads >= 1 and not on_loop


def test_shrink_refusal_is_torchs_error_caused_by_asyncolls(reports):
    for r in reports:
        error = r["shrink_refused"]
        assert _is_torchs_and_asyncolls(error) and error["configuration"], error
        assert "called shrink_group that excludes it" in error["message"]


def test_set_timeout_refuses_a_timeout_that_is_not_positive(reports):
    for r in reports:
        error = r["bad_timeout"]
        assert _is_torchs_and_asyncolls(error) and error["configuration"], error
        assert "set_timeout takes a positive timedelta" in error["message"]


def test_backend_set_timeout_governs_the_next_operation_and_get_error_says_timeout(reports):
    seen = reports[1]["timeout"]
    error = seen["error"]
    # What torch's fault-tolerance suite matches, and both classes.
    assert re.search("[Tt]imed out", error["message"]), error
    assert _is_torchs_and_asyncolls(error) and error["timeout"], error
    assert seen["seconds"] < WELL_WITHIN_S < GROUP_TIMEOUT_S
    assert seen["future_done"] is True
    assert seen["exception"]["dist_backend"] and seen["exception"]["timeout"]
    assert seen["get_error"] == "ErrorType.TIMEOUT"


def test_process_group_set_timeout_governs_a_sub_groups_operations(reports):
    seen = reports[1]["group_timeout"]
    assert re.search("[Tt]imed out", seen["error"]["message"]), seen
    assert seen["error"]["timeout"] and seen["error"]["dist_backend"]
    assert seen["seconds"] < WELL_WITHIN_S < GROUP_TIMEOUT_S


def test_operations_name_every_torch_facing_method_and_the_backend_forwards_each() -> None:
    from asyncoll._torch_backend.collectives import OPERATIONS, TorchCollectives
    from asyncoll._torch_backend.device_backend import CpuBackend

    # Each converts its errors through through_torch, but those whose repeats skip the
    # wrapper's call, which do it themselves.
    converting = {name for name, value in vars(TorchCollectives).items()
                  if callable(value) and hasattr(value, "__wrapped__")}
    assert converting | {"allreduce", "broadcast", "reduce", "barrier"} == set(OPERATIONS)
    for name in (*OPERATIONS, "abort", "shutdown", "get_error", "shrink", "reconfigure"):
        forward = vars(CpuBackend).get(name)
        assert forward is not None and forward.__doc__ == f"The group's {name}.", name


def test_both_asyncoll_backends_answer_each_supports_question_themselves() -> None:
    from asyncoll._torch_backend.device_backend import CpuBackend
    from asyncoll._torch_backend.fault_tolerance import ShrunkBackend

    base = torch._C._distributed_c10d.Backend
    for backend in (CpuBackend, ShrunkBackend):
        for name in ("supports_coalescing", "supports_splitting", "supports_shrinking",
                     "supports_reconfigure", "supports_time_estimate", "supports_window",
                     "supports_tensor_alloc"):
            owner = next(k for k in backend.__mro__ if name in vars(k))
            assert owner is not base and not owner.__module__.startswith("torch"), name

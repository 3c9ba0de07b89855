"""torch.distributed on backend='asyncoll': sub-groups, tensors, async work, errors, exit.

workers/behaviour.py runs on 3 processes and reports what it saw; see its docstring. The
processes never call destroy_process_group, so exiting 0 with nothing alarming on stderr
also shows that asyncoll's threads are stopped at exit without a hang or an abort.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from . import conftest

pytest.importorskip("torch")

JOB_TIMEOUT_S = 90
ABORT_SIGNS = ("Traceback", "terminate called", "Aborted", "Fatal Python error",
               "core dumped", "Exception ignored")


@pytest.fixture(scope="module")
def reports(entry_point_dir: Path) -> list[dict[str, Any]]:
    port = conftest.free_port()
    env = conftest.environment(entry_point_dir, DUMP_AFTER_S=str(JOB_TIMEOUT_S - 15),
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                               WORLD_SIZE="3")
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "behaviour.py", 3, env,
                                          JOB_TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outcomes), report
    assert not [s for _, _, err in outcomes for s in ABORT_SIGNS if s in err], report
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outcomes]


pytestmark = pytest.mark.timeout(JOB_TIMEOUT_S + 30)


def test_sub_group_reduces_on_members_and_a_non_member_call_only_warns(reports):
    assert [r["pair_max"] for r in reports] == [[3.0, 4.0], [2.0, 3.0], [3.0, 4.0]]
    assert [r["non_member_warned"] for r in reports] == [False, True, False]


def test_sub_group_ranks_follow_torch_order_as_gloo_does(reports):
    for r in reports[1:]:
        assert r["backwards_asyncoll"] == r["backwards_gloo"] == [[1.0, 1.0, 1.0], [1, 2]]


def test_tensor_that_requires_grad_is_reduced_in_place_as_gloo_does(reports):
    for r in reports:
        assert r["requires_grad_asyncoll"] == r["requires_grad_gloo"] == [[3.0] * 3, True, True]


def test_coalesced_all_gather_orders_outputs_by_rank_then_tensor_as_gloo(reports):
    expected = [[[[10.0 * k + i] * (k + 1) for k in range(count)] for i in range(3)]
                for count in (3, 2)]
    for r in reports:
        assert r["gather_coalesced_asyncoll"] == r["gather_coalesced_gloo"] == expected


def test_coalesced_all_reduce_reduces_each_tensor_as_gloo(reports):
    for r in reports:
        assert r["reduce_coalesced_asyncoll"] == r["reduce_coalesced_gloo"] == [[6.0] * 2,
                                                                                 [60.0] * 3]


def test_coalesced_all_gather_refuses_output_lists_that_do_not_fit_the_group(reports):
    for r in reports:
        error = r["gather_coalesced_short"]
        assert error["type"] == "asyncoll.errors.ConfigurationError"
        assert (error["torch"], error["cause"]) == ("DistBackendError", True)
        assert "one output list per rank of the group (3)" in error["message"]


def test_non_contiguous_tensors_are_reduced_right(reports):
    assert all(r["transposed_right"] and r["strided_right"] for r in reports)


def test_bfloat16_is_reduced_through_float32_and_stays_bfloat16(reports):
    # 256 + 1 + 1 summed in bfloat16 steps would stay 256.
    assert all(r["bfloat16_sum"] == [True, [258.0, 9.0]] for r in reports)


def test_sparse_all_reduce_sums_as_gloo_and_refuses_other_ops(reports):
    for r in reports:
        assert r["sparse_sum_asyncoll"] == r["sparse_sum_gloo"]
        assert r["sparse_sum_asyncoll"][:2] == [True, True]
        assert r["sparse_sum_asyncoll"] == reports[0]["sparse_sum_asyncoll"]
        assert r["sparse_max"]["type"] == "asyncoll.errors.ConfigurationError"
        assert r["sparse_max"]["torch"] == "DistBackendError"
        assert "supports ReduceOp.SUM only" in r["sparse_max"]["message"]


def test_async_work_and_its_torch_future_complete_with_the_tensor(reports):
    assert all(r["async"] == [True, True, True, [3.0] * 4, [3.0] * 4] for r in reports)


def test_small_operations_complete_in_the_callers_thread_and_keep_call_order(reports):
    # 3 ranks: 0 + 1 + 2 = 3. The broadcast of the large array's first elements,
    # queued behind its all_reduce, carries the reduced value, not rank 0's own.
    for r in reports:
        assert r["fast_path"] == [True, [3.0] * 4, [3.0] * 3, 3.0], r["fast_path"]


def test_repeated_all_reduce_runs_again_in_the_callers_thread_with_the_right_result(
        reports):
    # 3 ranks: sums 3 + 3k; the max of 10 * rank + k is 20 + k. The first call of
    # each signature takes the full path (and is remembered), the others run again.
    expected = [[3.0 + 3 * k] * 5 for k in range(3)] + [[[20.0 + k] * 3] * 2 for k in range(2)]
    for r in reports:
        repeated, again, compiled, ran_compiled = r["repeats"]
        assert [repeated, again] == [expected, [False, True, True, False, True]], r["repeats"]
        # The group's compiled entry, taught by the first repeat of the SUM, ran the third
        # call in C, as it runs the blocking API's repeats.
        assert ran_compiled == (1 if compiled else 0), r["repeats"]


def test_a_blocking_repeat_gives_torch_no_work_and_one_tensor_s_memory_is_followed(reports):
    # 3 ranks: 0 + 1 + 2 = 3, tripled by each later all_reduce; after set_, 3 ones.
    for r in reports:
        assert r["one_tensor"] == [[False, True, True], True,
                                   [[81.0] * 11, True, True, [3.0] * 11]], r["one_tensor"]


def test_blocking_repeats_of_broadcast_reduce_and_barrier_give_torch_no_work(reports):
    # The first call of each signature takes the full path (a Work); its repeats run in
    # the caller's thread and give none. Root 1 broadcasts 1, 11, 21; root 2 gets the
    # sums (0 + 1 + 2) + 30k. The barrier ran before (torch's own), so every one repeats.
    for r in reports:
        casts, sums, barriers = r["other_repeats"]
        assert casts == [[k > 0, [1.0 + 10 * k] * 13] for k in range(3)], casts
        assert [s[0] for s in sums] == [False, True, True], sums
        if r["rank"] == 2:
            assert [s[1] for s in sums] == [[3.0 + 30 * k] * 17 for k in range(3)], sums
        assert barriers == [True, True, True, [True, True]], barriers


def test_refused_call_raises_asyncolls_error_as_torchs_from_the_torch_call(reports):
    for r in reports:
        # Both: a DistBackendError (a RuntimeError) and asyncoll's ConfigurationError,
        # caused by asyncoll's own, message intact.
        assert r["refused_op"]["type"] == "asyncoll.errors.ConfigurationError"
        assert (r["refused_op"]["torch"], r["refused_op"]["cause"]) == ("DistBackendError",
                                                                        True)
        assert "needs an integer or bool array, got dtype float32" in r["refused_op"]["message"]


def test_recv_without_src_takes_racing_senders_in_arrival_order_and_returns_the_sender(
        reports):
    got = reports[0]["any_source"]
    assert sorted(sender for sender, _ in got) == [1, 1, 2, 2]
    for sender in (1, 2):  # each sender's messages in the order it sent them
        assert [value for s, value in got if s == sender] == [10.0 * sender, 10.0 * sender + 1]


def test_irecv_without_src_gives_the_senders_group_rank_and_recv_its_global_rank(reports):
    # Group [1, 2]: global rank 2 is group rank 1.
    assert reports[1]["any_source_irecv"] == [1, 8.0, 2, 9.0]


def test_destroying_a_sub_group_works_and_torch_knows_its_name(reports):
    assert [r["destroy_sub_group"] for r in reports] == [None, None, None]
    assert reports[0]["sub_group_name"] == reports[1]["sub_group_name"] != ""


def _torch_at_least(version: str, reports: list[dict[str, Any]]) -> bool:
    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:2])
    return numbers(reports[0]["torch"]) >= numbers(version)


def test_monitored_barrier_runs_on_asyncoll_on_any_group_where_torch_routes_it(reports):
    if _torch_at_least("2.14", reports):
        assert [r["monitored_barrier"] for r in reports] == [None, None, None]
        error = reports[0]["monitored_barrier_timeout"]
        # gloo's words, which torch's tests match on; and a RuntimeError, as gloo's.
        assert error["type"] == "asyncoll.errors.MonitoredBarrierError"
        assert error["torch"] == "DistBackendError"
        assert "Ranks 1, 2 failed to pass monitoredBarrier in 1000 ms" in error["message"]
        assert reports[0]["monitored_barrier_error_is_runtime_error"] is True
        assert [r["monitored_barrier_sub_group"] for r in reports[:2]] == [None, None]
    else:  # torch 2.13 sends it to gloo only
        for r in reports:
            assert r["monitored_barrier"]["type"] == "builtins.ValueError"
            assert "GLOO" in r["monitored_barrier"]["message"]


def test_barrier_timeout_says_what_torchs_callers_match_on(reports):
    error = reports[0]["barrier_timeout"]
    assert error["type"] == "asyncoll.errors.CollectiveTimeoutError"
    assert (error["torch"], error["cause"]) == ("DistBackendError", True)
    assert "did not complete within 1 s; still waiting for data from rank 1" in error["message"]
    # torch's distributed_test.py (_test_barrier_timeout) matches this on gloo's message.
    assert re.search(" (Timed out|closed|timeout) ", error["message"]), error


def test_timeout_surfaces_from_wait_and_future_and_breaks_the_group(reports):
    r = reports[0]
    # Work.wait() raises asyncoll's error as torch's; the torch future fails as gloo's
    # does, with a RuntimeError carrying asyncoll's message (see AsyncollWork.get_future).
    assert r["timeout_wait"]["type"] == "asyncoll.errors.CollectiveTimeoutError"
    assert (r["timeout_wait"]["torch"], r["timeout_wait"]["cause"]) == ("DistBackendError",
                                                                        True)
    assert r["timeout_future"]["type"] == "builtins.RuntimeError"
    for key in ("timeout_wait", "timeout_future"):
        assert "did not complete within 1 s; still waiting for data from rank 1" in \
            r[key]["message"]
        assert re.search(" (Timed out|closed|timeout) ", r[key]["message"])
    assert r["broken_after"]["type"] == "asyncoll.errors.GroupBrokenError"
    assert r["broken_after"]["torch"] == "DistBackendError"
    assert "failed earlier" in r["broken_after"]["message"]


def test_batch_isend_irecv_passes_around_the_ring(reports):
    assert [r["ring_received"] for r in reports] == [[2.0, 2.0], [0.0, 0.0], [1.0, 1.0]]


@pytest.mark.timeout(JOB_TIMEOUT_S + 30)
def test_asyncoll_group_under_a_gloo_default_group_runs_a_job_of_its_own(
        entry_point_dir: Path) -> None:
    script = conftest.WORKERS / "gloo_default.py"
    result = conftest.run(conftest.asyncoll_run(2, [str(script)]),
                          conftest.environment(entry_point_dir), JOB_TIMEOUT_S)

    assert result.returncode == 0, result.stdout + result.stderr
    # The two ranks share stdout, so their lines may run together.
    assert sorted(re.findall(r"rank-\d:\[[^]]*\]", result.stdout)) == [
        "rank-0:[3.0]", "rank-1:[3.0]"], result.stdout

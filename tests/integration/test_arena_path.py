"""The blocking API's fast paths: collectives in the calling thread.

Real processes under asyncoll-run (workers/arena_path.py, 2 ranks): where the
collectives run, in what order, and how they fail (see the worker's modes),
through the shared-memory arena and, with shared memory off, over direct
links (the cross-host path, here over loopback). Kill -9 and SIGSTOP during
fast-path operations are in test_failures.py; tests/multihost runs the links
between hosts.
"""

from __future__ import annotations

import re

import pytest

from asyncoll import _native
from asyncoll._transport.shm import arena

from .conftest import WORKERS
from .test_examples import JOB_TIMEOUT_S, TEST_TIMEOUT_S, clean_environment, finish, launcher, \
    start

pytestmark = [pytest.mark.timeout(TEST_TIMEOUT_S),
              pytest.mark.skipif(not arena.supported(),
                                 reason="the arena needs POSIX shared memory on x86-64")]


def run(mode: str, **env: str) -> dict[int, str]:
    """Run the worker's ``mode`` on 2 ranks; return each rank's RESULT lines, joined."""
    proc = start([*launcher(), "--nproc-per-node", "2", str(WORKERS / "arena_path.py"), mode],
                 clean_environment(**env))
    stdout, stderr = finish(proc, JOB_TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    results: dict[int, str] = {}
    # Two ranks' lines may run together in the launcher's output: a record ends
    # at a newline or where the next one starts.
    for rank, text in re.findall(r"RESULT (\d+) (.*?)(?=RESULT \d|\n|$)", stdout):
        results[int(rank)] = (results.get(int(rank), "") + " " + text).strip()
    assert sorted(results) == [0, 1] or mode == "cpu", f"stdout:\n{stdout}\nstderr:\n{stderr}"
    return results


def test_small_blocking_collectives_run_in_the_calling_thread_in_call_order():
    for rank, text in run("paths").items():
        assert "async_done_at_return=True" in text, text
        counts = dict(re.findall(r"(here|loop|here_before_async)=(\d+)", text))
        # The first all_reduce sets the arena up, on the loop; then broadcast,
        # all_gather, reduce_scatter, reduce and barrier run here.
        assert int(counts["here_before_async"]) == 5, (rank, text)
        # The all_reduce behind the loop's all_to_all went to the loop too;
        # the async all_reduce and the last one ran here.
        assert int(counts["loop"]) == 2 and int(counts["here"]) == 7, (rank, text)


def test_operations_larger_than_a_small_slot_run_on_the_arena_in_pieces():
    for rank, text in run("small_room").items():
        counts = dict(re.findall(r"(repeated|here|loop)=(\d+)", text))
        # The first 4 MiB all_reduce tries Runner.here before the arena exists
        # and goes to the loop, which makes it with 1 MiB slots; every later
        # operation runs here, larger than a slot or not: the two 4 MiB
        # all_reduces after it as repeats, the 2 MiB broadcast and all_gather,
        # the first 256 KiB all_reduce, and the two after it as repeats.
        assert counts == {"repeated": "4", "here": "7", "loop": "1"}, (rank, text)


@pytest.mark.parametrize("shm", ["1", "0"], ids=["arena", "direct_links"])
def test_repeated_calls_run_again_without_being_made_anew_with_the_right_results(shm):
    for rank, text in run("repeats", ASYNCOLL_SHM=shm).items():
        counts = dict(re.findall(r"(repeated|here|loop|express)=(\d+)", text))
        # 4 all_reduces and a 2-D one after the first (which set the path up on the
        # loop), 4 broadcasts (2 roots, each after its first), 2 barriers after the
        # first, 4 reduces (2 roots), 2 all_gathers and 2 reduce_scatters after
        # their first; the MAX all_reduce and the float64 one are new signatures.
        # Direct links take the same calls as the arena. Of these, the compiled
        # entry runs the all_reduces and the barrier from their second repeat on.
        express = "5" if shm == "1" and _native.arena is not None else "0"
        assert counts == {"repeated": "19", "here": "28", "loop": "1", "express": express}, \
            (rank, text)


@pytest.mark.skipif(_native.arena is None, reason="the compiled extension is off")
def test_the_compiled_entry_hands_a_late_member_on_and_leaves_the_numbers_it_should():
    for rank, text in run("express").items():
        # The late all_reduce and barrier both ran in the entry (handed on to wait);
        # the repeat behind the all_to_all went to the loop instead.
        assert "late=2 behind=0 running=0" in text, (rank, text)
        assert "completed_is_numbered=True ops_at_least_seq=True" in text, (rank, text)
        # Every field it reads and writes, it reads and writes in its owner's slot.
        fields = ["_seq", "closed", "completed", "finished", "frames", "handed", "last",
                  "operation", "run_fingerprint", "running"]
        assert f"in_slots={fields}" in text, (rank, text)


@pytest.mark.skipif(_native.arena is None, reason="the compiled extension is off")
def test_a_first_call_asks_the_compiled_entry_once_and_a_repeat_runs_no_python_of_its_own():
    for rank, text in run("asks").items():
        # The front asked the entry, which declined: the Python path did not ask again.
        assert "first_asks=1 first_barrier_asks=1 " in text, (rank, text)
        # A taught repeat: one ask each, and the only Python run between the caller and
        # its result is what C itself calls (a hand-over to Runner.here, a recorder's
        # sample): never the blocking API's functions or the remembered calls.
        assert "asks_per_repeat=['asks:1'] python_from_c_only=True" in text, (rank, text)


def test_two_threads_repeating_calls_on_groups_of_their_own_get_their_own_results():
    for rank, text in run("threads").items():
        assert "wrong=[] alive=False" in text, (rank, text)
        if _native.arena is not None:  # each group's entry was taught its calls
            assert "taught=[2, 2]" in text, (rank, text)


@pytest.mark.parametrize("shm", ["1", "0"], ids=["arena", "direct_links"])
def test_a_desync_between_repeated_calls_raises_mismatch_error_on_both_ranks(shm):
    for rank, text in run("desync_repeats", ASYNCOLL_SHM=shm).items():
        assert text.startswith("MismatchError"), (rank, text)


def test_with_shared_memory_off_small_collectives_run_over_direct_links():
    # No arena: the same collectives run in the calling thread over the group's
    # own TCP connections (the cross-host fast path), in the same order.
    for rank, text in run("paths", ASYNCOLL_SHM="0").items():
        assert "async_done_at_return=True" in text, text
        counts = dict(re.findall(r"(here|loop|here_before_async)=(\d+)", text))
        # As over the arena.
        assert int(counts["here_before_async"]) == 5, (rank, text)
        assert int(counts["loop"]) == 2 and int(counts["here"]) == 7, (rank, text)


def test_with_both_fast_paths_off_nothing_runs_in_the_calling_thread():
    for rank, text in run("nowhere", ASYNCOLL_SHM="0", ASYNCOLL_LINKS_BYTES="0").items():
        assert "here=0 " in text, (rank, text)


@pytest.mark.parametrize("mode", ["desync", "desync_mixed", "timeout"])
def test_links_fail_as_the_arena_does(mode):
    results = run(mode, ASYNCOLL_SHM="0")
    expected = "CollectiveTimeoutError" if mode == "timeout" else "MismatchError"
    for rank, text in results.items():
        assert text.startswith(expected), (rank, text)
    if mode == "timeout":
        assert "rank 1" in results[0] and "rank 0" in results[1], results


def test_ranks_calling_different_collectives_raise_mismatch():
    for rank, text in run("desync").items():
        assert text.startswith("MismatchError"), (rank, text)


def test_an_arena_size_against_a_large_array_raises_mismatch_on_both():
    results = run("desync_mixed")
    for rank, text in results.items():
        assert text.startswith("MismatchError"), (rank, text)


def test_a_late_peer_makes_the_arena_time_out_naming_it():
    results = run("timeout")
    assert results[0].startswith("CollectiveTimeoutError") and "rank 1" in results[0], results
    # The late rank arrives to find the operation abandoned, and is told so.
    assert results[1].startswith("CollectiveTimeoutError") and "rank 0" in results[1], results


def test_a_rank_waiting_two_seconds_for_a_late_peer_does_not_burn_a_core():
    text = run("cpu")[0]
    waited, cpu = (float(v) for v in re.findall(r"=([\d.]+)", text))
    assert waited > 1.5, text
    # Spinning through the wait would take about as much CPU as the wait's length;
    # waiting by sleeping takes a small fraction of it (reported, not timed: CPU time).
    assert cpu < 0.5 * waited, text

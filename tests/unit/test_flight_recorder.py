"""The flight recorder's ring, its dumps in torch's format, and reading them back."""

from __future__ import annotations

import argparse
import io
import logging
import os
import pickle
import signal
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from asyncoll._group import flight, waits
from asyncoll._group import recorder as recorder_module
from asyncoll._group.recorder import UNTIMED, Recorder
from asyncoll._runtime.settings import Settings
from asyncoll._wire.frames import Fingerprint
from asyncoll._wire.frames import Operation as Kind
from asyncoll._defaults import SAMPLE_EVERY
from asyncoll._wire.messages import DumpTrace, StatusReply, decode_body, encode
from asyncoll.errors import (
    CollectiveTimeoutError,
    ConfigurationError,
    GroupBrokenError,
    PeerLostError,
)
from tests.unit.test_rendezvous_state import Harness, by_conn, notices

pytestmark = pytest.mark.timeout(60)

#: A 4-byte float32 all_reduce (sum), on the arena.
SMALL = Fingerprint(Kind.ALL_REDUCE, 11, 1, 3, -1, 1)
#: The keys torch 2.13's recorder writes in every entry (a gloo dump, read back).
TORCH_ENTRY_KEYS = {"record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id",
                    "op_id", "profiling_name", "time_created_ns", "input_sizes",
                    "input_dtypes", "output_sizes", "output_dtypes", "state",
                    "time_discovered_started_ns", "time_discovered_completed_ns", "retired",
                    "timeout_ms", "is_p2p", "frames"}


class Group:
    """A group's runner as the recorder sees it (a RunSource), recording the way
    Runner.here does: a repeated call is one more of a run, every 8th sampled."""

    def __init__(self, recorder: Recorder, group_id: int = 0) -> None:
        self.recorder, self.group_id = recorder, group_id
        self.run_fingerprint: Fingerprint | None = None
        self.numbered = self.running = self.completed = 0
        self.deadline = 0.0
        self.broken = False

    def progress(self) -> tuple[int, int, int, float]:
        numbered = max(self.running, self.completed) if self.broken else self.numbered
        return numbered, self.running, self.completed, self.deadline if self.running else 0.0

    def begin(self, fingerprint: Fingerprint = SMALL, limit: float = 5.0) -> int:
        seq = self.numbered = self.numbered + 1
        self.running, self.deadline = seq, time.monotonic() + limit
        if fingerprint is not self.run_fingerprint:
            self.recorder.open_run(self, self.group_id, seq, "all_reduce", fingerprint,
                                   "arena", limit)
        elif not seq % SAMPLE_EVERY:
            self.recorder.sample(self.group_id, seq)
        return seq

    def end(self, seq: int) -> None:
        self.completed, self.running = seq, 0

    def fail(self, seq: int, error: BaseException, fingerprint: Fingerprint = SMALL) -> None:
        self.recorder.failed_here(self, self.group_id, seq, "all_reduce", fingerprint, "arena",
                                  5.0, error)
        self.running = 0

    def ops(self, count: int, fail_last: BaseException | None = None,
            fingerprint: Fingerprint = SMALL) -> None:
        """``count`` operations, completed (the last failing, if given)."""
        for i in range(count):
            seq = self.begin(fingerprint)
            if i == count - 1 and fail_last is not None:
                self.fail(seq, fail_last, fingerprint)
            else:
                self.end(seq)


def run(recorder: Recorder, group: int, ops: int, fail_last: BaseException | None = None,
        fingerprint: Fingerprint = SMALL) -> Group:
    """Record ``ops`` operations of a new ``group`` (the last failing, if given)."""
    runner = Group(recorder, group)
    runner.ops(ops, fail_last, fingerprint)
    return runner


def job_of(tmp_path: Path, behind: int = 2, size: int = 3, ops: int = 4) -> None:
    """Dumps of ``size`` ranks of one group; rank ``behind`` never reached the last op."""
    for rank in range(size):
        recorder = Recorder(100, rank, str(tmp_path))
        recorder.add_group(0, range(size))
        if rank == behind:
            run(recorder, 0, ops - 1)
        else:
            run(recorder, 0, ops, CollectiveTimeoutError("timed out"))
        recorder.dump("test")


def ids_and_seqs(recorder: Recorder) -> list[tuple[int, int, int]]:
    return [(e[0], e[1], e[2]) for e in recorder.entries()]


# -- the ring -------------------------------------------------------------------------


def test_ring_keeps_the_last_operations_oldest_first(tmp_path: Path) -> None:
    recorder = Recorder(3, 0, str(tmp_path))
    run(recorder, 0, 5)

    kept = recorder.entries()

    assert [e[0] for e in kept] == [2, 3, 4]
    assert [e[2] for e in kept] == [3, 4, 5]
    assert all(flight.state_of(e) == flight.COMPLETED for e in kept)


def test_a_run_is_one_entry_and_gives_each_operation_its_own_record(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    world, other = Group(recorder, 0), Group(recorder, 5)
    world.ops(3)
    other.ops(1)
    world.ops(2)
    world.ops(1, fingerprint=Fingerprint(Kind.BROADCAST, 11, 0, 0, 0, 1))

    assert sum(e is not None for e in recorder._ring) == 4
    assert ids_and_seqs(recorder) == [(0, 0, 1), (1, 0, 2), (2, 0, 3), (3, 5, 1), (4, 0, 4),
                                      (5, 0, 5), (6, 0, 6)]
    assert [e[3] for e in recorder.entries()][-1] == "all_reduce"
    assert recorder.entries()[-1][4].operation == Kind.BROADCAST


def test_the_same_call_made_anew_is_still_one_more_of_the_run(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    group = Group(recorder)
    for _ in range(3):  # an equal fingerprint, not the same object (not a repeat)
        group.ops(1, fingerprint=Fingerprint(*SMALL))
    group.ops(1, fingerprint=Fingerprint(Kind.ALL_REDUCE, 11, 1, 3, -1, 2))

    assert sum(e is not None for e in recorder._ring) == 2
    assert [(e[0], e[2]) for e in recorder.entries()] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_a_run_longer_than_the_ring_gives_its_last_operations(tmp_path: Path) -> None:
    recorder = Recorder(4, 0, str(tmp_path))
    run(recorder, 0, 1000)

    assert ids_and_seqs(recorder) == [(996, 0, 997), (997, 0, 998), (998, 0, 999),
                                      (999, 0, 1000)]


def test_times_are_those_taken_and_the_others_are_not_made_up(tmp_path: Path) -> None:
    recorder = Recorder(20, 0, str(tmp_path))
    recorder.add_group(0, [0, 1])
    before = time.time_ns()
    run(recorder, 0, 10)

    kept = recorder.entries()
    timed = [e[2] for e in kept if e[8]]

    assert timed == [1, 8]  # the run's first, and the sampled one
    assert all(e[7] >= before for e in kept)
    assert all(e[9] == UNTIMED and flight.state_of(e) == flight.COMPLETED for e in kept)
    assert kept[2][7] == kept[0][7] and kept[8][7] >= kept[7][7]  # created no earlier than
    entry = flight.torch_dump(0, kept, recorder.groups)["entries"][2]
    assert entry["time_discovered_started_ns"] is None
    assert entry["time_discovered_completed_ns"] is None and entry["retired"]
    assert "duration_ms" not in entry and entry["asyncoll"]["time_taken"] is False


def test_the_running_operation_of_a_run_started_when_its_deadline_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both of the recorder's clocks stand still: the wall clock it stamps with, and
    # the monotonic one that deadlines are on.
    now_ns, monotonic = 10**18, 1000.0
    monkeypatch.setattr(recorder_module, "_now", lambda: now_ns)
    monkeypatch.setattr(recorder_module, "time", types.SimpleNamespace(
        monotonic=lambda: monotonic))
    recorder = Recorder(10, 0, str(tmp_path))
    group = run(recorder, 0, 3)
    seq = group.begin(limit=5.0)
    group.deadline = monotonic + 5.0 - 2.0  # it began two seconds ago

    last = recorder.entries()[-1]
    doing, _, _ = recorder.report(-1, 256, {0})

    assert (last[2], flight.state_of(last)) == (4, flight.STARTED)
    assert last[8] == now_ns - 2 * 10**9
    assert doing is not None and doing == (0, seq, "all_reduce", True, now_ns - 2 * 10**9)


def test_a_failed_operation_leaves_its_run_and_the_next_opens_another(
        tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    group = run(recorder, 0, 3, PeerLostError("gone"))
    group.broken = True
    group.numbered += 2  # two more calls, refused before they ran

    kept = recorder.entries()

    assert [(e[2], flight.state_of(e)) for e in kept] == [
        (1, flight.COMPLETED), (2, flight.COMPLETED), (3, flight.FAILED)]
    assert [e[0] for e in kept] == [0, 1, 2]
    assert kept[2][10] == "PeerLostError"


def test_an_operation_failing_first_in_its_run_leaves_no_empty_run(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path), stacks=True)
    group = Group(recorder)
    seq = group.begin()
    group.fail(seq, CollectiveTimeoutError("late"))

    (entry,) = recorder.entries()

    assert (entry[0], entry[2], flight.state_of(entry)) == (0, 1, flight.FAILED)
    assert entry[11]  # the stack the run had taken
    assert sum(e is not None for e in recorder._ring) == 1


def test_an_operation_numbered_while_its_run_closed_is_recorded_once(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    world, other = run(recorder, 0, 2), Group(recorder, 5)
    # Another thread's operation closes the run just after this one numbered op 3, and
    # before it looked at its run: it opens a new one at 3.
    world.numbered += 1
    other.ops(1)
    world.numbered -= 1
    world.end(world.begin())

    assert [(e[1], e[2]) for e in recorder.entries()] == [(0, 1), (0, 2), (5, 1), (0, 3)]


def test_groups_in_threads_of_their_own_record_every_operation_once(
        tmp_path: Path) -> None:
    recorder = Recorder(100_000, 0, str(tmp_path))
    other = Fingerprint(Kind.BROADCAST, 11, 0, 0, 0, 1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two steps, nearly
    try:
        def work(group: Group) -> None:
            for i in range(3000):
                seq = group.begin(other if i % 7 == 0 else SMALL)
                group.end(seq)

        groups = [Group(recorder, g) for g in (0, 5)]
        threads = [threading.Thread(target=work, args=(g,)) for g in groups]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        sys.setswitchinterval(interval)

    kept = recorder.entries()
    ids = [e[0] for e in kept]
    assert ids == sorted(set(ids))
    for g in (0, 5):
        assert [e[2] for e in kept if e[1] == g] == list(range(1, 3001))
        assert all(flight.state_of(e) == flight.COMPLETED for e in kept if e[1] == g)
        assert all(e[4] is (other if e[2] % 7 == 1 else SMALL) for e in kept if e[1] == g)


def test_an_operation_on_the_loop_ends_the_run_of_its_group(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    group = run(recorder, 0, 2)
    group.numbered += 1  # Runner.in_turn numbers op 3 before entering it
    entry = recorder.scheduled(0, 3, "broadcast", SMALL, 5.0, None)
    entry[9] = entry[8] = entry[7]
    group.completed = 3
    group.end(group.begin())

    assert [(e[2], e[3]) for e in recorder.entries()] == [
        (1, "all_reduce"), (2, "all_reduce"), (3, "broadcast"), (4, "all_reduce")]


def test_a_report_shows_the_oldest_running_operation_and_the_new_samples(
        tmp_path: Path) -> None:
    recorder = Recorder(100, 0, str(tmp_path))
    assert recorder.report(-1, 256, {0, 7}) == (None, -1, [])
    run(recorder, 0, 17)  # seqs 1-17 of group 0, completed
    doing, mark, samples = recorder.report(-1, 256, {0, 7})
    assert doing is not None and doing[:4] == (0, 17, "all_reduce", False)
    assert [samples[i:i + 2] for i in range(0, len(samples), 3)] == [[0, 8], [0, 16]]
    stuck = Group(recorder, 7)
    stuck.numbered = 23
    stuck.begin(Fingerprint(Kind.BROADCAST, 11, 0, 0, 0, 1))
    Group(recorder, 8).ops(32)  # not a coordinator group
    recorder.scheduled(7, 25, "all_reduce", SMALL, 5.0, None)

    doing, mark2, samples = recorder.report(mark, 256, {0, 7})

    assert doing is not None and doing[:4] == (7, 24, "all_reduce", True)
    assert mark2 == mark + 5
    assert samples[:2] == [7, 24]  # only what came after the last report
    assert len(samples) == 3
    assert recorder.report(mark, 1, {0, 7})[2] == samples  # the newest, at most 1


def test_a_report_of_a_long_run_gives_its_last_operation_a_recent_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One operation a second for 300 s: the last one started at most SAMPLE_EVERY s ago,
    not when the run's first did (issue 59: "done, started 32 s ago" at 10 calls/s)."""
    clock = [10**18]
    monkeypatch.setattr(recorder_module, "_now", lambda: clock[0])
    recorder = Recorder(100, 0, str(tmp_path))
    group = Group(recorder, 0)
    for _ in range(300):
        group.end(group.begin())
        clock[0] += 10**9

    doing, _, _ = recorder.report(-1, 256, {0})

    assert doing is not None and doing[:4] == (0, 300, "all_reduce", False)
    assert 0 < clock[0] - doing[4] <= (SAMPLE_EVERY + 1) * 10**9


def test_a_refused_operation_is_forgotten(tmp_path: Path) -> None:
    recorder = Recorder(10, 0, str(tmp_path))
    entry = recorder.scheduled(0, 1, "all_reduce", SMALL, 5.0, None)

    recorder.forget(entry)

    assert recorder.entries() == []


def test_capacity_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="at least 1 operation, got 0"):
        Recorder(0, 0, str(tmp_path))


def test_stacks_are_kept_only_when_asked(tmp_path: Path) -> None:
    plain, traced = Recorder(4, 0, str(tmp_path)), Recorder(4, 0, str(tmp_path), stacks=True)
    run(plain, 0, 2)
    run(traced, 0, 2)

    assert [e[11] for e in plain.entries()] == [None, None]
    assert all(any(name == "ops" for name, _, _ in e[11]) for e in traced.entries())
    assert sum(e is not None for e in traced._ring) == 2  # with stacks: runs of one


# -- writing out ----------------------------------------------------------------------


def test_a_timeout_writes_the_recorder_out_once_per_change(tmp_path: Path) -> None:
    recorder = Recorder(10, 3, str(tmp_path))
    run(recorder, 0, 2, CollectiveTimeoutError("late"))
    path = tmp_path / "asyncoll_trace_rank_3"
    assert path.exists()
    path.unlink()

    recorder.alarm(PeerLostError("again, nothing new"))
    assert not path.exists()
    recorder.alarm(GroupBrokenError("not an alarm"))
    run(recorder, 1, 1)
    recorder.alarm(GroupBrokenError("not an alarm"))
    assert not path.exists()
    recorder.alarm(PeerLostError("something new"))
    assert path.exists()


def test_dump_has_torch_keys_and_names_sizes_dtypes_and_states(tmp_path: Path) -> None:
    recorder = Recorder(10, 1, str(tmp_path), job="j")
    recorder.add_group(0, [0, 1])
    run(recorder, 0, 2, CollectiveTimeoutError("late"))

    dump = flight.load(recorder.dump("asked") or "")

    assert dump["version"] == "2.10"
    assert dump["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    first, last = dump["entries"]
    assert TORCH_ENTRY_KEYS <= first.keys()
    assert first["profiling_name"] == "nccl:all_reduce"
    assert (first["input_sizes"], first["input_dtypes"]) == ([[1]], ["Float"])
    assert (first["state"], last["state"]) == ("completed", "failed")
    assert last["asyncoll"]["error"] == "CollectiveTimeoutError"
    assert last["asyncoll"]["path"] == "arena"
    assert dump["pg_status"]["0"]["last_completed_collective"] == 1


@pytest.mark.parametrize("kind, elements, name, sizes", [
    (Kind.ALL_GATHER, 8, "all_gather", ([[4]], [[8]])),
    (Kind.ALL_GATHER, 7, "all_gather_v", ([[7]], [[7]])),
    (Kind.REDUCE_SCATTER, 8, "reduce_scatter", ([[8]], [[4]])),
    (Kind.BARRIER, 0, "barrier", ([], [])),
    (Kind.GATHER, 0, "gather", ([[0]], [[0]])),
    (Kind.ALL_GATHER_OBJECT, 0, "all_gather_v", ([[0]], [[0]])),
])
def test_sizes_are_those_every_member_agrees_on(kind: Kind, elements: int, name: str,
                                                sizes: tuple[Any, Any], tmp_path: Path) -> None:
    recorder = Recorder(4, 0, str(tmp_path))
    recorder.add_group(0, [0, 1])
    run(recorder, 0, 1, fingerprint=Fingerprint(kind, 11, 0, 0, -1, elements))

    (entry,) = flight.torch_dump(0, recorder.entries(), recorder.groups)["entries"]

    assert entry["profiling_name"] == f"nccl:{name}"
    assert (entry["input_sizes"], entry["output_sizes"]) == sizes


def test_loading_refuses_a_pickle_that_names_a_class(tmp_path: Path) -> None:
    path = tmp_path / "asyncoll_trace_rank_0"
    path.write_bytes(pickle.dumps({"entries": [], "x": argparse.Namespace()}))

    with pytest.raises(pickle.UnpicklingError, match="plain data only.*Namespace"):
        flight.load(str(path))


# -- reading back -------------------------------------------------------------------


def test_trace_table_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    job_of(tmp_path)

    table = waits.summary(flight.read_dir(str(tmp_path)))

    lines = table.splitlines()
    assert lines[1].split()[:4] == ["0", "0", "all_reduce", "#4"]
    assert lines[1].endswith("rank 2")
    assert lines[3].split()[:5] == ["2", "0", "all_reduce", "#3", "completed"]
    assert lines[-1].startswith("ranks 0, 1 wait for rank 2, which did not reach")


def test_trace_says_a_rank_without_a_dump_left_none_not_that_it_ran_nothing(
        tmp_path: Path) -> None:
    """Rank 2 ran 101 operations and crashed, writing no dump (issue 59)."""
    job_of(tmp_path, ops=102)
    (tmp_path / f"{flight.PREFIX}2").unlink()

    verdict = waits.summary(flight.read_dir(str(tmp_path))).splitlines()[-1]

    assert verdict.startswith("ranks 0, 1 wait for rank 2, which did not reach")
    assert "it left no dump here, so what it ran is not known" in verdict
    assert "recorded no operation" not in verdict


def test_trace_table_says_so_when_no_one_waits(tmp_path: Path) -> None:
    job_of(tmp_path, behind=-1)

    assert "reached by every member" in waits.summary(flight.read_dir(str(tmp_path)))


def test_torchs_analyzer_names_the_rank_that_skipped(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed.flight_recorder.components.builder")
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    job_of(tmp_path)
    args = JobConfig().parse_args([str(tmp_path)])
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logging.getLogger("Flight Recorder").addHandler(handler)
    try:
        details, version = read_dir(args)
        db = build_db(details, args, version)
    finally:
        logging.getLogger("Flight Recorder").removeHandler(handler)

    assert version == "2.10"
    assert "missing ranks: {2}" in said.getvalue()
    assert [(c.collective_seq_id, c.missing_ranks) for c in db.collectives] == [
        (1, None), (2, None), (3, None), (4, {2})]


# -- settings and the coordinator's part ------------------------------------------------


def test_settings_read_the_recorder_variables() -> None:
    default = Settings.from_environment({})
    given = Settings.from_environment({"ASYNCOLL_TRACE_BUFFER": "0",
                                       "ASYNCOLL_TRACE_DIR": "/x", "ASYNCOLL_TRACE_STACKS": "1"})

    assert (default.trace_buffer, default.trace_dir, default.trace_stacks) == (2000, "", False)
    assert (given.trace_buffer, given.trace_dir, given.trace_stacks) == (0, "/x", True)
    with pytest.raises(ConfigurationError, match="ASYNCOLL_TRACE_BUFFER must be .* got '-1'"):
        Settings.from_environment({"ASYNCOLL_TRACE_BUFFER": "-1"})
    with pytest.raises(ConfigurationError, match="ASYNCOLL_TRACE_STACKS must be 1"):
        Settings.from_environment({"ASYNCOLL_TRACE_STACKS": "yes"})


def test_dump_request_is_a_notice_to_every_running_member_of_the_job_and_a_status_reply(
        ) -> None:
    h = Harness()
    asked = h.start_job(3)
    for conn in (11, 12):
        h.join(conn, world_size=2, job="other")

    replies = h.send(99, DumpTrace(job="job-1"))

    told = notices(replies)
    assert set(told) == set(asked.values())
    assert all(messages == [DumpTrace(job="job-1")] for messages in told.values())
    (answer,) = by_conn(replies).values()
    assert isinstance(answer.message, StatusReply)
    assert [job.job for job in answer.message.jobs] == ["job-1"]


def test_dump_request_travels_the_wire() -> None:
    encoded = encode(DumpTrace(job="j"), 0)

    assert decode_body(encoded[4:], 1 << 16) == (0, DumpTrace(job="j"))
    assert os.path.basename(flight.PREFIX + "3") == "asyncoll_trace_rank_3"


def test_sigusr1_handler_dumps_every_live_recorder_then_runs_the_one_it_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncoll._runtime import tracing

    called: list[int] = []
    monkeypatch.setattr(tracing, "_installed", True)  # not this test process's own handler
    monkeypatch.setattr(tracing, "_previous", lambda signum, frame: called.append(signum))
    settings = Settings.from_environment({"ASYNCOLL_TRACE_DIR": str(tmp_path)})
    recorder = tracing.recorder_for(settings, 5, "job")

    tracing.on_signal(signal.SIGUSR1, None)

    assert recorder is not None and (tmp_path / "asyncoll_trace_rank_5").exists()
    assert called == [signal.SIGUSR1]
    assert tracing.recorder_for(Settings.from_environment({"ASYNCOLL_TRACE_BUFFER": "0"}),
                                0, "job") is None

"""torch's fault-tolerance contract for a c10d backend, restated scenario by scenario.

pytorch's ``test/distributed/test_c10d_fault_tolerance.py`` is the suite a
backend joins by adding itself to that file's backend list. Its public
versions differ; this module restates every scenario of each in our own code
(nothing of theirs is copied), so that any backend name runs them all. Each
scenario's docstring names the upstream test it mirrors, and in which
versions:

- *tuples*: the list of ``(backend, device)`` tuples (pytorch/pytorch): the
  twelve tests of ``AbstractFaultToleranceTest`` and
  ``ReconfigureContractTest``;
- *early tuples*: an earlier state of that list (vineethsaivs/pytorch): the
  backend read with ``pg._get_backend``, and the ranks that shrink to
  themselves all using one uuid;
- *dataclass*: the list of ``FaultToleranceBackend(...)`` entries
  (AdetsGithub/pytorch, cyyever/pytorch): adds the work-result tests, runs
  the timeout test on every backend, and adds ``BackendCapabilityContractTest``.

Every scenario runs ``world_size`` ranks of one job over a ``FileStore``, as
upstream does, each rank calling the scenario's function with its
:class:`Rank`. A scenario upstream runs only on nccl2 or CUDA carries the
reason in ``skip``: it is skipped on every backend, as upstream skips it
for gloo. ``contract_runner.py`` runs them (each in forked processes) and
prints the table of outcomes; ``test_fault_tolerance_contract.py`` checks
that asyncoll passes every scenario gloo passes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

#: The size of every multi-rank scenario's job (upstream's ``world_size``).
WORLD_SIZE = 3
#: The group timeout, and the timeout of every reconfigure (upstream's).
GROUP_TIMEOUT = timedelta(seconds=30)
#: How long the timeout scenario waits for the backend to report its timeout.
ERROR_REPORT_S = 10.0


class Rank:
    """One rank of a scenario: its job's store and group, and the steps scenarios share.

    Args:
        backend_name: the backend under test ("gloo", "asyncoll").
        rank: this process's rank in the job.
        world_size: the job's size.
        store_path: the FileStore's file, the same for every rank.
    """

    def __init__(self, backend_name: str, rank: int, world_size: int, store_path: str) -> None:
        self.backend_name = backend_name
        self.rank = rank
        self.world_size = world_size
        self.store = dist.FileStore(store_path, world_size)
        self.group: Any = None
        self.backend: Any = None

    def start(self, reconfigurable: bool = True, accessor: str = "get_backend_impl") -> None:
        """Join the job's default group and take its backend for "cpu".

        Args:
            reconfigurable: pass ``enable_reconfigure=True`` and check that the
                group and its backend say they can reconfigure.
            accessor: how to reach the backend: ``"get_backend_impl"`` (the
                tuples and dataclass versions) or ``"_get_backend"`` (early tuples).
        """
        extra = {"enable_reconfigure": True} if reconfigurable else {}
        dist.init_process_group(self.backend_name, rank=self.rank, world_size=self.world_size,
                                store=self.store, timeout=GROUP_TIMEOUT, **extra)
        self.group = c10d._get_default_group()
        cpu = torch.device("cpu")
        if accessor == "_get_backend":
            self.backend = self.group._get_backend(cpu)
        else:
            self.backend = dist.get_backend_impl(self.group, cpu)
        if reconfigurable:
            expect(dist._supports_reconfigure(), True, "dist._supports_reconfigure()")
            expect(self.backend.supports_reconfigure, True, "backend.supports_reconfigure")

    def publish_handles(self, key: str) -> list[str]:
        """Post this rank's reconfigure handle under ``key``; every rank's, in rank order."""
        self.store.set(f"{key}/{self.rank}", dist._get_reconfigure_handle())
        return [self.store.get(f"{key}/{peer}").decode() for peer in range(self.world_size)]

    def meet(self, key: str) -> None:
        """Wait, through the store, until every rank of the job has reached ``key``."""
        self.store.set(f"{key}/{self.rank}", "here")
        for peer in range(self.world_size):
            self.store.get(f"{key}/{peer}")

    def reform(self, uuid: int, handles: list[str],
               timeout: timedelta = GROUP_TIMEOUT) -> None:
        """``dist._reconfigure`` to exactly ``handles`` under ``uuid``, and wait for it."""
        dist._reconfigure(uuid, handles, timeout=timeout).wait()

    def reform_alone(self, uuid: int) -> None:
        """Reconfigure to this rank's own handle only: a group of one."""
        self.reform(uuid, [dist._get_reconfigure_handle()])

    def start_and_reform_all(self, key: str, uuid: int) -> list[str]:
        """Join, reconfigure to every rank's handle under ``uuid``, check rank and size;
        every rank's handle afterwards."""
        self.start()
        self.reform(uuid, self.publish_handles(f"{key}/before"))
        self.expect_place(self.rank, self.world_size)
        return self.publish_handles(f"{key}/after")

    def expect_place(self, rank: int, size: int) -> None:
        """The default group now gives this process ``rank`` of ``size``."""
        expect((dist.get_rank(), dist.get_world_size()), (rank, size), "(rank, world size)")

    def expect_sum(self, members: int) -> None:
        """all_reduce of (group rank + 1) sums to 1 + 2 + ... + ``members``."""
        tensor = torch.full((4,), dist.get_rank() + 1.0)
        dist.all_reduce(tensor)
        expect(tensor.tolist(), [members * (members + 1) / 2] * 4, "all_reduce's sum")


def expect(actual: object, wanted: object, what: str) -> None:
    """Fail the scenario unless ``actual == wanted``."""
    if actual != wanted:
        raise AssertionError(f"{what}: expected {wanted!r}, got {actual!r}")


def expect_error(call: Callable[[], object], kind: type[BaseException], pattern: str,
                 what: str) -> BaseException:
    """Fail the scenario unless ``call()`` raises ``kind`` whose message matches ``pattern``."""
    try:
        call()
    except kind as error:
        if not re.search(pattern, str(error)):
            raise AssertionError(f"{what}: {kind.__name__} without {pattern!r}: "
                                 f"{error!r}") from error
        return error
    except BaseException as error:
        raise AssertionError(f"{what}: expected {kind.__name__} matching {pattern!r}, got "
                             f"{type(error).__module__}.{type(error).__name__}: "
                             f"{error}") from error
    raise AssertionError(f"{what}: expected {kind.__name__} matching {pattern!r}; "
                         "nothing was raised")


@dataclass(frozen=True)
class Scenario:
    """One upstream test, restated.

    Attributes:
        name: ours.
        mirrors: the upstream test and the versions that have it.
        run: what each rank does.
        ranks: how many processes run it.
        skip: why no CPU backend runs it (upstream runs it on nccl2 or CUDA only), or "".
        superseded: why the later versions changed it (an early version's form), or "".
    """

    name: str
    mirrors: str
    run: Callable[[Rank], None]
    ranks: int = WORLD_SIZE
    skip: str = ""
    superseded: str = ""


SCENARIOS: list[Scenario] = []


def scenario(mirrors: str, ranks: int = WORLD_SIZE, superseded: str = ""
             ) -> Callable[[Callable[[Rank], None]], Callable[[Rank], None]]:
    """Add the decorated function to :data:`SCENARIOS`, under its own name."""

    def add(run: Callable[[Rank], None]) -> Callable[[Rank], None]:
        SCENARIOS.append(Scenario(run.__name__, mirrors, run, ranks, superseded=superseded))
        return run

    return add


# -- reconfigure to every rank ---------------------------------------------------------


@scenario("test_reconfigure_basic (all versions)")
def reconfigure_to_every_rank_keeps_ranks(me: Rank) -> None:
    """A reconfigure to every rank's handle keeps each rank's place."""
    me.start_and_reform_all("basic", 100)


@scenario("test_reconfigure_then_all_reduce (all versions)")
def all_reduce_after_reconfigure(me: Rank) -> None:
    """all_reduce on the default group after a reconfigure to every rank."""
    me.start_and_reform_all("sum", 200)
    me.expect_sum(me.world_size)


def _ring_through_backend(me: Rank) -> None:
    # Each rank sends to its right and hears from its left on the backend
    # object itself; even ranks send first so that no order deadlocks.
    rank, size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    outgoing, incoming = torch.full((4,), rank + 1.0), torch.zeros(4)
    if rank % 2 == 0:
        works = [me.backend.send([outgoing], right, 0), me.backend.recv([incoming], left, 0)]
    else:
        works = [me.backend.recv([incoming], left, 0), me.backend.send([outgoing], right, 0)]
    for work in works:
        work.wait()
    expect(incoming.tolist(), [left + 1.0] * 4, f"what rank {rank} received from {left}")


@scenario("test_reconfigure_then_send_recv (tuples, dataclass)")
def backend_send_recv_after_reconfigure(me: Rank) -> None:
    """Send and recv on the backend from ``dist.get_backend_impl`` after a reconfigure."""
    me.start_and_reform_all("ring", 300)
    _ring_through_backend(me)


@scenario("test_reconfigure_then_send_recv (early tuples: the backend from pg._get_backend)")
def backend_send_recv_through_get_backend(me: Rank) -> None:
    """Send and recv on the backend from ``pg._get_backend(cpu)`` after a reconfigure."""
    me.start(accessor="_get_backend")
    me.reform(300, me.publish_handles("ring/before"))
    me.expect_place(me.rank, me.world_size)
    _ring_through_backend(me)


@scenario("test_reconfigure_identity (all versions)")
def second_reconfigure_to_the_same_ranks(me: Rank) -> None:
    """A second reconfigure to the same ranks' fresh handles, then all_reduce."""
    me.start_and_reform_all("same", 800)
    me.reform(801, me.publish_handles("same/again"))
    me.expect_sum(me.world_size)


# -- shrink: a rank not named stays out ----------------------------------------------


@scenario("test_shrink_exclude_last_rank (all versions)")
def shrink_leaves_out_the_last_rank(me: Rank) -> None:
    """The first two ranks reconfigure without the last; all_reduce and broadcast on them,
    while the last rank, not named, waits alive."""
    handles = me.start_and_reform_all("last", 400)
    left_out = me.world_size - 1
    if me.rank != left_out:
        me.reform(401, handles[:left_out])
        me.expect_place(me.rank, me.world_size - 1)
        me.expect_sum(me.world_size - 1)
        tensor = torch.full((4,), 42.0) if dist.get_rank() == 0 else torch.zeros(4)
        dist.broadcast(tensor, group_src=0)
        expect(tensor.tolist(), [42.0] * 4, "broadcast from group rank 0")
    me.meet("last/done")


@scenario("test_shrink_exclude_middle_rank (all versions)")
def shrink_leaves_out_the_middle_rank(me: Rank) -> None:
    """The ranks either side of the middle one reconfigure without it; the one above it
    moves down a place."""
    handles = me.start_and_reform_all("middle", 500)
    left_out = me.world_size // 2
    if me.rank != left_out:
        me.reform(501, [h for peer, h in enumerate(handles) if peer != left_out])
        me.expect_place(me.rank if me.rank < left_out else me.rank - 1, me.world_size - 1)
        me.expect_sum(me.world_size - 1)
    me.meet("middle/done")


# -- disjoint groups at the same time ------------------------------------------------


def _alone_then_all_then_alone(me: Rank, uuids: tuple[int, int, int]) -> None:
    me.start()
    me.reform_alone(uuids[0])
    me.expect_place(0, 1)
    me.reform(uuids[1], me.publish_handles("down_up"))
    me.expect_place(me.rank, me.world_size)
    me.reform_alone(uuids[2])
    me.expect_place(0, 1)
    me.meet("down_up/done")


@scenario("test_reconfigure_scale_down_up (tuples, dataclass: uuid 600 + rank)")
def every_rank_alone_then_all_then_alone(me: Rank) -> None:
    """Each rank reconfigures to itself (its own uuid), all reconfigure together, then each
    alone again: groups of one form side by side."""
    _alone_then_all_then_alone(me, (600 + me.rank, 603, 604 + me.rank))


#: Why the later versions give each rank's group of one a uuid of its own.
_OWN_UUIDS = ("the later versions give each rank's group of one its own uuid (\"each needs a "
              "unique uuid\"); gloo on torch 2.14 refuses the second group of one under the same "
              "uuid as \"already used\"")


@scenario("test_reconfigure_scale_down_up (early tuples: every rank's group of one uses "
          "uuid 600)", superseded=_OWN_UUIDS)
def every_rank_alone_under_one_uuid_then_all(me: Rank) -> None:
    """As every_rank_alone_then_all_then_alone, each rank's group of one under the same
    uuid, as the early version had it."""
    _alone_then_all_then_alone(me, (600, 601, 602))


@scenario("test_reconfigure_single_to_all (tuples, dataclass: uuid 700 + rank)")
def every_rank_alone_then_all_reduce_together(me: Rank) -> None:
    """Each rank reconfigures to itself, then all together, then all_reduce."""
    me.start()
    me.reform_alone(700 + me.rank)
    me.reform(703, me.publish_handles("single"))
    me.expect_sum(me.world_size)


@scenario("test_reconfigure_single_to_all (early tuples: every group of one uses uuid 700)",
          superseded=_OWN_UUIDS)
def every_rank_alone_under_one_uuid_then_all_reduce(me: Rank) -> None:
    """As every_rank_alone_then_all_reduce_together, each group of one under uuid 700."""
    me.start()
    me.reform_alone(700)
    me.reform(701, me.publish_handles("single"))
    me.expect_sum(me.world_size)


def _in_parts_then_together(me: Rank, key: str, parts: list[tuple[int, range]],
                            together: int) -> None:
    # Each part reconfigures to its ranks' handles under its uuid, at the same time;
    # a rank in no part waits, alive; then every rank reconfigures together.
    me.start()
    handles = me.publish_handles(f"{key}/first")
    for uuid, ranks in parts:
        if me.rank in ranks:
            me.reform(uuid, [handles[peer] for peer in ranks])
    me.reform(together, me.publish_handles(f"{key}/all"))
    me.expect_sum(me.world_size)


@scenario("test_reconfigure_late_join (all versions)")
def late_rank_joins_by_its_handle(me: Rank) -> None:
    """The lower ranks reconfigure without the others, who then join all by their handles."""
    _in_parts_then_together(me, "late", [(900, range(me.world_size // 2))], 901)


@scenario("test_reconfigure_merge_split (all versions)")
def two_halves_at_once_then_merged(me: Rank) -> None:
    """The lower and upper ranks reconfigure at the same time under two uuids, then merge."""
    split = me.world_size // 2
    _in_parts_then_together(me, "halves", [(1000, range(split)),
                                           (1001, range(split, me.world_size))], 1002)


# -- abort, timeouts, uuids -----------------------------------------------------------


@scenario("test_reconfigure_after_abort (tuples, dataclass)")
def reconfigure_recovers_after_abort(me: Rank) -> None:
    """The backend's abort(); get_error() stays SUCCESS (not nccl2's COMM_ERROR); a
    reconfigure under a fresh uuid makes the group work again."""
    from torch._C._distributed_c10d import ErrorType

    me.start_and_reform_all("abort", 1200)
    me.backend.abort()
    expect(me.backend.get_error(), ErrorType.SUCCESS, "get_error() after abort()")
    me.reform(1201, me.publish_handles("abort/recover"))
    me.expect_sum(me.world_size)


@scenario("test_reconfigure_after_timeout (dataclass: every backend)")
def set_timeout_governs_then_reconfigure_recovers(me: Rank) -> None:
    """After ``backend.set_timeout(50 ms)``, an all_reduce on one rank alone times out
    ("timed out" in a RuntimeError, or get_error() TIMEOUT and the next call refused);
    then a reconfigure of all makes the group work again."""
    from torch._C._distributed_c10d import ErrorType

    me.start_and_reform_all("timeout", 1300)
    me.expect_sum(me.world_size)
    me.backend.set_timeout(timedelta(milliseconds=50))
    if me.rank == 1:
        tensor = torch.ones(4)
        work = dist.all_reduce(tensor, async_op=True)
        try:
            work.wait()
        except RuntimeError as error:
            if not re.search("[Tt]imed out", str(error)):
                raise AssertionError(f"the lone all_reduce failed without 'timed out': "
                                     f"{error!r}") from error
        else:
            deadline = time.monotonic() + ERROR_REPORT_S
            while me.backend.get_error() == ErrorType.SUCCESS and time.monotonic() < deadline:
                time.sleep(0.1)
            expect(me.backend.get_error(), ErrorType.TIMEOUT, "get_error() after the timeout")
            expect_error(lambda: dist.all_reduce(tensor, async_op=True), RuntimeError,
                         "timed out", "an all_reduce after the timeout")
        del work
    me.backend.set_timeout(GROUP_TIMEOUT)
    me.meet("timeout/seen")
    me.reform(1301, me.publish_handles("timeout/recover"))
    me.expect_sum(me.world_size)


@scenario("test_reconfigure_rejects_reused_uuid (tuples, dataclass: the path of "
          "backends other than nccl2)")
def reused_uuid_is_refused(me: Rank) -> None:
    """A second reconfigure under a uuid this rank already used raises a RuntimeError that
    says "already used"."""
    me.start()
    me.reform_alone(1100 + me.rank)
    expect_error(lambda: me.reform_alone(1100 + me.rank), RuntimeError, "already used",
                 "a reconfigure under a used uuid")


# -- contracts of one process ---------------------------------------------------------


@scenario("ReconfigureContractTest.test_reconfigure_rejects_multiple_backends (all versions;"
          " the cpu backend's type GLOO in tuples, CUSTOM in dataclass)", ranks=1)
def group_of_two_backends_refuses_reconfigure(me: Rank) -> None:
    """A ProcessGroup holding this backend for cpu and another for cuda refuses the
    reconfigure API ("multiple backends"): it could not tell which should act."""
    me.start(reconfigurable=False)
    kind = dist.ProcessGroup.BackendType
    both = dist.ProcessGroup(0, 1)
    both._register_backend(torch.device("cpu"),
                           kind.GLOO if me.backend_name == "gloo" else kind.CUSTOM, me.backend)
    both._register_backend(torch.device("cuda"), kind.NCCL)
    for what, call in (("supports_reconfigure", lambda: both.supports_reconfigure),
                       ("get_reconfigure_handle", both.get_reconfigure_handle),
                       ("reconfigure", lambda: both.reconfigure(c10d.ReconfigureOptions()))):
        expect_error(call, RuntimeError, "multiple backends", what)


@scenario("BackendCapabilityContractTest.test_get_error_returns_success_on_base_backend "
          "(dataclass; asked of the backend a group holds, not of a bare base Backend)",
          ranks=1)
def fresh_backend_reports_no_error(me: Rank) -> None:
    """The backend of a fresh group has get_error(), and it answers SUCCESS."""
    from torch._C._distributed_c10d import ErrorType

    me.start(reconfigurable=False)
    expect(hasattr(me.backend, "get_error"), True, "hasattr(backend, 'get_error')")
    expect(me.backend.get_error(), ErrorType.SUCCESS, "get_error() of a fresh backend")


# -- upstream runs these on nccl2 or CUDA only ----------------------------------------


def _cuda_or_nccl2_only(me: Rank) -> None:
    raise AssertionError("a scenario with a skip reason was run")


for _name, _mirrors, _why in (
        ("work_timeout_counts_a_stall_before_launch",
         "test_work_explicit_timeout_includes_prelaunch_stall (dataclass)",
         "CUDA only: stalls the stream with torch.cuda._sleep; upstream skips it on every "
         "backend without supports_work_result (gloo's is False)"),
        ("work_reports_communicator_error",
         "test_work_reports_communicator_error (dataclass)",
         "CUDA only: reads NCCL's work results; upstream skips it on every backend without "
         "supports_work_result (gloo's is False)"),
        ("timeout_revokes_through_abort_hook",
         "test_reconfigure_after_timeout (tuples)",
         "nccl2 only: the tuples version skips it on other backends (\"timeout-triggered "
         "revoke is specific to nccl2\"); the dataclass version's runs on all"),
        ("reused_uuid_refused_group_wide",
         "test_reconfigure_rejects_reused_uuid (dataclass: the nccl2 path)",
         "nccl2 only: the whole group reuses a uuid, rank 0 refuses and the others time out "
         "waiting for it; other backends take the per-rank path (reused_uuid_is_refused)"),
        ("reconfigure_timeout_can_be_retried",
         "test_reconfigure_timeout_is_retryable (dataclass)",
         "nccl2 only: nonblocking NCCL communicator initialization; upstream skips it on "
         "other backends"),
):
    SCENARIOS.append(Scenario(_name, _mirrors, _cuda_or_nccl2_only, skip=_why))

BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}

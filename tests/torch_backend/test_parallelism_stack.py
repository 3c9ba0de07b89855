"""torch's parallelism stack computes the same on backend='asyncoll' as on gloo.

For each world size (2 and 4), workers/parallelism_stack.py runs as that many processes
twice: with BACKEND=gloo, then with BACKEND=asyncoll. In one process group's lifetime each
launch runs FSDP2 training, DTensor redistributions, tensor parallel forward and backward,
a DCP save and load, pipelining (GPipe and 1F1B), the object collectives, and uneven
all_to_all_single, all_to_all, all_gather_into_tensor and reduce_scatter_tensor; each rank
saves what every program computed, and each test compares one program's results, rank by
rank.

Agreement: at 2 ranks every result is bit-identical to gloo's (a sum of two terms is the
same in either order). At 4 ranks, values that only move between ranks, and integer sums,
are still compared exactly; float32 values that went through a sum across ranks are
compared with rtol=1e-5, atol=1e-6, because asyncoll and gloo add the ranks' terms in
different orders and float addition is not associative.

A program whose API this torch lacks is skipped in both launches, and its test says why
(none is, with torch 2.14 and 2.15). CI runs it on torch 2.14.1 and on the newest pip
gives (2.15.0).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import conftest

torch = pytest.importorskip("torch")
if tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
    pytest.skip("asyncoll's torch backend needs torch 2.14 or later", allow_module_level=True)

#: Limit on one launch (all its processes); a 4-process launch takes about 7 s on 2 cores.
JOB_TIMEOUT_S = 120
#: A collective that waits longer fails its program, so one hang does not stall the rest.
COLLECTIVE_TIMEOUT_S = 40
BACKENDS = ("gloo", "asyncoll")
PROGRAMS = ("fsdp2", "dtensor", "tensor_parallel", "dcp", "pipelining", "object_collectives",
            "tensor_collectives")
#: For float32 results summed across 4 ranks: the two backends add in different orders.
RTOL, ATOL = 1e-5, 1e-6

Launch = dict[str, list[dict[str, Any]]]


def launch(backend: str, world_size: int, entry_point_dir: Path, directory: Path) -> list[Any]:
    """Run the worker on ``backend``; return each rank's saved results (or fail with a report)."""
    env = conftest.environment(entry_point_dir, BACKEND=backend, WORLD_SIZE=str(world_size),
                               PORT=str(conftest.free_port()),
                               DUMP_AFTER_S=str(JOB_TIMEOUT_S - 15),
                               COLLECTIVE_TIMEOUT_S=str(COLLECTIVE_TIMEOUT_S),
                               CHECKPOINT_DIR=str(directory / "checkpoint"),
                               RESULTS=str(directory / "rank{rank}.pt"))
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "parallelism_stack.py",
                                          world_size, env, JOB_TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outcomes), f"the {backend} launch failed:\n{report}"
    return [torch.load(directory / f"rank{rank}.pt") for rank in range(world_size)]


@pytest.fixture(scope="module")
def launches(entry_point_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Launch]:
    """Both backends' results at a world size, launched by the first test that asks."""
    done: dict[int, Launch | Exception] = {}

    def get(world_size: int) -> Launch:
        if world_size not in done:
            try:
                done[world_size] = {
                    backend: launch(backend, world_size, entry_point_dir,
                                    tmp_path_factory.mktemp(f"{backend}{world_size}"))
                    for backend in BACKENDS}
            except Exception as exc:  # noqa: BLE001 - every test of this size reports it
                done[world_size] = exc
        outcome = done[world_size]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return get


def differences(expected: Any, got: Any, exact: bool, where: str) -> list[str]:
    """Where ``got`` differs from ``expected`` (tensors by bits, or by the tolerance)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return [f"{where}: gloo gave a tensor, asyncoll {type(got).__name__}"]
        if exact or not expected.is_floating_point():
            if expected.dtype != got.dtype or expected.shape != got.shape:
                return [(f"{where}: gloo gave {expected.dtype} {list(expected.shape)}, "
                         f"asyncoll {got.dtype} {list(got.shape)}")]
            if torch.equal(expected, got):
                return []
            differ = expected != got
            largest = (expected.double() - got.double()).abs().max()
            return [(f"{where}: {int(differ.sum())} of {expected.numel()} elements are not "
                     f"bit-identical to gloo's (largest difference {float(largest):.3g}):\n"
                     f"{expected[differ]}\n{got[differ]}")]
        try:
            torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
        except AssertionError as exc:
            return [f"{where}: {exc}"]
        return []
    if isinstance(expected, dict):
        if not isinstance(got, dict) or expected.keys() != got.keys():
            return [(f"{where}: keys differ: {sorted(expected)} and "
                     f"{sorted(got) if isinstance(got, dict) else got!r}")]
        return [line for key in expected
                for line in differences(expected[key], got[key], exact, f"{where} {key}")]
    if isinstance(expected, (list, tuple)):
        if type(got) is not type(expected) or len(got) != len(expected):
            return [f"{where}: gloo gave {expected!r}, asyncoll {got!r}"]
        return [line for i, (a, b) in enumerate(zip(expected, got))
                for line in differences(a, b, exact, f"{where} [{i}]")]
    return [] if expected == got else [f"{where}: gloo gave {expected!r}, asyncoll {got!r}"]


@pytest.mark.timeout(2 * JOB_TIMEOUT_S + 60)
@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("world_size", [2, 4])
def test_program_on_asyncoll_matches_gloo(world_size: int, program: str,
                                          launches: Callable[[int], Launch]) -> None:
    ran = launches(world_size)
    if program in ran["gloo"][0]["skipped"]:
        pytest.skip(f"{program}: {ran['gloo'][0]['skipped'][program]}")
    # Every rank's error at once: the first rank's is often a timeout caused by another's.
    raised = [f"{program} on rank {rank} of {world_size}: {backend} raised\n"
              f"{run['errors'][program]}"
              for backend, runs in ran.items() for rank, run in enumerate(runs)
              if program in run["errors"]]
    assert not raised, "\n".join(raised)
    found: list[str] = []
    for rank, (gloo, ours) in enumerate(zip(ran["gloo"], ran["asyncoll"])):
        where = f"{program} on rank {rank} of {world_size}"
        assert program in ours["results"], f"{where}: asyncoll skipped {ours['skipped']}"
        expected, got = gloo["results"][program], ours["results"][program]
        assert expected["moved"] or expected["summed"], f"{where}: nothing to compare"
        found += differences(expected["moved"], got["moved"], True, where) + \
            differences(expected["summed"], got["summed"], world_size == 2, where)
    assert not found, "\n".join(found)

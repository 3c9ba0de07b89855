"""torch.distributed with backend='asyncoll' gives what it gives with gloo, call by call.

Each world size starts that many processes of workers/differential_torch.py. In each, the
default group is asyncoll's and a second group of every rank is gloo's; every collective of
torch.distributed (reductions with every op, data movement, point to point, the object
collectives) runs through both on the same random inputs, for every dtype gloo accepts plus
bfloat16, at sizes 0, 1 and 1001, with the root taking turns, and the results are compared:
exactly, except float reductions (a tight tolerance: the two add in different orders).
Cases gloo refuses are skipped and listed; a floor on the number compared keeps the test
from passing on an empty comparison.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from . import conftest

pytest.importorskip("torch")

#: Limit on one job (all its processes); a 4-process job takes about 15 s on 2 cores.
JOB_TIMEOUT_S = 150
#: Cases each rank must have compared: with torch 2.13 the worker compares 928 at world
#: size 2 (gloo refuses 348); a little under, so a torch release that moves a case
#: between the two does not break the test.
MIN_COMPARED = 880
SUMMARY = re.compile(r"^rank (\d+) compared (\d+) cases; gloo refused (\d+)$", re.MULTILINE)


@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_every_torch_collective_on_asyncoll_matches_gloo(world_size: int,
                                                         entry_point_dir: Path) -> None:
    env = conftest.environment(entry_point_dir, DUMP_AFTER_S=str(JOB_TIMEOUT_S - 15),
                               WORLD_SIZE=str(world_size),
                               PORT=str(conftest.free_port()))
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "differential_torch.py",
                                          world_size, env, JOB_TIMEOUT_S, tails=(2000, 6000))
    assert all(code == 0 for code, _, _ in outcomes), report
    counts = set()
    for rank, (_, out, _) in enumerate(outcomes):
        summary = SUMMARY.search(out)
        assert summary is not None and int(summary.group(1)) == rank, report
        counts.add((int(summary.group(2)), int(summary.group(3))))
    assert len(counts) == 1, f"the ranks compared different numbers of cases: {counts}"
    (compared, refused), = counts
    assert compared >= MIN_COMPARED, report
    assert refused < compared, report
    bfloat16 = [line for line in outcomes[0][1].splitlines() if "bfloat16" in line]
    assert all("BAND" in line or "BOR" in line or "BXOR" in line for line in bfloat16), \
        "gloo refused a bfloat16 case other than a bitwise op, so it was not compared"


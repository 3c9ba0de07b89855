"""torch's split_group on asyncoll: the same groups as gloo's, non-members and sub-group parents.

workers/split_group.py runs on 4 processes, once on gloo and once on
asyncoll; every rank must see the same on both. torch before 2.15 splits
only on an accelerator, for every backend.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from . import conftest

torch = pytest.importorskip("torch")

JOB_TIMEOUT_S = 90
pytestmark = [
    pytest.mark.timeout(2 * JOB_TIMEOUT_S + 30),
    pytest.mark.skipif(tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
                       < (2, 15), reason="torch < 2.15 splits groups only on an accelerator"),
]


def seen_on(backend: str, entry_point_dir: Path) -> list[list[object]]:
    env = conftest.environment(entry_point_dir, BACKEND=backend, WORLD_SIZE="4",
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(conftest.free_port()))
    outcomes, report = conftest.run_ranks(conftest.WORKERS / "split_group.py", 4, env,
                                          JOB_TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outcomes), report
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outcomes]


def test_split_group_gives_every_rank_what_gloo_gives_it(entry_point_dir: Path) -> None:
    ours = seen_on("asyncoll", entry_point_dir)
    assert ours == seen_on("gloo", entry_point_dir)
    # And what that is: halves summed apart; ranks 1 and 3 outside [0, 2].
    assert [r[0][4] for r in ours] == [3.0, 3.0, 7.0, 7.0]
    assert [r[1][1] for r in ours][1::2] == ["NON_GROUP_MEMBER"] * 2
    assert [r[3][1:3] for r in ours] == [[3, 3.0], [2, 3.0], [1, 3.0], [0, 3.0]]


def test_a_split_that_repeats_a_rank_is_refused_before_anything_is_sent() -> None:
    from asyncoll._torch_backend.split import split

    class Parent:
        class _group:  # noqa: N801 - the attribute split() reads
            size, rank, ranks = 4, 0, (0, 1, 2, 3)

    with pytest.raises(ValueError, match=r"ranks \[0, 0\] of a group of 4"):
        split(Parent(), [0, 0], None, "g")

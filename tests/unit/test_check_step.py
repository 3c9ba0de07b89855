"""The neighbour check's step: one per phase, each fitting the frame header."""

from __future__ import annotations

import pytest

from asyncoll._algorithms.team import CHECK_STEP, STEPS_PER_PHASE, check_step
from asyncoll._wire.frames import Operation, pack_header, unpack_header


@pytest.mark.parametrize("phase", [0, 1, 5, 4095])
def test_every_phase_checks_at_a_step_the_header_carries(phase: int) -> None:
    # A group's fallback runs its algorithm in a later phase of its first
    # operation (Team.phase(5)); its check's step once overflowed the header.
    step = check_step(phase * STEPS_PER_PHASE)
    header = unpack_header(pack_header(Operation.ALL_REDUCE, 1, 2, step, 0))

    assert header.step == step


def test_the_check_steps_are_past_every_phase_and_one_each() -> None:
    steps = [check_step(phase * STEPS_PER_PHASE) for phase in range(8)]

    assert steps[0] == CHECK_STEP
    assert len(set(steps)) == len(steps)
    assert min(steps) > 8 * STEPS_PER_PHASE

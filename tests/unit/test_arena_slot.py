"""How large a group's arena slot is by default: as /dev/shm's free room allows."""

from __future__ import annotations

import pytest

from asyncoll._group.arena_path import slot_for
from asyncoll._runtime.settings import Settings
from asyncoll._transport.shm import segment

MiB = 1 << 20


@pytest.mark.parametrize("members, room, slot", [
    (2, 24 << 30, 8 * MiB),  # plenty of room: the largest
    (16, 24 << 30, 8 * MiB),  # 16 x 2 x 8 MiB = 256 MiB, well within a quarter
    (2, 64 * MiB, 2 * MiB),  # docker's 64 MB /dev/shm: 2 x 2 x 4 MiB would pass 16 MiB
    (4, 64 * MiB, MiB),  # with 4 members even 2 MiB slots pass a quarter: the floor
    (8, 0, MiB),  # no room at all: the floor (making it may then fail: no arena)
    (2, None, MiB),  # room unknown: the floor, the default of earlier versions
])
def test_the_slot_is_the_largest_whose_arena_takes_a_quarter_of_the_room(members, room, slot):
    assert slot_for(members, 8 * MiB, room) == slot


def test_a_largest_slot_below_the_floor_is_kept():
    assert slot_for(2, 64 << 10, 24 << 30) == 64 << 10
    assert slot_for(2, 64 << 10, None) == 64 << 10


def test_asyncoll_arena_bytes_sets_the_slot_exactly_and_its_absence_sizes_it_to_room():
    default = Settings.from_environment({}).policy
    assert default.arena_sized_to_room and default.arena_slot_bytes in (8 * MiB, 0)
    given = Settings.from_environment({"ASYNCOLL_ARENA_BYTES": str(3 * MiB)}).policy
    assert not given.arena_sized_to_room and given.arena_slot_bytes in (3 * MiB, 0)


def test_room_reads_dev_shm_or_says_it_does_not_know(monkeypatch):
    room = segment.room()
    assert room is None or room >= 0
    monkeypatch.setattr(segment, "SHM_DIR", "/no/such/directory")
    assert segment.room() is None

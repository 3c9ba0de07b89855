"""The ids of torch's sub-groups that asyncoll makes without its coordinator."""

from __future__ import annotations

import zlib

#: Sub-groups made without the coordinator get ids from here up, clear of the
#: coordinator's (which count up from 1).
_MEMBERS_ONLY_GROUP_IDS = 1 << 31


def members_only_id(torch_name: str) -> int:
    """asyncoll's id for the torch group named ``torch_name``, the same on every member.

    torch names groups by a counter every rank keeps alike ("1", "2", ...),
    or by a hash of their ranks; either is unique within the job.
    """
    number = int(torch_name) if torch_name.isdigit() else zlib.crc32(torch_name.encode())
    return _MEMBERS_ONLY_GROUP_IDS | (number % _MEMBERS_ONLY_GROUP_IDS)

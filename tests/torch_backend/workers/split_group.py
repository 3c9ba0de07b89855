"""torch's split_group on 4 ranks, on the backend BACKEND (gloo or asyncoll).

Splits the world in halves, then into [0, 2] (ranks 1 and 3 are in no split:
NON_GROUP_MEMBER), then a half into singletons (a sub-group as parent), then
the world in reverse order; each split runs a collective and prints what it
saw as one JSON line, which the test compares with gloo's.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

import asyncoll  # noqa: F401 - registers the backend

rank = int(os.environ["RANK"])
dist.init_process_group(os.environ["BACKEND"], timeout=timedelta(seconds=30))


def total(group: dist.ProcessGroup) -> float:
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=group)
    return float(t.item())


seen: list[object] = []
halves = dist.split_group(split_ranks=[[0, 1], [2, 3]], group_desc="halves")
seen.append(["halves", halves.rank(), halves.size(), dist.get_process_group_ranks(halves),
             total(halves)])
some = dist.split_group(split_ranks=[[0, 2]])
if some is dist.GroupMember.NON_GROUP_MEMBER:
    seen.append(["[0, 2]", "NON_GROUP_MEMBER"])
else:
    seen.append(["[0, 2]", some.rank(), dist.get_process_group_ranks(some), total(some)])
alone = dist.split_group(parent_pg=halves, split_ranks=[[1], [0]])
seen.append(["singletons of a half", alone.size(), dist.get_process_group_ranks(alone),
             total(alone)])
reverse = dist.split_group(split_ranks=[[3, 2, 1, 0]], timeout=timedelta(seconds=20))
t = torch.tensor([float(rank)])
dist.broadcast(t, group_src=0, group=reverse)
seen.append(["reversed", reverse.rank(), float(t.item()), total(reverse)])
dist.destroy_process_group()
print(json.dumps(seen))

"""torch.distributed on backend 'asyncoll', with ASYNCOLL_COORDINATOR naming a standing
coordinator: rank 0 publishes it as the fallback of the coordinator it hosts.

Rank 0 then stops the coordinator it hosts (as if its host went); every rank
makes an asyncoll group through the session, which needs a coordinator: the
standing one takes the job back. Prints ``OK rank=R addresses=N group=G``.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from asyncoll._runtime.runtime import runtime

dist.init_process_group("asyncoll")
rank = dist.get_rank()
group = dist.distributed_c10d._get_default_group()  # asyncoll's ProcessGroup itself
session = group._world.world.session
tensor = torch.tensor([1.0])
dist.all_reduce(tensor)
if rank == 0:
    runtime().run(group._world._coordinator.stop())
dist.all_reduce(tensor)  # collectives need no coordinator
group_id, _ = runtime().run(session.new_group((0, 1), 30.0))
sys.stdout.write(f"OK rank={rank} addresses={len(session.client.addresses)} "
                 f"group={group_id}\n")
sys.stdout.flush()
dist.destroy_process_group()

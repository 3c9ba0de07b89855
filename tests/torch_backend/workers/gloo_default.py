"""A gloo default group and an asyncoll group of every rank beside it: all_reduce on it."""

import torch
import torch.distributed as dist

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
group = dist.new_group(backend="asyncoll")
t = torch.tensor([rank + 1.0])
dist.all_reduce(t, group=group)
print(f"rank-{rank}:{t.tolist()}".replace(" ", ""), flush=True)
dist.destroy_process_group()

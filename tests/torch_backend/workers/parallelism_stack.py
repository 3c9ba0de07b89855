"""Runs torch's parallelism stack on one backend and saves what each program computed.

Launched as WORLD_SIZE processes by tests/torch_backend/test_parallelism_stack.py, once with
BACKEND=gloo and once with BACKEND=asyncoll, with RANK, WORLD_SIZE, PORT, CHECKPOINT_DIR
(shared by the ranks of one launch) and RESULTS (a path with ``{rank}`` in it) in the
environment. In one process group's lifetime it runs, on seeded inputs that are the same
for both launches:

- fsdp2: fully_shard training of a small MLP (losses, full parameters);
- dtensor: redistributions between Shard(0), Shard(1), Replicate and Partial on a 1-D
  DeviceMesh("cpu"); on a CPU mesh DTensor makes Shard(0) -> Shard(1) an all_gather and a
  chunk, so the all_to_all it makes on other devices (torch.ops._dtensor
  .shard_dim_alltoall) is called directly too; Shard -> Partial only where torch allows
  it (2.14 on, not 2.13);
- tensor_parallel: parallelize_module with ColwiseParallel and RowwiseParallel, forward
  and backward (output, input and parameter gradients);
- dcp: torch.distributed.checkpoint save of a fully_shard model, load into a fresh one;
- pipelining: ScheduleGPipe and Schedule1F1B, one stage per rank (losses, gradients);
- object_collectives: all_gather_object, broadcast_object_list, scatter_object_list and
  gather_object;
- tensor_collectives: uneven all_to_all_single, all_to_all, all_gather_into_tensor and
  reduce_scatter_tensor.

Each program's results go into two dicts: ``moved`` (values that only moved between ranks,
or integer arithmetic: the same bits whatever the backend) and ``summed`` (float values
that went through a sum across ranks). A program that raises is recorded as an error with
its traceback; one whose torch API is missing is recorded as skipped with the reason. Each
rank torch.saves ``{"results": ..., "errors": ..., "skipped": ...}`` to RESULTS and exits 0.
"""

from __future__ import annotations

import copy
import faulthandler
import itertools
import os
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

RANK = int(os.environ["RANK"])
WORLD_SIZE = int(os.environ["WORLD_SIZE"])
BACKEND = os.environ["BACKEND"]
#: Deadline of every collective: a program that hangs fails instead of stalling the rest.
TIMEOUT_S = float(os.environ.get("COLLECTIVE_TIMEOUT_S", "30"))

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])

Results = dict[str, dict[str, Any]]


class Unavailable(Exception):
    """This torch lacks an API a program needs."""


def seeded(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def mlp(seed: int, *sizes: int) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        layers += [nn.Linear(fan_in, fan_out)] + ([nn.Tanh()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


def imports(names: str, module: str) -> list[Any]:
    """``from module import names``, or Unavailable naming what this torch lacks."""
    try:
        loaded = __import__(module, fromlist=names.split())
        return [getattr(loaded, name) for name in names.split()]
    except (ImportError, AttributeError) as exc:
        raise Unavailable(f"torch {torch.__version__} lacks {module}: {exc}") from exc


def cpu_mesh() -> Any:
    init_device_mesh, = imports("init_device_mesh", "torch.distributed.device_mesh")
    return init_device_mesh("cpu", (WORLD_SIZE,))


def fsdp2() -> Results:
    fully_shard, = imports("fully_shard", "torch.distributed.fsdp")
    mesh = cpu_mesh()
    # 5 output rows: uneven shards (and padding) at 2 and 4 ranks.
    model = mlp(0, 6, 16, 5)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(3):
        x = seeded(100 * step + RANK, 8, 6)
        loss = nn.functional.mse_loss(model(x), x[:, :5].tanh())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    params = {name: p.full_tensor() for name, p in model.named_parameters()}
    return {"moved": {}, "summed": {"losses": torch.stack(losses), **params}}


def dtensor() -> Results:
    Shard, Replicate, Partial, DTensor, distribute_tensor = imports(
        "Shard Replicate Partial DTensor distribute_tensor", "torch.distributed.tensor")
    mesh = cpu_mesh()
    moved: dict[str, Any] = {}
    summed: dict[str, Any] = {}
    placements = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}
    # Even (8 x 12) and uneven (7 x 5) shards.
    for shape in ((8, 12), (7, 5)):
        whole = seeded(7, *shape)
        for start, first in placements.items():
            for end, second in placements.items():
                if start != end:
                    moved_to = distribute_tensor(whole, mesh, [first]).redistribute(
                        mesh, [second])
                    moved[f"{shape}:{start}->{end}"] = moved_to.to_local()
        # Partial: each rank holds a term; the redistribution reduces them.
        term = seeded(50 + RANK, *shape)
        integer = torch.randint(-1000, 1000, shape,
                                generator=torch.Generator().manual_seed(60 + RANK))
        for reduce_op in ("sum", "avg", "max", "min"):
            partial = DTensor.from_local(term, mesh, [Partial(reduce_op)])
            for end in ("R", "S0", "S1"):
                local = partial.redistribute(mesh, [placements[end]]).to_local()
                # max and min pick a value: nothing is added.
                (summed if reduce_op in ("sum", "avg") else moved)[
                    f"{shape}:P({reduce_op})->{end}"] = local
        for end in ("R", "S0", "S1"):
            partial = DTensor.from_local(integer, mesh, [Partial("sum")])
            moved[f"{shape}:int P(sum)->{end}"] = partial.redistribute(
                mesh, [placements[end]]).to_local()
        # Shard -> Partial pads each shard with zeros; back to Replicate, each element sums
        # one value and zeros, which is exact. torch 2.13 refuses redistributing to Partial.
        if TORCH_VERSION >= (2, 14):
            there = distribute_tensor(whole, mesh, [Shard(0)]).redistribute(mesh, [Partial()])
            moved[f"{shape}:S0->P->R"] = there.redistribute(mesh, [Replicate()]).to_local()
        # On a CPU mesh DTensor's Shard(0) -> Shard(1) gathers and chunks instead; this is
        # the all_to_all it makes on other devices.
        group = mesh.get_group(0)
        local = distribute_tensor(whole, mesh, [Shard(0)]).to_local()
        if shape[0] % WORLD_SIZE == 0 and shape[1] % WORLD_SIZE == 0:
            moved[f"{shape}:S0->S1 by all_to_all"] = torch.ops._dtensor.shard_dim_alltoall(
                local, 0, 1, group.group_name)
    return {"moved": moved, "summed": summed}


def tensor_parallel() -> Results:
    ColwiseParallel, RowwiseParallel, parallelize_module = imports(
        "ColwiseParallel RowwiseParallel parallelize_module", "torch.distributed.tensor.parallel")
    mesh = cpu_mesh()
    model = parallelize_module(mlp(1, 6, 16, 6), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = seeded(11, 4, 6).requires_grad_()
    out = model(x)
    (out * seeded(12, 4, 6)).sum().backward()
    assert x.grad is not None
    grads = {f"grad {name}": p.grad.full_tensor() for name, p in model.named_parameters()}
    return {"moved": {}, "summed": {"output": out.detach(), "input grad": x.grad, **grads}}


def dcp() -> Results:
    checkpoint, = imports("checkpoint", "torch.distributed")
    fully_shard, = imports("fully_shard", "torch.distributed.fsdp")
    mesh = cpu_mesh()

    def sharded(seed: int) -> nn.Module:
        model = mlp(seed, 6, 10, 5)
        fully_shard(model, mesh=mesh)
        return model

    saved = sharded(2)
    checkpoint.save(saved.state_dict(), checkpoint_id=os.environ["CHECKPOINT_DIR"])
    fresh = sharded(3)
    state = fresh.state_dict()
    checkpoint.load(state, checkpoint_id=os.environ["CHECKPOINT_DIR"])
    fresh.load_state_dict(state)
    moved = {}
    for (name, before), after in zip(saved.named_parameters(), fresh.parameters()):
        moved[f"saved {name}"] = before.full_tensor()
        moved[f"loaded {name}"] = after.full_tensor()
        moved[f"loaded shard {name}"] = after.to_local()
        if not torch.equal(moved[f"saved {name}"], moved[f"loaded {name}"]):
            raise RuntimeError(f"the checkpoint loaded {name} different from what was saved")
    return {"moved": moved, "summed": {}}


def pipelining() -> Results:
    PipelineStage, ScheduleGPipe, Schedule1F1B = imports(
        "PipelineStage ScheduleGPipe Schedule1F1B", "torch.distributed.pipelining")
    moved: dict[str, Any] = {}
    stage_module = mlp(20 + RANK, 6, 6)
    last = RANK == WORLD_SIZE - 1
    x, target = seeded(21, 8, 6), seeded(22, 8, 6)
    for name, schedule_type in (("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)):
        module = copy.deepcopy(stage_module)
        stage = PipelineStage(module, RANK, WORLD_SIZE, torch.device("cpu"))
        schedule = schedule_type(stage, n_microbatches=4, loss_fn=nn.functional.mse_loss)
        losses: list[torch.Tensor] = []
        if RANK == 0:
            output = schedule.step(x)
        elif last:
            output = schedule.step(target=target, losses=losses)
        else:
            output = schedule.step()
        if last:
            moved[f"{name} output"] = output.detach()
            moved[f"{name} losses"] = torch.stack([loss.detach() for loss in losses])
        for param_name, p in module.named_parameters():
            assert p.grad is not None
            moved[f"{name} grad {param_name}"] = p.grad
    # Stages only send and receive: nothing is summed across ranks, so all is exact.
    return {"moved": moved, "summed": {}}


def object_collectives() -> Results:
    mine = {"rank": RANK, "text": "x" * RANK, "values": [RANK, RANK / 3, None, (RANK, "t")]}
    gathered: list[Any] = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, mine)
    broadcast = [mine, f"from {RANK}"]
    dist.broadcast_object_list(broadcast, src=WORLD_SIZE - 1)
    scattered: list[Any] = [None]
    sources = [{"to": r, "payload": list(range(r))} for r in range(WORLD_SIZE)]
    dist.scatter_object_list(scattered, sources if RANK == 0 else None, src=0)
    collected: list[Any] | None = [None] * WORLD_SIZE if RANK == WORLD_SIZE - 1 else None
    dist.gather_object(mine, collected, dst=WORLD_SIZE - 1)
    return {"moved": {"all_gather_object": gathered, "broadcast_object_list": broadcast,
                      "scatter_object_list": scattered, "gather_object": collected},
            "summed": {}}


def split(source: int, destination: int) -> int:
    """Elements ``source`` sends ``destination`` in the uneven all_to_all: 0 to 3."""
    return (3 * source + destination) % 4


def tensor_collectives() -> Results:
    sends = [split(RANK, peer) for peer in range(WORLD_SIZE)]
    receives = [split(peer, RANK) for peer in range(WORLD_SIZE)]
    moved: dict[str, Any] = {}
    summed: dict[str, Any] = {}
    for dtype in (torch.int64, torch.float32):
        data = (torch.arange(sum(sends)) + 100 * RANK).to(dtype)
        out = torch.empty(sum(receives), dtype=dtype)
        dist.all_to_all_single(out, data, output_split_sizes=receives,
                               input_split_sizes=sends)
        moved[f"all_to_all_single {dtype}"] = out
        # gloo's all_to_all takes only tensors of one size.
        outs = [torch.empty(3, dtype=dtype) for _ in range(WORLD_SIZE)]
        dist.all_to_all(outs, [torch.arange(3).to(dtype) + 10 * RANK + peer
                               for peer in range(WORLD_SIZE)])
        moved[f"all_to_all {dtype}"] = outs
        gathered = torch.empty(WORLD_SIZE * 5, dtype=dtype)
        dist.all_gather_into_tensor(gathered, (torch.arange(5) * (RANK + 1)).to(dtype))
        moved[f"all_gather_into_tensor {dtype}"] = gathered
    reduced = torch.empty(3, dtype=torch.float32)
    dist.reduce_scatter_tensor(reduced, seeded(30 + RANK, 3 * WORLD_SIZE))
    summed["reduce_scatter_tensor float32"] = reduced
    exact = torch.empty(3, dtype=torch.int64)
    dist.reduce_scatter_tensor(exact, torch.arange(3 * WORLD_SIZE) * (RANK - 1))
    moved["reduce_scatter_tensor int64"] = exact
    return {"moved": moved, "summed": summed}


def plain(value: Any) -> Any:
    """``value`` with every tensor a plain, detached copy (torch.load refuses subclasses)."""
    if isinstance(value, torch.Tensor):
        if hasattr(value, "wait"):  # an AsyncCollectiveTensor of functional collectives
            value = value.wait()
        copied = value.detach().clone()
        if type(copied) is not torch.Tensor:
            raise TypeError(f"a result is a {type(copied).__name__}, not a plain tensor")
        return copied
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item) for item in value)
    return value


PROGRAMS: dict[str, Callable[[], Results]] = {
    "fsdp2": fsdp2, "dtensor": dtensor, "tensor_parallel": tensor_parallel, "dcp": dcp,
    "pipelining": pipelining, "object_collectives": object_collectives,
    "tensor_collectives": tensor_collectives}


def main() -> int:
    # A stuck process dumps every thread's stack to stderr, which the test shows, and exits.
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "100")), exit=True)
    dist.init_process_group(BACKEND, init_method=f"tcp://127.0.0.1:{os.environ['PORT']}",
                            world_size=WORLD_SIZE, rank=RANK,
                            timeout=timedelta(seconds=TIMEOUT_S))
    assert dist.get_backend() == BACKEND
    results: dict[str, Results] = {}
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, program in PROGRAMS.items():
        try:
            results[name] = plain(program())
        except Unavailable as exc:
            skipped[name] = str(exc)
        except Exception:  # noqa: BLE001 - recorded for the test to show, with the rank
            errors[name] = traceback.format_exc()
            print(f"rank {RANK}: {name} raised\n{errors[name]}", file=sys.stderr, flush=True)
    torch.save({"results": results, "errors": errors, "skipped": skipped},
               os.environ["RESULTS"].format(rank=RANK))
    if not errors:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

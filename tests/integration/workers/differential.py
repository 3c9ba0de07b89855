"""Runs each collective through torch.distributed (gloo) and through asyncoll, and compares.

Launched as WORLD_SIZE processes by tests/integration/test_differential_gloo.py, with RANK,
WORLD_SIZE, GLOO_PORT and ASYNCOLL_PORT in the environment. Every rank walks the same list
of cases in the same order. For each case it builds its inputs twice from one seed (the case
and the rank), runs the collective on one copy with gloo and on the other with asyncoll, and
compares what this rank ends up with: exactly for integer and bool dtypes and for data
movement, within a tight tolerance for float reductions (the two reduce in different orders).

Where gloo raises for a case on any rank (the ranks agree through a gloo all_reduce), the
case is skipped for both libraries and listed as refused. A rank prints
``rank R compared K cases; gloo refused M`` and exits 0, or prints every difference and
exits 1.
"""

from __future__ import annotations

import os
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as td

import asyncoll

RANK = int(os.environ["RANK"])
WORLD_SIZE = int(os.environ["WORLD_SIZE"])
TIMEOUT_S = 60
# torch calls all_gather_into_tensor and reduce_scatter_tensor deprecated; they are tested.
warnings.filterwarnings("ignore", category=FutureWarning)
#: Set ASYNCOLL_DIFF_TRACE=1 to log each case and each gloo refusal to stderr.
TRACE = bool(os.environ.get("ASYNCOLL_DIFF_TRACE"))

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "bool": torch.bool, "complex64": torch.complex64,
    "complex128": torch.complex128,
}
FLOATING = ("float32", "float64", "float16", "complex64", "complex128")
INTEGER = ("int8", "uint8", "int16", "int32", "int64")
#: Passed as is to both libraries: asyncoll takes torch's ReduceOp, as a drop-in should.
OPS = {name: getattr(td.ReduceOp, name)
       for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")}
#: Relative tolerance for float reductions; the absolute one scales with the result.
RTOL = {"float16": 1e-3, "float32": 1e-5, "complex64": 1e-5, "float64": 1e-12,
        "complex128": 1e-12}
COUNTS = (0, 1, 1001)


@dataclass(frozen=True)
class Case:
    """One collective call: which, on what dtype and values, how many elements, which root."""

    collective: str
    dtype: str
    count: int
    op: str = ""
    root: int = 0
    #: "small" (small integers, exact even in float16), "normal" or "wide" (whole range).
    values: str = "small"

    @property
    def name(self) -> str:
        op = f" {self.op}" if self.op else ""
        return (f"{self.collective}{op} {self.dtype} count={self.count} root={self.root} "
                f"values={self.values}")


class Inputs:
    """Deterministic tensors for one case on this rank; a second instance repeats them."""

    def __init__(self, case: Case, library: int) -> None:
        self.case = case
        self.torch_dtype = DTYPES.get(case.dtype, torch.int8)
        self.seed = zlib.crc32(case.name.encode())
        # Outputs start filled differently per library, so an element that one of
        # them never writes shows up as a difference.
        self.library = library

    def data(self, n: int, salt: int = 0, rank: int = RANK) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, rank, salt])
        dtype, values = self.case.dtype, self.case.values
        if dtype == "bool":
            return torch.from_numpy(rng.integers(0, 2, n).astype(bool))
        if values == "normal":
            tensor = torch.from_numpy(rng.standard_normal(n)).to(self.torch_dtype)
            if dtype.startswith("complex"):
                tensor = tensor + 1j * torch.from_numpy(rng.standard_normal(n))
            return tensor.to(self.torch_dtype)
        if values == "wide":
            info = torch.iinfo(self.torch_dtype)
            array = rng.integers(info.min, info.max, n, dtype=np.int64, endpoint=True)
            return torch.from_numpy(array).to(self.torch_dtype)
        low, high = (1, 2) if self.case.op == "PRODUCT" else (-4, 4)
        if dtype == "uint8":
            low = max(low, 0)
        array = rng.integers(low, high, n, endpoint=True)
        tensor = torch.from_numpy(array).to(self.torch_dtype)
        if dtype.startswith("complex"):
            imag = rng.integers(low, high, n, endpoint=True)
            tensor = tensor + 1j * torch.from_numpy(imag).to(self.torch_dtype)
        return tensor

    def blank(self, n: int) -> torch.Tensor:
        if self.case.dtype == "bool":
            return torch.full((n,), bool(self.library), dtype=torch.bool)
        return torch.full((n,), 3 + 2 * self.library, dtype=self.torch_dtype)

    def splits(self) -> list[list[int]]:
        # sizes[i][j]: what rank i sends rank j; the same on every rank, zeros included.
        rng = np.random.default_rng([self.seed, 1 << 20])
        return rng.integers(0, self.case.count, (WORLD_SIZE, WORLD_SIZE),
                            endpoint=True).tolist()


Result = list[Any]


def run_all_reduce(dist: Any, inp: Inputs) -> Result:
    tensor = inp.data(inp.case.count)
    dist.all_reduce(tensor, op=OPS[inp.case.op])
    return [tensor]


def run_reduce(dist: Any, inp: Inputs) -> Result:
    tensor = inp.data(inp.case.count)
    dist.reduce(tensor, dst=inp.case.root, op=OPS[inp.case.op])
    # Only the destination's tensor is defined afterwards.
    return [tensor] if RANK == inp.case.root else []


def run_reduce_scatter(dist: Any, inp: Inputs) -> Result:
    out = inp.blank(inp.case.count)
    dist.reduce_scatter(out, [inp.data(inp.case.count, salt=j) for j in range(WORLD_SIZE)],
                        op=OPS[inp.case.op])
    return [out]


def run_reduce_scatter_tensor(dist: Any, inp: Inputs) -> Result:
    out = inp.blank(inp.case.count)
    dist.reduce_scatter_tensor(out, inp.data(inp.case.count * WORLD_SIZE), op=OPS[inp.case.op])
    return [out]


def run_broadcast(dist: Any, inp: Inputs) -> Result:
    tensor = inp.data(inp.case.count)
    dist.broadcast(tensor, src=inp.case.root)
    return [tensor]


def run_all_gather(dist: Any, inp: Inputs) -> Result:
    outs = [inp.blank(inp.case.count) for _ in range(WORLD_SIZE)]
    dist.all_gather(outs, inp.data(inp.case.count))
    return outs


def run_all_gather_into_tensor(dist: Any, inp: Inputs) -> Result:
    out = inp.blank(inp.case.count * WORLD_SIZE)
    dist.all_gather_into_tensor(out, inp.data(inp.case.count))
    return [out]


def run_gather(dist: Any, inp: Inputs) -> Result:
    root = inp.case.root
    outs = [inp.blank(inp.case.count) for _ in range(WORLD_SIZE)] if RANK == root else None
    dist.gather(inp.data(inp.case.count), outs, dst=root)
    return outs or []


def run_scatter(dist: Any, inp: Inputs) -> Result:
    root = inp.case.root
    out = inp.blank(inp.case.count)
    ins = ([inp.data(inp.case.count, salt=j) for j in range(WORLD_SIZE)] if RANK == root
           else None)
    dist.scatter(out, ins, src=root)
    return [out]


def run_all_to_all(dist: Any, inp: Inputs) -> Result:
    # Equal sizes: gloo's alltoall refuses lists of tensors of different sizes ("invalid
    # tensor size at index 1"), and only on some ranks, so it cannot be compared.
    # Uneven splits are compared through all_to_all_single instead.
    n = inp.case.count
    outs = [inp.blank(n) for _ in range(WORLD_SIZE)]
    dist.all_to_all(outs, [inp.data(n, salt=j) for j in range(WORLD_SIZE)])
    return outs


def run_all_to_all_single(dist: Any, inp: Inputs) -> Result:
    n = inp.case.count
    out = inp.blank(n * WORLD_SIZE)
    dist.all_to_all_single(out, inp.data(n * WORLD_SIZE))
    return [out]


def run_all_to_all_single_uneven(dist: Any, inp: Inputs) -> Result:
    sizes = inp.splits()
    send = sizes[RANK]
    receive = [sizes[j][RANK] for j in range(WORLD_SIZE)]
    out = inp.blank(sum(receive))
    dist.all_to_all_single(out, inp.data(sum(send)), output_split_sizes=receive,
                           input_split_sizes=send)
    return [out]


def run_send_recv(dist: Any, inp: Inputs) -> Result:
    # Every ordered pair in one order that all ranks share, so blocking calls cannot
    # wait on each other in a cycle.
    received = []
    for src in range(WORLD_SIZE):
        for dst in range(WORLD_SIZE):
            if src == dst:
                continue
            if RANK == src:
                dist.send(inp.data(inp.case.count, salt=dst), dst=dst)
            elif RANK == dst:
                buffer = inp.blank(inp.case.count)
                dist.recv(buffer, src=src)
                received.append(buffer)
    return received


def an_object(rank: int, salt: int = 0) -> object:
    return {"rank": rank, "salt": salt, "text": "é" * rank, "items": list(range(rank + salt)),
            "nested": (None, 1.5, [True] * salt), "blob": bytes(range(rank * 40))}


def run_all_gather_object(dist: Any, inp: Inputs) -> Result:
    out: list[object] = [None] * WORLD_SIZE
    dist.all_gather_object(out, an_object(RANK))
    return out


def run_broadcast_object_list(dist: Any, inp: Inputs) -> Result:
    objects = [an_object(RANK, salt) for salt in range(3)]
    dist.broadcast_object_list(objects, src=inp.case.root)
    return objects


def run_gather_object(dist: Any, inp: Inputs) -> Result:
    root = inp.case.root
    out: list[object] | None = [None] * WORLD_SIZE if RANK == root else None
    dist.gather_object(an_object(RANK), out, dst=root)
    return out or []


def run_scatter_object_list(dist: Any, inp: Inputs) -> Result:
    root = inp.case.root
    out: list[object] = [None]
    ins = [an_object(RANK, j) for j in range(WORLD_SIZE)] if RANK == root else None
    dist.scatter_object_list(out, ins, src=root)
    return out


RUNNERS: dict[str, Callable[[Any, Inputs], Result]] = {
    name.removeprefix("run_"): function for name, function in globals().items()
    if name.startswith("run_")
}
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")
MOVEMENTS = ("broadcast", "all_gather", "all_gather_into_tensor", "gather", "scatter",
             "all_to_all", "all_to_all_single", "all_to_all_single_uneven", "send_recv")
OBJECTS = ("all_gather_object", "broadcast_object_list", "gather_object",
           "scatter_object_list")
ROOTED = ("reduce", "broadcast", "gather", "scatter", "broadcast_object_list",
          "gather_object", "scatter_object_list")


def cases() -> list[Case]:
    """Every case, in one order; roots take turns so each rank is the root of some."""
    found: list[Case] = []
    turn = 0

    def add(collective: str, dtype: str, count: int, op: str = "",
            values: str = "small") -> None:
        nonlocal turn
        root = 0
        if collective in ROOTED:
            root, turn = turn % WORLD_SIZE, turn + 1
        found.append(Case(collective, dtype, count, op, root, values))

    for collective in REDUCTIONS:
        for dtype in DTYPES:
            for op in OPS:
                # Sizes 0 and 1 test how the work is split, which the op does not change:
                # every op on all_reduce, SUM and MAX on the others, to keep it quick.
                edge = collective == "all_reduce" or op in ("SUM", "MAX")
                for count in COUNTS if edge else COUNTS[-1:]:
                    add(collective, dtype, count, op)
                if dtype in ("float32", "float64"):
                    add(collective, dtype, 1001, op, "normal")
                if dtype in INTEGER:
                    add(collective, dtype, 1001, op, "wide")
    for collective in MOVEMENTS:
        for dtype in DTYPES:
            for count in COUNTS:
                add(collective, dtype, count, values="normal" if dtype in FLOATING else
                    "wide" if dtype in INTEGER else "small")
    for collective in OBJECTS:
        for _ in range(WORLD_SIZE):
            add(collective, "object", 0)
    return found


def differences(case: Case, expected: Result, got: Result) -> str | None:
    """What is wrong with ``got`` (asyncoll's) against ``expected`` (gloo's), or None."""
    if len(expected) != len(got):
        return f"{len(got)} outputs, gloo gave {len(expected)}"
    for index, (want, have) in enumerate(zip(expected, got)):
        if not isinstance(want, torch.Tensor):
            if want != have:
                return f"output {index} is {have!r}, gloo gave {want!r}"
            continue
        if have.dtype != want.dtype or have.shape != want.shape:
            return (f"output {index} is {have.dtype} {tuple(have.shape)}, gloo gave "
                    f"{want.dtype} {tuple(want.shape)}")
        # Sums and products of small integers are exact in any order, even in float16;
        # an average divides, and normal values round, so those get a tolerance.
        tolerant = (case.collective in REDUCTIONS and case.dtype in FLOATING
                    and (case.op == "AVG" or case.values == "normal"))
        if tolerant and want.numel():
            rtol = RTOL[case.dtype]
            atol = rtol * max(1.0, float(want.abs().max()))
            same = torch.isclose(have, want, rtol=rtol, atol=atol)
        else:
            same = have == want
        if not bool(same.all()):
            bad = (~same).nonzero().flatten()
            first = int(bad[0])
            return (f"output {index} differs at {bad.numel()} of {want.numel()} elements; "
                    f"first at [{first}]: asyncoll {have[first].item()!r}, gloo "
                    f"{want[first].item()!r}")
    return None


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines() or [""]
    return f"{type(exc).__name__}: {lines[0][:120]}"


def main() -> int:
    init = {"world_size": WORLD_SIZE, "rank": RANK, "timeout": timedelta(seconds=TIMEOUT_S)}
    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['GLOO_PORT']}",
                          **init)
    asyncoll.init_process_group(
        init_method=f"tcp://127.0.0.1:{os.environ['ASYNCOLL_PORT']}", **init)
    compared, refused, failures = 0, [], []
    for case in cases():
        runner = RUNNERS[case.collective]
        if TRACE:
            print(f"case {case.name}", file=sys.stderr, flush=True)
        try:
            expected = runner(td, Inputs(case, 0))
            gloo_failed, reason = 0, ""
        except Exception as exc:  # noqa: BLE001 - any refusal by gloo skips the case
            gloo_failed, reason = 1, first_line(exc)
            if TRACE:
                print(f"gloo raised {reason}", file=sys.stderr, flush=True)
        # A refusal on any rank skips the case on all, so none waits in asyncoll alone.
        # gloo's refusals here are argument checks every rank makes alike; one made on
        # some ranks only would leave the others inside the collective until TIMEOUT_S
        # (as gloo's alltoall does with uneven lists, so run_all_to_all avoids those).
        flag = torch.tensor([gloo_failed], dtype=torch.int32)
        td.all_reduce(flag, op=td.ReduceOp.MAX)
        if int(flag) != 0:
            refused.append(f"{case.name}: {reason or 'refused on another rank'}")
            continue
        try:
            got = runner(asyncoll, Inputs(case, 1))
        except asyncoll.ConfigurationError as exc:
            # Raised before anything is sent, so the group still works.
            failures.append(f"{case.name}: gloo accepts it, asyncoll raised {first_line(exc)}")
            continue
        except Exception as exc:  # noqa: BLE001 - the group is broken: report and stop
            failures.append(f"{case.name}: asyncoll raised {first_line(exc)}")
            report(failures)
            # Leave at once: the other ranks see the connections close and fail fast.
            os._exit(1)
        difference = differences(case, expected, got)
        if difference is not None:
            failures.append(f"{case.name}: {difference}")
        compared += 1
    if RANK == 0:
        for line in refused:
            print(f"gloo refused {line}", flush=True)
    asyncoll.barrier()
    asyncoll.destroy_process_group()
    td.destroy_process_group()
    print(f"rank {RANK} compared {compared} cases; gloo refused {len(refused)}", flush=True)
    report(failures)
    return 1 if failures else 0


def report(failures: list[str]) -> None:
    for line in failures:
        print(f"rank {RANK} DIFFERS {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

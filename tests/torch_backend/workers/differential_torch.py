"""Runs each collective through torch.distributed twice: on gloo and on the asyncoll backend.

Launched as WORLD_SIZE processes by tests/torch_backend/test_differential.py, with RANK,
WORLD_SIZE and PORT in the environment. The default group is backend='asyncoll'; a second
group of every rank is backend='gloo'. The cases, inputs and comparison are those of
tests/integration/workers/differential.py (which compares gloo with asyncoll's own API),
plus bfloat16: every call goes through torch.distributed's functions, once with the gloo
group and once with the default group, on the same inputs. A rank prints
``rank R compared K cases; gloo refused M`` and exits 0, or prints every difference and
exits 1.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as td

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "workers"))
import differential as base  # noqa: E402 - after its directory is on the path

import asyncoll  # noqa: E402

RANK, WORLD_SIZE = base.RANK, base.WORLD_SIZE
base.DTYPES["bfloat16"] = torch.bfloat16
base.FLOATING = (*base.FLOATING, "bfloat16")
# One bfloat16 rounding (asyncoll reduces through float32) against one per step (gloo).
base.RTOL["bfloat16"] = 3e-2


class Bound:
    """torch.distributed's functions with ``group=`` bound."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(td, name), group=self.group)


def main() -> int:
    # A stuck process dumps every thread's stack to stderr, which the test shows, and exits.
    faulthandler.dump_traceback_later(float(os.environ.get("DUMP_AFTER_S", "100")), exit=True)
    td.init_process_group("asyncoll", init_method=f"tcp://127.0.0.1:{os.environ['PORT']}",
                          world_size=WORLD_SIZE, rank=RANK,
                          timeout=timedelta(seconds=base.TIMEOUT_S))
    assert td.get_backend() == "asyncoll"
    gloo = td.new_group(backend="gloo")
    reference = Bound(gloo)
    compared, refused, failures = 0, [], []
    for case in base.cases():
        runner = base.RUNNERS[case.collective]
        try:
            expected = runner(reference, base.Inputs(case, 0))
            gloo_failed, reason = 0, ""
        except Exception as exc:  # noqa: BLE001 - any refusal by gloo skips the case
            gloo_failed, reason = 1, base.first_line(exc)
        # A refusal on any rank skips the case on all.
        flag = torch.tensor([gloo_failed], dtype=torch.int32)
        td.all_reduce(flag, op=td.ReduceOp.MAX, group=gloo)
        if int(flag) != 0:
            refused.append(f"{case.name}: {reason or 'refused on another rank'}")
            continue
        try:
            got = runner(td, base.Inputs(case, 1))
        except asyncoll.ConfigurationError as exc:
            failures.append(f"{case.name}: gloo accepts it, asyncoll raised "
                            f"{base.first_line(exc)}")
            continue
        except Exception as exc:  # noqa: BLE001 - the group is broken: report and stop
            failures.append(f"{case.name}: asyncoll raised {base.first_line(exc)}")
            base.report(failures)
            os._exit(1)
        difference = base.differences(case, expected, got)
        if difference is not None:
            failures.append(f"{case.name}: {difference}")
        compared += 1
    if RANK == 0:
        for line in refused:
            print(f"gloo refused {line}", flush=True)
    td.barrier()
    td.destroy_process_group()
    print(f"rank {RANK} compared {compared} cases; gloo refused {len(refused)}", flush=True)
    base.report(failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

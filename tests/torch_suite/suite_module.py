"""torch's own DistributedTest, its gloo CPU tests run on the asyncoll backend.

Not collected by pytest (the name does not start with ``test_``):
``test_torch_suite.py`` runs this module in a pytest of its own, once per
world size and backend, and compares what passes.

This is what pytorch's ``test/distributed/test_distributed_spawn.py`` does,
with two differences:

- **the swap**: with ``ASYNCOLL_SUITE_BACKEND=asyncoll`` every
  ``init_process_group`` and ``new_group`` that names backend ``"gloo"``
  gets ``"asyncoll"`` instead. The suite itself runs with ``BACKEND=gloo``,
  so it picks, skips and expects exactly what it does for gloo, and it runs
  on asyncoll; with ``ASYNCOLL_SUITE_BACKEND=gloo`` it runs on gloo, for the
  comparison;
- **fork** instead of spawn to start each test's ranks: the suite's
  processes then skip re-importing torch, about 25 times faster, with the
  same results.

The environment (``BACKEND``, ``WORLD_SIZE``) must be set before this
module is imported: the suite reads it at import.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing

import asyncoll  # noqa: F401 - registers the "asyncoll" backend with torch

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

SWAP_TO = os.environ.get("ASYNCOLL_SUITE_BACKEND", "asyncoll")


def _swapped(backend: Any) -> Any:
    if SWAP_TO != "gloo" and isinstance(backend, str) and backend.lower() == "gloo":
        return SWAP_TO
    return backend


def _swapping(function: Any, position: int) -> Any:
    """``function`` with its ``backend`` argument (keyword, or positional at
    ``position``) swapped."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = _swapped(kwargs["backend"])
        elif len(args) > position:
            args = (*args[:position], _swapped(args[position]), *args[position + 1:])
        return function(*args, **kwargs)

    return call


# init_process_group(backend, ...) and new_group(ranks, timeout, backend, ...);
# distributed_c10d's own callers (new_subgroups) look new_group up there.
dist.init_process_group = c10d.init_process_group = _swapping(c10d.init_process_group, 0)
dist.new_group = c10d.new_group = _swapping(c10d.new_group, 2)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    """The suite's tests, each in ``WORLD_SIZE`` forked processes."""

    def setUp(self) -> None:
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

"""The compiled entry of a group's repeated blocking calls (asyncoll._native's Express).

Where the compiled extension runs and a group's fast path is a shared-memory
arena, a blocking call that repeats one the group ran before, and that the
arena's compiled step takes whole (an all_reduce of a numpy array that fits
the slots, or a barrier), goes from the API to its result in one call into
C: ``Express`` does what :meth:`Runner.here` and the step do, on the same
Python objects. For anything else it returns False, having done nothing,
and the call takes the Python path (Repeats.again, then the full path).
A step that finds a member late, or out of step, hands the operation it
started to :meth:`Runner.here`, which waits with the group's checks and
deadline and raises the group's errors.

Repeats.again teaches it each call it ran as a repeat (:func:`teach`),
once; the group's API object offers it as ``express`` (None where the
group has no such entry).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

import numpy as np

from asyncoll import _native
from asyncoll._algorithms import arena as in_arena
from asyncoll._defaults import SAMPLE_EVERY
from asyncoll._group.arena_path import GroupArena
from asyncoll._group.context import Membership
from asyncoll._group.fast_path import FastPath
from asyncoll._group.plan import Repeat
from asyncoll._group.runner import Runner
from asyncoll._native.contract import ALL_REDUCE, BARRIER


def express_for(session: Membership, group_id: int, fast: FastPath, runner: Runner,
                limit: float) -> Any | None:
    """A group's compiled entry, not yet taught anything; None where it can have none
    (the extension is off, or the group's fast path is not an arena)."""
    early = getattr(session.mesh, "early_count", None)
    counter = getattr(session, "compiled_ops", None)
    if _native.arena is None or not isinstance(fast, GroupArena) or not fast.slot_bytes \
            or early is None or counter is None \
            or not isinstance(fast.lock, _native.arena.PathLock):
        return None
    return _native.arena.Express(
        runner=runner, session=session, counter=counter, faults=session.faults,
        progress=session.faults.progress_of(group_id), early=early, lock=fast.lock,
        group_id=group_id, limit=limit, ndarray=np.ndarray, sample_every=SAMPLE_EVERY,
        scan_soon=functools.partial(session.call_soon, session.faults.scan, group_id),
        path=fast.algorithm)


def teach(express: Any, fast: FastPath, key: Hashable, repeat: Repeat) -> None:
    """Teach ``express`` the call remembered under ``key`` (repeat_key's), which has just
    run on ``fast``, where the compiled entry can take such calls."""
    compiled = fast.compiled() if isinstance(fast, GroupArena) else None
    if compiled is None or repeat.form is not None or not isinstance(key, tuple):
        return
    what = key[0]
    if what == "all_reduce" and len(key) == 5:
        owner = getattr(repeat.kernel, "__self__", None)
        _, dtype, size, op, _ = key
        if not isinstance(owner, in_arena.AllReduce) or owner.whole_kind is None or not size:
            return
        kind = owner.whole_kind
        express.learn(ALL_REDUCE, what, repeat.fingerprint, owner.resume, dtype,
                      size * dtype.itemsize, op, kind)
    elif what == "barrier":
        express.learn(BARRIER, what, repeat.fingerprint, in_arena.resume_barrier, None, 0,
                      None, -1)
    else:
        return
    core, step = compiled
    express.arm(core, step, step.waiter.spins)

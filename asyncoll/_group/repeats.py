"""A group's fast-path calls, remembered to run again without being made anew.

GroupCore.plan remembers each call that takes the group's fast path with the
group's timeout and the algorithm chosen by size, under its repeat key
(asyncoll._group.plan.repeat_key); a later call of that key runs the
remembered kernel at once through Runner.here (an MPI persistent
collective, without the user asking for one). The first repeat of a call
the group's compiled entry can take teaches it
(asyncoll._group.express.teach).

:func:`ran_again` is the one repeat check of the front doors (the blocking
API and the torch backend): the group's compiled entry where the caller has
not asked it already, then the remembered calls. A first call finds nothing
here and takes the full path, which starts at the group.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

import numpy as np

from asyncoll._group.express import teach
from asyncoll._group.fast_path import FastPath
from asyncoll._group.plan import Form, Kernel, Repeat, repeat_key
from asyncoll._wire.frames import Fingerprint
from asyncoll.types import ReduceOp

#: Remembered calls per group (Repeats.again), forgotten all at once past it.
_REPEATS = 256


class Repeats:
    """A group's remembered fast-path calls, run again in the calling thread by
    :meth:`again` (``here`` is the group's Runner.here, ``express`` its compiled
    entry or None)."""

    def __init__(self, here: Callable[..., bool], express: Any, fast: FastPath,
                 timeout: float) -> None:
        self._here = here
        self._express = express
        self._fast = fast
        self._timeout = timeout
        self._calls: dict[Hashable, Repeat] = {}

    def remember(self, key: Hashable, what: str, fingerprint: Fingerprint, kernel: Kernel,
                 form: Form | None) -> None:
        """Remember the call of ``key`` (:func:`repeat_key`'s) that has just been planned
        on the fast path, unless one is remembered under it already."""
        if key not in self._calls:
            if len(self._calls) >= _REPEATS:
                self._calls.clear()
            repeat = self._calls[key] = Repeat(what, fingerprint, kernel, form)
            # Nothing to teach a compiled entry the group does not have.
            repeat.taught = self._express is None

    def forget(self) -> None:
        """Forget every remembered call (the group is closed)."""
        self._calls.clear()

    def again(self, what: str, arrays: Any, op: ReduceOp | None = None, root: int = -1,
              limit: float | None = None) -> bool:
        """Run the call remembered under ``repeat_key(what, arrays, op, root)`` on ``arrays``,
        here, within ``limit`` seconds (None: the group's timeout), if it may run here now.

        ``arrays`` are the call's 1-D C-contiguous arrays (those written into
        writable), or None for a call that moves none. Returns False, having
        done nothing, when no such call was remembered or it must go to the loop.
        """
        # repeat_key, written out for the one-array calls most repeats are.
        key = (what, arrays.dtype, arrays.size, op, root) if type(arrays) is np.ndarray \
            else repeat_key(what, arrays, op, root)
        repeat = self._calls.get(key)
        if repeat is None:
            return False
        form = repeat.form
        ran = self._here(repeat.what, repeat.fingerprint,
                         self._timeout if limit is None else limit, repeat.kernel,
                         arrays if form is None else form(arrays))
        # (taught from the start where the group has no compiled entry: see remember)
        if not repeat.taught and ran:
            repeat.taught = True
            teach(self._express, self._fast, key, repeat)
        return ran


class Repeating(Protocol):
    """What :func:`ran_again` reads of a group (asyncoll.group.AsyncProcessGroup's)."""

    #: The group's compiled entry, or None (asyncoll._group.express).
    express: Any

    def again(self, what: str, arrays: Any, op: ReduceOp | None = None, root: int = -1,
              limit: float | None = None) -> bool:
        """Repeats.again, on the group's remembered calls."""


def ran_again(group: Repeating, what: str, arrays: Any, op: Any = None, root: int = -1,
              limit: float | None = None, asked: bool = False) -> bool:
    """Whether a call ran in this thread as a repeat of an earlier one on ``group``.

    An all_reduce or a barrier within the group's timeout (``limit`` None)
    goes to the group's compiled entry first, unless ``asked`` (the caller's
    compiled front asked it, and it declined); then, or for any other call,
    to the remembered calls (:meth:`Repeats.again`, which takes ``arrays``,
    ``op``, ``root`` and ``limit`` as they are). False, having done nothing,
    where neither ran it: the full path then checks the call and runs it.
    """
    express = group.express
    if express is not None and not asked and limit is None and (
            express.all_reduce(arrays, op) if what == "all_reduce"
            else what == "barrier" and express.barrier()):
        return True
    return group.again(what, arrays, op, root, limit)

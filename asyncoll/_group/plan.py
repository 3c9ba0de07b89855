"""Plan: one collective call, made and checked, and everything derived from its fields.

A group's collective method checks its arguments and describes the call as
a :class:`Signature` (what every member must agree on, arrays aside) and
its arrays. From the signature and the algorithm chosen for its size come,
in :meth:`asyncoll._group.core.GroupCore.plan`, the fingerprint the
members compare, the transport's algorithm, the fast path's kernel and the
key under which a repeat of the call runs again (:func:`repeat_key`). The
plan is a coroutine: awaiting it runs it in the group's turn
(asyncoll._group.runner); the blocking front doors hand it to the group's
``execute`` or ``submit`` instead, which may run it in the calling thread.
"""

from __future__ import annotations

import collections.abc
import functools
import math
from collections.abc import Awaitable, Callable, Coroutine, Generator
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

import numpy as np

from asyncoll._algorithms import selection
from asyncoll._algorithms.compression import wire_code
from asyncoll._algorithms.team import Team
from asyncoll._group.recorder import Recorder
from asyncoll._wire.dtypes import dtype_code
from asyncoll._wire.frames import Fingerprint
from asyncoll._wire.frames import Operation as Kind
from asyncoll.errors import ConfigurationError
from asyncoll.types import ReduceOp

#: The transport's algorithm for a call, given the team and the call's arrays.
Transport = Callable[[Team, Any], Awaitable[None]]
#: A fast path's algorithm for a call, in whichever thread: given the path's step
#: (what FastPath.step made for the operation) and the arrays.
Kernel = Callable[[Any, Any], None]
#: What turns the arrays a repeat is given into the arrays its kernel takes.
Form = Callable[[Any], Any]


class Signature(NamedTuple):
    """What every member must agree on about a call, its arrays aside."""

    #: The collective, as selection names it ("all_reduce", "all_gather", ...).
    collective: str
    kind: Kind
    dtype: np.dtype[Any] | None = None
    #: Elements the call moves (the fingerprint's).
    elements: int = 0
    op: ReduceOp | None = None
    #: The root's index in the group; -1: none.
    root: int = -1
    #: Per member, its block's element count (all_gather, reduce_scatter); else ().
    sizes: tuple[int, ...] = ()
    #: The all_reduce's compression, as (mode, block) (asyncoll._algorithms.compression);
    #: None: exact.
    compression: tuple[str, int] | None = None


class Repeat:
    """A remembered fast-path call: how to run it again on new arrays of its key."""

    __slots__ = ("what", "fingerprint", "kernel", "form", "taught")

    def __init__(self, what: str, fingerprint: Fingerprint, kernel: Kernel,
                 form: Form | None) -> None:
        self.what = what
        self.fingerprint = fingerprint
        self.kernel = kernel
        self.form = form
        #: Whether the group's compiled entry was offered it (asyncoll._group.express).
        self.taught = False


class Turns(Protocol):
    """What a plan needs of its group's runner (asyncoll._group.runner.Runner)."""

    #: Plans handed to the loop that finished there (a plan closed unstarted counts too).
    finished: int

    @property
    def recorder(self) -> Recorder | None:
        """This rank's flight recorder (None: off)."""

    def in_turn(self, plan: Plan) -> Coroutine[Any, Any, None]:
        """The coroutine that runs ``plan`` behind the group's earlier operations."""


class Plan(collections.abc.Coroutine):  # type: ignore[type-arg]
    """One collective call, made and checked, not yet run.

    Awaiting it (or handing it to the loop) runs it in the group's turn;
    the group's ``execute`` and ``submit`` may run it in the calling thread
    instead, where its path allows.
    """

    def __init__(self, runner: Turns, what: str, fingerprint: Fingerprint, limit: float,
                 transport: Transport, arrays: Any,
                 finish: Callable[[int], None] | None = None,
                 kernel: Kernel | None = None) -> None:
        self.what = what
        self.fingerprint = fingerprint
        self.limit = limit
        self.transport = transport
        #: What the transport and the kernel are given.
        self.arrays = arrays
        #: Run with this member's index once the call succeeded (writing results back).
        self.finish = finish
        #: The fast path's algorithm, where the call was chosen for it (it runs
        #: there once the path is set up, else over the transport); else None.
        self.kernel = kernel
        #: Whether it was counted as on its way to the loop (Runner.handed).
        self.handed = False
        recorder = runner.recorder
        #: The caller's stack, where the flight recorder keeps stacks (else None).
        self.stack = recorder.caller_stack() if recorder is not None else None
        self._runner = runner
        self._coroutine: Coroutine[Any, Any, None] | None = None

    def _started(self) -> Coroutine[Any, Any, None]:
        if self._coroutine is None:
            self._coroutine = self._runner.in_turn(self)
        return self._coroutine

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if val is None and tb is None:
            return self._started().throw(typ)
        return self._started().throw(typ, val, tb)

    def close(self) -> None:
        if self._coroutine is not None:
            self._coroutine.close()
        elif self.handed:
            self._runner.finished += 1  # handed, never started: it will not finish

    def __await__(self) -> Generator[Any, None, None]:
        return self._started().__await__()

    def __repr__(self) -> str:
        return f"<Plan {self.what} on {self._runner!r}>"


def repeat_key(what: str, arrays: Any, op: ReduceOp | None = None, root: int = -1
               ) -> tuple[Any, ...]:
    """The key a call of ``what`` on ``arrays`` is remembered under and found again by.

    ``arrays`` is one 1-D array, (output, input) for the collectives that
    write one array from another, or None for one that moves no data;
    ``root`` is a global rank. The group's
    plans and its quick path for repeats both make their keys here.
    """
    if arrays is None:
        return (what,)
    if type(arrays) is tuple:
        out, source = arrays
        return (what, out.dtype, out.size, source.dtype, source.size, op, root)
    return (what, arrays.dtype, arrays.size, op, root)


def seconds(timeout: float | timedelta | None, default: float) -> float:
    """A timeout given as seconds or a timedelta (torch's way), in seconds.

    Raises:
        ConfigurationError: it is not a positive finite duration.
    """
    if timeout is None:
        return default
    value = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value < math.inf):
        raise ConfigurationError(f"timeout must be a positive number of seconds or a "
                                 f"timedelta, got {timeout!r}")
    return float(value)


@functools.lru_cache(maxsize=4096)
def fingerprint_of(signature: Signature, algorithm: str | None = None) -> Fingerprint:
    """The fingerprint of a call: its signature and the number of its algorithm."""
    code = 0
    if algorithm is not None:
        code = selection.ALGORITHMS[signature.collective].index(algorithm) + 1
    if signature.compression is not None:  # under 16 algorithms: both fit the byte
        code += 16 * wire_code(*signature.compression)
    dtype, op = signature.dtype, signature.op
    return Fingerprint(signature.kind, 0 if dtype is None else dtype_code(dtype),
                       0 if op is None else op.value + 1, code, signature.root,
                       signature.elements)

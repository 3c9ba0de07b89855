"""Futexes on words of a shared mapping: sleep until another process changes a word.

A member of an arena that waits long for another sleeps in the kernel on
the word the other will write, and the writer wakes it: the sleeper gets
the processor back within a scheduler wake-up (microseconds) instead of at
the end of a timed sleep (``time.sleep(20e-6)`` sleeps 70 us or more, with
Linux's default 50 us timer slack). With more members than processors this
is most of an operation's time: sleepers no longer take turns with the
members that have work to do.

Linux on x86-64 only, through libc's ``syscall()`` via ctypes: no compiled
code of ours. :data:`AVAILABLE` is False elsewhere, and the arena's waiters
sleep in timed steps instead.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

__all__ = ["AVAILABLE", "fence", "wait", "wake"]

_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # not the _PRIVATE variants: the word is shared
_EVERYONE = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _syscall() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    function.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return function


_call = _syscall()
#: Whether futexes can be used here (the arena itself is x86-64 only).
AVAILABLE = _call is not None
_barrier = threading.Lock()
#: fence() in two calls, for a caller that saves the function's own frame.
FENCE_ENTER, FENCE_LEAVE = _barrier.acquire, _barrier.release


def wait(address: int, expected: int, timeout_s: float) -> None:
    """Sleep while the 32-bit word at ``address`` holds ``expected``, at most ``timeout_s``.

    Returns at once if the word differs already (the kernel compares it
    atomically with going to sleep), when woken, on a signal, or at the
    timeout: the caller looks at its condition again in every case.
    """
    assert _call is not None
    seconds = int(timeout_s)
    timespec = _Timespec(seconds, int((timeout_s - seconds) * 1e9))
    low = expected & 0xFFFFFFFF  # the kernel compares 32 bits: the int64's low half
    _call(_SYS_FUTEX, address, _FUTEX_WAIT, low - (1 << 32) if low >> 31 else low,
          ctypes.addressof(timespec), None, 0)


def wake(address: int) -> None:
    """Wake every process sleeping on the word at ``address``."""
    assert _call is not None
    _call(_SYS_FUTEX, address, _FUTEX_WAKE, _EVERYONE, None, None, 0)


def fence() -> None:
    """A full memory barrier (x86-64: a locked instruction, in taking a lock).

    A writer that stores a word and then loads a sleeper's flag needs one
    between the two: x86 may otherwise perform the load before the store
    is visible, and both sides would miss each other (the sleeper then
    wakes only at its timeout).
    """
    FENCE_ENTER()  # not a with block: its protocol costs more than the lock
    FENCE_LEAVE()

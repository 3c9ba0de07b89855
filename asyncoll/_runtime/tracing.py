"""The flight recorders of this process's sessions, and the ways to ask them to write out.

Each session (a rank in one generation of a job) gets a recorder
(asyncoll._group.recorder) unless ASYNCOLL_TRACE_BUFFER=0. It writes itself
out when one of its operations times out or fails with PeerLostError or
MismatchError, and when a group breaks for such a failure elsewhere (the
session's faults tell it); here are the other two ways: SIGUSR1, and a
notice from the coordinator (``asyncoll status --dump``).

SIGUSR1: the handler is installed once, from the main thread (Python lets
no other thread install one), and chains to the handler it replaced: a
program's own SIGUSR1 handler still runs, after the dump, provided it was
installed before asyncoll's (one installed later replaces asyncoll's; it
can call :func:`on_signal` itself). While no recorder is alive, a SIGUSR1
does what it did before asyncoll: the default action ends the process.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import threading
import weakref
from types import FrameType
from typing import Any

from asyncoll._group.recorder import Recorder
from asyncoll._runtime.settings import Settings

_live: weakref.WeakSet[Recorder] = weakref.WeakSet()
_previous: Any = None
_installed = False
_lock = threading.Lock()


def directory_for(settings: Settings, job: str) -> str:
    """Where a job's ranks write their recorders: ASYNCOLL_TRACE_DIR, else a folder named
    for the job under the system's temporary folder."""
    if settings.trace_dir:
        return settings.trace_dir
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job) or "default"
    return os.path.join(tempfile.gettempdir(), "asyncoll-trace", safe)


def recorder_for(settings: Settings, rank: int, job: str) -> Recorder | None:
    """A new recorder for ``rank`` of ``job``, kept alive by its session (None: off)."""
    if settings.trace_buffer <= 0:
        return None
    recorder = Recorder(settings.trace_buffer, rank, directory_for(settings, job), job,
                        settings.trace_stacks)
    _live.add(recorder)
    install_signal_handler()
    return recorder


def install_signal_handler() -> bool:
    """Install the SIGUSR1 handler once, if this is the main thread; whether it is."""
    global _installed, _previous
    if not hasattr(signal, "SIGUSR1"):
        return False
    with _lock:
        if _installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        _previous = signal.signal(signal.SIGUSR1, on_signal)
        _installed = True
    return True


def dump_all(reason: str) -> list[str]:
    """Ask every live recorder of this process to write out; return the paths written."""
    paths = [recorder.dump(reason) for recorder in list(_live)]
    return [p for p in paths if p is not None]


def on_signal(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1: write every live recorder out, then run the handler asyncoll replaced."""
    recorders = list(_live)
    for recorder in recorders:
        recorder.dump("SIGUSR1")
    previous = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL and not recorders:
        # Nothing to write: do what the signal did before asyncoll (end the process).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

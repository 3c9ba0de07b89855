"""How this process ends, as told to the peers it leaves at interpreter exit.

A program that never calls destroy_process_group still leaves its job, from
the runtime's exit hook. When it ends on an uncaught exception (a
KeyboardInterrupt from SIGINT too), that leave says how, and the coordinator
tells the others it was lost, as it does for a killed process, instead of
that it left in order. An ending without an exception (the program's end, or
sys.exit, whose code Python does not show to exit hooks) is an orderly leave.
"""

from __future__ import annotations

import asyncio
import sys

from asyncoll._rendezvous.client import CoordinatorClient

#: The longest part of an exception's message a leave carries.
MESSAGE_CHARS = 200
#: Seconds a process ending on an exception waits, once its leave is answered, before
#: its data connections close (see :func:`linger`).
LINGER_S = 0.2

#: How this process is ending ("" until its exit hook runs, or without an exception).
_ended = ""


def note_exit() -> None:
    """The interpreter is exiting: remember how (the runtime's exit hook calls it first)."""
    global _ended
    _ended = how_it_ended()


def ended() -> str:
    """How this process ends, for its leave ("": it leaves in order)."""
    return _ended


def how_it_ended() -> str:
    """The uncaught exception this process is exiting on, in words ("" for none)."""
    if hasattr(sys, "ps1"):
        return ""  # interactive: the last error was the prompt's, not how it ends
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return describe(exc) if isinstance(exc, BaseException) else ""


def describe(exc: BaseException) -> str:
    """How a process ending on ``exc`` ended, in words that follow "was lost: "."""
    if isinstance(exc, KeyboardInterrupt):
        return ("its process was interrupted (KeyboardInterrupt: SIGINT or Ctrl-C) without "
                "calling destroy_process_group")
    said = " ".join(str(exc).split())
    if len(said) > MESSAGE_CHARS:
        said = said[:MESSAGE_CHARS - 3] + "..."
    name = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        name = f"{type(exc).__module__}.{name}"
    return (f"its program raised {name}" + (f" ({said})" if said else "")
            + " and exited without calling destroy_process_group")


async def linger(ended: str, client: CoordinatorClient) -> None:
    """After a leave that says how this process ended (``ended`` not ""), close the link
    to the coordinator and wait a moment.

    The coordinator tells the others before it answers that leave. Their links to
    this rank breaking is a loss too, but without the words of how; this moment lets
    the notice, which has them, come first. The coordinator has nothing more to say
    to this rank, and its going away meanwhile (rank 0's, with its process) must not
    read as a coordinator lost.
    """
    if ended:
        await client.close()
        await asyncio.sleep(LINGER_S)

"""What the calling-thread paths share about members: giving up, and processors.

A member that gives up on an operation tells the others through its path
(the arena's control line, an ABORT record on direct links) which kind of
error it met, as a small number; the others raise the same kind.
"""

from __future__ import annotations

import os

from asyncoll.errors import (
    CollectiveError,
    CollectiveTimeoutError,
    MismatchError,
    PeerLostError,
)

#: The kinds a member can name, most specific first; anything else is a CollectiveError.
KINDS: tuple[type[CollectiveError], ...] = (PeerLostError, CollectiveTimeoutError,
                                            MismatchError, CollectiveError)


def kind_code(error: BaseException) -> int:
    """The number (1 ...) that names ``error``'s kind."""
    return next((i + 1 for i, kind in enumerate(KINDS) if isinstance(error, kind)), len(KINDS))


def kind_of(code: int) -> type[CollectiveError]:
    """The error class a member's ``code`` names (CollectiveError for an unknown one)."""
    return KINDS[code - 1] if 0 < code <= len(KINDS) else CollectiveError


def processors() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

"""How many processors this process may run on: the fast paths' waits spin only where
members do not outnumber them."""

from __future__ import annotations

import os


def processors() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

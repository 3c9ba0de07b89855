"""How many tasks this machine runs now: the arena's waits ask it to tell a
stranger (a task that is no member of the group) from a member with work to do."""

from __future__ import annotations


def running_tasks() -> int | None:
    """How many tasks this machine runs now (the first number of /proc/loadavg's
    fourth field); None where that cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as loadavg:
            return int(loadavg.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None

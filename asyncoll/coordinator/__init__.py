"""The asyncoll coordinator: rendezvous, groups and barriers for many jobs.

Run it as a daemon with `asyncoll-coordinator --host 127.0.0.1 --port 29500`
(or `python -m asyncoll.coordinator`), or embed `Coordinator` in an
event loop.
"""

from __future__ import annotations

from asyncoll.coordinator.server import Coordinator

__all__ = ["Coordinator"]

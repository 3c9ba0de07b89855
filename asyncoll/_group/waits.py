"""Who waits for whom: ``asyncoll trace``'s table of flight recorder dumps.

Reads the dumps as torch's format has them (asyncoll._group.flight), so
torch's own dumps work too, and needs no torch. For every rank it shows
the operation it is held in (its oldest that did not complete) or else its
last one, and, for the held ones, the members of that operation's group
that never reached it: those are who the rank waits for. A member that
the others wait for and that waits for nobody itself is named at the end.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Mapping
from typing import Any

_COLUMNS = ("RANK", "GROUP", "OPERATION", "STATE", "PATH", "STARTED", "WAITS FOR")
_DONE = "completed"


def _ranks(text: Any) -> list[int]:
    ranks = ast.literal_eval(text) if isinstance(text, str) else text
    return [int(r) for r in ranks]


def _name(entry: Mapping[str, Any]) -> str:
    mine = entry.get("asyncoll", {}).get("collective")
    name = mine or str(entry.get("profiling_name", "?")).partition(":")[2]
    return f"{name} #{entry.get('collective_seq_id', '?')}"


def _when(entry: Mapping[str, Any]) -> str:
    ns = entry.get("time_discovered_started_ns") or entry.get("time_created_ns")
    if not ns:
        return "-"
    seconds = ns / 1e9
    return time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{int(seconds % 1 * 1e3):03d}"


def _words(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def summary(dumps: Mapping[int, Mapping[str, Any]]) -> str:
    """The table of ``dumps`` (rank -> dump), and a closing line naming the ranks the
    others wait for, if any."""
    members: dict[str, list[int]] = {}
    latest: dict[str, dict[int, Mapping[str, Any]]] = {}
    held: dict[int, Mapping[str, Any]] = {}
    last: dict[int, Mapping[str, Any]] = {}
    for rank, dump in sorted(dumps.items()):
        for name, config in dump.get("pg_config", {}).items():
            members.setdefault(str(name), _ranks(config.get("ranks", "[]")))
        for entry in dump.get("entries", []):
            if entry.get("is_p2p"):
                continue
            group = str(entry["process_group"][0])
            latest.setdefault(group, {})[rank] = entry
            last[rank] = entry
            if entry.get("state") != _DONE and rank not in held:
                held[rank] = entry
    rows = [_COLUMNS]
    waited_for: dict[int, set[int]] = {}
    for rank in sorted(dumps):
        entry = held.get(rank) or last.get(rank)
        if entry is None:
            rows.append((str(rank), "-", "(none recorded)", "-", "-", "-", "-"))
            continue
        group = str(entry["process_group"][0])
        waits = "-"
        if rank in held:
            behind = _behind(rank, entry, members.get(group, []), latest.get(group, {}),
                             dumps)
            for other in behind:
                waited_for.setdefault(other, set()).add(rank)
            waits = _words(behind) if behind else "no one (all reached it)"
        path = entry.get("asyncoll", {}).get("path", "-")
        state = entry.get("state", "?")
        error = entry.get("asyncoll", {}).get("error")
        rows.append((str(rank), group, _name(entry), f"{state} ({error})" if error else state,
                     path, _when(entry), waits))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += _verdict(waited_for, held, last, dumps)
    return "\n".join(lines)


def _behind(rank: int, entry: Mapping[str, Any], members: list[int],
            latest: Mapping[int, Mapping[str, Any]],
            dumps: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """The members of ``entry``'s group that never reached it (or left no dump)."""
    seq = entry.get("collective_seq_id", 0)
    return [m for m in members if m != rank and (
        m not in dumps or m not in latest or latest[m].get("collective_seq_id", 0) < seq)]


def _verdict(waited_for: Mapping[int, set[int]], held: Mapping[int, Mapping[str, Any]],
             last: Mapping[int, Mapping[str, Any]],
             dumps: Mapping[int, Mapping[str, Any]]) -> list[str]:
    if not waited_for:
        return ["", "No rank waits for another." if not held else
                "The held operations were reached by every member of their groups."]
    lines = [""]
    for culprit, waiters in sorted(waited_for.items()):
        mine = last.get(culprit)
        if mine is not None:
            where = f"its last recorded operation is {_name(mine)} ({mine.get('state', '?')})"
        elif culprit not in dumps:
            # A process that crashed or was killed writes no dump: what it ran is unknown.
            where = ("it left no dump here, so what it ran is not known (a process that "
                     "crashed or was killed writes none; see its own output)")
        else:
            where = "its dump records no operation"
        lines.append(f"{_words(sorted(waiters))} wait{'s' if len(waiters) == 1 else ''} for "
                     f"rank {culprit}, which did not reach their operation: {where}.")
    return lines

"""Flight recorder dumps in torch's format, and reading them back without torch.

A dump is what torch's Flight Recorder writes (FlightRecorder::dump in
torch/csrc/distributed/c10d, format version 2.10 in torch 2.13): one pickle
per rank, named ``<prefix><rank>``, of a dict with ``version``,
``pg_config`` (each group's name, description and ranks), ``pg_status``
and ``entries``, one dict per operation with torch's keys. So
``torchfrtrace <dir>`` analyzes asyncoll's dumps unchanged. Where torch's
format has no word for something (the algorithm, the path, the error, the
asyncoll name of the collective) it goes under the entry's ``asyncoll`` key,
which torch's analyzer does not read.

Two choices are forced by the analyzer. Operation names must start with a
backend it knows, and the only one every version accepts is "nccl", so an
all_reduce is "nccl:all_reduce". And sizes are those every member agrees on
(the fingerprint's): an all_gather of uneven blocks is "all_gather_v", whose
sizes the analyzer does not compare.

:func:`read_dir` and :func:`summary` are ``asyncoll trace``: the last
operation of every rank, and who waits for whom.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from asyncoll._wire.frames import Fingerprint
from asyncoll._wire.frames import Operation as Kind

#: The format version torch 2.13's recorder writes (torch's analyzer checks only that
#: every rank's is the same, and reads "major.minor").
VERSION = "2.10"
#: The backend named in operation names: every version of torch's analyzer knows it.
BACKEND = "nccl"
#: A dump's file name, before the rank.
PREFIX = "asyncoll_trace_rank_"

SCHEDULED, STARTED, COMPLETED, FAILED = "scheduled", "started", "completed", "failed"

# torch's name of each collective, and of its dtypes (c10::toString of a ScalarType),
# by asyncoll's wire codes.
_NAMES = {Kind.ALL_REDUCE: "all_reduce", Kind.BROADCAST: "broadcast", Kind.REDUCE: "reduce",
          Kind.ALL_GATHER: "all_gather", Kind.REDUCE_SCATTER: "reduce_scatter",
          Kind.GATHER: "gather", Kind.SCATTER: "scatter", Kind.ALL_TO_ALL: "all_to_all",
          Kind.BARRIER: "barrier", Kind.ALL_GATHER_OBJECT: "all_gather_v",
          Kind.BROADCAST_OBJECT_LIST: "broadcast", Kind.GATHER_OBJECT: "gather",
          Kind.SCATTER_OBJECT_LIST: "scatter"}
_DTYPES = {1: "Bool", 2: "Char", 3: "Short", 4: "Int", 5: "Long", 6: "Byte", 7: "UInt16",
           8: "UInt32", 9: "UInt64", 10: "Half", 11: "Float", 12: "Double",
           13: "ComplexFloat", 14: "ComplexDouble"}
# An entry (asyncoll._group.recorder): its fields by index.
_ID, _GROUP, _SEQ, _WHAT, _FP, _PATH, _LIMIT, _CREATED, _STARTED, _ENDED, _ERROR, _STACK = \
    range(12)


def state_of(entry: Sequence[Any]) -> str:
    """An entry's state: scheduled, started, completed or failed."""
    if entry[_ERROR] is not None:
        return FAILED
    if entry[_ENDED]:
        return COMPLETED
    return STARTED if entry[_STARTED] else SCHEDULED


def description(group_id: int) -> str:
    """A group's description in torch's terms (its world is "default_pg")."""
    return "default_pg" if group_id == 0 else "undefined"


def torch_dump(rank: int, entries: Sequence[Sequence[Any]],
               groups: Mapping[int, Sequence[int]], job: str = "",
               reason: str = "") -> dict[str, Any]:
    """The dump torch's analyzer reads, of ``entries`` (oldest first) of ``rank``."""
    status: dict[str, dict[str, int]] = {}
    for entry in entries:
        seen = status.setdefault(str(entry[_GROUP]), {"last_enqueued_collective": -1,
                                                       "last_started_collective": -1,
                                                       "last_completed_collective": -1})
        seen["last_enqueued_collective"] = entry[_SEQ]
        if entry[_STARTED]:
            seen["last_started_collective"] = entry[_SEQ]
        if state_of(entry) == COMPLETED:
            seen["last_completed_collective"] = entry[_SEQ]
    return {
        "version": VERSION,
        "comm_lib_version": "asyncoll",
        "pg_config": {str(g): {"name": str(g), "desc": description(g),
                               "ranks": str(list(ranks))} for g, ranks in groups.items()},
        "pg_status": status,
        "entries": [_entry(e, len(groups.get(e[_GROUP], ())) or 1) for e in entries],
        "asyncoll": {"rank": rank, "job": job, "reason": reason},
    }


def _entry(entry: Sequence[Any], members: int) -> dict[str, Any]:
    name, (in_sizes, in_dtypes, out_sizes, out_dtypes) = _shape(entry[_FP], members)
    state, started, ended = state_of(entry), entry[_STARTED], entry[_ENDED]
    fields: dict[str, Any] = {
        "record_id": entry[_ID], "pg_id": entry[_GROUP],
        "process_group": (str(entry[_GROUP]), description(entry[_GROUP])),
        "collective_seq_id": entry[_SEQ], "p2p_seq_id": 0, "op_id": entry[_SEQ],
        "profiling_name": f"{BACKEND}:{name}", "time_created_ns": entry[_CREATED],
        "input_sizes": in_sizes, "input_dtypes": in_dtypes,
        "output_sizes": out_sizes, "output_dtypes": out_dtypes, "state": state,
        "time_discovered_started_ns": started or None,
        "time_discovered_completed_ns": ended if state == COMPLETED and ended > 0 else None,
        "retired": bool(ended), "timeout_ms": int(entry[_LIMIT] * 1000), "is_p2p": False,
        "frames": [{"name": f, "filename": file, "line": line}
                   for f, file, line in entry[_STACK] or ()],
        "asyncoll": {"collective": entry[_WHAT], "path": entry[_PATH] or "-",
                     "algorithm": entry[_FP].algorithm, "error": entry[_ERROR] or "",
                     "time_ended_ns": ended if ended > 0 else None,
                     "time_taken": bool(started)},
    }
    if state == COMPLETED and started and ended > 0:
        fields["duration_ms"] = (ended - started) / 1e6
    return fields


def _shape(fingerprint: Fingerprint, members: int
           ) -> tuple[str, tuple[list[list[int]], list[str], list[list[int]], list[str]]]:
    """torch's name of an operation, and its (input sizes, dtypes, output sizes, dtypes)."""
    kind = fingerprint.operation
    name = _NAMES.get(kind, "all_gather_v")  # type: ignore[call-overload]
    dtypes = [_DTYPES.get(fingerprint.dtype, "Byte")] if fingerprint.dtype else []
    total = fingerprint.elements
    if kind == Kind.BARRIER:
        return name, ([], [], [], [])
    if kind in (Kind.ALL_REDUCE, Kind.BROADCAST, Kind.REDUCE):
        return name, ([[total]], dtypes, [[total]], dtypes)
    if kind in (Kind.ALL_GATHER, Kind.REDUCE_SCATTER):
        block, uneven = divmod(total, members)
        if uneven:
            return f"{name}_v", ([[total]], dtypes, [[total]], dtypes)
        if kind == Kind.ALL_GATHER:
            return name, ([[block]], dtypes, [[total]], dtypes)
        return name, ([[total]], dtypes, [[block]], dtypes)
    # Sizes that differ by rank (gather, scatter, all_to_all, objects): none compared.
    return name, ([[0]], dtypes, [[0]], dtypes)


# -- reading dumps back: asyncoll trace ------------------------------------------------


class _PlainData(pickle.Unpickler):
    """Loads plain data only: a dump names no class, and a file that does is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight recorder dump holds plain data only, but "
                                     f"this one names {module}.{name}")


def load(path: str) -> dict[str, Any]:
    """One rank's dump (torch's or asyncoll's), loaded without running any code in it.

    Raises:
        OSError: the file cannot be read.
        pickle.UnpicklingError: it is not a dump of plain data.
    """
    with open(path, "rb") as source:
        dump = _PlainData(io.BytesIO(source.read())).load()
    if not isinstance(dump, dict) or "entries" not in dump and "version" not in dump:
        raise pickle.UnpicklingError(f"{path} is not a flight recorder dump")
    return dump


def read_dir(directory: str) -> dict[int, dict[str, Any]]:
    """Every rank's dump in ``directory`` (files named ``<prefix><rank>``), by rank."""
    dumps: dict[int, dict[str, Any]] = {}
    for name in sorted(os.listdir(directory)):
        digits = len(name) - len(name.rstrip("0123456789"))
        if not digits or name.startswith(".") or not os.path.isfile(
                os.path.join(directory, name)):
            continue
        dumps[int(name[len(name) - digits:])] = load(os.path.join(directory, name))
    return dumps

"""What the compiled extension and the Python side share, declared once.

The C files of `asyncoll._native._arena` and the Python modules beside them
meet in one shared-memory arena and hand calls to each other, so they must
agree on numbers and names: what a step returns, the codes of the
collectives and reductions, the arena's layout, and the attributes C reads
and writes on Python objects. They are declared here, and every Python user
imports them from here. The extension holds its own copies (the `#define`s,
`enum`s and lists of asyncoll/_native/contract.h, and the tables of names in
the files that read the attributes); its `contract()` returns them, and
tests/unit/test_native_seam.py checks that every one in `IN_C` matches, and
that every attribute named here is one its class has (a slot where `FIELDS`
names it).

C returns no error codes of its own: it returns the statuses below, or raises
ValueError or TypeError saying what it refused.

Only the standard library is imported, so any layer may read this.
"""

from __future__ import annotations

__all__ = ["ABANDONED", "ABANDONED_CODE", "ABANDONED_MS", "ABANDONED_RANK", "ALIGN", "ALL_REDUCE",
           "ATTRIBUTES", "BARRIER", "BRIEF_YIELDS", "COPY_BLOCK_BYTES", "DONE", "FIELDS",
           "FINGERPRINTS", "FINGERPRINT_WORDS", "IN_C", "LINE_BYTES", "LINE_WORDS", "MISMATCH",
           "NEIGHBOUR_STAYS", "OPS", "PID", "PROCESSOR", "PUBLISHED", "QUIET_NS", "REDUCE_OPS",
           "SLEEPING", "STRANGER_NS", "TYPES", "WAITING", "WAITING_RESULTS"]

# -- what a step returns (the compiled steps' and the compiled entry's status) ----------

#: Done; published and waiting (the caller waits, then calls the step's `*_out`); a
#: member published another operation (the caller's Python check says how); the split
#: all_reduce waiting for the members' results (phase 2k).
DONE, WAITING, MISMATCH, WAITING_RESULTS = 0, 1, 2, 3

# -- the collectives the compiled entry (Express) and the fronts (Front) take ------------

ALL_REDUCE, BARRIER = 0, 1

# -- reductions: a kind is TYPES' index * OPS + the ReduceOp's value ----------------------

#: numpy dtypes (native byte order) in the order of their type codes.
TYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
         "float16", "float32", "float64", "complex64", "complex128")
#: asyncoll.types.ReduceOp's names, in the order of their values.
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")
OPS = len(REDUCE_OPS)

# -- the arena's layout (asyncoll._transport.shm.arena describes it) ---------------------

#: Bytes of one member's control line, and its int64 words.
LINE_BYTES = 256
LINE_WORDS = LINE_BYTES // 8
#: A control line's words.
PUBLISHED, PID = 0, 1
ABANDONED, ABANDONED_CODE, ABANDONED_RANK = 2, 3, 4
SLEEPING = 5
#: Where the member last published or waited (the processor + 1; 0: not known): the compiled wait
#: sleeps rather than spin for a member on its own processor.
PROCESSOR = 6
#: The deadline (milliseconds) of the wait the member gave up on, where it timed out.
ABANDONED_MS = 7
#: Where each set's fingerprint starts (set = operation number mod 2), and its words.
FINGERPRINTS = (8, 16)
FINGERPRINT_WORDS = 6
#: Slots start on this boundary.
ALIGN = 128
#: Yields of the compiled brief wait after its spins: the Python Waiter's CHECK_EVERY,
#: so that a wait going on from it checks at once.
BRIEF_YIELDS = 16
#: A yield (the compiled brief wait's, the Python Waiter's) that came back this late
#: (nanoseconds) handed the processor to a task that is no member, for a scheduler's
#: time slice: a member waiting hands it back within its poll, one working within its
#: step. After two within QUIET_NS (one: a passing task), waits skip their yields for
#: QUIET_NS and sleep on the futex instead; after that, one within NEIGHBOUR_STAYS quiet
#: times of the last quiet time's end makes them quiet again (a busy neighbour stays).
STRANGER_NS = 500_000
QUIET_NS = 250_000_000
NEIGHBOUR_STAYS = 8
#: Copies to and from the slots go in steps of this many bytes (docs/design/native.md,
#: "Processors that share no cache").
COPY_BLOCK_BYTES = 256 << 10

# -- the attributes C reads and writes, by the class it expects them on -----------------

#: Read or written on every call, where the class keeps them in slots (the compiled
#: entry then reads and writes the slot itself: asyncoll/_native/field.c).
FIELDS: dict[str, tuple[str, ...]] = {
    "asyncoll._group.runner.Runner": ("_seq", "handed", "finished", "run_fingerprint"),
    "asyncoll._runtime.session.Session": ("closed",),
    "asyncoll._transport.base.EarlyCount": ("frames",),
    "asyncoll._group.arena_path.ArenaStep": ("operation",),
    "asyncoll._group.faults.Progress": ("running", "completed", "last"),
    "asyncoll.group.AsyncProcessGroup": ("express",),
}
#: Read through the attribute protocol (as an Express is made, or on every call from a
#: module or numpy's array).
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "asyncoll._group.runner.Runner": ("here", "recorder"),
    "asyncoll._group.faults.GroupFaults": ("broken",),
    "asyncoll._group.recorder.Recorder": ("open_run", "sample_ring"),
    "asyncoll._api.world": ("current",),
    "numpy.ndarray": ("dtype",),
}

#: The names above the extension holds its own copies of (its contract() returns them).
IN_C = ("DONE", "WAITING", "MISMATCH", "WAITING_RESULTS", "ALL_REDUCE", "BARRIER", "TYPES",
        "REDUCE_OPS", "OPS", "LINE_BYTES", "LINE_WORDS", "PUBLISHED", "SLEEPING", "PROCESSOR",
        "FINGERPRINTS", "FINGERPRINT_WORDS", "ALIGN", "BRIEF_YIELDS", "COPY_BLOCK_BYTES",
        "STRANGER_NS", "QUIET_NS", "NEIGHBOUR_STAYS", "FIELDS", "ATTRIBUTES")

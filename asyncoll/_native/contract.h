/* Mirrors asyncoll/_native/contract.py: every value the C files share with the
 * Python side (statuses, codes, the arena's layout, the classes whose attributes
 * C reads and writes), declared once for C. module.c's contract() returns them,
 * and tests/unit/test_native_seam.py checks them against the Python contract.
 * Constants only: every C file may include it.
 */
#ifndef ASYNCOLL_CONTRACT_H
#define ASYNCOLL_CONTRACT_H

/* What a step returns: done, published and waiting (the caller waits, then
 * calls the step's *_out), or a member published another operation (the
 * caller's Python check says how); the split all_reduce also waits for the
 * members' results (WAITING_RESULTS: phase 2k). */
enum { DONE = 0, WAITING = 1, MISMATCH = 2, WAITING_RESULTS = 3 };

/* The collectives the compiled entry (express.c) and the fronts (front.c) take. */
enum { ALL_REDUCE = 0, BARRIER = 1 };

/* The reductions' types, in the order of their codes: (code, numpy's name, item size). */
#define REDUCTION_TYPES(X)                                                             \
    X(T_BOOL, "bool", 1) X(T_I8, "int8", 1) X(T_U8, "uint8", 1)                        \
    X(T_I16, "int16", 2) X(T_U16, "uint16", 2) X(T_I32, "int32", 4)                   \
    X(T_U32, "uint32", 4) X(T_I64, "int64", 8) X(T_U64, "uint64", 8)                  \
    X(T_F16, "float16", 2) X(T_F32, "float32", 4) X(T_F64, "float64", 8)              \
    X(T_C64, "complex64", 8) X(T_C128, "complex128", 16)
/* asyncoll.types.ReduceOp's values, in order: (code, its name). A kind is a type's
 * code * OPS + an op's. */
#define REDUCTION_OPS(X)                                                               \
    X(O_SUM, "SUM") X(O_PRODUCT, "PRODUCT") X(O_MIN, "MIN") X(O_MAX, "MAX")            \
    X(O_BAND, "BAND") X(O_BOR, "BOR") X(O_BXOR, "BXOR") X(O_AVG, "AVG")

#define CODE_OF_TYPE(code, name, size) code,
#define CODE_OF_OP(code, name) code,
enum { REDUCTION_TYPES(CODE_OF_TYPE) TYPES };
enum { REDUCTION_OPS(CODE_OF_OP) OPS };

/* The arena's layout (asyncoll/_transport/shm/arena.py): control lines of 256
 * bytes, int64 words; slots 128-byte aligned, two sets. */
#define LINE_WORDS 32
#define LINE_BYTES 256
#define W_PUBLISHED 0
#define W_SLEEPING 5
#define W_PROCESSOR 6
#define FINGERPRINT_WORDS 6
static const int FINGERPRINT_AT[2] = {8, 16};
#define ALIGN 128
/* Yields after the spins, GIL released, before the caller's checks run again
 * (Waiter's CHECK_EVERY). */
#define BRIEF_YIELDS 16
/* A yield that came back this late went to a task that is no member, for a
 * scheduler's time slice; after two within QUIET_NS, waits skip their yields
 * for QUIET_NS, and after one within NEIGHBOUR_STAYS quiet times of the last. */
#define STRANGER_NS 500000
#define QUIET_NS 250000000
#define NEIGHBOUR_STAYS 8
/* Copies into and out of the slots go in steps of at most this many bytes
 * (steps.c says why). */
#define COPY_BLOCK_BYTES (256 << 10)

/* The classes (and a module) whose attributes C reads and writes, as the
 * contract's FIELDS and ATTRIBUTES name them. */
#define RUNNER "asyncoll._group.runner.Runner"
#define SESSION "asyncoll._runtime.session.Session"
#define EARLY_COUNT "asyncoll._transport.base.EarlyCount"
#define ARENA_STEP "asyncoll._group.arena_path.ArenaStep"
#define PROGRESS "asyncoll._group.faults.Progress"
#define GROUP_FAULTS "asyncoll._group.faults.GroupFaults"
#define RECORDER "asyncoll._group.recorder.Recorder"
#define GROUP "asyncoll.group.AsyncProcessGroup"
#define WORLD_MODULE "asyncoll._api.world"
#define NDARRAY "numpy.ndarray"

#endif

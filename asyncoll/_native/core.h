/* Mirrors asyncoll/_transport/shm/arena.py's Arena: one member's view of an
 * arena (Core), and its publish, its brief wait and its fingerprints (core.c).
 * The layout is contract.h's.
 */
#ifndef ASYNCOLL_CORE_H
#define ASYNCOLL_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "contract.h"

/* How a member writes its slot in the split all_reduce (copies.c judges it). */
typedef struct {
    /* Streaming stores now; fixed by slot_writes (not judged); this step streams. */
    int streaming, fixed, step;
    /* Judged steps in a row whose cached writes were slow; while streaming, steps
     * until one writes cached (probing) to judge them again. */
    int slow, probe_in, probing;
    /* This step's copies into the slot, where cached: how long they took, and bytes. */
    int64_t written_ns;
    Py_ssize_t written;
} Writes;

/* One member's view of an arena. */
typedef struct {
    PyObject_HEAD
    Py_buffer memory;
    int mapped;
    Py_ssize_t size, me, slot_bytes, stride;
    int64_t *words;
    char *slots;
    /* The fingerprint object last parsed (a strong reference) and its words. */
    PyObject *fingerprint;
    int64_t packed[FINGERPRINT_WORDS];
    /* Until then (CLOCK_MONOTONIC, ns), waits do not yield: a yield lately went to a
     * task that is no member, for a whole time slice (yield_briefly); and until
     * when one more such yield makes them quiet (met_stranger). */
    int64_t quiet_until, suspect_until;
    /* When strangers_running was last asked (stranger_beside), and its answer. */
    int64_t strangers_looked;
    int strangers_seen;
    /* The last brief wait waited for a member on another processor while a stranger
     * ran: it and its caller's wait do not yield (core.c says why). */
    int stranger_here;
    /* Waits in a row for a member on this processor while a stranger ran, and when
     * this member last moved itself off its processor (core.c's move_if_shared);
     * whether the split all_reduce is waiting, whose waits do not count. */
    int shared_waits, splitting;
    int64_t moved_at;
    Writes writes;
} Core;

static inline int64_t *line(Core *self, Py_ssize_t member) {
    return self->words + member * LINE_WORDS;
}

static inline char *slot(Core *self, int64_t operation, Py_ssize_t member) {
    return self->slots + ((operation & 1) * self->size + member) * self->stride;
}

static inline int64_t load(const int64_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

extern PyTypeObject CoreType;

/* Ready the Core type, its methods core.c's own and then `steps`' (steps.c's, which
 * module.c passes: the steps depend on the core, not the other way round). */
int core_ready(const PyMethodDef *steps);

int core_mapped(Core *self);
/* CLOCK_MONOTONIC, in ns. */
int64_t now_ns(void);
int parse_fingerprint(Core *self, PyObject *fingerprint);
void publish(Core *self, int64_t phase);
int wait_briefly(Core *self, int64_t phase, long spins);
int same_fingerprints(Core *self, int64_t operation);
int fits(Core *self, Py_ssize_t bytes);
int operation_ok(int64_t operation);

#endif

/* Mirrors asyncoll/_group/express.py and Runner.here (asyncoll/_group/runner.py):
 * a group's compiled entry of repeated blocking calls (Express), its state, the
 * names it reads and writes, and its call (express.c); its type and teaching
 * are express_type.c's.
 */
#ifndef ASYNCOLL_EXPRESS_H
#define ASYNCOLL_EXPRESS_H

#include "core.h"
#include "field.h"
#include "reduce.h"

/* Calls taught per group; a group repeats a few (DDP's buckets, a model's
 * layers), and one past these runs the Python way. */
#define ENTRIES 32

typedef struct {
    int collective;
    /* all_reduce's key beside its size in bytes: the dtype and op objects it
     * was taught with (compared by identity). */
    PyObject *dtype, *op;
    Py_ssize_t bytes;
    Kind kind;
    /* Runner.here's arguments where the step needs the Python path to finish. */
    PyObject *what, *fingerprint, *resume;
} Entry;

typedef struct {
    PyObject_HEAD
    /* The group's arena, once armed (NULL: every call goes the Python way). */
    Core *core;
    PyObject *step; /* the arena's ArenaStep: its operation number */
    long spins;
    /* What a call reads and writes (see Runner.here). */
    PyObject *runner, *session, *broken, *progress, *early, *recorder, *here;
    PyObject *lock, *scan_soon, *group_id, *limit, *ndarray, *path;
    PyObject *samples, *sampled; /* the recorder's sample_ring (NULL: no recorder) */
    /* The session's compiled_ops: the operations its groups' entries started. */
    Py_buffer counter;
    /* runner._seq, .handed, .finished and .run_fingerprint, session.closed,
     * early.frames, step.operation, and the group's progress.running, .completed and
     * .last (asyncoll._group.faults.Progress) */
    Field seq, handed, finished, run, closed, frames, operation, running, completed, last;
    long long sample_every;
    long long asked; /* calls of all_reduce and barrier, taken or declined */
    int count;
    Entry entries[ENTRIES];
} Express;

#define FIELDS(self) {&(self)->seq, &(self)->handed, &(self)->finished, &(self)->run, \
        &(self)->closed, &(self)->frames, &(self)->operation, &(self)->running, \
        &(self)->completed, &(self)->last}

/* The names Express reads and writes, interned by express_names_ready. */
typedef struct {
    PyObject *seq, *handed, *finished, *run_fingerprint, *closed, *frames, *operation,
        *running, *completed, *last, *here, *recorder, *broken, *open_run, *sample_ring,
        *dtype;
} ExpressNames;

extern ExpressNames express_names;
/* Each name, with the class Express expects it on (asyncoll/_native/contract.py). */
extern const Name EXPRESS_NAMES[];
extern const size_t EXPRESS_NAMES_COUNT;
int express_names_ready(void);

/* all_reduce(data, op) and barrier(): whether the call ran (False: nothing was done). */
PyObject *express_all_reduce(PyObject *express, PyObject *const *args, Py_ssize_t nargs);
PyObject *express_barrier(PyObject *express, PyObject *unused);

#endif

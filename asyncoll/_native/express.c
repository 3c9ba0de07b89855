/* Mirrors asyncoll/_group/runner.py's Runner.here, for a call asyncoll/_group/express.py
 * taught: a group's repeated blocking call, from the API to its result in one call
 * into C (asyncoll._native._arena.Express; its type: express_type.c).
 *
 * asyncoll._group.runner.Runner.here runs a call on the group's arena in the
 * calling thread: it numbers the operation, refuses it where the session is
 * closed or the group broken, takes note for the fault table and the flight
 * recorder, holds the path's lock, runs the arena's step and notes the end.
 * Express does the same for a call it was taught (an all_reduce of one dtype,
 * size and op whose array goes whole through the slots, or a barrier), on the
 * same Python objects, so everything that reads them (status, the flight
 * recorder, the loop's checks) sees what the Python path would have left.
 * It takes only the common case: where anything differs (an operation of
 * the group still on the loop, a closed session, a broken group, frames kept
 * early, an array it was not taught) it returns False, having done nothing,
 * and the Python path runs the call.
 * Where the step's brief wait ends before every member arrived (or a member
 * published another operation), it hands the operation it started, by its
 * number on the arena, to Runner.here with the entry's resume, which waits
 * with the group's checks and deadline and raises the group's errors.
 */
#include "express.h"

#include "lock.h"
#include "steps.h"

#include <string.h>
#include <time.h>

ExpressNames express_names;

#define N(owner, text, field, name) {owner, text, field, &express_names.name}
const Name EXPRESS_NAMES[] = {
    N(RUNNER, "_seq", 1, seq), N(RUNNER, "handed", 1, handed),
    N(RUNNER, "finished", 1, finished), N(RUNNER, "run_fingerprint", 1, run_fingerprint),
    N(SESSION, "closed", 1, closed), N(EARLY_COUNT, "frames", 1, frames),
    N(ARENA_STEP, "operation", 1, operation), N(PROGRESS, "running", 1, running),
    N(PROGRESS, "completed", 1, completed), N(PROGRESS, "last", 1, last),
    N(RUNNER, "here", 0, here), N(RUNNER, "recorder", 0, recorder),
    N(GROUP_FAULTS, "broken", 0, broken), N(RECORDER, "open_run", 0, open_run),
    N(RECORDER, "sample_ring", 0, sample_ring), N(NDARRAY, "dtype", 0, dtype),
};
#undef N
const size_t EXPRESS_NAMES_COUNT = sizeof EXPRESS_NAMES / sizeof EXPRESS_NAMES[0];

int express_names_ready(void) {
    return names_ready(EXPRESS_NAMES, EXPRESS_NAMES_COUNT);
}

/* -- reading the Python side's numbers ------------------------------------------------ */

static long long frames_kept(Express *self) {
    long long frames;
    return field_number(&self->frames, self->early, &frames) < 0 ? -1 : frames;
}

/* 1: a call may run here now; 0: it goes the Python way; -1: an error. */
static int open_for(Express *self) {
    long long handed, finished, frames = frames_kept(self);
    if (frames < 0 || field_number(&self->handed, self->runner, &handed) < 0
        || field_number(&self->finished, self->runner, &finished) < 0)
        return -1;
    if (handed != finished || frames > 0 || PyDict_GET_SIZE(self->broken) > 0)
        return 0;
    PyObject *closed = field_get(&self->closed, self->session);
    if (closed == NULL)
        return -1;
    int refused = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    return refused < 0 ? -1 : !refused;
}

/* Recorder.sample's note, made here: (index, group, seq, time.time_ns()) into the
 * recorder's ring of samples, at the next index its count gives. */
static int sampled(Express *self, PyObject *seq) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    PyObject *index = PyIter_Next(self->sampled);
    if (index == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the recorder's count of samples ended");
        return -1;
    }
    long long at = PyLong_AsLongLong(index);
    PyObject *when = PyLong_FromLongLong((long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    PyObject *sample = when == NULL ? NULL : PyTuple_Pack(4, index, self->group_id, seq, when);
    Py_DECREF(index);
    Py_XDECREF(when);
    Py_ssize_t ring = PyList_GET_SIZE(self->samples);
    if (sample == NULL || (at < 0 && PyErr_Occurred()) || ring < 1) {
        Py_XDECREF(sample);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the recorder's ring of samples is empty");
        return -1;
    }
    return PyList_SetItem(self->samples, (Py_ssize_t)(at % ring), sample); /* takes it */
}

/* The flight recorder's note of operation `seq`, as Runner.here takes it, before the
 * step publishes anything (opening a run calls Python, which may fail): the first of a
 * new run is noted now; 1: one more of the recorder's run, to be sampled; 0: nothing
 * more to note; -1: an error. */
static int recorded(Express *self, const Entry *entry, long long seq) {
    if (self->recorder == Py_None)
        return 0;
    PyObject *run = field_get(&self->run, self->runner);
    if (run == NULL)
        return -1;
    Py_DECREF(run); /* compared by identity only: the runner keeps it */
    if (run == entry->fingerprint)
        return seq % self->sample_every == 0;
    PyObject *number = PyLong_FromLongLong(seq);
    PyObject *noted = number == NULL ? NULL
        : PyObject_CallMethodObjArgs(self->recorder, express_names.open_run, self->runner,
                                     self->group_id, number, entry->what, entry->fingerprint,
                                     self->path, self->limit, NULL);
    Py_XDECREF(number);
    Py_XDECREF(noted);
    return noted == NULL ? -1 : 0;
}

/* -- one call ---------------------------------------------------------------------------- */

/* What Runner.here notes as an operation starts (its seq, the session's count, the
 * fault table's running operation, the step's operation number, a sample), made
 * once this member's part is published: they take about as long as the other
 * members' parts take to arrive, so the wait hides them. `running` is (seq,
 * fingerprint), a new reference this takes. */
static int begun(Express *self, long long operation, PyObject *running, int sample) {
    if (running == NULL)
        return -1;
    int64_t ops;
    memcpy(&ops, self->counter.buf, sizeof ops);
    ops += 1;
    memcpy(self->counter.buf, &ops, sizeof ops);
    PyObject *number = PyTuple_GET_ITEM(running, 0);
    int failed = field_set(&self->seq, self->runner, number) < 0
        || field_set(&self->running, self->progress, running) < 0
        || field_set_number(&self->operation, self->step, operation) < 0
        || (sample && sampled(self, number) < 0);
    Py_DECREF(running);
    return failed ? -1 : 0;
}

/* The end of operation `number` the step finished: faults.complete's note, and a scan
 * on the loop where frames were kept meanwhile. */
static int ended(Express *self, PyObject *number) {
    PyObject *running = field_get(&self->running, self->progress);
    if (running == NULL)
        return -1;
    /* The loop may have aborted the group meanwhile; what runs is then another's. */
    int ours = PyTuple_Check(running) && PyTuple_GET_SIZE(running) == 2
        && PyTuple_GET_ITEM(running, 0) == number;
    int failed = field_set(&self->completed, self->progress, number) < 0
        || field_set(&self->running, self->progress, Py_None) < 0
        || (ours && field_set(&self->last, self->progress, running) < 0);
    Py_DECREF(running);
    long long frames = failed ? -1 : frames_kept(self);
    if (frames <= 0)
        return frames < 0 ? -1 : 0;
    /* Frames kept early are checked against the group's operations on the loop. */
    PyObject *soon = PyObject_CallNoArgs(self->scan_soon);
    Py_XDECREF(soon);
    return soon == NULL ? -1 : 0;
}

/* The step, with the path's lock held: the operation after the arena's last. */
static PyObject *run_locked(Express *self, const Entry *entry, PyObject *data,
                            const Py_buffer *view) {
    Core *core = self->core;
    long long operation, seq;
    if (field_number(&self->operation, self->step, &operation) < 0
        || field_number(&self->seq, self->runner, &seq) < 0)
        return NULL;
    operation += 1;
    seq += 1;
    int sample = -1;
    if (!operation_ok(operation) || parse_fingerprint(core, entry->fingerprint) < 0
        || (sample = recorded(self, entry, seq)) < 0)
        return NULL;
    int64_t phase = 2 * operation - 1;
    if (entry->collective == ALL_REDUCE)
        memcpy(slot(core, operation, core->me), view->buf, (size_t)view->len);
    publish(core, phase);
    PyObject *number = PyLong_FromLongLong(seq);
    if (begun(self, operation, number == NULL ? NULL
              : PyTuple_Pack(2, number, entry->fingerprint), sample) < 0) {
        /* Out of memory, with this member's part published: the group's next operation
         * finds it out of step. */
        Py_XDECREF(number);
        return NULL;
    }
    int status;
    if (entry->collective == ALL_REDUCE) {
        status = wait_briefly(core, phase, self->spins)
            ? all_reduce_out(core, &entry->kind, view->buf, view->len, operation, -1)
            : WAITING;
        if (status < 0) {
            /* Out of memory for the members' list, with this member's part published:
             * the Python path finishes it, and raises the group's error if it fails. */
            PyErr_Clear();
            status = WAITING;
        }
    } else {
        status = !wait_briefly(core, phase, self->spins) ? WAITING
            : same_fingerprints(core, operation) ? DONE : MISMATCH;
    }
    if (status == DONE) {
        int failed = ended(self, number) < 0;
        Py_DECREF(number);
        return failed ? NULL : Py_NewRef(Py_True);
    }
    Py_DECREF(number);
    /* Late or different: Runner.here(what, fingerprint, limit, resume, (data, status),
     * operation) finishes the operation this started, the one numbered `operation` on
     * the arena (the step's operation says so too): it waits, with its checks, and
     * ends it. Its arguments are held for the call: the entry may be forgotten
     * meanwhile. */
    PyObject *started = Py_BuildValue("(Oi)", data, status);
    PyObject *handed = started == NULL ? NULL : PyLong_FromLongLong(operation);
    if (handed == NULL) {
        Py_XDECREF(started);
        return NULL;
    }
    PyObject *args[6] = {Py_NewRef(entry->what), Py_NewRef(entry->fingerprint),
                         Py_NewRef(self->limit), Py_NewRef(entry->resume), started, handed};
    PyObject *ran = PyObject_Vectorcall(self->here, args, 6, NULL);
    for (int i = 0; i < 6; i++)
        Py_DECREF(args[i]);
    if (ran == NULL)
        return NULL;
    Py_DECREF(ran);
    Py_RETURN_TRUE;
}

/* `entry` on `data` (Py_None for a barrier), where the group lets it run here now. */
static PyObject *run(Express *self, const Entry *entry, PyObject *data, const Py_buffer *view) {
    int open = open_for(self);
    if (open <= 0)
        return open < 0 ? NULL : Py_NewRef(Py_False);
    /* An untimed try: a thread that holds the lock runs an operation of the group,
     * and the Python path waits for it under the call's deadline. */
    if (!path_lock_try(self->lock))
        Py_RETURN_FALSE;
    PyObject *result = run_locked(self, entry, data, view);
    path_lock_release(self->lock);
    return result;
}

/* all_reduce(data, op) -> whether it ran (False: nothing was done). */
PyObject *express_all_reduce(PyObject *express, PyObject *const *args, Py_ssize_t nargs) {
    Express *self = (Express *)express;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "all_reduce(data, op)");
        return NULL;
    }
    PyObject *data = args[0], *op = args[1];
    self->asked += 1;
    if (self->core == NULL || !self->core->mapped
        || Py_TYPE(data) != (PyTypeObject *)self->ndarray)
        Py_RETURN_FALSE;
    PyObject *dtype = PyObject_GetAttr(data, express_names.dtype);
    if (dtype == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(dtype);
        PyErr_Clear(); /* read-only or strided: the Python path says what it does with it */
        Py_RETURN_FALSE;
    }
    const Entry *entry = NULL;
    for (int i = 0; i < self->count && entry == NULL; i++) {
        const Entry *e = &self->entries[i];
        if (e->collective == ALL_REDUCE && e->dtype == dtype && e->op == op
            && e->bytes == view.len)
            entry = e;
    }
    Py_DECREF(dtype);
    PyObject *result;
    if (entry == NULL || view.len > self->core->slot_bytes
        || (uintptr_t)view.buf % (uintptr_t)(entry->kind.itemsize > 8 ? 8 : entry->kind.itemsize))
        result = Py_NewRef(Py_False);
    else
        result = run(self, entry, data, &view);
    PyBuffer_Release(&view);
    return result;
}

/* barrier() -> whether it ran (False: nothing was done). */
PyObject *express_barrier(PyObject *express, PyObject *Py_UNUSED(unused)) {
    Express *self = (Express *)express;
    self->asked += 1;
    if (self->core == NULL || !self->core->mapped)
        Py_RETURN_FALSE;
    for (int i = 0; i < self->count; i++)
        if (self->entries[i].collective == BARRIER)
            return run(self, &self->entries[i], Py_None, NULL);
    Py_RETURN_FALSE;
}

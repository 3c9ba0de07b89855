/* asyncoll._native._arena.Express: a group's repeated blocking call, from the
 * API to its result in one call into C.
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
 * published another operation), it hands the started operation to
 * Runner.here with the entry's resume, which waits with the group's checks
 * and deadline and raises the group's errors.
 */
#include "core.h"

#include <time.h>

/* Calls taught per group; a group repeats a few (DDP's buckets, a model's
 * layers), and one past these runs the Python way. */
#define ENTRIES 32

enum { E_ALL_REDUCE = 0, E_BARRIER = 1 };

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

static PyObject *s_running, *s_completed, *s_last, *s_handed, *s_finished, *s_seq, *s_closed, *s_frames, *s_operation, *s_run_fingerprint, *s_dtype, *s_open_run;

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
        : PyObject_CallMethodObjArgs(self->recorder, s_open_run, self->runner, self->group_id,
                                     number, entry->what, entry->fingerprint, self->path,
                                     self->limit, NULL);
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
    if (entry->collective == E_ALL_REDUCE)
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
    if (entry->collective == E_ALL_REDUCE) {
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
    /* Late or different: Runner.here waits, with its checks, and ends it. Its step
     * numbers the operation again, from the one before. Its arguments are held for
     * the call: the entry may be forgotten meanwhile. */
    if (field_set_number(&self->operation, self->step, operation - 1) < 0)
        return NULL;
    PyObject *started = Py_BuildValue("(Oi)", data, status);
    if (started == NULL)
        return NULL;
    PyObject *args[6] = {Py_NewRef(entry->what), Py_NewRef(entry->fingerprint),
                         Py_NewRef(self->limit), Py_NewRef(entry->resume), started, Py_True};
    PyObject *ran = PyObject_Vectorcall(self->here, args, 6, NULL);
    for (int i = 0; i < 5; i++)
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
    PyObject *dtype = PyObject_GetAttr(data, s_dtype);
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
        if (e->collective == E_ALL_REDUCE && e->dtype == dtype && e->op == op
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
        if (self->entries[i].collective == E_BARRIER)
            return run(self, &self->entries[i], Py_None, NULL);
    Py_RETURN_FALSE;
}

/* -- teaching ---------------------------------------------------------------------------- */

static void entry_clear(Entry *entry) {
    Py_CLEAR(entry->dtype);
    Py_CLEAR(entry->op);
    Py_CLEAR(entry->what);
    Py_CLEAR(entry->fingerprint);
    Py_CLEAR(entry->resume);
}

/* learn(collective, what, fingerprint, resume, dtype, bytes, op, kind): one call to take. */
static PyObject *express_learn(Express *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "learn(collective, what, fingerprint, resume, dtype, bytes, op, kind)");
        return NULL;
    }
    long collective = PyLong_AsLong(args[0]), code = PyLong_AsLong(args[7]);
    Py_ssize_t bytes = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Entry entry = {0};
    if (collective == E_ALL_REDUCE) {
        if (kind_of(code, &entry.kind) < 0)
            return NULL;
        if (bytes < 1 || bytes % entry.kind.itemsize) {
            PyErr_Format(PyExc_ValueError, "an all_reduce of %zd bytes of items of %zd",
                         bytes, entry.kind.itemsize);
            return NULL;
        }
    } else if (collective != E_BARRIER) {
        PyErr_Format(PyExc_ValueError, "collective %ld is not one Express takes", collective);
        return NULL;
    }
    if (!PyTuple_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "a fingerprint is a tuple and resume a callable");
        return NULL;
    }
    if (self->count == ENTRIES)
        Py_RETURN_FALSE;
    entry.collective = (int)collective;
    entry.bytes = bytes;
    entry.what = Py_NewRef(args[1]);
    entry.fingerprint = Py_NewRef(args[2]);
    entry.resume = Py_NewRef(args[3]);
    entry.dtype = Py_NewRef(args[4]);
    entry.op = Py_NewRef(args[6]);
    self->entries[self->count++] = entry;
    Py_RETURN_TRUE;
}

/* arm(core, step, spins): the group's arena, set up, and its step. */
static PyObject *express_arm(Express *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyObject_TypeCheck(args[0], &CoreType)) {
        PyErr_SetString(PyExc_TypeError, "arm(core, step, spins)");
        return NULL;
    }
    long spins = PyLong_AsLong(args[2]);
    if (spins == -1 && PyErr_Occurred())
        return NULL;
    Py_XSETREF(self->core, (Core *)Py_NewRef(args[0]));
    Py_XSETREF(self->step, Py_NewRef(args[1]));
    field_find(&self->operation, self->step, s_operation);
    self->spins = spins < 0 ? 0 : spins;
    Py_RETURN_NONE;
}

/* forget(): no call is taken any more, until taught again. */
static PyObject *express_forget(Express *self, PyObject *Py_UNUSED(unused)) {
    for (int i = 0; i < self->count; i++)
        entry_clear(&self->entries[i]);
    self->count = 0;
    Py_RETURN_NONE;
}

/* -- the type -------------------------------------------------------------------------- */

static int express_init(Express *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"runner", "session", "counter", "faults", "progress", "early",
                            "lock", "group_id", "limit", "ndarray", "sample_every", "scan_soon",
                            "path", NULL};
    PyObject *runner, *session, *counter, *faults, *progress, *early, *lock, *group_id, *limit,
        *ndarray, *scan_soon, *path;
    long long sample_every;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOLOU", names, &runner, &session,
                                     &counter, &faults, &progress, &early, &lock, &group_id,
                                     &limit, &ndarray, &sample_every, &scan_soon, &path))
        return -1;
    Py_buffer count;
    if (PyObject_GetBuffer(counter, &count, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (count.len < (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&count);
        PyErr_SetString(PyExc_ValueError, "the counter holds an int64");
        return -1;
    }
    if (self->counter.obj != NULL)
        PyBuffer_Release(&self->counter);
    self->counter = count;
    if (sample_every < 1 || !PyType_Check(ndarray) || !PyLong_Check(group_id)
        || !PyObject_TypeCheck(lock, &PathLockType)) {
        PyErr_SetString(PyExc_ValueError, "sample_every is 1 or more, ndarray a type, "
                        "group_id an int and lock a PathLock");
        return -1;
    }
    /* Each read stops at the first that fails, with its error. */
    PyObject *broken = PyObject_GetAttrString(faults, "broken");
    PyObject *recorder = broken ? PyObject_GetAttrString(runner, "recorder") : NULL;
    PyObject *here = recorder ? PyObject_GetAttrString(runner, "here") : NULL;
    PyObject *ring = here && recorder != Py_None
        ? PyObject_GetAttrString(recorder, "sample_ring") : NULL;
    PyObject *samples = NULL, *sampled = NULL;
    int ok = here != NULL && (recorder == Py_None || ring != NULL);
    if (ok && !PyDict_Check(broken)) {
        PyErr_SetString(PyExc_TypeError, "the fault table's broken is a dict");
        ok = 0;
    }
    if (ok && ring != NULL && (!PyArg_ParseTuple(ring, "O!O", &PyList_Type, &samples, &sampled)
                               || !PyIter_Check(sampled))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a recorder's sample_ring is (list, count)");
        ok = 0;
    }
    if (ok && ring != NULL) {
        Py_XSETREF(self->samples, Py_NewRef(samples));
        Py_XSETREF(self->sampled, Py_NewRef(sampled));
    }
    Py_XDECREF(ring);
    if (!ok) {
        Py_XDECREF(broken);
        Py_XDECREF(recorder);
        Py_XDECREF(here);
        return -1;
    }
    Py_XSETREF(self->broken, broken);
    Py_XSETREF(self->progress, Py_NewRef(progress));
    Py_XSETREF(self->recorder, recorder);
    Py_XSETREF(self->here, here);
    Py_XSETREF(self->lock, Py_NewRef(lock));
    Py_XSETREF(self->runner, Py_NewRef(runner));
    Py_XSETREF(self->session, Py_NewRef(session));
    Py_XSETREF(self->early, Py_NewRef(early));
    Py_XSETREF(self->group_id, Py_NewRef(group_id));
    Py_XSETREF(self->limit, Py_NewRef(limit));
    Py_XSETREF(self->ndarray, Py_NewRef(ndarray));
    Py_XSETREF(self->scan_soon, Py_NewRef(scan_soon));
    Py_XSETREF(self->path, Py_NewRef(path));
    self->sample_every = sample_every;
    field_find(&self->seq, runner, s_seq);
    field_find(&self->handed, runner, s_handed);
    field_find(&self->finished, runner, s_finished);
    field_find(&self->run, runner, s_run_fingerprint);
    field_find(&self->closed, session, s_closed);
    field_find(&self->frames, early, s_frames);
    field_find(&self->running, progress, s_running);
    field_find(&self->completed, progress, s_completed);
    field_find(&self->last, progress, s_last);
    return 0;
}

static int express_traverse(Express *self, visitproc visit, void *arg) {
    Py_VISIT(self->core);
    Py_VISIT(self->step);
    Py_VISIT(self->runner);
    Py_VISIT(self->session);
    Py_VISIT(self->broken);
    Py_VISIT(self->progress);
    Py_VISIT(self->counter.obj);
    Py_VISIT(self->early);
    Py_VISIT(self->recorder);
    Py_VISIT(self->here);
    Py_VISIT(self->lock);
    Py_VISIT(self->scan_soon);
    Py_VISIT(self->group_id);
    Py_VISIT(self->limit);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->path);
    Py_VISIT(self->samples);
    Py_VISIT(self->sampled);
    Field *fields[] = FIELDS(self);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        Py_VISIT(fields[i]->type);
    for (int i = 0; i < self->count; i++) {
        Py_VISIT(self->entries[i].dtype);
        Py_VISIT(self->entries[i].op);
        Py_VISIT(self->entries[i].what);
        Py_VISIT(self->entries[i].fingerprint);
        Py_VISIT(self->entries[i].resume);
    }
    return 0;
}

static int express_clear(Express *self) {
    Py_CLEAR(self->core);
    Py_CLEAR(self->step);
    Py_CLEAR(self->runner);
    Py_CLEAR(self->session);
    Py_CLEAR(self->broken);
    Py_CLEAR(self->progress);
    if (self->counter.obj != NULL)
        PyBuffer_Release(&self->counter);
    Py_CLEAR(self->early);
    Py_CLEAR(self->recorder);
    Py_CLEAR(self->here);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->scan_soon);
    Py_CLEAR(self->group_id);
    Py_CLEAR(self->limit);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->path);
    Py_CLEAR(self->samples);
    Py_CLEAR(self->sampled);
    Field *fields[] = FIELDS(self);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        field_clear(fields[i]);
    for (int i = 0; i < self->count; i++)
        entry_clear(&self->entries[i]);
    self->count = 0;
    return 0;
}

static void express_dealloc(Express *self) {
    PyObject_GC_UnTrack(self);
    express_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef express_methods[] = {
    {"all_reduce", (PyCFunction)(void (*)(void))express_all_reduce, METH_FASTCALL,
     "all_reduce(data, op) -> whether it ran here (False: nothing was done)"},
    {"barrier", (PyCFunction)express_barrier, METH_NOARGS,
     "barrier() -> whether it ran here (False: nothing was done)"},
    {"learn", (PyCFunction)(void (*)(void))express_learn, METH_FASTCALL,
     "learn(collective, what, fingerprint, resume, dtype, bytes, op, kind) -> whether it "
     "was taken (False: full)"},
    {"arm", (PyCFunction)(void (*)(void))express_arm, METH_FASTCALL,
     "arm(core, step, spins): the group's arena and its step"},
    {"forget", (PyCFunction)express_forget, METH_NOARGS, "forget(): take no call"},
    {NULL, NULL, 0, NULL},
};

static PyObject *express_count(Express *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->count);
}

static PyObject *express_asked(Express *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLongLong(self->asked);
}

/* The names of the fields it reads and writes in their owners' slots (the others go
 * through the attribute protocol). */
static PyObject *express_in_slots(Express *self, void *Py_UNUSED(closure)) {
    Field *fields[] = FIELDS(self);
    PyObject *names = PyList_New(0);
    for (size_t i = 0; names != NULL && i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i]->offset != 0 && PyList_Append(names, fields[i]->name) < 0)
            Py_CLEAR(names);
    return names;
}

static PyGetSetDef express_getset[] = {
    {"count", (getter)express_count, NULL, "the calls taught", NULL},
    {"asked", (getter)express_asked, NULL, "the calls of all_reduce and barrier it was asked "
     "to run, taken or declined", NULL},
    {"in_slots", (getter)express_in_slots, NULL,
     "the names of the fields it reads and writes in their owners' slots", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ExpressType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncoll._native._arena.Express",
    .tp_basicsize = sizeof(Express),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Express(runner, session, counter, faults, progress, early, lock, group_id, "
              "limit, ndarray, sample_every, scan_soon, path): a group's repeated blocking "
              "calls, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)express_init,
    .tp_dealloc = (destructor)express_dealloc,
    .tp_traverse = (traverseproc)express_traverse,
    .tp_clear = (inquiry)express_clear,
    .tp_methods = express_methods,
    .tp_getset = express_getset,
};

int express_ready(void) {
    struct { PyObject **name; const char *text; } names[] = {
        {&s_running, "running"}, {&s_completed, "completed"}, {&s_last, "last"},
        {&s_handed, "handed"}, {&s_finished, "finished"}, {&s_seq, "_seq"},
        {&s_closed, "closed"}, {&s_frames, "frames"}, {&s_operation, "operation"},
        {&s_run_fingerprint, "run_fingerprint"}, {&s_dtype, "dtype"}, {&s_open_run, "open_run"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].name == NULL
            && (*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return PyType_Ready(&ExpressType);
}

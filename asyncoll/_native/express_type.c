/* Mirrors asyncoll/_group/express.py: the Express type (asyncoll._native._arena.Express),
 * made for a group (express_for) and taught the calls it takes (teach); its call is
 * express.c's.
 */
#include "express_type.h"

#include "lock.h"

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
    if (collective == ALL_REDUCE) {
        if (kind_of(code, &entry.kind) < 0)
            return NULL;
        if (bytes < 1 || bytes % entry.kind.itemsize) {
            PyErr_Format(PyExc_ValueError, "an all_reduce of %zd bytes of items of %zd",
                         bytes, entry.kind.itemsize);
            return NULL;
        }
    } else if (collective != BARRIER) {
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
    field_find(&self->operation, self->step, express_names.operation);
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
    PyObject *broken = PyObject_GetAttr(faults, express_names.broken);
    PyObject *recorder = broken ? PyObject_GetAttr(runner, express_names.recorder) : NULL;
    PyObject *here = recorder ? PyObject_GetAttr(runner, express_names.here) : NULL;
    PyObject *ring = here && recorder != Py_None
        ? PyObject_GetAttr(recorder, express_names.sample_ring) : NULL;
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
    field_find(&self->seq, runner, express_names.seq);
    field_find(&self->handed, runner, express_names.handed);
    field_find(&self->finished, runner, express_names.finished);
    field_find(&self->run, runner, express_names.run_fingerprint);
    field_find(&self->closed, session, express_names.closed);
    field_find(&self->frames, early, express_names.frames);
    field_find(&self->running, progress, express_names.running);
    field_find(&self->completed, progress, express_names.completed);
    field_find(&self->last, progress, express_names.last);
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
    if (express_names_ready() < 0)
        return -1;
    return PyType_Ready(&ExpressType);
}

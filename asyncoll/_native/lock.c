/* Mirrors asyncoll/_group/arena_path.py's GroupArena.lock: the lock a group's
 * arena is run under (asyncoll._native._arena.PathLock).
 *
 * threading.Lock's methods and meaning (acquire(blocking=True, timeout=-1),
 * release(), locked(), a context manager), on the interpreter's own lock
 * (PyThread_type_lock), for two reasons: the compiled entry of repeated calls
 * (express.c) takes and gives it back without a call through Python, and its
 * acquire reads its arguments without building a tuple, which every call on
 * the arena's Python path pays for too.
 */
#include "lock.h"

#include <time.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;
} PathLock;

int path_lock_try(PyObject *lock) {
    PathLock *self = (PathLock *)lock;
    if (PyThread_acquire_lock_timed(self->lock, 0, 0) != PY_LOCK_ACQUIRED)
        return 0;
    self->held = 1;
    return 1;
}

void path_lock_release(PyObject *lock) {
    PathLock *self = (PathLock *)lock;
    self->held = 0;
    PyThread_release_lock(self->lock);
}

static double monotonic(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/* Wait for the lock (timeout < 0: for as long as it takes), the GIL released,
 * running signal handlers as the wait is interrupted: 1 taken, 0 timed out,
 * -1 a handler raised. */
static int wait_for(PathLock *self, double timeout) {
    double deadline = timeout < 0 ? 0.0 : monotonic() + timeout;
    for (;;) {
        PY_TIMEOUT_T micros = -1;
        if (timeout >= 0) {
            double left = deadline - monotonic();
            if (left <= 0)
                return 0;
            micros = left * 1e6 > (double)PY_TIMEOUT_MAX ? PY_TIMEOUT_MAX
                                                          : (PY_TIMEOUT_T)(left * 1e6);
        }
        PyLockStatus got;
        Py_BEGIN_ALLOW_THREADS
        got = PyThread_acquire_lock_timed(self->lock, micros, 1);
        Py_END_ALLOW_THREADS
        if (got == PY_LOCK_ACQUIRED)
            return 1;
        if (got == PY_LOCK_FAILURE)
            return 0;
        if (Py_MakePendingCalls() < 0) /* PY_LOCK_INTR: a signal */
            return -1;
    }
}

/* acquire(blocking=True, timeout=-1) -> whether it was taken */
static PyObject *path_lock_acquire(PathLock *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    int blocking = 1;
    double timeout = -1;
    Py_ssize_t given = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    if (given > 2) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True, timeout=-1)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < given; i++) {
        int is_timeout = i >= nargs
            ? PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i - nargs),
                                               "timeout") == 0
            : i == 1;
        if (i >= nargs && !is_timeout
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i - nargs),
                                                "blocking") != 0) {
            PyErr_Format(PyExc_TypeError, "acquire() got an unexpected keyword argument %R",
                         PyTuple_GET_ITEM(kwnames, i - nargs));
            return NULL;
        }
        if (is_timeout) {
            timeout = PyFloat_AsDouble(args[i]);
            if (timeout == -1 && PyErr_Occurred())
                return NULL;
        } else if ((blocking = PyObject_IsTrue(args[i])) < 0) {
            return NULL;
        }
    }
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (path_lock_try((PyObject *)self))
        Py_RETURN_TRUE;
    if (!blocking)
        Py_RETURN_FALSE;
    int got = wait_for(self, timeout);
    if (got < 0)
        return NULL;
    if (got)
        self->held = 1;
    return PyBool_FromLong(got);
}

static PyObject *path_lock_release_method(PathLock *self, PyObject *Py_UNUSED(unused)) {
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    path_lock_release((PyObject *)self);
    Py_RETURN_NONE;
}

static PyObject *path_lock_locked(PathLock *self, PyObject *Py_UNUSED(unused)) {
    return PyBool_FromLong(self->held);
}

static PyObject *path_lock_enter(PathLock *self, PyObject *Py_UNUSED(unused)) {
    return path_lock_acquire(self, NULL, 0, NULL);
}

static PyObject *path_lock_exit(PathLock *self, PyObject *Py_UNUSED(args)) {
    return path_lock_release_method(self, NULL);
}

static PyObject *path_lock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "PathLock() takes no arguments");
        return NULL;
    }
    PathLock *self = (PathLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void path_lock_dealloc(PathLock *self) {
    if (self->lock != NULL) {
        if (self->held)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef path_lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))path_lock_acquire,
     METH_FASTCALL | METH_KEYWORDS, "acquire(blocking=True, timeout=-1) -> whether taken"},
    {"release", (PyCFunction)path_lock_release_method, METH_NOARGS, "release()"},
    {"locked", (PyCFunction)path_lock_locked, METH_NOARGS, "locked() -> whether held"},
    {"__enter__", (PyCFunction)path_lock_enter, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)path_lock_exit, METH_VARARGS, "release()"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject PathLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncoll._native._arena.PathLock",
    .tp_basicsize = sizeof(PathLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PathLock(): threading.Lock's methods, for the arena's path and its "
              "compiled entry.",
    .tp_new = path_lock_new,
    .tp_dealloc = (destructor)path_lock_dealloc,
    .tp_methods = path_lock_methods,
};

/* Mirrors asyncoll/_api/front.py (asyncoll._native._arena.Front): a blocking API
 * function, fronted by the world group's compiled entry (express.c).
 *
 * `dist.all_reduce(x)` on the world, repeated, is one C call from here to its
 * result: a Front takes the calls it can (all_reduce(tensor) and
 * all_reduce(tensor, op), barrier()) to the world's Express, passes one
 * Express declines to the function's declined twin (which does not ask
 * Express again), where it was given one, and any other call to the Python
 * function it stands for, unchanged. Everything else about it is the
 * function's: its __wrapped__, and through it its name, docstring and
 * signature.
 */
#include "front.h"

#include "contract.h"
#include "express_type.h"

#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *function;  /* the Python function */
    PyObject *world;     /* the module whose `current` is the world group, or None */
    PyObject *names;     /* that module's __dict__ (NULL: `world` is no module) */
    Field express;       /* the world group's `express` */
    PyObject *op;        /* all_reduce's default op */
    PyObject *declined;  /* called with a call Express declined (NULL: the function) */
    int collective;
} Front;

static PyObject *s_current, *s_express;

/* The names a Front reads, with the class or module it expects them on. */
const Name FRONT_NAMES[] = {
    {WORLD_MODULE, "current", 0, &s_current}, {GROUP, "express", 1, &s_express},
};
const size_t FRONT_NAMES_COUNT = sizeof FRONT_NAMES / sizeof FRONT_NAMES[0];

/* The world group's Express (a new reference: another thread may end the world
 * while a call waits); NULL (no error) where there is none. */
static PyObject *world_express(Front *self) {
    PyObject *world = self->names != NULL
        ? Py_XNewRef(PyDict_GetItemWithError(self->names, s_current))
        : PyObject_GetAttr(self->world, s_current);
    if (world == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *express = NULL;
    if (world != Py_None) {
        if (Py_TYPE(world) != self->express.type)
            field_find(&self->express, world, s_express);
        express = field_get(&self->express, world);
    }
    Py_DECREF(world);
    if (express == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!Py_IS_TYPE(express, &ExpressType)) {
        /* None, or a test's stand-in: the function calls it itself */
        Py_DECREF(express);
        return NULL;
    }
    return express;
}

static PyObject *front_call(Front *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int simple = kwnames == NULL
        && (self->collective == ALL_REDUCE ? nargs == 1 || nargs == 2 : nargs == 0);
    PyObject *express = simple ? world_express(self) : NULL;
    if (express != NULL) {
        PyObject *ran;
        if (self->collective == ALL_REDUCE) {
            PyObject *pair[2] = {args[0], nargs == 2 ? args[1] : self->op};
            ran = express_all_reduce(express, pair, 2);
        } else {
            ran = express_barrier(express, NULL);
        }
        Py_DECREF(express);
        if (ran != Py_False) {
            Py_XDECREF(ran);
            return ran == NULL ? NULL : Py_NewRef(Py_None); /* an error, or done */
        }
        Py_DECREF(ran);
        if (self->declined != NULL)
            return PyObject_Vectorcall(self->declined, args, nargsf, kwnames);
    }
    return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
}

/* Front(function, collective, world, op, declined=None) */
static PyObject *front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *function, *world, *op, *declined = Py_None;
    int collective;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Front(function, collective, world, op, declined)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OiOO|O", &function, &collective, &world, &op, &declined))
        return NULL;
    if (!PyCallable_Check(function) || (collective != ALL_REDUCE && collective != BARRIER)
        || (declined != Py_None && !PyCallable_Check(declined))) {
        PyErr_SetString(PyExc_ValueError, "a Front stands for a callable, all_reduce (0) or "
                        "barrier (1), and its declined twin is a callable or None");
        return NULL;
    }
    Front *self = (Front *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)front_call;
    self->function = Py_NewRef(function);
    self->world = Py_NewRef(world);
    self->names = PyModule_Check(world) ? Py_NewRef(PyModule_GetDict(world)) : NULL;
    self->op = Py_NewRef(op);
    self->declined = declined == Py_None ? NULL : Py_NewRef(declined);
    self->collective = collective;
    return (PyObject *)self;
}

/* Any attribute the Front has not (its __doc__, __name__, __module__ ...): the
 * function's. */
static PyObject *front_getattro(Front *self, PyObject *name) {
    PyObject *got = PyObject_GenericGetAttr((PyObject *)self, name);
    if (got != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return got;
    PyErr_Clear();
    return PyObject_GetAttr(self->function, name);
}

static PyObject *front_wrapped(Front *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->function);
}

static PyObject *front_doc(Front *self, void *Py_UNUSED(closure)) {
    return PyObject_GetAttrString(self->function, "__doc__");
}

static PyObject *front_repr(Front *self) {
    return PyUnicode_FromFormat("<compiled front of %R>", self->function);
}

static int front_traverse(Front *self, visitproc visit, void *arg) {
    Py_VISIT(self->function);
    Py_VISIT(self->world);
    Py_VISIT(self->names);
    Py_VISIT(self->express.type);
    Py_VISIT(self->op);
    Py_VISIT(self->declined);
    return 0;
}

static int front_clear(Front *self) {
    Py_CLEAR(self->function);
    Py_CLEAR(self->world);
    Py_CLEAR(self->names);
    field_clear(&self->express);
    Py_CLEAR(self->op);
    Py_CLEAR(self->declined);
    return 0;
}

static void front_dealloc(Front *self) {
    PyObject_GC_UnTrack(self);
    front_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef front_getset[] = {
    {"__wrapped__", (getter)front_wrapped, NULL, "the function it stands for", NULL},
    {"__doc__", (getter)front_doc, NULL, "the function's docstring", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncoll._native._arena.Front",
    .tp_basicsize = sizeof(Front),
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = front_new,
    .tp_getattro = (getattrofunc)front_getattro,
    .tp_repr = (reprfunc)front_repr,
    .tp_dealloc = (destructor)front_dealloc,
    .tp_traverse = (traverseproc)front_traverse,
    .tp_clear = (inquiry)front_clear,
    .tp_getset = front_getset,
};

int front_ready(void) {
    if (names_ready(FRONT_NAMES, FRONT_NAMES_COUNT) < 0)
        return -1;
    return PyType_Ready(&FrontType);
}

/* Mirrors asyncoll/_native/__init__.py's view of the extension: the module
 * asyncoll._native._arena, its types (Core, PathLock, Express, Front: each
 * file's), its functions (reduce, kinds, contract) and their registration.
 * The top of the C files: it includes every other's header, and none includes
 * it.
 */
#include "contract.h"
#include "core.h"
#include "express_type.h"
#include "field.h"
#include "front.h"
#include "lock.h"
#include "reduce.h"
#include "steps.h"

/* -- the contract (asyncoll/_native/contract.py) ------------------------------------------ */

/* Set `key` of `into` to `value` (a new reference, or NULL on an error): 0 or -1. */
static int put(PyObject *into, const char *key, PyObject *value) {
    if (value == NULL)
        return -1;
    int failed = PyDict_SetItemString(into, key, value);
    Py_DECREF(value);
    return failed;
}

/* Each name of `names` into `fields` (the contract's FIELDS) or `attributes`
 * (ATTRIBUTES), by the class it expects it on: {owner: (name, ...)}. */
static int put_names(PyObject *fields, PyObject *attributes, const Name *names,
                     size_t count) {
    for (size_t i = 0; i < count; i++) {
        PyObject *into = names[i].field ? fields : attributes;
        PyObject *owned = PyDict_GetItemString(into, names[i].owner); /* borrowed */
        PyObject *more = PyUnicode_FromString(names[i].text);
        PyObject *grown = NULL;
        if (more != NULL) {
            PyObject *one = PyTuple_Pack(1, more);
            grown = one == NULL || owned == NULL ? one : PySequence_Concat(owned, one);
            if (owned != NULL)
                Py_XDECREF(one);
        }
        Py_XDECREF(more);
        if (put(into, names[i].owner, grown) < 0)
            return -1;
    }
    return 0;
}

#define NAME_OF_TYPE(code, name, size) name,
#define NAME_OF_OP(code, name) name,
static const char *const TYPE_NAMES[] = {REDUCTION_TYPES(NAME_OF_TYPE)};
static const char *const OP_NAMES[] = {REDUCTION_OPS(NAME_OF_OP)};

static PyObject *names_tuple(const char *const *names, Py_ssize_t count) {
    PyObject *tuple = PyTuple_New(count);
    for (Py_ssize_t i = 0; tuple != NULL && i < count; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, name);
    }
    return tuple;
}

/* contract(): the values this module shares with the Python side, by the names
 * asyncoll/_native/contract.py gives them (its IN_C). */
static PyObject *module_contract(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    struct { const char *key; long value; } numbers[] = {
        {"DONE", DONE}, {"WAITING", WAITING}, {"MISMATCH", MISMATCH},
        {"WAITING_RESULTS", WAITING_RESULTS}, {"ALL_REDUCE", ALL_REDUCE},
        {"BARRIER", BARRIER}, {"OPS", OPS}, {"LINE_BYTES", LINE_BYTES},
        {"LINE_WORDS", LINE_WORDS}, {"PUBLISHED", W_PUBLISHED}, {"SLEEPING", W_SLEEPING},
        {"PROCESSOR", W_PROCESSOR}, {"FINGERPRINT_WORDS", FINGERPRINT_WORDS},
        {"ALIGN", ALIGN}, {"BRIEF_YIELDS", BRIEF_YIELDS},
        {"COPY_BLOCK_BYTES", COPY_BLOCK_BYTES}, {"STRANGER_NS", STRANGER_NS},
        {"QUIET_NS", QUIET_NS}, {"NEIGHBOUR_STAYS", NEIGHBOUR_STAYS},
    };
    PyObject *contract = PyDict_New(), *fields = PyDict_New(), *attributes = PyDict_New();
    int failed = contract == NULL || fields == NULL || attributes == NULL;
    for (size_t i = 0; !failed && i < sizeof numbers / sizeof numbers[0]; i++)
        failed = put(contract, numbers[i].key, PyLong_FromLong(numbers[i].value)) < 0;
    failed = failed
        || put(contract, "FINGERPRINTS",
               Py_BuildValue("(ii)", FINGERPRINT_AT[0], FINGERPRINT_AT[1])) < 0
        || put(contract, "TYPES", names_tuple(TYPE_NAMES, TYPES)) < 0
        || put(contract, "REDUCE_OPS", names_tuple(OP_NAMES, OPS)) < 0
        || put_names(fields, attributes, EXPRESS_NAMES, EXPRESS_NAMES_COUNT) < 0
        || put_names(fields, attributes, FRONT_NAMES, FRONT_NAMES_COUNT) < 0
        || PyDict_SetItemString(contract, "FIELDS", fields) < 0
        || PyDict_SetItemString(contract, "ATTRIBUTES", attributes) < 0;
    Py_XDECREF(fields);
    Py_XDECREF(attributes);
    if (failed)
        Py_CLEAR(contract);
    return contract;
}

/* -- the module --------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"kinds", (PyCFunction)kinds_function, METH_NOARGS,
     "kinds() -> the reduction kinds (type * OPS + op) this module has"},
    {"reduce", (PyCFunction)(void (*)(void))reduce_function, METH_FASTCALL,
     "reduce(kind, out, parts, members): out = parts[0] (op) parts[1] (op) ..., in order"},
    {"contract", (PyCFunction)module_contract, METH_NOARGS,
     "contract() -> the values this module shares with asyncoll/_native/contract.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef arena_module = {
    PyModuleDef_HEAD_INIT, "asyncoll._native._arena",
    "The arena's small-operation steps and reductions, in C (asyncoll._native).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__arena(void) {
    if (core_ready(STEP_METHODS) < 0 || PyType_Ready(&PathLockType) < 0 || express_ready() < 0
        || front_ready() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&arena_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&CoreType);
    Py_INCREF(&ExpressType);
    Py_INCREF(&PathLockType);
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(module, "Core", (PyObject *)&CoreType) < 0
        || PyModule_AddObject(module, "Express", (PyObject *)&ExpressType) < 0
        || PyModule_AddObject(module, "PathLock", (PyObject *)&PathLockType) < 0
        || PyModule_AddObject(module, "Front", (PyObject *)&FrontType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(&ExpressType);
        Py_DECREF(&PathLockType);
        Py_DECREF(&FrontType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

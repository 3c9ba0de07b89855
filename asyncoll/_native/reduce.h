/* Mirrors asyncoll/_algorithms/ops.py's reductions (numpy's ufuncs): a
 * reduction's kind (a type's code * OPS + an op's, as asyncoll._native.kind makes
 * it), its functions, and the fused reduction of many parts (reduce.c).
 */
#ifndef ASYNCOLL_REDUCE_H
#define ASYNCOLL_REDUCE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "contract.h"

typedef void (*binary_fn)(char *out, const char *a, const char *b, Py_ssize_t n);
typedef void (*divide_fn)(char *out, Py_ssize_t n, Py_ssize_t by);

/* A reduction's kind, checked: its binary function, its divide (AVG only) and its
 * item size. */
typedef struct {
    binary_fn binary;
    divide_fn divide;
    Py_ssize_t itemsize;
} Kind;

/* The kind of `code`: 0, or -1 with a ValueError where this module has none. */
int kind_of(long code, Kind *kind);
/* Whether this module has a kind of `code` (no error either way). */
int kind_known(long code);
void reduce_parts(const Kind *kind, char *out, const char *const *parts, Py_ssize_t count,
                  Py_ssize_t bytes, Py_ssize_t members, char *also, int streaming);
int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize);

/* The module's reduce(kind, out, parts, members) and kinds() (module.c registers them). */
PyObject *reduce_function(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *kinds_function(PyObject *module, PyObject *unused);

#endif

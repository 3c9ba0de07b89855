/* Mirrors Python's attribute protocol for the attributes C reads and writes on
 * Python objects (field.c): a Field reads a slot the way its member descriptor
 * does, and a Name says which class C expects an attribute on
 * (asyncoll/_native/contract.py's FIELDS and ATTRIBUTES).
 */
#ifndef ASYNCOLL_FIELD_H
#define ASYNCOLL_FIELD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* An attribute of an object the compiled entry reads and writes on every call:
 * its name, and where the owner's type keeps it in a slot (0: it has none, and
 * the attribute protocol is used). The type is held. */
typedef struct {
    PyObject *name;
    PyTypeObject *type;
    Py_ssize_t offset;
} Field;

void field_find(Field *field, PyObject *owner, PyObject *name);
void field_clear(Field *field);
PyObject *field_get(const Field *field, PyObject *owner);
int field_set(const Field *field, PyObject *owner, PyObject *value);
int field_number(const Field *field, PyObject *owner, long long *value);
int field_set_number(const Field *field, PyObject *owner, long long value);

/* An attribute name C uses: the class it expects it on (contract.h's names), the
 * name, whether it is a Field (read in a slot where there is one: the contract's
 * FIELDS) or read through the attribute protocol (ATTRIBUTES), and where its
 * interned string is kept. */
typedef struct {
    const char *owner;
    const char *text;
    int field;
    PyObject **name;
} Name;

/* Intern every name of `names` not yet interned: 0, or -1 with an error. */
int names_ready(const Name *names, size_t count);

#endif

/* Mirrors Python's attribute protocol (a member descriptor's __get__ and
 * __set__): the attributes the compiled entry (express.c) and the fronts
 * (front.c) read and write on every call, the runner's seq, the step's
 * operation number and the like (asyncoll/_native/contract.py's FIELDS).
 *
 * Where the owner's class keeps one in a slot (__slots__, an object slot with no
 * __getattribute__ or __setattr__ of its own in the way), the entry reads and
 * writes the slot itself, as the slot's descriptor does, at the cost of a load;
 * any other owner (a test's stand-in) goes through the attribute protocol.
 */
#include "field.h"

#include <structmember.h>

void field_find(Field *field, PyObject *owner, PyObject *name) {
    PyTypeObject *type = Py_TYPE(owner);
    field->name = name;
    field->offset = 0;
    Py_XSETREF(field->type, (PyTypeObject *)Py_NewRef(type));
    if (type->tp_getattro != PyObject_GenericGetAttr
        || type->tp_setattro != PyObject_GenericSetAttr)
        return;
    PyObject *found = _PyType_Lookup(type, name); /* borrowed */
    if (found == NULL || !Py_IS_TYPE(found, &PyMemberDescr_Type))
        return;
    PyMemberDef *member = ((PyMemberDescrObject *)found)->d_member;
    if (member->type == T_OBJECT_EX && !(member->flags & READONLY))
        field->offset = member->offset;
}

void field_clear(Field *field) {
    Py_CLEAR(field->type);
    field->offset = 0;
}

/* Where the owner keeps the field in its slot: that slot; else NULL. */
static inline PyObject **slot_of(const Field *field, PyObject *owner) {
    if (field->offset == 0 || Py_TYPE(owner) != field->type)
        return NULL;
    return (PyObject **)((char *)owner + field->offset);
}

PyObject *field_get(const Field *field, PyObject *owner) {
    PyObject **at = slot_of(field, owner);
    if (at == NULL)
        return PyObject_GetAttr(owner, field->name);
    if (*at == NULL) {
        PyErr_SetObject(PyExc_AttributeError, field->name);
        return NULL;
    }
    return Py_NewRef(*at);
}

int field_set(const Field *field, PyObject *owner, PyObject *value) {
    PyObject **at = slot_of(field, owner);
    if (at == NULL)
        return PyObject_SetAttr(owner, field->name, value);
    Py_XSETREF(*at, Py_NewRef(value));
    return 0;
}

int field_number(const Field *field, PyObject *owner, long long *value) {
    PyObject *got = field_get(field, owner);
    if (got == NULL)
        return -1;
    *value = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

int field_set_number(const Field *field, PyObject *owner, long long value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL)
        return -1;
    int failed = field_set(field, owner, number);
    Py_DECREF(number);
    return failed;
}

int names_ready(const Name *names, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (*names[i].name == NULL
            && (*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

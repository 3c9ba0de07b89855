/* Mirrors asyncoll/_group/arena_path.py's GroupArena.lock: threading.Lock's
 * methods on the interpreter's own lock, which the compiled entry takes and
 * gives back without a call through Python (lock.c).
 */
#ifndef ASYNCOLL_LOCK_H
#define ASYNCOLL_LOCK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyTypeObject PathLockType;

/* A PathLock taken without waiting (1) or not (0), and given back. */
int path_lock_try(PyObject *lock);
void path_lock_release(PyObject *lock);

#endif

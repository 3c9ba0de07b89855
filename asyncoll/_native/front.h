/* Mirrors asyncoll/_api/front.py: the Front type, a blocking API function
 * fronted by the world group's compiled entry (front.c).
 */
#ifndef ASYNCOLL_FRONT_H
#define ASYNCOLL_FRONT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "field.h"

extern PyTypeObject FrontType;
/* The names a Front reads, with the class or module it expects them on. */
extern const Name FRONT_NAMES[];
extern const size_t FRONT_NAMES_COUNT;

/* Ready the Front type and the names it reads (module init). */
int front_ready(void);

#endif

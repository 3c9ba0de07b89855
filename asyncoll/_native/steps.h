/* Mirrors asyncoll/_algorithms/arena.py and arena_steps.py: the arena's
 * steps, Core's all_reduce, reduce, all_gather, split, broadcast and barrier
 * methods (steps.c), and all_reduce's end, which the compiled entry runs too.
 */
#ifndef ASYNCOLL_STEPS_H
#define ASYNCOLL_STEPS_H

#include "core.h"
#include "reduce.h"

/* The Core's step methods (module.c hands them to core_ready). */
extern const PyMethodDef STEP_METHODS[];

/* all_reduce's end, and reduce's (on `root` only; -1: every member): DONE, MISMATCH,
 * or -1 with an error. */
int all_reduce_out(Core *self, const Kind *kind, char *data, Py_ssize_t bytes,
                   int64_t operation, Py_ssize_t root);

#endif

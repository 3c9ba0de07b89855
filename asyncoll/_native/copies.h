/* Mirrors asyncoll/_algorithms/arena.py's copy: the copies into and out of the
 * slots, in blocks, and how a member writes its slot in the split all_reduce,
 * with cached stores or streaming ones, judged from the copies' times (copies.c).
 */
#ifndef ASYNCOLL_COPIES_H
#define ASYNCOLL_COPIES_H

#include "core.h"

/* memcpy of `bytes`, in steps of COPY_BLOCK_BYTES. */
void copy_blocks(char *to, const char *from, Py_ssize_t bytes);
/* A copy into a slot, with streaming stores where `streaming` (they leave no line
 * of `to` in any cache); then fence_writes before the publish. */
void write_slot(char *to, const char *from, Py_ssize_t bytes, int streaming);
/* Orders streaming stores before the stores that follow (a publish). */
void fence_writes(int streaming);

/* Whether this split step writes this member's slot with streaming stores. */
int step_streams(Core *self);
/* The step's copies into this member's slot took `ns` for `bytes` (noted where
 * they were cached stores) ... */
void wrote_slot(Core *self, int64_t ns, Py_ssize_t bytes);
/* ... and its copies out of the others' took `ns` for `bytes`: judged, the two may
 * change how the next steps write. */
void judge_writes(Core *self, int64_t ns, Py_ssize_t bytes);
/* The Core's slot_writes method: how this member writes its slot now, and, given
 * "auto", "cached" or "streaming", judged from then on or fixed. */
PyObject *core_slot_writes(Core *self, PyObject *const *args, Py_ssize_t nargs);
/* The Core's judge_step method: a split step's judgement from given times (tests). */
PyObject *core_judge_step(Core *self, PyObject *const *args, Py_ssize_t nargs);

#endif

/* Mirrors asyncoll/_algorithms/arena.py and arena_steps.py: the arena's
 * small-operation steps, in C (the Core's step methods).
 *
 * Each step does in one call what its pure-Python twin does: copy in, publish,
 * wait briefly with the GIL released, compare fingerprints, reduce in member
 * order (a fused reduction that reads each member's part once), copy out. A
 * step that must wait longer returns WAITING, and the caller's Waiter takes
 * over before the step's *_out call finishes it.
 */
#include "steps.h"

#include "copies.h"

#include <stdint.h>
#include <string.h>

/* all_reduce's end, and reduce's (on `root` only; -1: every member): fingerprints
 * compared, every slot reduced in member order. */
int all_reduce_out(Core *self, const Kind *kind, char *data, Py_ssize_t bytes,
                   int64_t operation, Py_ssize_t root) {
    if (!same_fingerprints(self, operation))
        return MISMATCH;
    if (root >= 0 && root != self->me)
        return DONE;
    const char *parts[64];
    const char **many = NULL, **use = parts;
    if (self->size > 64) {
        many = PyMem_Malloc(sizeof(char *) * (size_t)self->size);
        if (many == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        use = many;
    }
    for (Py_ssize_t m = 0; m < self->size; m++)
        use[m] = slot(self, operation, m);
    reduce_parts(kind, data, use, self->size, bytes, self->size, NULL, 0);
    PyMem_Free(many);
    return DONE;
}

static int root_ok(Core *self, Py_ssize_t root) {
    if (root < 0 || root >= self->size) {
        PyErr_Format(PyExc_ValueError, "root %zd is not a member of an arena of %zd", root,
                     self->size);
        return 0;
    }
    return 1;
}

static int unpack_step(Core *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                       int64_t *operation) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "this step takes %zd arguments (%zd given)", want, nargs);
        return -1;
    }
    if (!core_mapped(self))
        return -1;
    *operation = PyLong_AsLongLong(args[1]);
    if (*operation == -1 && PyErr_Occurred())
        return -1;
    if (!operation_ok(*operation) || parse_fingerprint(self, args[2]) < 0)
        return -1;
    return 0;
}

/* The reduce steps: reduce (with a root) and all_reduce (root -1: every member
 * reduces), started (`start`: copy in, publish, a brief wait, then on) or
 * finished after the caller's wait. Their arguments: data, operation,
 * fingerprint, kind, then root where there is one, then spins where it starts. */
static PyObject *reduce_step(Core *self, PyObject *const *args, Py_ssize_t nargs,
                             int rooted, int start) {
    int64_t operation;
    Kind kind;
    if (unpack_step(self, args, nargs, 4 + rooted + start, &operation) < 0)
        return NULL;
    long code = PyLong_AsLong(args[3]), spins = start ? PyLong_AsLong(args[4 + rooted]) : 0;
    Py_ssize_t root = rooted ? PyLong_AsSsize_t(args[4]) : -1;
    if (PyErr_Occurred() || kind_of(code, &kind) < 0 || (rooted && !root_ok(self, root)))
        return NULL;
    Py_buffer data;
    if (get_buffer(args[0], &data, root < 0 || self->me == root, kind.itemsize) < 0)
        return NULL;
    int status = -1;
    if (fits(self, data.len)) {
        int ready = 1;
        if (start) {
            copy_blocks(slot(self, operation, self->me), data.buf, data.len);
            publish(self, 2 * operation - 1);
            ready = wait_briefly(self, 2 * operation - 1, spins);
        }
        status = ready ? all_reduce_out(self, &kind, data.buf, data.len, operation, root)
                       : WAITING;
    }
    PyBuffer_Release(&data);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* all_reduce(data, operation, fingerprint, kind, spins): the whole array
 * through the slots, every member reducing all of it. */
static PyObject *core_all_reduce(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return reduce_step(self, args, nargs, 0, 1);
}

/* all_reduce_out(data, operation, fingerprint, kind): after the caller's wait. */
static PyObject *core_all_reduce_out(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return reduce_step(self, args, nargs, 0, 0);
}

/* reduce(data, operation, fingerprint, kind, root, spins): every member's data through
 * the slots, reduced in member order into the root's; the others' stay as they were. */
static PyObject *core_reduce(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return reduce_step(self, args, nargs, 1, 1);
}

/* reduce_out(data, operation, fingerprint, kind, root): after the caller's wait. */
static PyObject *core_reduce_out(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return reduce_step(self, args, nargs, 1, 0);
}

/* all_gather's end: member j's slot into outputs[j], this member's own block from
 * `mine` unless the two overlap (it is that block). */
static int gather_out(Core *self, Py_buffer *mine, PyObject *outputs, int64_t operation) {
    if (!same_fingerprints(self, operation))
        return MISMATCH;
    Py_buffer out;
    for (Py_ssize_t j = 0; j < self->size; j++) {
        if (get_buffer(PySequence_Fast_GET_ITEM(outputs, j), &out, 1, 0) < 0)
            return -1;
        int ok = fits(self, out.len);
        if (ok && j != self->me) {
            copy_blocks(out.buf, slot(self, operation, j), out.len);
        } else if (ok) {
            const char *a = out.buf, *b = mine->buf;
            if (a + out.len <= b || b + mine->len <= a)
                memcpy(out.buf, mine->buf, (size_t)(out.len < mine->len ? out.len : mine->len));
        }
        PyBuffer_Release(&out);
        if (!ok)
            return -1;
    }
    return DONE;
}

static PyObject *gathered(Core *self, PyObject *const *args, int64_t operation, long spins,
                          int start) {
    PyObject *outputs = PySequence_Fast(args[1], "outputs must be a sequence of buffers");
    if (outputs == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(outputs) != self->size) {
        PyErr_Format(PyExc_ValueError, "all_gather needs %zd outputs, one a member, not %zd",
                     self->size, PySequence_Fast_GET_SIZE(outputs));
        Py_DECREF(outputs);
        return NULL;
    }
    Py_buffer mine;
    if (get_buffer(args[0], &mine, 0, 0) < 0) {
        Py_DECREF(outputs);
        return NULL;
    }
    int status = -1;
    if (fits(self, mine.len)) {
        if (start) {
            copy_blocks(slot(self, operation, self->me), mine.buf, mine.len);
            publish(self, 2 * operation - 1);
        }
        status = !start || wait_briefly(self, 2 * operation - 1, spins)
                     ? gather_out(self, &mine, outputs, operation) : WAITING;
    }
    PyBuffer_Release(&mine);
    Py_DECREF(outputs);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* all_gather(mine, outputs, operation, fingerprint, spins): every member's block
 * (they may differ in size) through the slots into outputs[j]. */
static PyObject *core_all_gather(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t operation;
    PyObject *shifted[3];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "all_gather(mine, outputs, operation, fingerprint, "
                        "spins)");
        return NULL;
    }
    shifted[0] = args[0], shifted[1] = args[2], shifted[2] = args[3];
    if (unpack_step(self, shifted, 3, 3, &operation) < 0)
        return NULL;
    long spins = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    return gathered(self, args, operation, spins, 1);
}

/* all_gather_out(mine, outputs, operation, fingerprint): after the caller's wait. */
static PyObject *core_all_gather_out(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t operation;
    PyObject *shifted[3];
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "all_gather_out(mine, outputs, operation, fingerprint)");
        return NULL;
    }
    shifted[0] = args[0], shifted[1] = args[2], shifted[2] = args[3];
    if (unpack_step(self, shifted, 3, 3, &operation) < 0)
        return NULL;
    return gathered(self, args, operation, 0, 0);
}

/* Member j's chunk of `count` elements: chunk_bounds (asyncoll._algorithms.chunking). */
static void chunk(Py_ssize_t count, Py_ssize_t parts, Py_ssize_t j, Py_ssize_t *lo,
                  Py_ssize_t *hi) {
    Py_ssize_t base = count / parts, extra = count % parts;
    *lo = j * base + (j < extra ? j : extra);
    *hi = *lo + base + (j < extra ? 1 : 0);
}

/* split(data, operation, fingerprint, kind, spins, stage): all_reduce reduce-scatter
 * style, as AllReduce._split_run: member i puts the chunks the others reduce into
 * its slot and publishes 2k - 1 (stage 0); reduces chunk i of every slot (its own
 * from data) into its slot and its data at once, and publishes 2k (stage 1);
 * copies every other chunk from its member's slot (stage 2). A stage that must
 * wait returns WAITING or WAITING_RESULTS, and the caller calls again with the
 * next stage once it waited. */
static PyObject *core_split(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t operation;
    Kind kind;
    if (unpack_step(self, args, nargs, 6, &operation) < 0)
        return NULL;
    long code = PyLong_AsLong(args[3]), spins = PyLong_AsLong(args[4]);
    long stage = PyLong_AsLong(args[5]);
    if (PyErr_Occurred() || kind_of(code, &kind) < 0)
        return NULL;
    if (stage < 0 || stage > 2) {
        PyErr_Format(PyExc_ValueError, "stage %ld is not 0, 1 or 2", stage);
        return NULL;
    }
    Py_buffer data;
    if (get_buffer(args[0], &data, 1, kind.itemsize) < 0)
        return NULL;
    self->splitting = 1;
    int status = -1;
    const char *parts[64];
    const char **many = NULL, **use = parts;
    if (!fits(self, data.len))
        goto done;
    if (self->size > 64) {
        many = PyMem_Malloc(sizeof(char *) * (size_t)self->size);
        if (many == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        use = many;
    }
    Py_ssize_t n = self->size, me = self->me, size = kind.itemsize;
    Py_ssize_t count = data.len / size, lo, hi;
    char *buf = data.buf, *mine = slot(self, operation, me);
    /* The slot is written with cached or streaming stores, as copies.c judges from
     * the time of the copies in and out. */
    if (stage == 0) {
        int streams = step_streams(self);
        int64_t start = now_ns();
        for (Py_ssize_t j = 0; j < n; j++) {
            chunk(count, n, j, &lo, &hi);
            if (j != me)
                write_slot(mine + lo * size, buf + lo * size, (hi - lo) * size, streams);
        }
        chunk(count, n, me, &lo, &hi);
        wrote_slot(self, now_ns() - start, data.len - (hi - lo) * size);
        fence_writes(streams);
        publish(self, 2 * operation - 1);
        if (!wait_briefly(self, 2 * operation - 1, spins)) {
            status = WAITING;
            goto done;
        }
        stage = 1;
    }
    if (stage == 1) {
        if (!same_fingerprints(self, operation)) {
            status = MISMATCH;
            goto done;
        }
        chunk(count, n, me, &lo, &hi);
        for (Py_ssize_t j = 0; j < n; j++)
            use[j] = (j == me ? buf : slot(self, operation, j)) + lo * size;
        /* The result into data, then copied into the slot (COPY_BLOCK_BYTES says why);
         * in place where member order reads data's chunk in the first step (me < 2),
         * else through the stack. */
        Py_ssize_t bytes = (hi - lo) * size;
        int streams = self->writes.step;
        if (me < 2) {
            reduce_parts(&kind, buf + lo * size, use, n, bytes, n, NULL, 0);
            write_slot(mine + lo * size, buf + lo * size, bytes, streams);
        } else {
            reduce_parts(&kind, mine + lo * size, use, n, bytes, n, buf + lo * size, streams);
        }
        fence_writes(streams);
        publish(self, 2 * operation);
        if (!wait_briefly(self, 2 * operation, spins)) {
            status = WAITING_RESULTS;
            goto done;
        }
    }
    int64_t start = now_ns();
    for (Py_ssize_t j = 0; j < n; j++) {
        chunk(count, n, j, &lo, &hi);
        if (j != me)
            copy_blocks(buf + lo * size, slot(self, operation, j) + lo * size, (hi - lo) * size);
    }
    chunk(count, n, me, &lo, &hi);
    judge_writes(self, now_ns() - start, data.len - (hi - lo) * size);
    status = DONE;
done:
    self->splitting = 0;
    PyMem_Free(many);
    PyBuffer_Release(&data);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* The broadcast step, started (`start`: the root copies in, every member publishes
 * and waits briefly, then on) or finished after the caller's wait. Its arguments:
 * data, operation, fingerprint, root, then spins where it starts. */
static PyObject *broadcast_step(Core *self, PyObject *const *args, Py_ssize_t nargs,
                                int start) {
    int64_t operation;
    if (unpack_step(self, args, nargs, 4 + start, &operation) < 0)
        return NULL;
    Py_ssize_t root = PyLong_AsSsize_t(args[3]);
    long spins = start ? PyLong_AsLong(args[4]) : 0;
    if (PyErr_Occurred() || !root_ok(self, root))
        return NULL;
    Py_buffer data;
    if (get_buffer(args[0], &data, self->me != root, 0) < 0)
        return NULL;
    int status = -1;
    if (fits(self, data.len)) {
        int ready = 1;
        if (start) {
            if (self->me == root)
                copy_blocks(slot(self, operation, root), data.buf, data.len);
            publish(self, 2 * operation - 1);
            ready = wait_briefly(self, 2 * operation - 1, spins);
        }
        if (!ready) {
            status = WAITING;
        } else if (!same_fingerprints(self, operation)) {
            status = MISMATCH;
        } else {
            if (self->me != root)
                copy_blocks(data.buf, slot(self, operation, root), data.len);
            status = DONE;
        }
    }
    PyBuffer_Release(&data);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* broadcast(data, operation, fingerprint, root, spins): the root's slot to everyone. */
static PyObject *core_broadcast(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return broadcast_step(self, args, nargs, 1);
}

/* broadcast_out(data, operation, fingerprint, root): after the caller's wait. */
static PyObject *core_broadcast_out(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    return broadcast_step(self, args, nargs, 0);
}

/* barrier(None, operation, fingerprint, spins): publish, meet, compare. */
static PyObject *core_barrier(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t operation;
    if (unpack_step(self, args, nargs, 4, &operation) < 0)
        return NULL;
    long spins = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    publish(self, 2 * operation - 1);
    if (!wait_briefly(self, 2 * operation - 1, spins))
        return PyLong_FromLong(WAITING);
    return PyLong_FromLong(same_fingerprints(self, operation) ? DONE : MISMATCH);
}

const PyMethodDef STEP_METHODS[] = {
    {"all_reduce", (PyCFunction)(void (*)(void))core_all_reduce, METH_FASTCALL,
     "all_reduce(data, operation, fingerprint, kind, spins) -> 0 done, 1 waiting, 2 mismatch"},
    {"all_reduce_out", (PyCFunction)(void (*)(void))core_all_reduce_out, METH_FASTCALL,
     "all_reduce_out(data, operation, fingerprint, kind) -> 0 done, 2 mismatch"},
    {"reduce", (PyCFunction)(void (*)(void))core_reduce, METH_FASTCALL,
     "reduce(data, operation, fingerprint, kind, root, spins) -> 0 done, 1 waiting, 2 mismatch"},
    {"reduce_out", (PyCFunction)(void (*)(void))core_reduce_out, METH_FASTCALL,
     "reduce_out(data, operation, fingerprint, kind, root) -> 0 done, 2 mismatch"},
    {"all_gather", (PyCFunction)(void (*)(void))core_all_gather, METH_FASTCALL,
     "all_gather(mine, outputs, operation, fingerprint, spins) -> 0, 1 or 2"},
    {"all_gather_out", (PyCFunction)(void (*)(void))core_all_gather_out, METH_FASTCALL,
     "all_gather_out(mine, outputs, operation, fingerprint) -> 0 or 2"},
    {"slot_writes", (PyCFunction)(void (*)(void))core_slot_writes, METH_FASTCALL,
     "slot_writes(mode=None): how this member writes its slot in the split all_reduce, "
     "\"cached\" or \"streaming\"; mode \"auto\" judges it from then on, \"cached\" "
     "or \"streaming\" fixes it."},
    {"judge_step", (PyCFunction)(void (*)(void))core_judge_step, METH_FASTCALL,
     "judge_step(written_ns, written, read_ns, read): a split step's judgement of its "
     "copies' times, as the step makes it -> slot_writes()"},
    {"split", (PyCFunction)(void (*)(void))core_split, METH_FASTCALL,
     "split(data, operation, fingerprint, kind, spins, stage) -> 0 done, 1 or 3 waiting, "
     "2 mismatch"},
    {"broadcast", (PyCFunction)(void (*)(void))core_broadcast, METH_FASTCALL,
     "broadcast(data, operation, fingerprint, root, spins) -> 0, 1 or 2"},
    {"broadcast_out", (PyCFunction)(void (*)(void))core_broadcast_out, METH_FASTCALL,
     "broadcast_out(data, operation, fingerprint, root) -> 0 or 2"},
    {"barrier", (PyCFunction)(void (*)(void))core_barrier, METH_FASTCALL,
     "barrier(None, operation, fingerprint, spins) -> 0, 1 or 2"},
    {NULL, NULL, 0, NULL},
};

/* Mirrors asyncoll/_transport/shm/arena.py's Arena: the mapping, publish, the
 * brief wait and the fingerprints, and the Core type (asyncoll._native._arena.Core)
 * whose step methods are steps.c's.
 *
 * The same design as the pure-Python path: one member's control line and slot
 * written by it alone, phases published after the data, fingerprints compared
 * before any slot is read. A member running this code and one running the
 * Python path meet in one arena. What C adds: waits that release the GIL.
 * Every pointer is checked against the mapping's bounds before use.
 */
#include "core.h"
#include "place.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define PAUSE() _mm_pause()
#else
#define PAUSE() ((void)0)
#endif

/* Polls of a brief wait made before the GIL is released: giving it up and taking
 * it back costs about what a peer a step behind takes to arrive, and the
 * Python path polls holding it too (a few hundred nanoseconds here). */
#ifndef HELD_SPINS
#define HELD_SPINS 16
#endif

/* -- the arena ------------------------------------------------------------------------ */

static void core_release(Core *self) {
    if (self->mapped) {
        PyBuffer_Release(&self->memory);
        self->mapped = 0;
    }
    Py_CLEAR(self->fingerprint);
}

static void core_dealloc(Core *self) {
    core_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int core_init(Core *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"memory", "size", "me", "slot_bytes", NULL};
    PyObject *memory;
    Py_ssize_t size, me, slot_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Onnn", names, &memory, &size, &me,
                                     &slot_bytes))
        return -1;
    core_release(self);
    if (size < 1 || me < 0 || me >= size || slot_bytes < 0 || size > (1 << 20)) {
        PyErr_Format(PyExc_ValueError, "an arena of %zd members cannot have member %zd with "
                     "slots of %zd bytes", size, me, slot_bytes);
        return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(memory, &view, PyBUF_WRITABLE) < 0)
        return -1;
    Py_ssize_t stride = (slot_bytes + ALIGN - 1) / ALIGN * ALIGN;
    /* size * LINE_BYTES + 2 * size * stride, without overflowing */
    if (stride > (PY_SSIZE_T_MAX / 4) / size || view.len < size * LINE_BYTES + 2 * size * stride
        || ((uintptr_t)view.buf) % 64 != 0) {
        PyErr_Format(PyExc_ValueError, "a mapping of %zd bytes cannot hold an arena of %zd "
                     "members with slots of %zd bytes", view.len, size, slot_bytes);
        PyBuffer_Release(&view);
        return -1;
    }
    self->memory = view;
    self->mapped = 1;
    self->size = size;
    self->me = me;
    self->slot_bytes = slot_bytes;
    self->stride = stride;
    self->words = (int64_t *)view.buf;
    self->slots = (char *)view.buf + size * LINE_BYTES;
    return 0;
}

int core_mapped(Core *self) {
    if (!self->mapped) {
        PyErr_SetString(PyExc_ValueError, "the arena was released: this member closed it");
        return 0;
    }
    return 1;
}


/* The fingerprint (a tuple of 6 ints) in self->packed; the last one is kept. */
int parse_fingerprint(Core *self, PyObject *fingerprint) {
    if (fingerprint == self->fingerprint)
        return 0;
    if (!PyTuple_Check(fingerprint) || PyTuple_GET_SIZE(fingerprint) != FINGERPRINT_WORDS) {
        PyErr_SetString(PyExc_TypeError, "a fingerprint is a tuple of 6 integers");
        return -1;
    }
    int64_t packed[FINGERPRINT_WORDS];
    for (int k = 0; k < FINGERPRINT_WORDS; k++) {
        packed[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(fingerprint, k));
        if (packed[k] == -1 && PyErr_Occurred())
            return -1;
    }
    memcpy(self->packed, packed, sizeof packed);
    Py_INCREF(fingerprint);
    Py_XSETREF(self->fingerprint, fingerprint);
    return 0;
}

/* Say in this member's line that it runs on processor `here` (W_PROCESSOR). */
static inline void note_processor(Core *self, int here) {
    int64_t *word = &line(self, self->me)[W_PROCESSOR];
    if (here >= 0 && __atomic_load_n(word, __ATOMIC_RELAXED) != here + 1)
        __atomic_store_n(word, (int64_t)here + 1, __ATOMIC_RELAXED);
}

/* Publish `phase` (the data is in this member's slot): where this member runs, the
 * fingerprint of its operation, then the phase, then wake any member asleep on a
 * futex. */
void publish(Core *self, int64_t phase) {
    int64_t *mine = line(self, self->me);
    note_processor(self, sched_getcpu());
    int64_t *field = mine + FINGERPRINT_AT[((phase + 1) / 2) & 1];
    for (int k = 0; k < FINGERPRINT_WORDS; k++)
        if (field[k] != self->packed[k])
            __atomic_store_n(&field[k], self->packed[k], __ATOMIC_RELAXED);
    __atomic_store_n(&mine[W_PUBLISHED], phase, __ATOMIC_RELEASE);
    /* The store above before the loads below (a sleeper sets its flag, then
     * sleeps on the word this member just wrote). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (Py_ssize_t m = 0; m < self->size; m++) {
        if (__atomic_load_n(&line(self, m)[W_SLEEPING], __ATOMIC_RELAXED)) {
            syscall(SYS_futex, &mine[W_PUBLISHED], FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
            break;
        }
    }
}

static inline int all_published(Core *self, int64_t phase) {
    for (Py_ssize_t m = 0; m < self->size; m++)
        if (load(&line(self, m)[W_PUBLISHED]) < phase)
            return 0;
    return 1;
}

int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whether this machine runs more tasks than this group has members awake (not
 * asleep on a futex, SLEEPING): a task that is no member wants a processor.
 * The count of running tasks is /proc/loadavg's fourth field's first number;
 * where it cannot be read, yes. (Arena.strangers_running in Python.) */
static int strangers_running(Core *self) {
    long running = running_tasks();
    if (running < 0)
        return 1;
    Py_ssize_t awake = 0;
    for (Py_ssize_t m = 0; m < self->size; m++)
        awake += !__atomic_load_n(&line(self, m)[W_SLEEPING], __ATOMIC_RELAXED);
    return running > awake;
}

/* A member that must wait for one on its own processor (the scheduler put both
 * there, as it often does for processes just forked from one parent) sleeps until
 * that member publishes, or for SHARED_REST_NS at most: spinning only keeps the
 * processor from it, and yielding hands it over but keeps the two together, every
 * operation then costing two switches. Woken, the sleeper is placed on an idle
 * processor if there is one. Each member says where it published or waited last
 * in its line (W_PROCESSOR: the processor + 1; 0: not known, as on the Python path).
 * Not while a stranger runs: then no processor is idle, and every operation
 * would pay a sleep and a wake for nothing (asked once per STRANGERS_LOOK_NS). */
#define SHARED_REST_NS 50000
#define STRANGERS_LOOK_NS 1000000

static int stranger_beside(Core *self) {
    int64_t now = now_ns();
    if (now - self->strangers_looked >= STRANGERS_LOOK_NS) {
        self->strangers_seen = strangers_running(self);
        self->strangers_looked = now;
    }
    return self->strangers_seen;
}

/* The first member that has not published `phase`, where it last published or
 * waited on processor `here`, as this member waits now; -1: none. */
static Py_ssize_t late_beside(Core *self, int64_t phase, int here) {
    note_processor(self, here);
    Py_ssize_t late = 0;
    while (late < self->size && load(&line(self, late)[W_PUBLISHED]) >= phase)
        late++;
    if (late == self->size
        || __atomic_load_n(&line(self, late)[W_PROCESSOR], __ATOMIC_RELAXED) != here + 1)
        return -1;
    return late;
}

/* While a stranger runs, two members the scheduler put on one processor stay
 * there: each wait yields it to the other, a switch every operation, while the
 * stranger has a processor to itself. After SHARED_WAITS_TO_MOVE such waits with
 * none for a member elsewhere between them, the waiting member moves itself off
 * its processor (place.c): the two then run side by side, one of them beside the
 * stranger. At most once in MOVE_EVERY_NS, as the scheduler's balancing may
 * bring them together again, and each move costs a migration.
 * The split all_reduce's waits do not count (Core.splitting): its work between
 * two waits outweighs a switch, and is done as soon on one processor as on two,
 * one of them shared with the stranger, where the member beside the stranger
 * keeps the other waiting out its time slices. */
#define SHARED_WAITS_TO_MOVE 32
#define MOVE_EVERY_NS 5000000

static void move_if_shared(Core *self, int here) {
    if (self->splitting)
        return;
    if (++self->shared_waits < SHARED_WAITS_TO_MOVE)
        return;
    self->shared_waits = 0;
    int64_t now = now_ns();
    if (now >= self->moved_at + MOVE_EVERY_NS) {
        self->moved_at = now;
        move_off(here);
    }
}

static void rest_if_shared(Core *self, int64_t phase, Py_ssize_t late, int here) {
    if (stranger_beside(self)) {
        move_if_shared(self, here);
        return;
    }
    int64_t *mine = line(self, self->me), *word = &line(self, late)[W_PUBLISHED];
    /* The flag before the word is read again (publish stores the word, then reads
     * the flags): a publish after that read sees the flag and wakes this member. */
    __atomic_store_n(&mine[W_SLEEPING], 1, __ATOMIC_SEQ_CST);
    int64_t seen = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    if (seen < phase) {
        struct timespec rest = {0, SHARED_REST_NS};
        /* The word's low half, where this little-endian machine keeps it. */
        syscall(SYS_futex, word, FUTEX_WAIT, (uint32_t)seen, &rest, NULL, 0);
    }
    __atomic_store_n(&mine[W_SLEEPING], 0, __ATOMIC_RELAXED);
}

/* A gap this long between two looks at the clock while spinning: this member
 * was taken off its processor, which another task wants. It stops spinning. */
#define PREEMPTED_NS 20000
/* Polls between looks at the clock. */
#define POLLS_PER_LOOK 16

/* A yield that ended at `now` went to a stranger. The second within QUIET_NS of
 * the first makes the waits quiet for QUIET_NS (an idle machine's passing
 * task makes one, a busy neighbour many), and one within NEIGHBOUR_STAYS
 * quiet times after a quiet time ended makes them quiet again: a busy
 * neighbour stays. (Waiter._met_stranger in Python.) */
static void met_stranger(Core *self, int64_t now) {
    if (now < self->suspect_until) {
        self->quiet_until = now + QUIET_NS;
        self->suspect_until = self->quiet_until + NEIGHBOUR_STAYS * QUIET_NS;
    } else {
        self->suspect_until = now + QUIET_NS;
    }
}

/* Whether every member published `phase`, after BRIEF_YIELDS yields at most,
 * each handing the processor to a member that needs it; none while a yield
 * lately went to a stranger (Core.quiet_until): one that came back late while
 * a task that is no member was running, in a group `crowded` with more
 * members than processors. Without the GIL. */
static int yield_briefly(Core *self, int64_t phase, int crowded) {
    int64_t before = now_ns();
    if (before < self->quiet_until)
        return 0;
    for (int i = 0; i < BRIEF_YIELDS; i++) {
        sched_yield();
        if (all_published(self, phase))
            return 1;
        int64_t after = now_ns();
        if (crowded && after - before > STRANGER_NS && strangers_running(self)) {
            met_stranger(self, after);
            if (after < self->quiet_until)
                return 0;
        }
        before = after;
    }
    return 0;
}

/* Whether every member published `phase`, after `spins` polls and BRIEF_YIELDS
 * yields at most: the first HELD_SPINS polls with the GIL, the rest released.
 * The spinning stops early when this member was preempted (its processor is
 * wanted: spinning keeps it from others, the member waited for among them). No
 * spins (more members than processors): no rest either. The caller yields or
 * sleeps next (Waiter.until, then Arena.rest). */
int wait_briefly(Core *self, int64_t phase, long spins) {
    self->stranger_here = 0;
    if (all_published(self, phase))
        return 1;
    int ready = 0, rests = spins > 0;
    long held = spins < HELD_SPINS ? spins : HELD_SPINS;
    for (long i = 0; i < held && !ready; i++) {
        PAUSE();
        ready = all_published(self, phase);
    }
    spins -= held;
    if (ready)
        return 1;
    Py_BEGIN_ALLOW_THREADS
    /* A member waited for on this processor cannot publish while this one spins. */
    int here = rests ? sched_getcpu() : -1;
    Py_ssize_t late = here >= 0 ? late_beside(self, phase, here) : -1;
    if (late >= 0)
        spins = 0;
    int64_t looked = spins > 0 ? now_ns() : 0;
    for (long i = 0; i < spins && !ready; i++) {
        PAUSE();
        ready = all_published(self, phase);
        if (i % POLLS_PER_LOOK == POLLS_PER_LOOK - 1) {
            int64_t now = now_ns();
            if (now - looked > PREEMPTED_NS)
                break;
            looked = now;
        }
    }
    if (!ready && here >= 0) {
        if (late < 0 && (here = sched_getcpu()) >= 0)  /* it may have moved */
            late = late_beside(self, phase, here);
        if (late >= 0) {
            rest_if_shared(self, phase, late, here);
            ready = all_published(self, phase);
        } else {
            self->shared_waits = 0;
            /* Waited for on another processor while a stranger runs: a yield would
             * hand this processor to a task that is no member for the rest of a time
             * slice, and the scheduler (EEVDF) counts each yield against the yielder,
             * so that a member yielding in every wait gets a few percent of its
             * processor. It skips its yields; Waiter.until asks yields_to_stranger
             * and sleeps on the futex, which the member's publish wakes. */
            self->stranger_here = stranger_beside(self);
        }
    }
    if (!ready && !self->stranger_here)
        ready = yield_briefly(self, phase, !rests);
    Py_END_ALLOW_THREADS
    return ready;
}

/* Whether every other member's fingerprint for `operation` is this member's. */
int same_fingerprints(Core *self, int64_t operation) {
    int at = FINGERPRINT_AT[operation & 1];
    for (Py_ssize_t m = 0; m < self->size; m++) {
        if (m == self->me)
            continue;
        const int64_t *theirs = line(self, m) + at;
        for (int k = 0; k < FINGERPRINT_WORDS; k++)
            if (theirs[k] != self->packed[k])
                return 0;
    }
    return 1;
}

/* The slot bytes of an operation: within a slot, checked. */
int fits(Core *self, Py_ssize_t bytes) {
    if (bytes > self->slot_bytes) {
        PyErr_Format(PyExc_ValueError, "%zd bytes do not fit the arena's slots of %zd bytes",
                     bytes, self->slot_bytes);
        return 0;
    }
    return 1;
}

int operation_ok(int64_t operation) {
    if (operation < 1 || operation > ((int64_t)1 << 61)) {
        PyErr_Format(PyExc_ValueError, "operation number %lld is out of range",
                     (long long)operation);
        return 0;
    }
    return 1;
}

/* same(operation, fingerprint): whether every member's fingerprint is this one's. */
static PyObject *core_same(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "same(operation, fingerprint)");
        return NULL;
    }
    int64_t operation = PyLong_AsLongLong(args[0]);
    if ((operation == -1 && PyErr_Occurred()) || !core_mapped(self)
        || !operation_ok(operation) || parse_fingerprint(self, args[1]) < 0)
        return NULL;
    return PyBool_FromLong(same_fingerprints(self, operation));
}

/* publish(phase, fingerprint) */
static PyObject *core_publish(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "publish(phase, fingerprint)");
        return NULL;
    }
    int64_t phase = PyLong_AsLongLong(args[0]);
    if ((phase == -1 && PyErr_Occurred()) || !core_mapped(self)
        || !operation_ok((phase + 1) / 2) || parse_fingerprint(self, args[1]) < 0)
        return NULL;
    publish(self, phase);
    Py_RETURN_NONE;
}

/* wait(phase, spins): whether every member published `phase`, after a brief wait. */
static PyObject *core_wait(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wait(phase, spins)");
        return NULL;
    }
    int64_t phase = PyLong_AsLongLong(args[0]);
    long spins = PyLong_AsLong(args[1]);
    if (PyErr_Occurred() || !core_mapped(self))
        return NULL;
    return PyBool_FromLong(wait_briefly(self, phase, spins));
}

static PyObject *core_strangers_running(Core *self, PyObject *Py_UNUSED(unused)) {
    if (!core_mapped(self))
        return NULL;
    return PyBool_FromLong(strangers_running(self));
}

static PyObject *core_yields_to_stranger(Core *self, PyObject *Py_UNUSED(unused)) {
    return PyBool_FromLong(self->stranger_here);
}

static PyObject *core_release_method(Core *self, PyObject *Py_UNUSED(unused)) {
    core_release(self);
    Py_RETURN_NONE;
}

/* The Core's own methods; core_ready puts the steps' after them. */
static const PyMethodDef core_methods[] = {
    {"same", (PyCFunction)(void (*)(void))core_same, METH_FASTCALL,
     "same(operation, fingerprint) -> whether every member published this fingerprint"},
    {"publish", (PyCFunction)(void (*)(void))core_publish, METH_FASTCALL,
     "publish(phase, fingerprint): say this member's slot holds phase's data"},
    {"wait", (PyCFunction)(void (*)(void))core_wait, METH_FASTCALL,
     "wait(phase, spins) -> whether every member published phase, after a brief wait"},
    {"strangers_running", (PyCFunction)core_strangers_running, METH_NOARGS,
     "strangers_running() -> whether more tasks run than members are awake"},
    {"yields_to_stranger", (PyCFunction)core_yields_to_stranger, METH_NOARGS,
     "yields_to_stranger() -> whether the last brief wait waited for a member on another "
     "processor while a stranger ran: the wait then sleeps rather than yield"},
    {"release", (PyCFunction)core_release_method, METH_NOARGS,
     "release(): let go of the mapping (the arena closes)"},
    {NULL, NULL, 0, NULL},
};

/* Room for the Core's methods and the steps', with the sentinel. */
#define METHODS 32
static PyMethodDef all_methods[METHODS];

PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncoll._native._arena.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(memory, size, me, slot_bytes): one member's view of an arena, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = all_methods,
};

int core_ready(const PyMethodDef *steps) {
    if (CoreType.tp_flags & Py_TPFLAGS_READY)
        return 0;
    size_t count = 0;
    for (const PyMethodDef *table[] = {steps, core_methods}, **t = table; t < table + 2; t++)
        for (const PyMethodDef *m = *t; m->ml_name != NULL; m++) {
            if (count == METHODS - 1) {
                PyErr_SetString(PyExc_SystemError, "the Core has more methods than room");
                return -1;
            }
            all_methods[count++] = *m;
        }
    return PyType_Ready(&CoreType);
}

/* What the arena's C files share (asyncoll._native._arena): the layout's
 * constants, a member's view of an arena (Core), reduction kinds, and the
 * steps' parts that both the Core's methods (arena.c) and the repeated call's
 * entry (express.c) run.
 */
#ifndef ASYNCOLL_ARENA_CORE_H
#define ASYNCOLL_ARENA_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* The layout (asyncoll/_transport/shm/arena.py): control lines of 256 bytes,
 * int64 words; slots 128-byte aligned, two sets. */
#define LINE_WORDS 32
#define LINE_BYTES 256
#define W_PUBLISHED 0
#define W_SLEEPING 5
#define W_PROCESSOR 6
#define FINGERPRINT_WORDS 6
static const int FINGERPRINT_AT[2] = {8, 16};
#define ALIGN 128
/* Yields after the spins, GIL released, before the caller's checks run again
 * (Waiter's CHECK_EVERY). */
#define YIELDS 16

/* What a step returns: done, published and waiting (the caller waits, then
 * calls the step's *_out), or a member published another operation (the
 * caller's Python check says how); the split all_reduce also waits for the
 * members' results (WAITING_RESULTS: phase 2k). */
enum { DONE = 0, WAITING = 1, MISMATCH = 2, WAITING_RESULTS = 3 };

typedef void (*binary_fn)(char *out, const char *a, const char *b, Py_ssize_t n);
typedef void (*divide_fn)(char *out, Py_ssize_t n, Py_ssize_t by);

/* A reduction's kind (type * OPS + op, as asyncoll._native.kind makes it),
 * checked: its binary function, its divide (AVG only) and its item size. */
typedef struct {
    binary_fn binary;
    divide_fn divide;
    Py_ssize_t itemsize;
} Kind;

/* One member's view of an arena. */
typedef struct {
    PyObject_HEAD
    Py_buffer memory;
    int mapped;
    Py_ssize_t size, me, slot_bytes, stride;
    int64_t *words;
    char *slots;
    /* The fingerprint object last parsed (a strong reference) and its words. */
    PyObject *fingerprint;
    int64_t packed[FINGERPRINT_WORDS];
} Core;

static inline int64_t *line(Core *self, Py_ssize_t member) {
    return self->words + member * LINE_WORDS;
}

static inline char *slot(Core *self, int64_t operation, Py_ssize_t member) {
    return self->slots + ((operation & 1) * self->size + member) * self->stride;
}

static inline int64_t load(const int64_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

extern PyTypeObject CoreType;
extern PyTypeObject ExpressType;
extern PyTypeObject PathLockType;
extern PyTypeObject FrontType;

/* Express's all_reduce(data, op) and barrier() (express.c), for the Front (front.c). */
PyObject *express_all_reduce(PyObject *express, PyObject *const *args, Py_ssize_t nargs);
PyObject *express_barrier(PyObject *express, PyObject *unused);

/* A PathLock (lock.c) taken without waiting (1) or not (0), and given back. */
int path_lock_try(PyObject *lock);
void path_lock_release(PyObject *lock);

/* An attribute of an object the compiled entry reads and writes on every call
 * (field.c): its name, and where the owner's type keeps it in a slot (0: it has
 * none, and the attribute protocol is used). The type is held. */
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

/* Ready the Express and Front types and the names they read (module init). */
int express_ready(void);
int front_ready(void);

int kind_of(long code, Kind *kind);
int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize);
int core_mapped(Core *self);
int parse_fingerprint(Core *self, PyObject *fingerprint);
void publish(Core *self, int64_t phase);
int wait_briefly(Core *self, int64_t phase, long spins);
int same_fingerprints(Core *self, int64_t operation);
int fits(Core *self, Py_ssize_t bytes);
int operation_ok(int64_t operation);
int all_reduce_out(Core *self, const Kind *kind, char *data, Py_ssize_t bytes,
                   int64_t operation, Py_ssize_t root);

#endif

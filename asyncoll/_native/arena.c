/* asyncoll._native._arena: the arena's small-operation step and reductions, in C.
 *
 * The same design as the pure-Python path (asyncoll/_transport/shm/arena.py
 * for the layout and the waits, asyncoll/_algorithms/arena.py for the
 * steps): one member's control line and slot written by it alone, phases
 * published after the data, fingerprints compared before any slot is read.
 * A member running this code and one running the Python path meet in one
 * arena. What C adds: no interpreter between the steps, a fused reduction
 * that reads each member's part once, and waits that release the GIL.
 *
 * Every reduction gives the bits numpy's ufunc gives for the same operands
 * in the same order (tests/unit/test_native_kernels.py compares them);
 * -ffp-contract=off keeps the compiler from fusing a multiply and an add.
 * Every pointer is checked against the mapping's bounds before use.
 */
#include "core.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
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

/* -- the reductions ------------------------------------------------------------------ */

enum { T_BOOL, T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32,
       T_F64, T_C64, T_C128, TYPES };
/* asyncoll.types.ReduceOp's values. */
enum { O_SUM, O_PRODUCT, O_MIN, O_MAX, O_BAND, O_BOR, O_BXOR, O_AVG, OPS };

static const Py_ssize_t ITEMSIZE[TYPES] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 8, 16};


/* out[i] = a[i] (op) b[i]; out may be a (in place). */
#define BINARY(name, T, EXPR)                                                          \
    static void name(char *out_, const char *a_, const char *b_, Py_ssize_t n) {       \
        T *out = (T *)out_;                                                            \
        const T *a = (const T *)a_, *b = (const T *)b_;                                \
        for (Py_ssize_t i = 0; i < n; i++) {                                           \
            T x = a[i], y = b[i];                                                      \
            out[i] = (EXPR);                                                           \
        }                                                                              \
    }

/* Integers wrap, as numpy's do: computed unsigned (U: at least int's width, so
 * that no promotion to signed int overflows). */
#define INTEGER(tag, T, U)                                                             \
    BINARY(tag##_sum, T, (T)((U)x + (U)y))                                             \
    BINARY(tag##_prod, T, (T)((U)x * (U)y))                                            \
    BINARY(tag##_min, T, x < y ? x : y)                                                \
    BINARY(tag##_max, T, x > y ? x : y)                                                \
    BINARY(tag##_band, T, (T)(x & y))                                                  \
    BINARY(tag##_bor, T, (T)(x | y))                                                   \
    BINARY(tag##_bxor, T, (T)(x ^ y))

INTEGER(i8, int8_t, unsigned int)
INTEGER(u8, uint8_t, unsigned int)
INTEGER(i16, int16_t, unsigned int)
INTEGER(u16, uint16_t, unsigned int)
INTEGER(i32, int32_t, uint32_t)
INTEGER(u32, uint32_t, uint32_t)
INTEGER(i64, int64_t, uint64_t)
INTEGER(u64, uint64_t, uint64_t)

/* bool: numpy's add is logical or, multiply logical and (0 or 1 out). */
BINARY(b_or, uint8_t, (uint8_t)((x != 0) | (y != 0)))
BINARY(b_and, uint8_t, (uint8_t)((x != 0) & (y != 0)))
BINARY(b_xor, uint8_t, (uint8_t)((x != 0) ^ (y != 0)))

/* Floats: numpy's minimum and maximum give a NaN operand (the first of two),
 * and the second operand where the two compare equal (signed zeros). */
#define FLOATING(tag, T)                                                               \
    BINARY(tag##_sum, T, x + y)                                                        \
    BINARY(tag##_prod, T, x * y)                                                       \
    BINARY(tag##_min, T, (x < y || x != x) ? x : y)                                    \
    BINARY(tag##_max, T, (x > y || x != x) ? x : y)                                    \
    static void tag##_divide(char *out_, Py_ssize_t n, Py_ssize_t by) {                \
        T *out = (T *)out_;                                                            \
        T d = (T)by;                                                                   \
        for (Py_ssize_t i = 0; i < n; i++)                                             \
            out[i] = out[i] / d;                                                       \
    }

FLOATING(f32, float)
FLOATING(f64, double)

/* float16, as numpy computes it: widened to float, the op, rounded back
 * (npy_half_to_float, npy_float_to_half, written out from their definitions). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = h & 0x7c00u, significand = h & 0x03ffu, bits;
    if (exponent == 0x7c00u) {
        bits = sign | 0x7f800000u | (significand << 13);
    } else if (exponent == 0) {
        if (significand == 0) {
            bits = sign;
        } else {
            /* subnormal: normalize */
            int shift = 0;
            significand <<= 1;
            while ((significand & 0x0400u) == 0) {
                significand <<= 1;
                shift++;
            }
            bits = sign | ((uint32_t)(127 - 15 - shift) << 23) | ((significand & 0x03ffu) << 13);
        }
    } else {
        bits = sign | (((exponent >> 10) + 127 - 15) << 23) | (significand << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float value) {
    uint32_t f;
    memcpy(&f, &value, 4);
    uint32_t f_exp = f & 0x7f800000u, f_sig;
    uint16_t h_sgn = (uint16_t)((f & 0x80000000u) >> 16), h_exp, h_sig;
    if (f_exp >= 0x47800000u) {
        /* overflow, infinity or NaN */
        if (f_exp == 0x7f800000u) {
            f_sig = f & 0x007fffffu;
            if (f_sig != 0) {
                /* a NaN: keep its top bits, and stay a NaN */
                uint16_t ret = (uint16_t)(0x7c00u + (f_sig >> 13));
                if (ret == 0x7c00u)
                    ret++;
                return (uint16_t)(h_sgn + ret);
            }
            return (uint16_t)(h_sgn + 0x7c00u);
        }
        return (uint16_t)(h_sgn + 0x7c00u);
    }
    if (f_exp <= 0x38000000u) {
        /* a subnormal half, or zero */
        if (f_exp < 0x33000000u)
            return h_sgn;
        f_exp >>= 23;
        f_sig = 0x00800000u + (f & 0x007fffffu);
        f_sig >>= (113 - f_exp);
        /* round half to even; the shift lost up to 11 bits, which the || sees */
        if ((f_sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu) != 0)
            f_sig += 0x00001000u;
        h_sig = (uint16_t)(f_sig >> 13);
        return (uint16_t)(h_sgn + h_sig);
    }
    h_exp = (uint16_t)((f_exp - 0x38000000u) >> 13);
    f_sig = f & 0x007fffffu;
    if ((f_sig & 0x00003fffu) != 0x00001000u)
        f_sig += 0x00001000u;
    h_sig = (uint16_t)(f_sig >> 13);
    /* a carry from the significand moves into the exponent, up to infinity */
    return (uint16_t)(h_sgn + h_exp + h_sig);
}

static int half_isnan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

BINARY(f16_sum, uint16_t, float_to_half(half_to_float(x) + half_to_float(y)))
BINARY(f16_prod, uint16_t, float_to_half(half_to_float(x) * half_to_float(y)))
/* numpy's half minimum keeps the first operand where the two compare equal. */
BINARY(f16_min, uint16_t,
       (half_to_float(x) <= half_to_float(y) || half_isnan(x)) ? x : y)
BINARY(f16_max, uint16_t,
       (half_to_float(x) >= half_to_float(y) || half_isnan(x)) ? x : y)

static void f16_divide(char *out_, Py_ssize_t n, Py_ssize_t by) {
    uint16_t *out = (uint16_t *)out_;
    float d = half_to_float(float_to_half((float)by));
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = float_to_half(half_to_float(out[i]) / d);
}

/* Complex numbers: their sum only, part by part. numpy's products and
 * divisions round differently in its vector loops than in its scalar ones, so
 * those stay numpy's (the kind is not one of this module's). */
#define COMPLEX(tag, T)                                                                \
    static void tag##_sum(char *out_, const char *a_, const char *b_, Py_ssize_t n) {  \
        T *out = (T *)out_;                                                            \
        const T *a = (const T *)a_, *b = (const T *)b_;                                \
        for (Py_ssize_t i = 0; i < 2 * n; i++)                                         \
            out[i] = a[i] + b[i];                                                      \
    }

COMPLEX(c64, float)
COMPLEX(c128, double)

#define INTEGER_ROW(tag) {tag##_sum, tag##_prod, tag##_min, tag##_max, tag##_band, tag##_bor, \
                          tag##_bxor, NULL}
/* BINARIES[type][op]: NULL where the op is not defined on the type (the
 * Python side refused it before) or AVG (SUM, then DIVIDES). */
static const binary_fn BINARIES[TYPES][OPS] = {
    {b_or, b_and, b_and, b_or, b_and, b_or, b_xor, NULL},
    INTEGER_ROW(i8), INTEGER_ROW(u8), INTEGER_ROW(i16), INTEGER_ROW(u16),
    INTEGER_ROW(i32), INTEGER_ROW(u32), INTEGER_ROW(i64), INTEGER_ROW(u64),
    {f16_sum, f16_prod, f16_min, f16_max, NULL, NULL, NULL, f16_sum},
    {f32_sum, f32_prod, f32_min, f32_max, NULL, NULL, NULL, f32_sum},
    {f64_sum, f64_prod, f64_min, f64_max, NULL, NULL, NULL, f64_sum},
    {c64_sum, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {c128_sum, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
};
static const divide_fn DIVIDES[TYPES] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                         f16_divide, f32_divide, f64_divide, NULL, NULL};


int kind_of(long code, Kind *kind) {
    if (code < 0 || code >= TYPES * OPS || BINARIES[code / OPS][code % OPS] == NULL) {
        PyErr_Format(PyExc_ValueError, "reduction kind %ld is not one this module has", code);
        return -1;
    }
    kind->binary = BINARIES[code / OPS][code % OPS];
    kind->divide = code % OPS == O_AVG ? DIVIDES[code / OPS] : NULL;
    kind->itemsize = ITEMSIZE[code / OPS];
    return 0;
}

/* Elements reduced together, part after part: a block of every part stays in
 * the processor's first-level cache while the next part is added to it. */
#define BLOCK_BYTES 8192

/* Copies into and out of the slots go in steps of at most this many bytes. Where two
 * members' processors share no cache, writing a slot that the other last read is several
 * times slower through one large memcpy (on AMD processors, glibc's leaves `rep movsb`
 * for a loop of vector stores past the L2's size) than in smaller steps; so is the
 * reduction's own loop (docs/design/native.md, "Processors that share no cache"). */
#define COPY_BLOCK_BYTES (256 << 10)

/* memcpy of `bytes`, in steps of COPY_BLOCK_BYTES. */
static void copy(char *to, const char *from, Py_ssize_t bytes) {
    for (Py_ssize_t lo = 0; lo < bytes; lo += COPY_BLOCK_BYTES)
        memcpy(to + lo, from + lo,
               (size_t)(bytes - lo < COPY_BLOCK_BYTES ? bytes - lo : COPY_BLOCK_BYTES));
}

/* out = parts[0] (op) parts[1] (op) ... in that order, each element; then AVG's
 * divide by `members`. Every part and out hold `bytes`. With `also`, a second output:
 * `out` is then a slot, so each block is reduced on the stack and copied to both (a
 * copy writes a slot for less than the reduction's loop: COPY_BLOCK_BYTES). */
static void reduce_parts(const Kind *kind, char *out, const char *const *parts, Py_ssize_t count,
                         Py_ssize_t bytes, Py_ssize_t members, char *also) {
    _Alignas(64) char staged[BLOCK_BYTES];
    Py_ssize_t block = BLOCK_BYTES / kind->itemsize * kind->itemsize;
    for (Py_ssize_t lo = 0; lo < bytes; lo += block) {
        Py_ssize_t len = bytes - lo < block ? bytes - lo : block;
        Py_ssize_t n = len / kind->itemsize;
        char *to = also != NULL ? staged : out + lo;
        if (count == 1)
            memmove(to, parts[0] + lo, (size_t)len);
        else
            kind->binary(to, parts[0] + lo, parts[1] + lo, n);
        for (Py_ssize_t p = 2; p < count; p++)
            kind->binary(to, to, parts[p] + lo, n);
        if (kind->divide != NULL)
            kind->divide(to, n, members);
        if (also != NULL) {
            memcpy(out + lo, staged, (size_t)len);
            memcpy(also + lo, staged, (size_t)len);
        }
    }
}

/* -- buffers ---------------------------------------------------------------------------- */

/* A C-contiguous buffer of `obj` (writable if asked), aligned for `itemsize`. */
int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t align = itemsize > 8 ? 8 : itemsize;
    if (itemsize > 0 && view->len > 0
        && (view->len % itemsize != 0 || ((uintptr_t)view->buf) % (uintptr_t)align != 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError,
                     "a buffer of %zd bytes at %p is not a whole number of aligned items of "
                     "%zd bytes", view->len, view->buf, itemsize);
        return -1;
    }
    return 0;
}

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

/* Publish `phase` (the data is in this member's slot): the fingerprint of its
 * operation, then the phase, then wake any member asleep on a futex. */
void publish(Core *self, int64_t phase) {
    int64_t *mine = line(self, self->me);
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

/* A member that must wait for one on its own processor (the scheduler put both
 * there, as it often does for processes just forked from one parent) sleeps until
 * that member publishes, or for SHARED_REST_NS at most: spinning only keeps the
 * processor from it, and yielding hands it over but keeps the two together, every
 * operation then costing two switches. Woken, the sleeper is placed on an idle
 * processor if there is one. Each member says where it waited last in its line
 * (W_PROCESSOR: the processor + 1; 0: not known, as on the Python path). */
#define SHARED_REST_NS 50000

static void rest_if_shared(Core *self, int64_t phase) {
    int here = sched_getcpu();
    if (here < 0)
        return;
    int64_t *mine = line(self, self->me);
    __atomic_store_n(&mine[W_PROCESSOR], (int64_t)here + 1, __ATOMIC_RELAXED);
    Py_ssize_t late = 0;
    while (late < self->size && load(&line(self, late)[W_PUBLISHED]) >= phase)
        late++;
    if (late == self->size
        || __atomic_load_n(&line(self, late)[W_PROCESSOR], __ATOMIC_RELAXED) != here + 1)
        return;
    int64_t *word = &line(self, late)[W_PUBLISHED];
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

/* Whether every member published `phase`, after `spins` polls and YIELDS
 * yields at most: the first HELD_SPINS polls with the GIL, the rest released.
 * No spins (more members than processors, where sharing one is the rule and a
 * yield hands it over for less than a sleep costs): no rest either. */
int wait_briefly(Core *self, int64_t phase, long spins) {
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
    for (long i = 0; i < spins && !ready; i++) {
        PAUSE();
        ready = all_published(self, phase);
    }
    if (!ready && rests) {
        rest_if_shared(self, phase);
        ready = all_published(self, phase);
    }
    for (int i = 0; i < YIELDS && !ready; i++) {
        sched_yield();
        ready = all_published(self, phase);
    }
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

/* -- the steps -------------------------------------------------------------------------- */

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
    reduce_parts(kind, data, use, self->size, bytes, self->size, NULL);
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
            copy(slot(self, operation, self->me), data.buf, data.len);
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
            copy(out.buf, slot(self, operation, j), out.len);
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
            copy(slot(self, operation, self->me), mine.buf, mine.len);
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
    if (stage == 0) {
        for (Py_ssize_t j = 0; j < n; j++) {
            chunk(count, n, j, &lo, &hi);
            if (j != me)
                copy(mine + lo * size, buf + lo * size, (hi - lo) * size);
        }
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
        if (me < 2) {
            reduce_parts(&kind, buf + lo * size, use, n, bytes, n, NULL);
            copy(mine + lo * size, buf + lo * size, bytes);
        } else {
            reduce_parts(&kind, mine + lo * size, use, n, bytes, n, buf + lo * size);
        }
        publish(self, 2 * operation);
        if (!wait_briefly(self, 2 * operation, spins)) {
            status = WAITING_RESULTS;
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        chunk(count, n, j, &lo, &hi);
        if (j != me)
            copy(buf + lo * size, slot(self, operation, j) + lo * size, (hi - lo) * size);
    }
    status = DONE;
done:
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
                copy(slot(self, operation, root), data.buf, data.len);
            publish(self, 2 * operation - 1);
            ready = wait_briefly(self, 2 * operation - 1, spins);
        }
        if (!ready) {
            status = WAITING;
        } else if (!same_fingerprints(self, operation)) {
            status = MISMATCH;
        } else {
            if (self->me != root)
                copy(data.buf, slot(self, operation, root), data.len);
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

static PyObject *core_release_method(Core *self, PyObject *Py_UNUSED(unused)) {
    core_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
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
    {"split", (PyCFunction)(void (*)(void))core_split, METH_FASTCALL,
     "split(data, operation, fingerprint, kind, spins, stage) -> 0 done, 1 or 3 waiting, "
     "2 mismatch"},
    {"broadcast", (PyCFunction)(void (*)(void))core_broadcast, METH_FASTCALL,
     "broadcast(data, operation, fingerprint, root, spins) -> 0, 1 or 2"},
    {"broadcast_out", (PyCFunction)(void (*)(void))core_broadcast_out, METH_FASTCALL,
     "broadcast_out(data, operation, fingerprint, root) -> 0 or 2"},
    {"barrier", (PyCFunction)(void (*)(void))core_barrier, METH_FASTCALL,
     "barrier(None, operation, fingerprint, spins) -> 0, 1 or 2"},
    {"same", (PyCFunction)(void (*)(void))core_same, METH_FASTCALL,
     "same(operation, fingerprint) -> whether every member published this fingerprint"},
    {"publish", (PyCFunction)(void (*)(void))core_publish, METH_FASTCALL,
     "publish(phase, fingerprint): say this member's slot holds phase's data"},
    {"wait", (PyCFunction)(void (*)(void))core_wait, METH_FASTCALL,
     "wait(phase, spins) -> whether every member published phase, after a brief wait"},
    {"release", (PyCFunction)core_release_method, METH_NOARGS,
     "release(): let go of the mapping (the arena closes)"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asyncoll._native._arena.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(memory, size, me, slot_bytes): one member's view of an arena, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
};

/* -- module functions ------------------------------------------------------------------- */

/* reduce(kind, out, parts, members): out = parts[0] (op) parts[1] ... then AVG's divide. */
static PyObject *module_reduce(PyObject *Py_UNUSED(module), PyObject *const *args,
                               Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "reduce(kind, out, parts, members)");
        return NULL;
    }
    Kind kind;
    long code = PyLong_AsLong(args[0]);
    Py_ssize_t members = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred() || kind_of(code, &kind) < 0)
        return NULL;
    PyObject *parts = PySequence_Fast(args[2], "parts must be a sequence of buffers");
    if (parts == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(parts);
    if (count < 1 || members < 1) {
        Py_DECREF(parts);
        PyErr_Format(PyExc_ValueError, "a reduction needs a part or more and a member or more "
                     "(%zd parts, %zd members)", count, members);
        return NULL;
    }
    Py_buffer out;
    if (get_buffer(args[1], &out, 1, kind.itemsize) < 0) {
        Py_DECREF(parts);
        return NULL;
    }
    Py_buffer *views = PyMem_Calloc((size_t)count, sizeof(Py_buffer));
    const char **pointers = PyMem_Calloc((size_t)count, sizeof(char *));
    Py_ssize_t got = 0;
    int ok = views != NULL && pointers != NULL;
    if (!ok)
        PyErr_NoMemory();
    /* views[0 .. got) are held, and released below whatever happens */
    while (ok && got < count) {
        Py_buffer *view = &views[got];
        if (get_buffer(PySequence_Fast_GET_ITEM(parts, got), view, 0, kind.itemsize) < 0) {
            ok = 0;
            break;
        }
        pointers[got++] = view->buf;
        if (view->len != out.len) {
            PyErr_Format(PyExc_ValueError, "part %zd has %zd bytes, the output %zd", got - 1,
                         view->len, out.len);
            ok = 0;
        }
    }
    if (ok)
        reduce_parts(&kind, out.buf, pointers, count, out.len, members, NULL);
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(pointers);
    PyBuffer_Release(&out);
    Py_DECREF(parts);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* kinds(): every reduction kind this module has, as a tuple of codes. */
static PyObject *module_kinds(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    PyObject *codes = PyList_New(0);
    if (codes == NULL)
        return NULL;
    for (long code = 0; code < TYPES * OPS; code++) {
        if (BINARIES[code / OPS][code % OPS] == NULL)
            continue;
        PyObject *number = PyLong_FromLong(code);
        if (number == NULL || PyList_Append(codes, number) < 0) {
            Py_XDECREF(number);
            Py_DECREF(codes);
            return NULL;
        }
        Py_DECREF(number);
    }
    PyObject *result = PyList_AsTuple(codes);
    Py_DECREF(codes);
    return result;
}

static PyMethodDef module_methods[] = {
    {"kinds", (PyCFunction)module_kinds, METH_NOARGS,
     "kinds() -> the reduction kinds (type * OPS + op) this module has"},
    {"reduce", (PyCFunction)(void (*)(void))module_reduce, METH_FASTCALL,
     "reduce(kind, out, parts, members): out = parts[0] (op) parts[1] (op) ..., in order"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef arena_module = {
    PyModuleDef_HEAD_INIT, "asyncoll._native._arena",
    "The arena's small-operation steps and reductions, in C (asyncoll._native).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__arena(void) {
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&PathLockType) < 0 || express_ready() < 0
        || front_ready() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&arena_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&CoreType);
    Py_INCREF(&ExpressType);
    Py_INCREF(&PathLockType);
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(module, "Core", (PyObject *)&CoreType) < 0
        || PyModule_AddObject(module, "Express", (PyObject *)&ExpressType) < 0
        || PyModule_AddObject(module, "PathLock", (PyObject *)&PathLockType) < 0
        || PyModule_AddObject(module, "Front", (PyObject *)&FrontType) < 0
        || PyModule_AddIntConstant(module, "OPS", OPS) < 0
        || PyModule_AddIntConstant(module, "DONE", DONE) < 0
        || PyModule_AddIntConstant(module, "WAITING", WAITING) < 0
        || PyModule_AddIntConstant(module, "MISMATCH", MISMATCH) < 0
        || PyModule_AddIntConstant(module, "WAITING_RESULTS", WAITING_RESULTS) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(&ExpressType);
        Py_DECREF(&PathLockType);
        Py_DECREF(&FrontType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

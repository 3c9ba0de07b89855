/* Mirrors asyncoll/_algorithms/ops.py: the reductions, in C, and the module's reduce()
 * and kinds() (module.c registers them).
 *
 * Every reduction gives the bits numpy's ufunc gives for the same operands
 * in the same order (tests/unit/test_native_kernels.py compares them);
 * -ffp-contract=off keeps the compiler from fusing a multiply and an add.
 */
#include "reduce.h"

#include "copies.h"

#include <stdint.h>
#include <string.h>

#define ITEMSIZE_OF_TYPE(code, name, size) size,
static const Py_ssize_t ITEMSIZE[TYPES] = {REDUCTION_TYPES(ITEMSIZE_OF_TYPE)};

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

int kind_known(long code) {
    return code >= 0 && code < TYPES * OPS && BINARIES[code / OPS][code % OPS] != NULL;
}

int kind_of(long code, Kind *kind) {
    if (!kind_known(code)) {
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

/* out = parts[0] (op) parts[1] (op) ... in that order, each element; then AVG's
 * divide by `members`. Every part and out hold `bytes`. With `also`, a second output:
 * `out` is then a slot, so each block is reduced on the stack and copied to both (a
 * copy writes a slot for less than the reduction's loop: copies.c), to the slot
 * with streaming stores where `streaming`. */
void reduce_parts(const Kind *kind, char *out, const char *const *parts, Py_ssize_t count,
                  Py_ssize_t bytes, Py_ssize_t members, char *also, int streaming) {
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
            write_slot(out + lo, staged, len, streaming);
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

/* -- the module's functions (module.c registers them) ------------------------------------ */

/* reduce(kind, out, parts, members): out = parts[0] (op) parts[1] ... then AVG's divide. */
PyObject *reduce_function(PyObject *Py_UNUSED(module), PyObject *const *args,
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
        reduce_parts(&kind, out.buf, pointers, count, out.len, members, NULL, 0);
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
PyObject *kinds_function(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused)) {
    PyObject *codes = PyList_New(0);
    if (codes == NULL)
        return NULL;
    for (long code = 0; code < TYPES * OPS; code++) {
        if (!kind_known(code))
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

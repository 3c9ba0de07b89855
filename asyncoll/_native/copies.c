/* Mirrors asyncoll/_algorithms/arena.py's copy: the copies into and out of the
 * slots, and how a member writes its slot in the split all_reduce.
 *
 * Copies go in blocks of COPY_BLOCK_BYTES: where two members' processors share no
 * cache, writing a slot that the other last read is several times slower through
 * one large memcpy (on AMD processors, glibc's leaves `rep movsb` for a loop of
 * vector stores past the L2's size) than in smaller steps; so is the reduction's
 * own loop (docs/design/native.md, "Processors that share no cache").
 *
 * Even in blocks, on such processors a member's stores into its slot, whose lines
 * the other members last read, can take several times as long as its copies out
 * of theirs: each store first takes its line back from another processor's cache.
 * Streaming stores take no line: they write around the caches, and the other
 * members read the slot from memory; where the processors share a cache, they are
 * the slower (those reads miss it). So a member judges after each
 * split step: its cached writes slower per byte than SLOW_RATIO times its reads,
 * SLOW_STEPS steps in a row, and it streams; while it streams, one step in
 * PROBE_EVERY writes cached again to see whether they still are. Each member
 * judges for itself: how a slot is written changes its speed, never its bytes.
 */
#include "copies.h"

#include <emmintrin.h>
#include <stdint.h>
#include <string.h>

/* Only copies of at least this many bytes each way are judged (smaller ones are too
 * short to time). */
#define JUDGE_FROM_BYTES (64 << 10)
#define SLOW_RATIO 3
#define SLOW_STEPS 3
#define PROBE_EVERY 64

void copy_blocks(char *to, const char *from, Py_ssize_t bytes) {
    for (Py_ssize_t lo = 0; lo < bytes; lo += COPY_BLOCK_BYTES)
        memcpy(to + lo, from + lo,
               (size_t)(bytes - lo < COPY_BLOCK_BYTES ? bytes - lo : COPY_BLOCK_BYTES));
}

/* Streaming stores of 16 bytes (SSE2, which every x86-64 processor has) to aligned
 * addresses; the edges with memcpy. */
static void stream_copy(char *to, const char *from, Py_ssize_t bytes) {
    Py_ssize_t head = (Py_ssize_t)((16 - ((uintptr_t)to & 15)) & 15);
    if (head > bytes)
        head = bytes;
    memcpy(to, from, (size_t)head);
    Py_ssize_t i = head;
    for (; i + 64 <= bytes; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(from + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(from + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(from + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(from + i + 48));
        _mm_stream_si128((__m128i *)(to + i), a);
        _mm_stream_si128((__m128i *)(to + i + 16), b);
        _mm_stream_si128((__m128i *)(to + i + 32), c);
        _mm_stream_si128((__m128i *)(to + i + 48), d);
    }
    memcpy(to + i, from + i, (size_t)(bytes - i));
}

void write_slot(char *to, const char *from, Py_ssize_t bytes, int streaming) {
    if (streaming)
        stream_copy(to, from, bytes);
    else
        copy_blocks(to, from, bytes);
}

void fence_writes(int streaming) {
    if (streaming)
        _mm_sfence();
}

int step_streams(Core *self) {
    Writes *w = &self->writes;
    if (w->streaming && !w->fixed && !w->probing && --w->probe_in <= 0)
        w->probing = 1;
    w->step = w->streaming && !w->probing;
    return w->step;
}

void wrote_slot(Core *self, int64_t ns, Py_ssize_t bytes) {
    self->writes.written_ns = self->writes.step ? 0 : ns;
    self->writes.written = bytes;
}

void judge_writes(Core *self, int64_t read_ns, Py_ssize_t read) {
    Writes *w = &self->writes;
    int64_t written_ns = w->written_ns;
    Py_ssize_t written = w->written;
    w->written_ns = 0;
    if (w->fixed || written_ns <= 0 || written < JUDGE_FROM_BYTES || read < JUDGE_FROM_BYTES)
        return;
    /* Per byte: written_ns / written > SLOW_RATIO * read_ns / read. */
    int slow = (double)written_ns * (double)read > SLOW_RATIO * (double)read_ns * (double)written;
    if (w->probing) {
        w->probing = 0;
        w->probe_in = PROBE_EVERY;
        w->streaming = slow;
        w->slow = 0;
        return;
    }
    w->slow = slow ? w->slow + 1 : 0;
    if (w->slow >= SLOW_STEPS) {
        w->streaming = 1;
        w->probe_in = PROBE_EVERY;
        w->slow = 0;
    }
}

PyObject *core_slot_writes(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    Writes *w = &self->writes;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "slot_writes takes at most one argument (%zd given)",
                     nargs);
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        const char *mode = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
        if (mode == NULL && PyErr_Occurred())
            return NULL;
        int known = mode != NULL && (!strcmp(mode, "auto") || !strcmp(mode, "cached")
                                     || !strcmp(mode, "streaming"));
        if (!known) {
            PyErr_Format(PyExc_ValueError, "slot_writes takes \"auto\", \"cached\" or "
                         "\"streaming\", not %R", args[0]);
            return NULL;
        }
        memset(w, 0, sizeof *w);
        w->fixed = strcmp(mode, "auto") != 0;
        w->streaming = !strcmp(mode, "streaming");
    }
    return PyUnicode_FromString(w->streaming ? "streaming" : "cached");
}

/* judge_step(written_ns, written, read_ns, read): one split step's judgement, as the
 * step makes it, from the times given (for tests: the step's own are the machine's). */
PyObject *core_judge_step(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "judge_step takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    long long values[4];
    for (int i = 0; i < 4; i++) {
        values[i] = PyLong_AsLongLong(args[i]);
        if (values[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    step_streams(self);
    wrote_slot(self, (int64_t)values[0], (Py_ssize_t)values[1]);
    judge_writes(self, (int64_t)values[2], (Py_ssize_t)values[3]);
    return PyUnicode_FromString(self->writes.streaming ? "streaming" : "cached");
}

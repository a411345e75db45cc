/* wire.h: the little-endian words ranks hand each other (chips.c's
 * handovers between pipeline stages, train.c's messages of a training step
 * over replicas). A reader checks every length against what is left, so a
 * malformed message is refused, never read past. */
#ifndef TESSEL_DRIVER_WIRE_H
#define TESSEL_DRIVER_WIRE_H

#include <stdio.h>
#include <string.h>

#include "../util/util.h"

static inline void wire_put(FILE *b, const void *p, size_t n) { TS_ASSERT(fwrite(p, 1, n, b) == n); }
static inline void wire_put32(FILE *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    wire_put(b, x, 4);
}
static inline void wire_put64(FILE *b, uint64_t v) {
    wire_put32(b, (uint32_t)v);
    wire_put32(b, (uint32_t)(v >> 32));
}
/* n floats as their bits. */
static inline void wire_put_floats(FILE *b, const float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++) {
        uint32_t w;
        memcpy(&w, &x[e], 4);
        wire_put32(b, w);
    }
}

/* A named tensor: the name's length and bytes, the count, the floats. */
static inline void wire_put_tensor(FILE *b, const char *name, const float *x, int64_t n) {
    wire_put32(b, (uint32_t)strlen(name));
    wire_put(b, name, strlen(name));
    wire_put64(b, (uint64_t)n);
    wire_put_floats(b, x, n);
}

typedef struct wire_reader {
    const uint8_t *p, *end;
    bool bad;
} wire_reader;
static inline uint32_t wire_get32(wire_reader *r) {
    if (r->end - r->p < 4) return r->bad = true, 0;
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}
static inline uint64_t wire_get64(wire_reader *r) {
    uint64_t lo = wire_get32(r);
    return lo | (uint64_t)wire_get32(r) << 32;
}
/* The next n bytes, or NULL (and bad) when fewer are left. */
static inline const uint8_t *wire_get_bytes(wire_reader *r, uint64_t n) {
    if ((uint64_t)(r->end - r->p) < n) return r->bad = true, NULL;
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

#endif

/* low: per-tile programs, the last representation before placement.
 *
 *   program ── steps[]   in order, the same on every tile (bulk-synchronous):
 *                COMPUTE   a compute set: runs[first, first+count), grouped by
 *                          tile; runs of one compute set are independent
 *                EXCHANGE  an exchange phase: frags[first, first+count); every
 *                          fragment reads the memory as it was before the phase
 *                REPEAT    runs the steps up to the matching END `iterations` times
 *                END       closes the innermost REPEAT
 *          ── runs[]    kernel runs: one kernel on one tile with its operands
 *          ── frags[]   exchange fragments: bytes from one tile to one or more
 *          ── dst_tiles[] destination tile lists of multicast fragments
 *          ── bufs[]    buffers: one address range, the same on every tile
 *                       that uses it, placed later
 *
 *   An address is (buffer, byte offset, iteration stride): inside a REPEAT the
 *   effective address adds iteration * stride (the innermost repeat's count),
 *   which is how a body lowered once reads layer i of stacked weights. After
 *   placement buf is KERNEL_ABSOLUTE and off is the byte address on the tile.
 *
 * A run's record, the kernels and their semantics are kern.h's (the
 * estimate prices the same runs the simulator charges).
 */
#ifndef TESSEL_LOW_H
#define TESSEL_LOW_H

#include "../kern/kern.h"
#include "../layout/layout.h"
#include "../machine/machine.h"
#include "../num/num.h"
#include "../util/util.h"

typedef struct low_frag {
    uint32_t src_tile;
    kernel_addr src, dst; /* the same destination address on every destination tile */
    uint32_t bytes;       /* at most the machine's max_send_bytes */
    uint32_t dst0, ndst;  /* destination tiles: dst_tiles[dst0, dst0 + ndst) */
} low_frag;

typedef enum { LOW_STEP_COMPUTE, LOW_STEP_EXCHANGE, LOW_STEP_REPEAT, LOW_STEP_END } low_step_kind;

typedef struct low_step {
    uint8_t kind;          /* low_step_kind */
    uint32_t first, count; /* runs (COMPUTE) or frags (EXCHANGE) */
    uint32_t iterations;   /* REPEAT */
    uint32_t label;        /* byte offset of a NUL-terminated name in the string table */
} low_step;

/* What a buffer holds (low_buf.role): a temporary is live while the program
 * uses it; a parameter's and an input's buffers from the start. */
typedef enum { LOW_BUF_TEMP, LOW_BUF_PARAM, LOW_BUF_INPUT } low_buf_role;

typedef struct low_buf {
    uint32_t bytes;        /* payload per tile */
    uint32_t label;        /* string table offset of its name */
    int32_t first, last;   /* placement's: the steps it is live (last = steps: to the end), -1 before */
    uint32_t addr;         /* placement's: its address on every tile that holds it, 0 before */
    uint32_t reserved;     /* placement's: bytes it owns from addr while live (payload, tail, rounding) */
    uint8_t role;          /* low_buf_role (the lowering's; a package does not keep it) */
    bool output;           /* a program output's: live to the end (likewise) */
} low_buf;

/* A parameter's data, which placement encodes into the package: buffer buf
 * holds its shards in layout lay (dtype, scale), `stack` entries (a repeat's
 * stacked layers) of `layer` values each; the program's values() gives them,
 * parameter `source`. */
typedef struct low_param {
    uint32_t buf;
    const char *name;      /* for progress */
    layout lay;
    uint8_t dtype;
    int8_t scale;
    int64_t stack, layer;
    int32_t source;
} low_param;

/* n values of parameter `source` from element `first`, as f32; nonzero with
 * d set when they cannot be made (a missing data file). */
typedef int low_values_fn(const void *ctx, int32_t source, int64_t first, int64_t n, float *out, diag *d);

typedef enum { LOW_BIND_INPUT, LOW_BIND_OUTPUT, LOW_BIND_PROBE } low_bind_role;

/* A value the host writes (an input), reads (an output) or watches (a
 * probe, complete after step `step`, each iteration inside a repeat): its
 * name, dtype, layout and buffer. */
typedef struct low_binding {
    const char *name;
    uint8_t role;          /* low_bind_role */
    uint8_t dtype;
    int8_t scale;
    layout lay;
    uint32_t buf;
    int32_t step;          /* a probe's step, else -1 */
} low_binding;

typedef struct low_program {
    VEC(low_step) steps;
    VEC(kernel_run) runs;
    VEC(low_frag) frags;
    VEC(uint32_t) dst_tiles;
    VEC(low_buf) bufs;
    VEC(char) strings;     /* NUL-terminated labels */
    /* What placement needs besides the program to make its package (the
     * lowering's; a package keeps none of it): */
    VEC(low_param) params;       /* in the order their data goes into the package */
    VEC(low_binding) bindings;   /* inputs, outputs, probes, in that order */
    low_values_fn *values;       /* the parameters' values */
    const void *values_ctx;
    const char *model_path, *model_name; /* for messages */
    double param_bytes;          /* the model's parameters' bytes in all, for messages */
} low_program;

/* ---- print.c ---------------------------------------------------------------- */

/* The buffers and every step in order, a line each, for --print-after. */
void low_print(FILE *f, const low_program *p);

#endif

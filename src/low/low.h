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
 *   placement buf is LOW_ABSOLUTE and off is the byte address on the tile.
 *
 * Kernel semantics (the simulator implements exactly these; the cycle cost
 * is the simulator's business). All arithmetic is in f32 unless `acc` says
 * f16; results round once to their dtype. Box shapes n[] are outermost first,
 * strides are in bytes.
 */
#ifndef TESSEL_LOW_H
#define TESSEL_LOW_H

#include "../kern/kern.h"
#include "../layout/layout.h"
#include "../machine/machine.h"
#include "../num/num.h"
#include "../util/util.h"

/*  id          name        operands  what it computes
 *  GEMM        gemm        3  C[g][m][n] = sum_k A[g][m][k] * B[g][k][n] for g<n[0], m<n[1], n<n[2], k<n[3]
 *                             A: AMP-left, element (m,k) at ptr0 + g*stride[0][0] + (k/w)*stride[0][1]
 *                                + m*32 + (k%w)*bytes, w = 32/bytes;  B: ptr1 + g*stride[1][0]
 *                                + k*stride[1][1] + n*stride[1][2] (stride[1][2] = 0: n*bytes, the
 *                                columns contiguous);  C: ptr2 + g*stride[2][0] + m*stride[2][1]
 *                                + n*bytes. dt[0], dt[1] operands (8-bit scales add), dt[2] the
 *                                result, acc f32 or f16 (each step rounds when f16), k ascending.
 *  REDUCE      reduce      5  out[e] = sum_j in[j][e] for j<n[0], e<n[1]: out at ptr0 + e*bytes, in at
 *                             ptr1 + j*stride[1][0] + e*bytes; summed in acc, j ascending, then rounded
 *                             to `grad` (f32: not). With a bias (n[2] > 0, n[2] * max(n[3], 1) dividing
 *                             n[1]): that plus bias[(e / max(n[3], 1)) % n[2]] (ptr2) is out[e] (n[3] > 1:
 *                             each bias value covers n[3] consecutive elements, a transposed result's).
 *                             With stride[0][1] != 0 the result is AMP-left panels of rows of
 *                             c = stride[0][2] elements: out[e] at ptr0 + ((e%c)/w)*stride[0][1]
 *                             + (e/c)*32 + (e%c%w)*bytes, w = 32/bytes (the next GEMM's operand).
 *                             With op = j + 1 > 0, partial j is read from ptr3 instead (the tile's
 *                             own, where its GEMM wrote it). With f[0] = 1 (2) a GeLU follows (a GeLU done
 *                             by the reduction): the value rounds to the sum's dtype (dt[2] with a bias,
 *                             else `grad`), out = num_gelu (num_gelu_erf) of it, rounded to f16 first when
 *                             out is 8-bit (kern.h's KERNEL_REDUCE_GELU, _GELU_ERF).
 *                             With f[1] = 1 a residual follows (a residual add done by the reduction;
 *                             not with a GeLU, out row-major): the value rounds to out's dtype, then
 *                             out = that + res[e] (ptr4, out's dtype, e*bytes), rounded again
 *  EWISE       ewise       3  out = op(a, b) over the box n[0..4) (op is KERNEL_EW_*); operand i at
 *                             ptr[i] + sum_d idx[d]*stride[i][d]; operands 0 = out, 1 = a, 2 = b
 *                             (b unused for unary ops); f[0] is the scale factor for EW_SCALE;
 *                             for EW_CAST f[0] != 0 leaves an 8-bit result unsaturated (inf or NaN)
 *  SOFTMAX     softmax     2  per row r<n[0]: out[r][:] = softmax(x[r][:]) over n[1] elements;
 *                             ptr0 = out, ptr1 = x; rows stride[i][0] bytes apart; max and sum in f32;
 *                             f[0] > 0 is a folded scale: e = exp(f[0] * (x - max)), else exp(x - max);
 *                             out rows are contiguous, or with stride[0][1] != 0 AMP-left panels:
 *                             element e at ptr0 + r*stride[0][0] + (e/w)*stride[0][1] + (e%w)*bytes,
 *                             w = 32/bytes (LAYER_NORM's out likewise)
 *  LAYER_NORM  layer_norm  5  per row r<n[0] of n[1]: out = (x - mean) / sqrt(var + f[0]) * gamma + beta;
 *                             ptr0 = out, ptr1 = x (rows stride[i][0] apart), ptr2 = gamma, ptr3 = beta;
 *                             statistics in f32 (num_moments): with n[2] = 0 the row's own, num_moments_of
 *                             its n[1] values; with n[2] = P > 0 (the row cut into parts over P tiles, x
 *                             this tile's part) the join in order of P parts' LN_MOMENTS at ptr4 (f32,
 *                             rows P*12 bytes apart), mean = m.mean, var = m.m2 / m.n
 *  LN_MOMENTS  ln_moments  3  per row r<n[0]: num_moments_of the n[1] values of x (ptr1, rows stride[1][0]
 *                             apart) as three f32 (n, mean, m2) at ptr0 + r*12; with n[2] = P > 0 also
 *                             at ptr2 + r*P*12 (its own slot of the row's gathered statistics)
 *  REDUCE_SUM  reduce_sum  2  out[o] = sum of in over the box n[0..4) where out's stride is 0 on the
 *                             summed axes: ptr0 = out, ptr1 = in; accumulated in f32
 *  FILL        fill        1  n[0] elements of dt[0] at ptr0 set to f[0]
 *  COPY        copy        2  n[0]*n[1]*n[2] spans of n[3] bytes: span idx goes from ptr1 + sum_d idx[d]*stride[1][d]
 *                             to ptr0 + sum_d idx[d]*stride[0][d] (d < 3); spans must not overlap
 *  SGD         sgd         5  per e<n[0]: g' = g + f[2] w; buf' = f[1] buf + g'; w' = w - f[0] (buf' or g')
 *                             ptr0 = w', ptr1 = buf' (momentum only), ptr2 = w, ptr3 = g, ptr4 = buf
 *  ADAMW       adamw       7  per e<n[0], PyTorch AdamW at step n[1]: ptr0 = w', ptr1 = m', ptr2 = v',
 *                             ptr3 = w, ptr4 = g, ptr5 = m, ptr6 = v; f = lr, beta1, beta2, eps; wd in f[4]
 *  SUMSQ       sumsq       2  f32 out[0] = out[0] + sum over e<n[0] of in[e]^2, one chain continuing
 *                             from out[0] (ptr0 = out f32, ptr1 = in): runs over the spans of a
 *                             shard, in order, make one chain over its elements
 *  CLIP_COEF   clip_coef   2  out = min(1, f[0] / (sqrt(sum_{j<n[0]} in[j]) + 1e-6)), f32 in and out
 *  GEMM_EPI    gemm_epi    6  GEMM's C for n[0] = 1, A and B (operands 0, 1) addressed as GEMM's, each element
 *                             rounded to `grad` (the gradient's dtype; no operand holds it) and handed to the
 *                             epilogue `op` (KERNEL_EPI_*) with operands 2..5: element (m,n) of each at
 *                             ptr + (m*stride[2][1] + n)*bytes (stride[2][1] in elements, one for all four)
 *  REDUCE_EPI  reduce_epi  5  REDUCE's sum of in[j][e] (ptr0 = in, slices stride[0][0] apart; acc, j ascending),
 *                             rounded to `grad` (the gradient's dtype) and handed to the epilogue `op` with
 *                             operands 1..4, element e at ptr + e*bytes
 *  GATHER      gather      3  per i<n[0]: r = ids[i] (i32 at ptr2 + i*4), plus n[2] when negative; the n[1]
 *                             elements of row r of the table (ptr1 + r*stride[1][0], dt[1]) to ptr0 +
 *                             i*stride[0][0] (dt[0] = dt[1], one scale), or zeros when r is outside
 *                             [0, n[2]): this tile's columns of an embedding lookup (graph op gather)
 *  ADAMW_APPLY adamw_apply 4  per e<n[0], ADAMW's last line at step n[1]: w' = w (1 - lr wd) - (lr / bc1) m' /
 *                             (sqrt(v') / sqrt(bc2) + eps); ptr0 = w', ptr1 = w, ptr2 = m', ptr3 = v'; f as ADAMW
 *
 * Epilogues (the `op` of GEMM_EPI and REDUCE_EPI) take each gradient value g
 * with four operands E0..E3 (GEMM_EPI's 2..5, REDUCE_EPI's 1..4):
 *  SGD   E0 = w, E1 = buf, E2 = w', E3 = buf' (E1, E3 only with momentum f[1] != 0); SGD's arithmetic with
 *        f = lr, momentum, weight_decay
 *  ADAM  E0 = m, E1 = v, E2 = m', E3 = v'; f[0] = beta1, f[1] = beta2: m' = b1 m + (1 - b1) g,
 *        v' = b2 v + (1 - b2) g g, each rounded to its dtype (ADAMW_APPLY then makes w')
 */
/* What each kernel reads of a run besides its operands, so that a package
 * holds only that (docs/package.md, "run"): `box` the leading box axes n[0..box),
 * `strides` a mask of stride[i][d] at bit 4*i + d, `floats` the leading
 * f[0..floats), `params` LOW_P_ACC (acc), LOW_P_OP (op) and LOW_P_GRAD (grad).
 * Everything else is zero in a placed run (low_run_canonical). */
enum { LOW_P_ACC = 1, LOW_P_OP = 2, LOW_P_GRAD = 4 };

/*  id          name        operands  box  strides  floats  params */
#define LOW_KERNELS(X)                                                  \
    X(GEMM, gemm, 3, 4, 0x373, 0, LOW_P_ACC)                            \
    X(REDUCE, reduce, 5, 4, 0x016, 2, LOW_P_OP | LOW_P_ACC | LOW_P_GRAD) \
    X(EWISE, ewise, 3, 4, 0xfff, 1, LOW_P_OP | LOW_P_ACC)               \
    X(SOFTMAX, softmax, 2, 2, 0x013, 1, 0)                              \
    X(LAYER_NORM, layer_norm, 5, 3, 0x013, 1, LOW_P_ACC)                \
    X(REDUCE_SUM, reduce_sum, 2, 4, 0x0ff, 0, 0)                        \
    X(FILL, fill, 1, 1, 0x000, 1, 0)                                    \
    X(COPY, copy, 2, 4, 0x077, 0, 0)                                    \
    X(SGD, sgd, 5, 1, 0x000, 3, 0)                                      \
    X(ADAMW, adamw, 7, 2, 0x000, 5, 0)                                  \
    X(SUMSQ, sumsq, 2, 1, 0x000, 0, 0)                                  \
    X(CLIP_COEF, clip_coef, 2, 1, 0x000, 1, 0)                          \
    X(GEMM_EPI, gemm_epi, 6, 4, 0x222, 3, LOW_P_ACC | LOW_P_OP | LOW_P_GRAD) \
    X(REDUCE_EPI, reduce_epi, 5, 2, 0x001, 3, LOW_P_ACC | LOW_P_OP | LOW_P_GRAD) \
    X(ADAMW_APPLY, adamw_apply, 4, 2, 0x000, 5, 0)                      \
    X(LN_MOMENTS, ln_moments, 3, 3, 0x010, 0, 0)                       \
    X(GATHER, gather, 3, 3, 0x011, 0, 0)

typedef enum {
#define X(id, name, nops, box, strides, floats, params) LOW_K_##id,
    LOW_KERNELS(X)
#undef X
    LOW_K_COUNT
} low_kernel;

extern const char *const low_kernel_names[LOW_K_COUNT];
extern const int low_kernel_operands[LOW_K_COUNT];
/* The columns box, strides, floats and params of LOW_KERNELS. */
typedef struct low_kernel_fields {
    uint8_t box, floats, params;
    uint16_t strides;
} low_kernel_fields;
extern const low_kernel_fields low_kernel_used[LOW_K_COUNT];

enum { LOW_MAX_OPERANDS = 7, LOW_MAX_BOX = 4, LOW_STRIDED_OPERANDS = 4, LOW_AMP_PANEL_BYTES = 32 };
/* A row part's statistics (LN_MOMENTS: n, mean, m2 as f32); the most parts a row's layer norm joins. */
enum { LOW_MOMENTS_BYTES = 12, LOW_MAX_PARTS = 64 };
#define LOW_ABSOLUTE 0xffffffffu

typedef struct low_addr {
    uint32_t buf;         /* buffer id, or LOW_ABSOLUTE once placed */
    uint32_t off;         /* bytes into the buffer, or the address once placed */
    int32_t iter_stride;  /* bytes added per iteration of the innermost repeat */
} low_addr;

typedef struct low_run {
    uint32_t tile;
    uint8_t kernel;                          /* low_kernel */
    uint8_t op;                              /* kernel_ew_op for EWISE, kernel_epi_op for GEMM_EPI and REDUCE_EPI; REDUCE:
                                                0, or 1 + the partial read from ptr3 */
    uint8_t acc;                             /* accumulation dtype (GEMM, REDUCE, GEMM_EPI, REDUCE_EPI); EWISE,
                                                LAYER_NORM: the dtype the result rounds to before out's (a cast
                                                done by its producer), f32 for none */
    uint8_t grad;                            /* the gradient's dtype (GEMM_EPI, REDUCE_EPI); REDUCE: the sum
                                                rounds to it first (the product's, before a bias or a cast done
                                                by the reduction), f32 for none */
    uint8_t dt[LOW_MAX_OPERANDS];            /* operand dtypes */
    int8_t scale[LOW_MAX_OPERANDS];          /* 8-bit operand scales */
    low_addr ptr[LOW_MAX_OPERANDS];
    uint32_t n[LOW_MAX_BOX];                 /* box shape, elements, outermost first */
    int32_t stride[LOW_STRIDED_OPERANDS][LOW_MAX_BOX]; /* bytes per box step */
    float f[5];                              /* float parameters, per kernel */
} low_run;

typedef struct low_frag {
    uint32_t src_tile;
    low_addr src, dst;      /* the same destination address on every destination tile */
    uint32_t bytes;         /* at most the machine's max_send_bytes */
    uint32_t dst0, ndst;    /* destination tiles: dst_tiles[dst0, dst0 + ndst) */
} low_frag;

typedef enum { LOW_STEP_COMPUTE, LOW_STEP_EXCHANGE, LOW_STEP_REPEAT, LOW_STEP_END } low_step_kind;

typedef struct low_step {
    uint8_t kind;          /* low_step_kind */
    uint32_t first, count; /* runs (COMPUTE) or frags (EXCHANGE) */
    uint32_t iterations;   /* REPEAT */
    uint32_t label;        /* byte offset of a NUL-terminated name in the string table */
} low_step;

typedef struct low_buf {
    uint32_t bytes;        /* payload per tile */
    uint32_t label;        /* string table offset of its name */
    int32_t first, last;   /* placement's: the steps it is live (last = steps: to the end), -1 before */
    uint32_t addr;         /* placement's: its address on every tile that holds it, 0 before */
    uint32_t reserved;     /* placement's: bytes it owns from addr while live (payload, tail, rounding) */
} low_buf;

typedef struct low_program {
    VEC(low_step) steps;
    VEC(low_run) runs;
    VEC(low_frag) frags;
    VEC(uint32_t) dst_tiles;
    VEC(low_buf) bufs;
    VEC(char) strings;     /* NUL-terminated labels */
} low_program;

/* ---- print.c ---------------------------------------------------------------- */

/* The buffers and every step in order, a line each, for --print-after. */
void low_print(FILE *f, const low_program *p);

/* ---- kernels.c ---------------------------------------------------------- */

/* The first epilogue operand of a GEMM_EPI or REDUCE_EPI run (E0), else -1. */
int low_epilogue_base(const low_run *r);
/* The dtype an epilogue run rounds the gradient to (its grad). */
dtype low_epilogue_grad(const low_run *r);
/* Whether run r uses operand i (SGD without momentum skips its buffers). */
bool low_run_uses(const low_run *r, int i);
/* Zeroes every field of r its kernel does not read (LOW_KERNELS' columns,
 * operands low_run_uses says are unused): what a package stores of r, so a
 * placed run equals the run a package gives back. */
void low_run_canonical(low_run *r);
/* Whether run r writes operand i (the rest it only reads; SUMSQ does both). */
bool low_run_writes(const low_run *r, int i);
/* Placement's rules for operand i of a kernel: the alignment its address
 * needs and the bytes past its footprint the kernel may read (an access
 * tail), both in bytes; estimates documented in docs/placement.md. */
uint32_t low_operand_align(low_kernel k, int i);
uint32_t low_operand_tail(low_kernel k, int i);
/* Bytes operand i of r spans from its address (0 if unused); strides are
 * non-negative, so the footprint is [address, address + extent). */
uint64_t low_run_extent(const low_run *r, int i);
/* Checks the shape and parameters of r make sense for its kernel (operand
 * dtypes, nonzero sizes, non-negative strides); used on untrusted packages. */
bool low_run_valid(const low_run *r, char *why, size_t cap);

#endif

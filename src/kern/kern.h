/* kern: what the tile kernels compute, below every layer that makes or
 * runs them: the elementwise ops of the EWISE kernel and the epilogues of
 * the fused GEMM and K-reduction, each with its number (the package stores
 * these: src/package/format.c), name, arity and the machine's work class
 * that prices it; the kernel table and the run record (one kernel on one
 * tile with its operands), what each run reads and writes; the exchange
 * tables' row format. mid's prims, low's runs, the package, the estimate
 * and the simulator all name ops and kernels by these. */
#ifndef TESSEL_KERN_H
#define TESSEL_KERN_H

#include "../machine/machine.h"
#include "../num/num.h"

/* Elementwise ops (EWISE prims and the low EWISE kernel): name, arity (unary
 * ones ignore operand b) and the machine's work class that prices them; each
 * ID is also the graph op's (OP_ID) it expands. The plain unary ops (num.h's
 * NUM_UNARY_OPS, in its order, with its cost classes) follow the first
 * eight, then max and min (the package stores these numbers: a new op is
 * appended, or the format changes). */
#define KERNEL_EW_OPS(X) \
    X(ADD, add, 2, MACHINE_EW_ARITH) \
    X(SUB, sub, 2, MACHINE_EW_ARITH) \
    X(MUL, mul, 2, MACHINE_EW_ARITH) \
    X(GELU, gelu, 1, MACHINE_EW_GELU) \
    X(GELU_GRAD, gelu_grad, 2, MACHINE_EW_GELU_GRAD) \
    X(SCALE, scale, 1, MACHINE_EW_ARITH) \
    X(CAST, cast, 1, MACHINE_EW_CAST) \
    X(GELU_ERF, gelu_erf, 1, MACHINE_EW_GELU) \
    NUM_UNARY_OPS(KERNEL_UNARY_ROW, X) \
    X(MAX, max, 2, MACHINE_EW_ARITH) \
    X(MIN, min, 2, MACHINE_EW_ARITH)
#define KERNEL_UNARY_ROW(id, name, cost, X) X(id, name, 1, MACHINE_EW_##cost)

typedef enum {
#define X(id, name, arity, cls) KERNEL_EW_##id,
    KERNEL_EW_OPS(X)
#undef X
    KERNEL_EW_COUNT
} kernel_ew_op;

extern const char *const kernel_ew_names[KERNEL_EW_COUNT];
extern const int kernel_ew_arity[KERNEL_EW_COUNT];
extern const machine_ew_class kernel_ew_class[KERNEL_EW_COUNT];

/* Epilogues of the fused GEMM and K-reduction (GEMM_EPI and REDUCE_EPI
 * prims, and the low kernels' `op`): what consumes each gradient value
 * where it is completed, instead of a stored gradient (docs/epilogue.md). */
#define KERNEL_EPI_OPS(X)                           \
    X(SGD, sgd) \
    X(ADAM, adam)

typedef enum {
#define X(id, name) KERNEL_EPI_##id,
    KERNEL_EPI_OPS(X)
#undef X
    KERNEL_EPI_COUNT
} kernel_epi_op;

extern const char *const kernel_epi_names[KERNEL_EPI_COUNT];

/* The GeLU a K-partials reduction may take after its sum (the REDUCE
 * prim's and run's f[0]; the package stores these numbers): none, the tanh
 * form (num_gelu), the erf form (num_gelu_erf, PyTorch's nn.GELU). */
enum { KERNEL_REDUCE_NO_GELU = 0, KERNEL_REDUCE_GELU = 1, KERNEL_REDUCE_GELU_ERF = 2 };

/* ---- boxes: the strided iteration spaces of runs ----------------------------------------- */

/* A box of elements several operands walk together: n[d] elements along
 * axis d (outermost first), st[i][d] bytes per step of operand i. The
 * lowering builds runs from boxes, the simulator walks them and the
 * cycle model and the estimator price them. */
enum { KERNEL_BOX_AXES = 6, KERNEL_BOX_OPS = 5 };
typedef struct kernel_box {
    int nd;                               /* axes in use, at least 1 */
    int nops;                             /* operands walking the box */
    int64_t n[KERNEL_BOX_AXES];                  /* elements per axis */
    int64_t st[KERNEL_BOX_OPS][KERNEL_BOX_AXES]; /* bytes per step, per operand */
} kernel_box;

/* Orders the axes by operand 0's strides, largest first (stable), so an
 * elementwise box over a transposed shard walks its storage in order. Only
 * for kernels whose result does not depend on the element order. */
void kernel_box_order(kernel_box *b);

/* Drops unit axes and merges an axis into the next inner one wherever every
 * operand is contiguous across the pair. The element order, and so every
 * summation order, is unchanged; a single element stays one axis of 1. */
void kernel_box_collapse(kernel_box *b);

/* ---- kernel runs: one kernel on one tile with its operands -------------------------------
 *
 * Kernel semantics (the simulator implements exactly these, and
 * kernel_run_cycles says what each run costs). All arithmetic is in f32
 * unless `acc` says f16; results round once to their dtype. Box shapes n[]
 * are outermost first, strides are in bytes.
 *
 *  id          name        operands  what it computes
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
 *                             With own = j + 1 > 0, partial j is read from ptr3 instead (the tile's
 *                             own, where its GEMM wrote it). With gelu = 1 (2) a GeLU follows (a GeLU done
 *                             by the reduction): the value rounds to the sum's dtype (dt[2] with a bias,
 *                             else `grad`), out = num_gelu (num_gelu_erf) of it, rounded to f16 first when
 *                             out is 8-bit (kern.h's KERNEL_REDUCE_GELU, _GELU_ERF).
 *                             With residual a residual follows (a residual add done by the reduction;
 *                             not with a GeLU, out row-major): the value rounds to out's dtype, then
 *                             out = that + res[e] (ptr4, out's dtype, e*bytes), rounded again
 *  EWISE       ewise       3  out = ew(a, b) over the box n[0..4) (ew is KERNEL_EW_*); operand i at
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
 *                             epilogue `epi` (KERNEL_EPI_*) with operands 2..5: element (m,n) of each at
 *                             ptr + (m*stride[2][1] + n)*bytes (stride[2][1] in elements, one for all four)
 *  REDUCE_EPI  reduce_epi  5  REDUCE's sum of in[j][e] (ptr0 = in, slices stride[0][0] apart; acc, j ascending),
 *                             rounded to `grad` (the gradient's dtype) and handed to the epilogue `epi` with
 *                             operands 1..4, element e at ptr + e*bytes
 *  GATHER      gather      3  per i<n[0]: r = ids[i] (i32 at ptr2 + i*4), plus n[2] when negative; the n[1]
 *                             elements of row r of the table (ptr1 + r*stride[1][0], dt[1]) to ptr0 +
 *                             i*stride[0][0] (dt[0] = dt[1], one scale), or zeros when r is outside
 *                             [0, n[2]): this tile's columns of an embedding lookup (graph op gather)
 *  ADAMW_APPLY adamw_apply 4  per e<n[0], ADAMW's last line at step n[1]: w' = w (1 - lr wd) - (lr / bc1) m' /
 *                             (sqrt(v') / sqrt(bc2) + eps); ptr0 = w', ptr1 = w, ptr2 = m', ptr3 = v'; f as ADAMW
 *
 * Epilogues (the `epi` of GEMM_EPI and REDUCE_EPI) take each gradient value g
 * with four operands E0..E3 (GEMM_EPI's 2..5, REDUCE_EPI's 1..4):
 *  SGD   E0 = w, E1 = buf, E2 = w', E3 = buf' (E1, E3 only with momentum f[1] != 0); SGD's arithmetic with
 *        f = lr, momentum, weight_decay
 *  ADAM  E0 = m, E1 = v, E2 = m', E3 = v'; f[0] = beta1, f[1] = beta2: m' = b1 m + (1 - b1) g,
 *        v' = b2 v + (1 - b2) g g, each rounded to its dtype (ADAMW_APPLY then makes w')
 */
/* What each kernel reads of a run besides its operands, so that a package
 * holds only that (docs/package.md, "run"): `box` the leading box axes n[0..box),
 * `strides` a mask of stride[i][d] at bit 4*i + d, `floats` the leading
 * f[0..floats), `params` KERNEL_P_ACC (acc), KERNEL_P_OP (op) and KERNEL_P_GRAD (grad).
 * Everything else is zero in a placed run (kernel_run_canonical). */
enum { KERNEL_P_ACC = 1, KERNEL_P_OP = 2, KERNEL_P_GRAD = 4 };

/*  id          name        operands  box  strides  floats  params */
#define KERNEL_TABLE(X)                                                  \
    X(GEMM, gemm, 3, 4, 0x373, 0, KERNEL_P_ACC)                            \
    X(REDUCE, reduce, 5, 4, 0x016, 2, KERNEL_P_OP | KERNEL_P_ACC | KERNEL_P_GRAD) \
    X(EWISE, ewise, 3, 4, 0xfff, 1, KERNEL_P_OP | KERNEL_P_ACC)               \
    X(SOFTMAX, softmax, 2, 2, 0x013, 1, 0)                              \
    X(LAYER_NORM, layer_norm, 5, 3, 0x013, 1, KERNEL_P_ACC)                \
    X(REDUCE_SUM, reduce_sum, 2, 4, 0x0ff, 0, 0)                        \
    X(FILL, fill, 1, 1, 0x000, 1, 0)                                    \
    X(COPY, copy, 2, 4, 0x077, 0, 0)                                    \
    X(SGD, sgd, 5, 1, 0x000, 3, 0)                                      \
    X(ADAMW, adamw, 7, 2, 0x000, 5, 0)                                  \
    X(SUMSQ, sumsq, 2, 1, 0x000, 0, 0)                                  \
    X(CLIP_COEF, clip_coef, 2, 1, 0x000, 1, 0)                          \
    X(GEMM_EPI, gemm_epi, 6, 4, 0x222, 3, KERNEL_P_ACC | KERNEL_P_OP | KERNEL_P_GRAD) \
    X(REDUCE_EPI, reduce_epi, 5, 2, 0x001, 3, KERNEL_P_ACC | KERNEL_P_OP | KERNEL_P_GRAD) \
    X(ADAMW_APPLY, adamw_apply, 4, 2, 0x000, 5, 0)                      \
    X(LN_MOMENTS, ln_moments, 3, 3, 0x010, 0, 0)                       \
    X(GATHER, gather, 3, 3, 0x011, 0, 0)

typedef enum {
#define X(id, name, nops, box, strides, floats, params) KERNEL_K_##id,
    KERNEL_TABLE(X)
#undef X
    KERNEL_K_COUNT
} kernel_id;

extern const char *const kernel_names[KERNEL_K_COUNT];
extern const int kernel_operands[KERNEL_K_COUNT];
/* The columns box, strides, floats and params of KERNEL_TABLE. */
typedef struct kernel_fields {
    uint8_t box, floats, params;
    uint16_t strides;
} kernel_fields;
extern const kernel_fields kernel_used[KERNEL_K_COUNT];

enum { KERNEL_MAX_OPERANDS = 7, KERNEL_MAX_BOX = 4, KERNEL_STRIDED_OPERANDS = 4, KERNEL_AMP_PANEL_BYTES = 32 };
/* A row part's statistics (LN_MOMENTS: n, mean, m2 as f32); the most parts a row's layer norm joins. */
enum { KERNEL_MOMENTS_BYTES = 12, KERNEL_MAX_PARTS = 64 };
#define KERNEL_ABSOLUTE 0xffffffffu

typedef struct kernel_addr {
    uint32_t buf;         /* buffer id, or KERNEL_ABSOLUTE once placed */
    uint32_t off;         /* bytes into the buffer, or the address once placed */
    int32_t iter_stride;  /* bytes added per iteration of the innermost repeat */
} kernel_addr;

typedef struct kernel_run {
    uint32_t tile;
    uint8_t kernel;                          /* kernel_id */
    uint8_t ew;                              /* EWISE: its op (kernel_ew_op) */
    uint8_t epi;                             /* GEMM_EPI, REDUCE_EPI: the epilogue (kernel_epi_op) */
    uint8_t own;                             /* REDUCE: 0, or 1 + the partial it reads from ptr3 (the tile's own) */
    uint8_t gelu;                            /* REDUCE: a GeLU after the sum (KERNEL_REDUCE_GELU, _GELU_ERF) or none */
    bool residual;                           /* REDUCE: a residual (ptr4) added after the sum */
    uint8_t acc;                             /* accumulation dtype (GEMM, REDUCE, GEMM_EPI, REDUCE_EPI); EWISE,
                                                LAYER_NORM: the dtype the result rounds to before out's (a cast
                                                done by its producer), f32 for none */
    uint8_t grad;                            /* the gradient's dtype (GEMM_EPI, REDUCE_EPI); REDUCE: the sum
                                                rounds to it first (the product's, before a bias or a cast done
                                                by the reduction), f32 for none */
    uint8_t dt[KERNEL_MAX_OPERANDS];         /* operand dtypes */
    int8_t scale[KERNEL_MAX_OPERANDS];       /* 8-bit operand scales */
    kernel_addr ptr[KERNEL_MAX_OPERANDS];
    uint32_t n[KERNEL_MAX_BOX];              /* box shape, elements, outermost first */
    int32_t stride[KERNEL_STRIDED_OPERANDS][KERNEL_MAX_BOX]; /* bytes per box step */
    float f[5];                              /* float parameters, per kernel */
} kernel_run;

/* ---- runs.c: what each run reads and writes ---------------------------------------------- */

/* The first epilogue operand of a GEMM_EPI or REDUCE_EPI run (E0), else -1. */
int kernel_epilogue_base(const kernel_run *r);
/* The dtype an epilogue run rounds the gradient to (its grad). */
dtype kernel_epilogue_grad(const kernel_run *r);
/* Whether run r uses operand i (SGD without momentum skips its buffers). */
bool kernel_run_uses(const kernel_run *r, int i);
/* A package stores a run's op byte (KERNEL_P_OP: EWISE's ew, an epilogue
 * kernel's epi, REDUCE's own) and its floats f[0..floats) (REDUCE's: gelu
 * and the residual as 0 or 1); these give and take them. Setting a float
 * REDUCE cannot hold (a GeLU kind it does not know, a residual not 0 or 1)
 * returns false. */
uint8_t kernel_run_op_byte(const kernel_run *r);
void kernel_run_set_op_byte(kernel_run *r, uint8_t b);
float kernel_run_float(const kernel_run *r, int f);
bool kernel_run_set_float(kernel_run *r, int f, float v);
/* Zeroes every field of r its kernel does not read (KERNEL_TABLE' columns,
 * operands kernel_run_uses says are unused): what a package stores of r, so a
 * placed run equals the run a package gives back. */
void kernel_run_canonical(kernel_run *r);
/* Whether run r writes operand i (the rest it only reads; SUMSQ does both). */
bool kernel_run_writes(const kernel_run *r, int i);
/* Placement's rules for operand i of a kernel: the alignment its address
 * needs and the bytes past its footprint the kernel may read (an access
 * tail), both in bytes; estimates documented in docs/placement.md. */
uint32_t kernel_operand_align(kernel_id k, int i);
uint32_t kernel_operand_tail(kernel_id k, int i);
/* Bytes operand i of r spans from its address (0 if unused); strides are
 * non-negative, so the footprint is [address, address + extent). */
uint64_t kernel_run_extent(const kernel_run *r, int i);
/* Checks the shape and parameters of r make sense for its kernel (operand
 * dtypes, nonzero sizes, non-negative strides); used on untrusted packages. */
bool kernel_run_valid(const kernel_run *r, char *why, size_t cap);

/* The box of r over its operands 0..nops-1 (their strides), collapsed
 * (EWISE's out, a, b; REDUCE_SUM's out, in). */
kernel_box kernel_run_box(const kernel_run *r, int nops);
/* Rows of a box: every axis but the innermost. */
uint64_t kernel_box_rows(const kernel_box *b);
/* The runs of a box when each takes its `keep` innermost axes (the others
 * are iterated, a run per index): sets r's box (n) and the strides of
 * operands 0..b->nops-1 to those axes and returns how many runs there are;
 * only their operands' addresses differ. */
uint64_t kernel_box_run(const kernel_box *b, int keep, kernel_run *r);

/* ---- cycles.c: what a run costs ---------------------------------------------------------- */

/* What kernel_run_cycles returns for a GEMM the machine's AMP cannot take
 * (8-bit operands on mk2, bf16): large enough that any plan containing one
 * loses, small enough that a sum of a few thousand of them does not wrap.
 * The compiler must never emit such a run. */
#define KERNEL_CYCLES_UNSUPPORTED MACHINE_CYCLES_UNSUPPORTED

/* Cycles r takes on one tile of machine m, launch cost excluded (the
 * simulator adds m->launch_cycles per run); interleaved[i] says whether
 * operand i lies in interleaved memory (loads at
 * interleaved_load_bytes_per_cycle instead of load_bytes_per_cycle), NULL:
 * nothing interleaved. The simulator charges it, the estimate sums it. */
uint64_t kernel_run_cycles(const kernel_run *r, const machine *m, const bool interleaved[KERNEL_MAX_OPERANDS]);

/* ---- the tile memory map --------------------------------------------------------------------
 *
 *   base ─ code, tables ─ data_base ── ordinary region ──┬── interleaved region ──┐ loader_limit
 *                                       packed, aligned    │ whole logical elements │
 *
 * The ordinary region runs from data_base to interleaved_base (data_base
 * rounded to 16 bytes when it reaches past it); the interleaved one in
 * logical elements of interleave_factor x memory_element_bytes from the
 * first element boundary at or past data_base, up to loader_limit.
 * Placement allocates in these regions; the estimate models them. */
typedef struct kernel_regions {
    uint64_t ord_lo, ord_hi; /* [lo, hi) */
    uint64_t il_lo, il_hi;   /* [lo, hi): whole elements from il_lo, the last one usable up to loader_limit */
    uint64_t unit;           /* bytes per logical interleaved element */
} kernel_regions;
kernel_regions kernel_tile_regions(const machine *m, uint64_t data_base);

/* ---- supersteps: when an exchange phase may join an earlier one --------------------------
 *
 * Every fragment of a phase reads the memory as it was before the phase, so
 * a phase may join the nearest phase before it in its block when nothing in
 * between stands in the way. Going back from the phase one step at a time,
 * what each step q says, from whether the phase reads what q writes, writes
 * what q writes, and writes what q reads: an earlier phase takes it unless
 * it reads or writes what that phase writes; a compute step in between is
 * passed unless it writes the phase's sources or touches its destinations.
 * place/schedule.c joins phases so, on buffers; the estimate prices the
 * joins so, on the mid prims' storage. */
typedef enum { KERNEL_JOIN_HERE, KERNEL_JOIN_PAST, KERNEL_JOIN_NEVER } kernel_join;
static inline kernel_join kernel_join_step(bool q_is_phase, bool reads_q_writes, bool writes_q_writes, bool writes_q_reads) {
    if (reads_q_writes || writes_q_writes) return KERNEL_JOIN_NEVER;
    if (q_is_phase) return KERNEL_JOIN_HERE;
    return writes_q_reads ? KERNEL_JOIN_NEVER : KERNEL_JOIN_PAST;
}

/* ---- the exchange tables' row format ---------------------------------------------------
 *
 * Every row of a package's exchange tables has fields as wide as its machine
 * and program need (docs/package.md, "Exchange tables"): placement encodes
 * with it, the package decodes with it, and the estimate prices a phase's
 * rows with it. */
typedef struct kernel_xt_format {
    uint32_t base;           /* tile_memory_base: row addresses are offsets from it */
    uint32_t tiles;          /* a destination below this is a tile, from it tiles + group */
    uint32_t max_send;       /* max_send_bytes */
    uint8_t addr_bits;       /* A: an offset into tile memory; a slot is as wide */
    uint8_t len_bits;        /* L: bytes - 1 */
    uint8_t dst_bits;        /* G: a tile or tiles + group */
    uint8_t count_bits;      /* C: fragments - 1 through one receive pointer */
    uint8_t send_bytes;      /* whole words holding 2A + L + G bits */
    uint8_t recv_bytes;      /* whole words holding A + C bits (C at least 8) */
} kernel_xt_format;

enum {
    KERNEL_XT_HEADER_BYTES = 8, /* u16 phase, u16 send rows, u16 receive rows, u16 patch rows */
    KERNEL_XT_PATCH_BYTES = 8,  /* u32 row (PKG_XT_RECV_ROW: a receive row), i32 bytes per iteration */
};

/* The rows of m's tables, for a program with `groups` multicast groups. */
void kernel_xt_format_init(kernel_xt_format *f, const machine *m, uint32_t groups);
/* Bytes of one tile's block for a phase with these rows. */
uint64_t kernel_xt_block_bytes(const kernel_xt_format *f, uint64_t nsend, uint64_t nrecv, uint64_t npatch);

#endif

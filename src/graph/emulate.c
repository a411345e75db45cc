/* emulate.c: the kernels of the plan-exact emulated reference. Each computes
 * a graph op over whole tensors with the device's arithmetic (src/kern/kern.h,
 * docs/sim.md) in the order the plan's numeric decisions give (graph.h,
 * "numerics.c"), so that the simulator's outputs must agree bit for bit. The
 * code is independent of the simulator's: it reads no layout, address or
 * exchange, only the plan's numeric decisions, so a lowering fault cannot be
 * mirrored here.
 *
 * Rules shared with the tile kernels: f32 arithmetic with no contraction (the
 * build passes -ffp-contract=off), every result rounded once to its dtype (by
 * ref.c, after the kernel), 8-bit GEMM operands unscaled and the finished
 * chain multiplied by 2^(sa+sb), f16 accumulators rounded after every step. */
#include "emulate.h"
#include "../num/chain.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static float to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

/* ---- matmul ------------------------------------------------------------------ */

/* One batch entry: A [M][K] and B packed in 16-column panels [N/16][K][16],
 * unscaled; C [M][N] receives the rounded result. */
typedef struct mm_job {
    const float *a, *bp;
    float *c;
    int64_t M, N, K, np;            /* np: 16-column panels */
    const graph_gemm_plan *pl;
    bool exact;                     /* every product is exact in f32 (f16 or 8-bit operands) */
    float post;                     /* 2^(sa+sb) for 8-bit operands in an f32 chain, else 1 */
    dtype out;
    int out_scale;
} mm_job;

enum { MM_ROWS = 6, MM_COLS = 16 };

/* acc[r][j] over k in [k0, k1) for rows i..i+5 (clamped) of one panel, each
 * chain stepped by num_chain_step with the job's choices folded in (the twelve
 * accumulators stay in registers). */
static inline __attribute__((always_inline)) void mm_chain_as(const mm_job *j, int64_t i, int64_t jp, int64_t k0,
                                                              int64_t k1, float acc[][MM_COLS], bool exact,
                                                              bool f16) {
    const float *row0, *row1, *row2, *row3, *row4, *row5;
#define MM_ROW(r) row##r = j->a + (i + r < j->M ? i + r : j->M - 1) * j->K;
    MM_ROW(0) MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5)
#undef MM_ROW
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    const float *b = j->bp + jp * j->K * MM_COLS;
    for (int64_t k = k0; k < k1; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * MM_COLS), b1 = _mm256_loadu_ps(b + k * MM_COLS + 8);
#define MM_STEP(r)                                                                                   \
    {                                                                                                \
        __m256 a = _mm256_broadcast_ss(row##r + k);                                                    \
        c##r##0 = num_chain_step(c##r##0, a, b0, exact, f16);                                        \
        c##r##1 = num_chain_step(c##r##1, a, b1, exact, f16);                                        \
    }
        MM_STEP(0) MM_STEP(1) MM_STEP(2) MM_STEP(3) MM_STEP(4) MM_STEP(5)
#undef MM_STEP
    }
#define MM_STORE(r)                           \
    _mm256_storeu_ps(acc[r], c##r##0);        \
    _mm256_storeu_ps(acc[r] + 8, c##r##1);
    MM_STORE(0) MM_STORE(1) MM_STORE(2) MM_STORE(3) MM_STORE(4) MM_STORE(5)
#undef MM_STORE
}

/* mm_chain_as for twelve rows, one 512-bit register a row
 * (num_chain_step16: the same bits per chain). Only where num_wide(). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
mm_chain16_as(const mm_job *j, int64_t i, int64_t jp, int64_t k0, int64_t k1, float acc[2 * MM_ROWS][MM_COLS], bool exact,
              bool f16) {
    const float *row0, *row1, *row2, *row3, *row4, *row5, *row6, *row7, *row8, *row9, *row10, *row11;
    __m512 c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
#define MM_ROW(r) row##r = j->a + (i + r < j->M ? i + r : j->M - 1) * j->K, c##r = _mm512_setzero_ps();
    MM_ROW(0) MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5) MM_ROW(6) MM_ROW(7) MM_ROW(8) MM_ROW(9) MM_ROW(10) MM_ROW(11)
#undef MM_ROW
    const float *b = j->bp + jp * j->K * MM_COLS;
    for (int64_t k = k0; k < k1; k++) {
        __m512 bv = _mm512_loadu_ps(b + k * MM_COLS);
#define MM_STEP(r) c##r = num_chain_step16(c##r, _mm512_set1_ps(row##r[k]), bv, exact, f16);
        MM_STEP(0) MM_STEP(1) MM_STEP(2) MM_STEP(3) MM_STEP(4) MM_STEP(5)
        MM_STEP(6) MM_STEP(7) MM_STEP(8) MM_STEP(9) MM_STEP(10) MM_STEP(11)
#undef MM_STEP
    }
#define MM_STORE(r) _mm512_storeu_ps(acc[r], c##r);
    MM_STORE(0) MM_STORE(1) MM_STORE(2) MM_STORE(3) MM_STORE(4) MM_STORE(5)
    MM_STORE(6) MM_STORE(7) MM_STORE(8) MM_STORE(9) MM_STORE(10) MM_STORE(11)
#undef MM_STORE
}

__attribute__((target("avx512f"))) static void mm_chain16(const mm_job *j, int64_t i, int64_t jp, int64_t k0, int64_t k1,
                                                          float acc[2 * MM_ROWS][MM_COLS]) {
    bool f16 = j->pl->acc == DT_F16;
    if (j->exact && f16) mm_chain16_as(j, i, jp, k0, k1, acc, true, true);
    else if (j->exact) mm_chain16_as(j, i, jp, k0, k1, acc, true, false);
    else if (f16) mm_chain16_as(j, i, jp, k0, k1, acc, false, true);
    else mm_chain16_as(j, i, jp, k0, k1, acc, false, false);
}

/* acc over k in [k0, k1) for rows i .. i + rows - 1 (6, or 12 where wide). */
static void mm_chain(const mm_job *j, int64_t i, int64_t jp, int64_t k0, int64_t k1, float acc[2 * MM_ROWS][MM_COLS],
                     int rows) {
    bool f16 = j->pl->acc == DT_F16;
    if (rows > MM_ROWS) mm_chain16(j, i, jp, k0, k1, acc);
    else if (j->exact && f16) mm_chain_as(j, i, jp, k0, k1, acc, true, true);
    else if (j->exact) mm_chain_as(j, i, jp, k0, k1, acc, true, false);
    else if (f16) mm_chain_as(j, i, jp, k0, k1, acc, false, true);
    else mm_chain_as(j, i, jp, k0, k1, acc, false, false);
}

/* x rounded to f16 and back, as f32_to_f16 and f16_to_f32 do (VCVTPS2PH's RNE). */
static inline __m256 round_f16_v(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

/* tot += one K part's chains, as mm_rows's scalar loop does it, eight lanes
 * at a time: scaled, stored as the partials' dtype (f16 or f32 here), added
 * in the reduction's chain. */
static void mm_sum_partial(const mm_job *j, float acc[][MM_COLS], float tot[][MM_COLS], int rows) {
    const graph_gemm_plan *pl = j->pl;
    __m256 post = _mm256_set1_ps(j->post);
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < MM_COLS; q += 8) {
            __m256 x = _mm256_loadu_ps(&acc[r][q]);
            if (j->post != 1.0f) x = _mm256_mul_ps(x, post);
            if (pl->partials == DT_F16) x = round_f16_v(x);
            __m256 t = _mm256_add_ps(_mm256_loadu_ps(&tot[r][q]), x);
            if (pl->acc == DT_F16) t = round_f16_v(t);
            _mm256_storeu_ps(&tot[r][q], t);
        }
}

/* Row blocks [b, e) of MM_ROWS rows, two at a time where the host is wide. */
static void mm_rows(void *ctx, int64_t b, int64_t e) {
    const mm_job *j = ctx;
    const graph_gemm_plan *pl = j->pl;
    float acc[2 * MM_ROWS][MM_COLS], tot[2 * MM_ROWS][MM_COLS];
    bool wide = num_wide();
    for (int64_t blk = b, nb; blk < e; blk += nb) {
        nb = wide && blk + 1 < e ? 2 : 1;
        int rows = (int)nb * MM_ROWS;
        int64_t i = blk * MM_ROWS;
        for (int64_t jp = 0; jp < j->np; jp++) {
            memset(tot, 0, sizeof tot);
            for (int32_t p = 0; p < pl->nk; p++) {
                mm_chain(j, i, jp, pl->k_bounds[p], pl->k_bounds[p + 1], acc, rows);
                if (pl->nk > 1 && (pl->partials == DT_F16 || pl->partials == DT_F32)) {
                    mm_sum_partial(j, acc, tot, rows);
                    continue;
                }
                for (int r = 0; r < rows; r++)
                    for (int q = 0; q < MM_COLS; q++) {
                        float x = acc[r][q];
                        if (j->post != 1.0f) x *= j->post;
                        if (pl->nk == 1) {
                            tot[r][q] = x;
                            continue;
                        }
                        /* A stored partial, then the reduction's chain. */
                        x = num_round(pl->partials, 0, x);
                        float t = tot[r][q] + x;
                        tot[r][q] = pl->acc == DT_F16 ? to_f16(t) : t;
                    }
            }
            for (int r = 0; r < rows && i + r < j->M; r++)
                for (int q = 0; q < MM_COLS && jp * MM_COLS + q < j->N; q++)
                    j->c[(i + r) * j->N + jp * MM_COLS + q] = tot[r][q];
        }
    }
}

/* The GEMM of op's operands 0 and 1 into out (of type tc), by the plan. */
static void emu_gemm(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float *out, const graph_type *tc) {
    const graph_type *ta = &graph_val(g, op->in[0])->type, *tb = &graph_val(g, op->in[1])->type;
    bool tra = graph_attr_bool(op, ATTR_TRANSPOSE_A), trb = graph_attr_bool(op, ATTR_TRANSPOSE_B);
    int64_t M = tc->dim[tc->rank - 2], N = tc->dim[tc->rank - 1], K = ta->dim[ta->rank - (tra ? 2 : 1)];
    int64_t lda = ta->dim[ta->rank - 1], ldb = tb->dim[tb->rank - 1];
    bool f8 = dtype_is_f8(ta->dtype);
    /* 8-bit operands: an f32 chain sums the codes' products and scales the sum by
     * 2^(sa+sb); an f16 chain holds the result's units, each product scaled (B is,
     * exactly). Unscaling and scaling by a power of two are exact for every 8-bit value. */
    float ua = f8 ? ldexpf(1.0f, -ta->scale) : 1.0f, ub = f8 ? ldexpf(1.0f, -tb->scale) : 1.0f;
    float post = f8 ? ldexpf(1.0f, ta->scale + tb->scale) : 1.0f;
    if (pl->gemm.acc == DT_F16) ub *= post, post = 1.0f;
    int64_t np = (N + MM_COLS - 1) / MM_COLS;
    float *a = xmalloc(sizeof(float) * (size_t)(M * K + 1));
    float *bp = xcalloc((size_t)(np * K * MM_COLS + 1), sizeof(float));
    graph_type ba = *ta, bb = *tb, bc = *tc;
    ba.rank -= 2, bb.rank -= 2, bc.rank -= 2;
    int64_t sa[GRAPH_MAX_RANK], sb[GRAPH_MAX_RANK], idx[GRAPH_MAX_RANK] = {0};
    shape_bstrides(&ba, bc.rank, sa);
    shape_bstrides(&bb, bc.rank, sb);
    int64_t batches = graph_type_numel(&bc);
    for (int64_t t = 0; t < batches; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < bc.rank; i++) oa += idx[i] * sa[i], ob += idx[i] * sb[i];
        const float *A = in[0] + oa * ta->dim[ta->rank - 1] * ta->dim[ta->rank - 2];
        const float *B = in[1] + ob * tb->dim[tb->rank - 1] * tb->dim[tb->rank - 2];
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) a[m * K + k] = (tra ? A[k * lda + m] : A[m * lda + k]) * ua;
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++)
                bp[((n / MM_COLS) * K + k) * MM_COLS + n % MM_COLS] = (trb ? B[n * ldb + k] : B[k * ldb + n]) * ub;
        mm_job j = {a, bp, out + t * M * N, M, N, K, np, &pl->gemm, f8 || (ta->dtype == DT_F16 && tb->dtype == DT_F16),
                    post, tc->dtype, tc->scale};
        util_parallel((M + MM_ROWS - 1) / MM_ROWS, 8, mm_rows, &j);
        for (int i = bc.rank - 1; i >= 0; i--) {
            if (++idx[i] < bc.dim[i]) break;
            idx[i] = 0;
        }
    }
    free(a);
    free(bp);
}

static int emu_matmul(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    emu_gemm(g, op, pl, in, out[0], &graph_val(g, op->out[0])->type);
    return 0;
}

/* ---- rows: softmax and layer norm ------------------------------------------------ */

static int emu_softmax(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    float s = pl->prescale; /* 0: none */
    const graph_type *t = &graph_val(g, op->in[0])->type;
    int64_t ax = graph_attr_int(op, ATTR_AXIS), outer, len, inner;
    if (t->rank == 0) outer = len = inner = 1; /* one row of one */
    else shape_around(t, (int)(ax < 0 ? ax + t->rank : ax), &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *x = in[0] + o * len * inner + i;
            float *y = out[0] + o * len * inner + i, mx = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < len; k++)
                if (x[k * inner] > mx) mx = x[k * inner]; /* NaNs skipped: they come back through exp */
            for (int64_t k = 0; k < len; k++) {
                y[k * inner] = s != 0 ? expf(s * (x[k * inner] - mx)) : expf(x[k * inner] - mx);
                sum = sum + y[k * inner];
            }
            for (int64_t k = 0; k < len; k++) y[k * inner] = y[k * inner] / sum;
        }
    return 0;
}

static int emu_layer_norm(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    const graph_type *t = &graph_val(g, op->in[0])->type;
    int64_t c = t->rank ? t->dim[t->rank - 1] : 1, rows = graph_type_numel(t) / c;
    int64_t part = pl->kind == OP_LAYER_NORM && pl->part > 0 ? pl->part : c;
    float eps = (float)graph_attr_float(op, ATTR_EPS);
    for (int64_t row = 0; row < rows; row++) {
        const float *x = in[0] + row * c;
        float *y = out[0] + row * c;
        num_moments s = num_moments_of(x, (size_t)(part < c ? part : c));
        for (int64_t at = part; at < c; at += part)
            s = num_moments_join(s, num_moments_of(x + at, (size_t)(c - at < part ? c - at : part)));
        float rstd = 1.0f / sqrtf(s.m2 / s.n + eps);
        for (int64_t k = 0; k < c; k++) y[k] = (x[k] - s.mean) * rstd * in[1][k] + in[2][k];
    }
    return 0;
}

/* ---- reduce_sum: f32 chains per block of the reduced axes, then over blocks ----- */

static int emu_reduce_sum(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    const graph_type *t = &graph_val(g, op->in[0])->type;
    const graph_attr *ax = &op->attr[ATTR_AXES];
    bool red[GRAPH_MAX_RANK] = {0};
    for (int i = 0; i < ax->ints.n; i++) red[ax->ints.v[i] < 0 ? ax->ints.v[i] + t->rank : ax->ints.v[i]] = true;
    /* Output offset strides (0 on reduced axes) and block-index strides
     * (row-major over the reduced axes' blocks, 0 on kept ones). */
    int64_t ost[GRAPH_MAX_RANK], bst[GRAPH_MAX_RANK], so = 1, sb = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        ost[i] = red[i] ? 0 : so;
        if (!red[i]) so *= t->dim[i];
        int64_t nb = (t->dim[i] + pl->block[i] - 1) / pl->block[i];
        bst[i] = red[i] ? sb : 0;
        if (red[i]) sb *= nb;
    }
    int64_t nout = so, nblk = sb, n = graph_type_numel(t);
    float *part = xcalloc((size_t)(nout * nblk + 1), sizeof(float));
    int64_t idx[GRAPH_MAX_RANK] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t o = 0, b = 0;
        for (int i = 0; i < t->rank; i++) o += idx[i] * ost[i], b += idx[i] / pl->block[i] * bst[i];
        float *p = &part[o * nblk + b];
        *p = *p + in[0][e];
        for (int i = t->rank - 1; i >= 0; i--) {
            if (++idx[i] < t->dim[i]) break;
            idx[i] = 0;
        }
    }
    for (int64_t o = 0; o < nout; o++) {
        float s = 0.0f;
        for (int64_t b = 0; b < nblk; b++) s = s + part[o * nblk + b];
        out[0][o] = s;
    }
    free(part);
    return 0;
}

/* ---- elementwise ops whose device form differs from the FP32 reference's ---------- */

static int emu_scale(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    int64_t n = graph_type_numel(&graph_val(g, op->out[0])->type);
    float by = pl->folded ? 1.0f : (float)graph_attr_float(op, ATTR_BY); /* folded: the softmax scales */
    for (int64_t i = 0; i < n; i++) out[0][i] = pl->folded ? in[0][i] : in[0][i] * by;
    return 0;
}

/* ---- optimizers: kern.h's f32 forms, states rounded before they feed w' ---------- */

/* n elements with op's attributes: w, g, buf (NULL: no momentum) into w', buf'
 * (buf' of type tb). */
static void emu_sgd_step(const graph_op *op, int64_t n, const float *w_, const float *g_, const float *buf_,
                         const graph_type *tb, float *w_out, float *buf_out) {
    float lr = (float)graph_attr_float(op, ATTR_LR), mom = (float)graph_attr_float(op, ATTR_MOMENTUM),
          wd = (float)graph_attr_float(op, ATTR_WEIGHT_DECAY);
    for (int64_t i = 0; i < n; i++) {
        float w = w_[i], gr = g_[i] + wd * w;
        if (buf_) {
            float buf = num_round(tb->dtype, tb->scale, mom * buf_[i] + gr);
            buf_out[i] = buf;
            gr = buf;
        }
        w_out[i] = w - lr * gr;
    }
}

static int emu_sgd(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    (void)pl;
    bool mom = op->nin == 3;
    emu_sgd_step(op, graph_type_numel(&graph_val(g, op->in[0])->type), in[0], in[1], mom ? in[2] : NULL,
                 mom ? &graph_val(g, op->out[1])->type : NULL, out[0], mom ? out[1] : NULL);
    return 0;
}

/* n elements with op's attributes: in = w, g, m, v into out = w', m', v' (m'
 * and v' of types tm and tv). */
static void emu_adamw_step(const graph_op *op, int64_t n, const float *const *in, const graph_type *tm, const graph_type *tv,
                           float **out) {
    float lr = (float)graph_attr_float(op, ATTR_LR), b1 = (float)graph_attr_float(op, ATTR_BETA1),
          b2 = (float)graph_attr_float(op, ATTR_BETA2), eps = (float)graph_attr_float(op, ATTR_EPS),
          wd = (float)graph_attr_float(op, ATTR_WEIGHT_DECAY);
    double t = (double)graph_attr_int(op, ATTR_STEP);
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    float step = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * wd, c1 = 1.0f - b1, c2 = 1.0f - b2;
    for (int64_t i = 0; i < n; i++) {
        float gr = in[1][i];
        float m = num_round(tm->dtype, tm->scale, b1 * in[2][i] + c1 * gr);
        float v = num_round(tv->dtype, tv->scale, b2 * in[3][i] + c2 * gr * gr);
        out[0][i] = in[0][i] * decay - step * m / (sqrtf(v) / bc2_sqrt + eps);
        out[1][i] = m;
        out[2][i] = v;
    }
}

static int emu_adamw(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    (void)pl;
    emu_adamw_step(op, graph_type_numel(&graph_val(g, op->in[0])->type), (const float *const *)in,
                   &graph_val(g, op->out[1])->type, &graph_val(g, op->out[2])->type, out);
    return 0;
}

/* ---- the fused ops: the plan's GEMM, the gradient rounded to `grad`, the
 * optimizer; bitwise the unfused pair's (P1, docs/epilogue.md) ------------------- */

static float *emu_gradient(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in) {
    graph_type gt = graph_val(g, op->out[0])->type;
    gt.dtype = graph_attr_dtype(op, ATTR_GRAD);
    gt.scale = 0;
    int64_t n = graph_type_numel(&gt);
    float *gr = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    emu_gemm(g, op, pl, in, gr, &gt);
    num_round_buf(gt.dtype, 0, gr, (size_t)n);
    return gr;
}

static int emu_matmul_sgd(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    float *gr = emu_gradient(g, op, pl, in);
    bool mom = op->nin == 4;
    emu_sgd_step(op, graph_type_numel(&graph_val(g, op->out[0])->type), in[2], gr, mom ? in[3] : NULL,
                 mom ? &graph_val(g, op->out[1])->type : NULL, out[0], mom ? out[1] : NULL);
    free(gr);
    return 0;
}

static int emu_matmul_adamw(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    float *gr = emu_gradient(g, op, pl, in);
    const float *opt[4] = {in[2], gr, in[3], in[4]};
    emu_adamw_step(op, graph_type_numel(&graph_val(g, op->out[0])->type), opt, &graph_val(g, op->out[1])->type,
                   &graph_val(g, op->out[2])->type, out);
    free(gr);
    return 0;
}

/* ---- global_norm_clip: partial sums of squares in the plan's rows ------------------ */

typedef struct row_term {
    int64_t row;
    int32_t grad;
    int64_t block;                        /* row-major block index within the gradient */
    int64_t lo[GRAPH_MAX_RANK], hi[GRAPH_MAX_RANK];
} row_term;

static int cmp_term(const void *a, const void *b) {
    const row_term *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    if (x->grad != y->grad) return x->grad < y->grad ? -1 : 1;
    return x->block < y->block ? -1 : x->block > y->block;
}

/* s + the squares of the box [lo, hi) of x (dims dim), row-major. */
static float chain_squares(float s, const float *x, int rank, const int64_t *dim, const int64_t *lo, const int64_t *hi) {
    int64_t e[GRAPH_MAX_RANK];
    for (int i = 0; i < rank; i++) e[i] = lo[i];
    for (;;) {
        int64_t off = 0;
        for (int i = 0; i < rank; i++) off = off * dim[i] + e[i];
        s = s + x[off] * x[off];
        int i = rank - 1;
        for (; i >= 0; i--) {
            if (++e[i] < hi[i]) break;
            e[i] = lo[i];
        }
        if (i < 0) return s;
    }
}

static int emu_global_norm_clip(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    VEC(row_term) terms = {0};
    arena a;
    arena_init(&a);
    for (int32_t k = 0; k < op->nin; k++) {
        const graph_type *t = &graph_val(g, op->in[k])->type;
        const graph_norm_grad *gr = &pl->grads[k];
        int rank = t->rank ? t->rank : 1;
        int64_t dim[GRAPH_MAX_RANK], nb[GRAPH_MAX_RANK], b[GRAPH_MAX_RANK] = {0}, nblocks = 1;
        int64_t blk[GRAPH_MAX_RANK], rst[GRAPH_MAX_RANK];
        for (int i = 0; i < rank; i++) {
            dim[i] = t->rank ? t->dim[i] : 1; /* a scalar is one block of one */
            blk[i] = t->rank ? gr->block[i] : 1;
            rst[i] = t->rank ? gr->row_stride[i] : 0;
            nb[i] = (dim[i] + blk[i] - 1) / blk[i];
            nblocks *= nb[i];
        }
        for (int64_t bi = 0; bi < nblocks; bi++) {
            row_term rt = {.row = gr->row_base, .grad = k, .block = bi};
            for (int i = 0; i < rank; i++) {
                rt.lo[i] = b[i] * blk[i];
                rt.hi[i] = rt.lo[i] + blk[i] < dim[i] ? rt.lo[i] + blk[i] : dim[i];
                rt.row += b[i] * rst[i];
            }
            vec_push(&a, &terms, rt);
            for (int i = rank - 1; i >= 0; i--) {
                if (++b[i] < nb[i]) break;
                b[i] = 0;
            }
        }
    }
    if (terms.n) qsort(terms.v, (size_t)terms.n, sizeof(row_term), cmp_term);
    /* One chain per (row, gradient) over its blocks in order; each row
     * chains its gradients; the rows chain ascending. */
    float total = 0.0f;
    for (int32_t i = 0; i < terms.n;) {
        float rs = 0.0f;
        int32_t j = i;
        while (j < terms.n && terms.v[j].row == terms.v[i].row) {
            const row_term *first = &terms.v[j];
            const graph_type *t = &graph_val(g, op->in[first->grad])->type;
            int rank = t->rank ? t->rank : 1;
            int64_t dim[GRAPH_MAX_RANK];
            for (int q = 0; q < rank; q++) dim[q] = t->rank ? t->dim[q] : 1;
            float s = 0.0f;
            for (; j < terms.n && terms.v[j].row == first->row && terms.v[j].grad == first->grad; j++)
                s = chain_squares(s, in[first->grad], rank, dim, terms.v[j].lo, terms.v[j].hi);
            rs = rs + s;
        }
        total = total + rs;
        i = j;
    }
    arena_free(&a);
    float c = (float)graph_attr_float(op, ATTR_MAX_NORM) / (sqrtf(total) + 1e-6f);
    if (c > 1.0f) c = 1.0f; /* a NaN coefficient stays NaN */
    for (int32_t k = 0; k < op->nin; k++) {
        int64_t n = graph_type_numel(&graph_val(g, op->in[k])->type);
        for (int64_t i = 0; i < n; i++) out[k][i] = in[k][i] * c;
    }
    return 0;
}

/* The fused sums: the partials summed over their first axis in f32, in
 * order (a REDUCE_EPI's chain, as one block of the unfused reduce_sum),
 * rounded to `grad`, then the optimizer. */
static float *emu_sum(const graph *g, const graph_op *op, const float *p) {
    int64_t n = graph_type_numel(&graph_val(g, op->out[0])->type), parts = graph_val(g, op->in[0])->type.dim[0];
    float *gr = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int64_t j = 0; j < parts; j++) s = s + p[j * n + i];
        gr[i] = s;
    }
    num_round_buf(graph_attr_dtype(op, ATTR_GRAD), 0, gr, (size_t)n);
    return gr;
}

static int emu_sum_sgd(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    (void)pl;
    float *gr = emu_sum(g, op, in[0]);
    bool mom = op->nin == 3;
    emu_sgd_step(op, graph_type_numel(&graph_val(g, op->out[0])->type), in[1], gr, mom ? in[2] : NULL,
                 mom ? &graph_val(g, op->out[1])->type : NULL, out[0], mom ? out[1] : NULL);
    free(gr);
    return 0;
}

static int emu_sum_adamw(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out) {
    (void)pl;
    float *gr = emu_sum(g, op, in[0]);
    const float *opt[4] = {in[1], gr, in[2], in[3]};
    emu_adamw_step(op, graph_type_numel(&graph_val(g, op->out[0])->type), opt, &graph_val(g, op->out[1])->type,
                   &graph_val(g, op->out[2])->type, out);
    free(gr);
    return 0;
}

emu_fn emu_kernel(graph_op_kind kind) {
    switch (kind) {
    case OP_MATMUL: return emu_matmul;
    case OP_SOFTMAX: return emu_softmax;
    case OP_LAYER_NORM: return emu_layer_norm;
    case OP_REDUCE_SUM: return emu_reduce_sum;
    case OP_SCALE: return emu_scale;
    case OP_SGD: return emu_sgd;
    case OP_ADAMW: return emu_adamw;
    case OP_GLOBAL_NORM_CLIP: return emu_global_norm_clip;
    case OP_MATMUL_SGD: return emu_matmul_sgd;
    case OP_MATMUL_ADAMW: return emu_matmul_adamw;
    case OP_SUM_SGD: return emu_sum_sgd;
    case OP_SUM_ADAMW: return emu_sum_adamw;
    default: return NULL;
    }
}

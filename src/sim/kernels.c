/* kernels.c: the simulator's tile kernels (kern.h's arithmetic, bit for bit; what each run costs is kern/cycles.c's).
 *
 * Numerics: the machine's arithmetic, which the tests check bit for bit against a scalar
 * definition (docs/sim.md has the same rules with the reasons):
 *
 *   - Operands are read in their dtype (8-bit: decode(code) * 2^scale); every result is written
 *     in its dtype with one round-to-nearest-even (8-bit results saturate, as num_encode_buf does).
 *     All arithmetic is f32 (x86 SSE/AVX, no excess precision, no contraction: the file is built
 *     with -ffp-contract=off and sets FP_CONTRACT off for clang).
 *   - GEMM: each output element is one chain acc = acc + a*b over k ascending from acc = 0. With
 *     acc f16 the chain rounds to f16 after every step. f16 x f16 and 8-bit x 8-bit products are
 *     exact in f32, so the chain may use FMA; any other pairing (f32, bf16, mixed) multiplies and
 *     adds separately, so the result never depends on FMA. 8-bit operands are decoded unscaled
 *     and the final sum is multiplied by 2^(sa+sb) (exact: a power of two in range), as the AMP
 *     applies the two scales after accumulating; this matters only for acc f16.
 *   - REDUCE: the same chain over j ascending, in acc, rounded to grad (unless f32), plus a bias
 *     if any; a residual: the value rounded to out's dtype, plus the residual, rounded again. REDUCE_SUM: one f32 chain per output element in box order. SUMSQ, CLIP_COEF: one
 *     f32 chain in element order (SUMSQ's continues from the value its output holds).
 *   - EWISE: the op in f32 on the decoded operands, one rounding to the out dtype. gelu and
 *     gelu_grad are num.h's num_gelu and num_gelu_deriv (tanh form, tanhf); gelu_erf is
 *     num_gelu_erf (erff). scale is a * f[0]; cast is a. relu .. erf are num.h's
 *     NUM_UNARY_OPS (num_relu .. num_erf).
 *     For add, sub and mul of f16 operands into f16 this equals native f16 arithmetic (f32 has
 *     24 >= 2*11 + 2 bits, so the double rounding is innocuous).
 *   - SOFTMAX: f32 max (NaNs skipped), e = expf(x - max) (expf(f[0] * (x - max)) with a folded
 *     scale f[0] > 0), f32 sum in order, out = e / sum.
 *   - LAYER_NORM: mean = (f32 sum in order) / n; var = (f32 sum of (x - mean)^2 in order) / n
 *     (two passes, biased: num_moments_of); out = (x - mean) * (1 / sqrtf(var + eps)) * gamma + beta.
 *     A row cut into parts over tiles: each part's LN_MOMENTS (num_moments_of), joined in part
 *     order by num_moments_join, var = m2 / n.
 *   - SGD, ADAMW: f32 per element in the order of kern.h; the bias corrections 1 - beta^step in
 *     double, then f32. Updated states are rounded to their stored dtype before they feed w'
 *     (what the next step reads back; a no-op for f32 states).
 *
 * Speed: GEMM decodes B (and A unless it is 8-bit, which the block reads through a 256-entry
 * table) once per K chunk into f32 scratch and runs a 6x16 AVX2 register block (12x16 in 512-bit
 * registers where num_wide(): the same chains, the same bits); every other
 * kernel streams rows through small f32 chunks with the bulk converters of num.h. Scratch is per thread (a pthread key whose destructor frees it), so runs on different
 * threads never share memory and a run allocates only when a buffer has to grow.
 */
#include "sim_kernels.h"
#include "../num/chain.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- cycle constants the machine description does not have yet ------------------------- */

/* Each of these should become a machine field; docs/sim.md gives the fit behind the values. */

/* ---- per-thread scratch ------------------------------------------------------------------ */

enum { SCR_A, SCR_B, SCR_C, SCR_T0, SCR_T1, SCR_T2, SCR_T3, SCR_E0, SCR_E1, SCR_COUNT };

typedef struct scratch {
    float *p[SCR_COUNT];
    size_t cap[SCR_COUNT]; /* floats */
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
    scratch *s = v;
    for (int i = 0; i < SCR_COUNT; i++) free(s->p[i]);
    free(s);
}

static void scratch_key_make(void) { TS_ASSERT(pthread_key_create(&scratch_key, scratch_free) == 0); }

/* At least n floats of this thread's slot, 64-byte aligned; contents are not kept on growth. */
static float *scratch_floats(int slot, size_t n) {
    pthread_once(&scratch_once, scratch_key_make);
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = xcalloc(1, sizeof *s);
        TS_ASSERT(pthread_setspecific(scratch_key, s) == 0);
    }
    if (s->cap[slot] < n) {
        size_t cap = s->cap[slot] * 2 > n ? s->cap[slot] * 2 : n;
        cap = (cap + 15) & ~(size_t)15; /* whole cache lines, as aligned_alloc requires */
        free(s->p[slot]);
        s->p[slot] = aligned_alloc(64, cap * sizeof(float));
        TS_ASSERT(s->p[slot] != NULL); /* out of host memory, as xmalloc treats it */
        s->cap[slot] = cap;
    }
    return s->p[slot];
}

/* ---- operands: strided runs of elements in any dtype ------------------------------------ */

/* One operand as the kernels see it: element e lies at p + e * step. */
typedef struct opnd {
    uint8_t *p;
    dtype t;
    int scale;    /* 8-bit scale exponent; ignored for other dtypes */
    int64_t step; /* bytes between consecutive elements; 0 broadcasts one element */
} opnd;

static opnd opnd_of(const kernel_run *r, uint8_t *p, int i, int64_t step) {
    return (opnd){p, (dtype)r->dt[i], dtype_is_f8((dtype)r->dt[i]) ? r->scale[i] : 0, step};
}

/* Operand i of r as a contiguous array. */
static opnd opnd_dense(const kernel_run *r, uint8_t *const ptr[], int i) {
    return opnd_of(r, ptr[i], i, dtype_bytes((dtype)r->dt[i]));
}

static float elem_get(dtype t, int scale, const uint8_t *p) {
    uint16_t h;
    float x;
    switch (t) {
    case DT_F32: memcpy(&x, p, 4); return x;
    case DT_F16: memcpy(&h, p, 2); return f16_to_f32(h);
    case DT_BF16: memcpy(&h, p, 2); return bf16_to_f32(h);
    case DT_F8E4M3:
    case DT_F8E5M2:
    case DT_F143: return f8_decode(t, *p, scale);
    default: TS_UNREACHABLE(); /* i32 operands are rejected by kernel_run_valid */
    }
}

static void elem_put(dtype t, int scale, uint8_t *p, float x) {
    uint16_t h;
    switch (t) {
    case DT_F32: memcpy(p, &x, 4); return;
    case DT_F16: h = f32_to_f16(x); memcpy(p, &h, 2); return;
    case DT_BF16: h = f32_to_bf16(x); memcpy(p, &h, 2); return;
    case DT_F8E4M3:
    case DT_F8E5M2:
    case DT_F143: *p = f8_encode(t, x, scale, true); return;
    default: TS_UNREACHABLE();
    }
}

/* Elements [first, first + n) of o, decoded to f32. */
static void opnd_read(const opnd *o, uint64_t first, size_t n, float *dst) {
    const uint8_t *p = o->p + (int64_t)first * o->step;
    if (o->step == dtype_bytes(o->t)) {
        num_decode_buf(o->t, o->scale, p, dst, n);
    } else if (o->step == 0) {
        float x = elem_get(o->t, o->scale, p);
        for (size_t i = 0; i < n; i++) dst[i] = x;
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = elem_get(o->t, o->scale, p + (int64_t)i * o->step);
    }
}

/* Elements [first, first + n) of o, rounded from f32. */
static void opnd_write(const opnd *o, uint64_t first, size_t n, const float *src) {
    uint8_t *p = o->p + (int64_t)first * o->step;
    if (o->step == dtype_bytes(o->t)) {
        num_encode_buf(o->t, o->scale, src, p, n);
    } else {
        for (size_t i = 0; i < n; i++) elem_put(o->t, o->scale, p + (int64_t)i * o->step, src[i]);
    }
}

/* One row of n values written by a row kernel (SOFTMAX, LAYER_NORM): contiguous, or with a
 * panel stride (stride[0][1] != 0) in AMP-left panels of 32 bytes, each panel_stride apart. */
static void row_write(const kernel_run *r, const opnd *out, size_t n, const float *x) {
    int64_t ps = r->stride[0][1];
    if (ps == 0) {
        opnd_write(out, 0, n, x);
        return;
    }
    size_t pw = KERNEL_AMP_PANEL_BYTES / (size_t)dtype_bytes(out->t);
    for (size_t e0 = 0; e0 < n; e0 += pw) {
        opnd o = *out;
        o.p += (int64_t)(e0 / pw) * ps;
        opnd_write(&o, 0, n - e0 < pw ? n - e0 : pw, x + e0);
    }
}

/* Elements per chunk of the streaming kernels: a few f32 rows that stay in L1. */
enum { CHUNK = 512 };

/* ---- boxes: the strided iteration space of EWISE and REDUCE_SUM -------------------------- */

enum { BOX_MAX_OPS = 3 }; /* operands an EWISE or REDUCE_SUM box walks */

typedef kernel_box box;

/* Called once per innermost row: p[i] is operand i's first element, step[i] its bytes per
 * element along the row. */
typedef void row_fn(void *ctx, uint8_t *const p[BOX_MAX_OPS], uint64_t len, const int64_t step[BOX_MAX_OPS]);

/* Visits the rows of b in box order (outer axes odometer-style). */
static void box_walk(const box *b, uint8_t *const base[BOX_MAX_OPS], row_fn *fn, void *ctx) {
    int inner = b->nd - 1;
    int64_t idx[KERNEL_BOX_AXES] = {0};
    int64_t step[BOX_MAX_OPS] = {0};
    for (int i = 0; i < b->nops; i++) step[i] = b->st[i][inner];
    for (;;) {
        uint8_t *p[BOX_MAX_OPS] = {0};
        for (int i = 0; i < b->nops; i++) {
            int64_t off = 0;
            for (int d = 0; d < inner; d++) off += (int64_t)idx[d] * b->st[i][d];
            p[i] = base[i] + off;
        }
        fn(ctx, p, b->n[inner], step);
        int d = inner - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < b->n[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* ---- GEMM --------------------------------------------------------------------------------- */

/* Register block GEMM_MR x GEMM_NR (12 accumulators of 8 lanes, padded rows and columns
 * computed and dropped); K is taken in chunks of GEMM_KC so one packed B panel (16 KiB) stays in
 * L1 while A streams from L2. Chunks keep k ascending: the f32 partial sums between chunks are
 * the chain's own values, so chunking changes nothing. */
enum { GEMM_MR = 6, GEMM_NR = 16, GEMM_KC = 256 };

/* Where a register block reads A: rows of decoded floats, or (8-bit operands) the raw codes
 * looked up in a 256-entry table, so A is never decoded into scratch. */
typedef struct gemm_a {
    const float *f;         /* decoded: row r, k = q*w + kk at f[q*panel + r*w + kk] */
    const uint8_t *code;    /* coded: row r, k = q*w + kk at code[q*panel + row[r] + kk] */
    const float *table;     /* coded: the unscaled value of every code */
    size_t panel;           /* floats (decoded) or bytes (coded) from one K panel to the next */
    int w;                  /* k per panel */
    size_t row[2 * GEMM_MR]; /* coded: byte offset of each row, clamped to the last real row */
} gemm_a;

/* c[6][16] = (load_c ? c : 0) + A * b over kc values of k; b holds 16 floats per k. */
static inline __attribute__((always_inline)) void gemm_block(const gemm_a *a, int kc, const float *b, float *c, size_t ldc,
                                                             bool load_c, bool exact, bool f16acc, bool coded) {
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
#define GEMM_LOAD(r)                                                                   \
    c##r##0 = load_c ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();             \
    c##r##1 = load_c ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    GEMM_LOAD(0) GEMM_LOAD(1) GEMM_LOAD(2) GEMM_LOAD(3) GEMM_LOAD(4) GEMM_LOAD(5)
#undef GEMM_LOAD
    const int w = a->w;
    const float *table = a->table;
    const size_t ro0 = a->row[0], ro1 = a->row[1], ro2 = a->row[2], ro3 = a->row[3], ro4 = a->row[4], ro5 = a->row[5];
    for (int k0 = 0; k0 < kc; k0 += w) {
        const float *ap = coded ? NULL : a->f + (size_t)(k0 / w) * a->panel;
        const uint8_t *cp = coded ? a->code + (size_t)(k0 / w) * a->panel : NULL;
        const float *bk = b + (size_t)k0 * GEMM_NR;
        int kn = kc - k0 < w ? kc - k0 : w;
        for (int kk = 0; kk < kn; kk++, bk += GEMM_NR) {
            __m256 b0 = _mm256_load_ps(bk), b1 = _mm256_load_ps(bk + 8);
#define GEMM_ROW(r)                                                                                      \
    {                                                                                                    \
        __m256 ar = coded ? _mm256_broadcast_ss(table + cp[ro##r + kk]) : _mm256_broadcast_ss(ap + r * w + kk); \
        c##r##0 = num_chain_step(c##r##0, ar, b0, exact, f16acc);                                             \
        c##r##1 = num_chain_step(c##r##1, ar, b1, exact, f16acc);                                             \
    }
            GEMM_ROW(0) GEMM_ROW(1) GEMM_ROW(2) GEMM_ROW(3) GEMM_ROW(4) GEMM_ROW(5)
#undef GEMM_ROW
        }
    }
#define GEMM_STORE(r)                               \
    _mm256_storeu_ps(c + r * ldc, c##r##0);         \
    _mm256_storeu_ps(c + r * ldc + 8, c##r##1);
    GEMM_STORE(0) GEMM_STORE(1) GEMM_STORE(2) GEMM_STORE(3) GEMM_STORE(4) GEMM_STORE(5)
#undef GEMM_STORE
}

/* gemm_block for twelve rows, c[12][16], one 512-bit register a row
 * (num_chain_step16: the same bits per chain): rows 6..11 are read where
 * a second 6-row block at i + 6 would read them (a->f continues row by
 * row; a->row holds all twelve). Only where num_wide(). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
gemm_block16(const gemm_a *a, int kc, const float *b, float *c, size_t ldc, bool load_c, bool exact, bool f16acc,
             bool coded) {
    __m512 c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
#define GEMM_LOAD(r) c##r = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    GEMM_LOAD(0) GEMM_LOAD(1) GEMM_LOAD(2) GEMM_LOAD(3) GEMM_LOAD(4) GEMM_LOAD(5)
    GEMM_LOAD(6) GEMM_LOAD(7) GEMM_LOAD(8) GEMM_LOAD(9) GEMM_LOAD(10) GEMM_LOAD(11)
#undef GEMM_LOAD
    const int w = a->w;
    const float *table = a->table;
    for (int k0 = 0; k0 < kc; k0 += w) {
        const float *ap = coded ? NULL : a->f + (size_t)(k0 / w) * a->panel;
        const uint8_t *cp = coded ? a->code + (size_t)(k0 / w) * a->panel : NULL;
        const float *bk = b + (size_t)k0 * GEMM_NR;
        int kn = kc - k0 < w ? kc - k0 : w;
        for (int kk = 0; kk < kn; kk++, bk += GEMM_NR) {
            __m512 bv = _mm512_load_ps(bk);
#define GEMM_ROW(r)                                                                                 \
    c##r = num_chain_step16(c##r, _mm512_set1_ps(coded ? table[cp[a->row[r] + kk]] : ap[r * w + kk]), \
                            bv, exact, f16acc);
            GEMM_ROW(0) GEMM_ROW(1) GEMM_ROW(2) GEMM_ROW(3) GEMM_ROW(4) GEMM_ROW(5)
            GEMM_ROW(6) GEMM_ROW(7) GEMM_ROW(8) GEMM_ROW(9) GEMM_ROW(10) GEMM_ROW(11)
#undef GEMM_ROW
        }
    }
#define GEMM_STORE(r) _mm512_storeu_ps(c + r * ldc, c##r);
    GEMM_STORE(0) GEMM_STORE(1) GEMM_STORE(2) GEMM_STORE(3) GEMM_STORE(4) GEMM_STORE(5)
    GEMM_STORE(6) GEMM_STORE(7) GEMM_STORE(8) GEMM_STORE(9) GEMM_STORE(10) GEMM_STORE(11)
#undef GEMM_STORE
}

typedef void gemm_block_fn(const gemm_a *a, int kc, const float *b, float *c, size_t ldc, bool load_c);

/* The arithmetic variants, each compiled with its choices folded in, in both widths
 * (block12_*: 512-bit, for num_wide() hosts). 8-bit products are exact, so the coded
 * variants always fuse. */
#define GEMM_VARIANT(name, exact, f16acc, coded)                                                                   \
    static void block_##name(const gemm_a *a, int kc, const float *b, float *c, size_t ldc, bool ld) {              \
        gemm_block(a, kc, b, c, ldc, ld, exact, f16acc, coded);                                                    \
    }                                                                                                              \
    __attribute__((target("avx512f"))) static void block12_##name(const gemm_a *a, int kc, const float *b, float *c, \
                                                                  size_t ldc, bool ld) {                          \
        gemm_block16(a, kc, b, c, ldc, ld, exact, f16acc, coded);                                                  \
    }
GEMM_VARIANT(fma, true, false, false)
GEMM_VARIANT(muladd, false, false, false)
GEMM_VARIANT(fma_f16, true, true, false)
GEMM_VARIANT(muladd_f16, false, true, false)
GEMM_VARIANT(code, true, false, true)
GEMM_VARIANT(code_f16, true, true, true)
#undef GEMM_VARIANT

/* Unscaled values of every 8-bit code, per format, built once. */
static float f8_tables[3][256];
static pthread_once_t f8_tables_once = PTHREAD_ONCE_INIT;

static void f8_tables_build(void) {
    static const dtype f8[3] = {DT_F8E4M3, DT_F8E5M2, DT_F143};
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 256; c++) f8_tables[i][c] = f8_decode(f8[i], (uint8_t)c, 0);
}

static const float *f8_table(dtype t) {
    pthread_once(&f8_tables_once, f8_tables_build);
    TS_ASSERT(dtype_is_f8(t));
    return f8_tables[t == DT_F8E4M3 ? 0 : t == DT_F8E5M2 ? 1 : 2];
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* The 8-bit scales 2^(sa+sb): an f32 chain sums the codes' products and the AMP scales the
 * finished sum (exact in f32); an f16 chain holds the result's units, so each product is
 * scaled (gemm_band scales B, exactly) and nothing is left to apply after. */
static float gemm_scale(const kernel_run *r) {
    return dtype_is_f8((dtype)r->dt[0]) ? ldexpf(1.0f, r->scale[0] + r->scale[1]) : 1.0f;
}
static float gemm_post(const kernel_run *r) { return r->acc == DT_F16 ? 1.0f : gemm_scale(r); }

/* Rows [i0, i0 + rows) of batch entry g of r's product (operands 0 and 1) into c, `rows` rows of
 * Np floats (Np: N rounded up to whole register panels): each element's whole chain over k
 * ascending, exactly as if all M rows were computed at once (rows only select which chains run).
 * The caller applies what gemm_post says of the 8-bit scales. */
static void gemm_band(const kernel_run *r, uint8_t *const ptr[], uint32_t g, size_t i0, size_t rows, float *c) {
    dtype ta = (dtype)r->dt[0], tb = (dtype)r->dt[1];
    bool f8 = dtype_is_f8(ta);
    bool exact = f8 || (ta == DT_F16 && tb == DT_F16);
    bool f16acc = r->acc == DT_F16;
    float pre = f8 && f16acc ? gemm_scale(r) : 1.0f; /* see gemm_post */
    gemm_block_fn *block = f8      ? (f16acc ? block_code_f16 : block_code)
                           : exact ? (f16acc ? block_fma_f16 : block_fma)
                                   : (f16acc ? block_muladd_f16 : block_muladd);
    gemm_block_fn *block12 = !num_wide() ? NULL
                             : f8        ? (f16acc ? block12_code_f16 : block12_code)
                             : exact     ? (f16acc ? block12_fma_f16 : block12_fma)
                                         : (f16acc ? block12_muladd_f16 : block12_muladd);
    size_t M = rows, N = r->n[2], K = r->n[3];
    int w = KERNEL_AMP_PANEL_BYTES / dtype_bytes(ta);
    size_t Mp = round_up(M, GEMM_MR), Np = round_up(N, GEMM_NR);
    size_t kc_max = K < GEMM_KC ? round_up(K, (size_t)w) : GEMM_KC;
    size_t a_panel = Mp * (size_t)w; /* floats per decoded K panel */
    float *a = f8 ? NULL : scratch_floats(SCR_A, Mp * kc_max);
    float *bp = scratch_floats(SCR_B, Np * kc_max);
    float *row = scratch_floats(SCR_T0, Np);
    for (size_t j = N; j < Np; j++) row[j] = 0; /* padding columns stay zero */
    _Static_assert(GEMM_KC % KERNEL_AMP_PANEL_BYTES == 0, "K chunks hold whole A panels (w divides 32)");
    /* Row m of an AMP-left panel is 32 bytes at m * 32: the band starts i0 rows in. */
    const uint8_t *A = ptr[0] + (int64_t)g * r->stride[0][0] + (int64_t)i0 * KERNEL_AMP_PANEL_BYTES;
    const uint8_t *B = ptr[1] + (int64_t)g * r->stride[1][0];
    for (size_t k0 = 0; k0 < K; k0 += GEMM_KC) {
        size_t kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
        /* A: 8-bit A stays coded, the block looks each code up as it goes. Otherwise each K
         * panel (M rows of 32 bytes, contiguous) is decoded whole; the last panel's lanes
         * past K are decoded too (they are inside the operand) but never used. */
        const uint8_t *Ak = A + (int64_t)(k0 / (size_t)w) * r->stride[0][1];
        gemm_a ga = {.f = a, .panel = a_panel, .w = w};
        if (f8) {
            ga = (gemm_a){.code = Ak, .table = f8_table(ta), .panel = (size_t)r->stride[0][1], .w = w};
        } else {
            for (size_t q = 0; q * (size_t)w < kc; q++) {
                float *dst = a + q * a_panel;
                num_decode_buf(ta, 0, Ak + (int64_t)q * r->stride[0][1], dst, M * (size_t)w);
                memset(dst + M * (size_t)w, 0, (Mp - M) * (size_t)w * sizeof(float));
            }
        }
        /* B: rows of N, decoded and dealt into 16-column panels of kc rows
         * (strided columns, a transposed operand's, element by element). */
        int64_t bcol = r->stride[1][2];
        for (size_t k = 0; k < kc; k++) {
            const uint8_t *Bk = B + (int64_t)(k0 + k) * r->stride[1][1];
            if (bcol == 0 || bcol == dtype_bytes(tb))
                num_decode_buf(tb, 0, Bk, row, N);
            else
                for (size_t j = 0; j < N; j++) num_decode_buf(tb, 0, Bk + (int64_t)j * bcol, row + j, 1);
            if (pre != 1.0f)
                for (size_t j = 0; j < N; j++) row[j] *= pre;
            for (size_t jp = 0; jp < Np / GEMM_NR; jp++)
                memcpy(bp + (jp * kc + k) * GEMM_NR, row + jp * GEMM_NR, GEMM_NR * sizeof(float));
        }
        /* Twelve rows at a time where the host is wide, a last six alone. */
        for (size_t jp = 0; jp < Np / GEMM_NR; jp++)
            for (size_t i = 0, step; i < Mp; i += step) {
                step = block12 && i + 2 * GEMM_MR <= Mp ? 2 * GEMM_MR : GEMM_MR;
                gemm_a gi = ga;
                if (f8)
                    for (size_t rr = 0; rr < step; rr++) gi.row[rr] = (i + rr < M ? i + rr : M - 1) * KERNEL_AMP_PANEL_BYTES;
                else
                    gi.f = a + i * (size_t)w;
                (step > GEMM_MR ? block12 : block)(&gi, (int)kc, bp + jp * kc * GEMM_NR, c + i * Np + jp * GEMM_NR, Np, k0 > 0);
            }
    }
}


static void run_gemm(const kernel_run *r, uint8_t *const ptr[]) {
    dtype tc = (dtype)r->dt[2];
    float post = gemm_post(r);
    size_t M = r->n[1], N = r->n[2], Np = round_up(N, GEMM_NR);
    float *c = scratch_floats(SCR_C, round_up(M, GEMM_MR) * Np);
    for (uint32_t g = 0; g < r->n[0]; g++) {
        gemm_band(r, ptr, g, 0, M, c);
        uint8_t *C = ptr[2] + (int64_t)g * r->stride[2][0];
        opnd out = opnd_of(r, NULL, 2, dtype_bytes(tc));
        for (size_t m = 0; m < M; m++) {
            float *cm = c + m * Np;
            if (post != 1.0f)
                for (size_t j = 0; j < N; j++) cm[j] *= post;
            out.p = C + (int64_t)m * r->stride[2][1];
            opnd_write(&out, 0, N, cm);
        }
    }
}

/* ---- optimizer arithmetic: the optimizer kernels and the epilogues run these lines ------------ */

/* SGD on n values, in place: g' = g + wd w; with momentum (buf non-NULL) buf' = mom buf + g',
 * rounded to the state's stored dtype (the state as stored feeds w'); w' = w - lr (buf' or g'). */
static void sgd_update(float lr, float mom, float wd, size_t n, float *w, float *g, float *buf, const opnd *state) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] + wd * w[i];
    if (buf) {
        for (size_t i = 0; i < n; i++) buf[i] = mom * buf[i] + g[i];
        num_round_buf(state->t, state->scale, buf, n);
    }
    const float *step = buf ? buf : g;
    for (size_t i = 0; i < n; i++) w[i] = w[i] - lr * step[i];
}

/* Adam's moments on n values, in place: m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2. */
static void adam_moments(float b1, float b2, size_t n, const float *g, float *m, float *v) {
    float c1 = 1.0f - b1, c2 = 1.0f - b2;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + c1 * g[i];
        v[i] = b2 * v[i] + c2 * g[i] * g[i];
    }
}

/* AdamW's weight line at step n[1] from f = lr, beta1, beta2, eps, wd (ADAMW and ADAMW_APPLY):
 * w' = w (1 - lr wd) - lr / (1 - b1^t) m' / (sqrt(v') / sqrt(1 - b2^t) + eps), in place. */
typedef struct adamw_line {
    float step_size, bc2_sqrt, decay, eps;
} adamw_line;

static adamw_line adamw_line_of(const kernel_run *r) {
    float lr = r->f[0], b1 = r->f[1], b2 = r->f[2], eps = r->f[3], wd = r->f[4];
    double t = (double)r->n[1];
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    return (adamw_line){lr / bc1, sqrtf(bc2), 1.0f - lr * wd, eps};
}

static void adamw_weights(const adamw_line *k, size_t n, float *w, const float *m, const float *v) {
    for (size_t i = 0; i < n; i++) w[i] = w[i] * k->decay - k->step_size * m[i] / (sqrtf(v[i]) / k->bc2_sqrt + k->eps);
}

/* ---- epilogues: the optimizer on each gradient value where it is completed ------------------ */

/* n gradient values g (already rounded to the gradient's dtype) at element `at` of the epilogue
 * operands E0..E3 (operands base..base+3), with SGD's or ADAM's arithmetic exactly as run_sgd and
 * run_adamw write it; g is overwritten. */
static void epilogue(const kernel_run *r, uint8_t *const ptr[], int base, uint64_t at, size_t n, float *g) {
    float *x = scratch_floats(SCR_E0, n), *y = scratch_floats(SCR_E1, n);
    opnd e0 = opnd_dense(r, ptr, base), e2 = opnd_dense(r, ptr, base + 2);
    if (r->epi == KERNEL_EPI_SGD) {
        bool momentum = r->f[1] != 0.0f;
        opnd e1 = momentum ? opnd_dense(r, ptr, base + 1) : e0, e3 = momentum ? opnd_dense(r, ptr, base + 3) : e0;
        opnd_read(&e0, at, n, x); /* w */
        if (momentum) opnd_read(&e1, at, n, y);
        sgd_update(r->f[0], r->f[1], r->f[2], n, x, g, momentum ? y : NULL, &e3);
        if (momentum) opnd_write(&e3, at, n, y);
        opnd_write(&e2, at, n, x);
        return;
    }
    opnd e1 = opnd_dense(r, ptr, base + 1), e3 = opnd_dense(r, ptr, base + 3);
    opnd_read(&e0, at, n, x); /* m */
    opnd_read(&e1, at, n, y); /* v */
    adam_moments(r->f[0], r->f[1], n, g, x, y);
    opnd_write(&e2, at, n, x);
    opnd_write(&e3, at, n, y);
}

/* Rows of the tile's block computed at a time: the working set is a band of EPI_ROWS x N f32
 * values, never the whole block (docs/epilogue.md). */
enum { EPI_ROWS = 8 * GEMM_MR };

static void run_gemm_epi(const kernel_run *r, uint8_t *const ptr[]) {
    float post = gemm_post(r);
    dtype gt = kernel_epilogue_grad(r);
    size_t M = r->n[1], N = r->n[2], Np = round_up(N, GEMM_NR);
    float *c = scratch_floats(SCR_C, EPI_ROWS * Np);
    for (size_t i0 = 0; i0 < M; i0 += EPI_ROWS) {
        size_t rows = M - i0 < EPI_ROWS ? M - i0 : EPI_ROWS;
        gemm_band(r, ptr, 0, i0, rows, c);
        for (size_t m = 0; m < rows; m++) {
            float *cm = c + m * Np;
            if (post != 1.0f)
                for (size_t j = 0; j < N; j++) cm[j] *= post;
            num_round_buf(gt, 0, cm, N); /* what a stored gradient would hold */
            epilogue(r, ptr, 2, (uint64_t)(i0 + m) * (uint64_t)r->stride[2][1], N, cm);
        }
    }
}

/* ---- REDUCE ------------------------------------------------------------------------------- */

/* Operand 0 is the output, operand 1 the input (slices stride[1][0] apart). */
static void run_reduce(const kernel_run *r, uint8_t *const ptr[]) {
    size_t n = r->n[1];
    float *acc = scratch_floats(SCR_T0, n), *x = scratch_floats(SCR_T1, n);
    memset(acc, 0, n * sizeof(float));
    opnd in = opnd_dense(r, ptr, 1);
    uint32_t own = r->own > 0 ? (uint32_t)r->own - 1 : UINT32_MAX; /* the partial read from ptr3 (kern.h) */
    for (uint32_t j = 0; j < r->n[0]; j++) {
        in.p = j == own ? ptr[3] : ptr[1] + (int64_t)j * r->stride[1][0];
        opnd_read(&in, 0, n, x);
        for (size_t e = 0; e < n; e++) acc[e] = acc[e] + x[e];
        if (r->acc == DT_F16) num_round_buf(DT_F16, 0, acc, n);
    }
    /* The sum rounded to grad first: the product's dtype before a bias, or
     * the dtype a cast done by the reduction reads (kern.h). */
    if (r->grad != DT_F32) num_round_buf((dtype)r->grad, 0, acc, n);
    if (r->n[2]) { /* the bias, added to the rounded product */
        size_t w = r->n[2], rep = r->n[3] > 1 ? r->n[3] : 1;
        float *b = scratch_floats(SCR_T2, w);
        opnd bias = opnd_dense(r, ptr, 2);
        opnd_read(&bias, 0, w, b);
        for (size_t e = 0; e < n; e++) acc[e] = acc[e] + b[e / rep % w];
    }
    if (r->gelu != KERNEL_REDUCE_NO_GELU) { /* a GeLU done by the reduction: the sum's dtype, then the GeLU's (kern.h) */
        num_round_buf((dtype)(r->n[2] ? r->dt[2] : r->grad), 0, acc, n);
        if (r->gelu == KERNEL_REDUCE_GELU_ERF)
            for (size_t e = 0; e < n; e++) acc[e] = num_gelu_erf(acc[e]);
        else
            for (size_t e = 0; e < n; e++) acc[e] = num_gelu(acc[e]);
        if (dtype_is_f8((dtype)r->dt[0])) num_round_buf(DT_F16, 0, acc, n);
    }
    if (r->residual) { /* a residual add done by the reduction: the value in out's dtype, plus the residual */
        num_round_buf((dtype)r->dt[0], r->scale[0], acc, n);
        opnd res = opnd_dense(r, ptr, 4);
        opnd_read(&res, 0, n, x);
        for (size_t e = 0; e < n; e++) acc[e] = acc[e] + x[e];
    }
    opnd out = opnd_dense(r, ptr, 0);
    if (!r->stride[0][1]) {
        opnd_write(&out, 0, n, acc);
        return;
    }
    size_t c = (size_t)r->stride[0][2]; /* AMP-left panels of rows of c (kern.h) */
    for (size_t row = 0; row < n / c; row++) {
        opnd o = out;
        o.p += (int64_t)row * KERNEL_AMP_PANEL_BYTES;
        row_write(r, &o, c, acc + row * c);
    }
}

/* REDUCE's chains, a chunk of elements at a time, each sum rounded to the gradient's dtype and
 * handed to the epilogue (operands 1..4): no buffer holds the sums. */
static void run_reduce_epi(const kernel_run *r, uint8_t *const ptr[]) {
    float *acc = scratch_floats(SCR_T0, CHUNK), *x = scratch_floats(SCR_T1, CHUNK);
    dtype gt = kernel_epilogue_grad(r);
    for (uint64_t at = 0; at < r->n[1]; at += CHUNK) {
        size_t n = r->n[1] - at < CHUNK ? (size_t)(r->n[1] - at) : CHUNK;
        memset(acc, 0, n * sizeof(float));
        opnd in = opnd_dense(r, ptr, 0);
        for (uint32_t j = 0; j < r->n[0]; j++) {
            in.p = ptr[0] + (int64_t)j * r->stride[0][0];
            opnd_read(&in, at, n, x);
            for (size_t e = 0; e < n; e++) acc[e] = acc[e] + x[e];
            if (r->acc == DT_F16) num_round_buf(DT_F16, 0, acc, n);
        }
        num_round_buf(gt, 0, acc, n);
        epilogue(r, ptr, 1, at, n, acc);
    }
}

/* ---- EWISE -------------------------------------------------------------------------------- */

static void ew_apply(kernel_ew_op op, float f0, const float *restrict a, const float *restrict b, float *restrict o, size_t n) {
    switch (op) {
    case KERNEL_EW_ADD: for (size_t i = 0; i < n; i++) o[i] = a[i] + b[i]; return;
    case KERNEL_EW_SUB: for (size_t i = 0; i < n; i++) o[i] = a[i] - b[i]; return;
    case KERNEL_EW_MUL: for (size_t i = 0; i < n; i++) o[i] = a[i] * b[i]; return;
    case KERNEL_EW_MAX: for (size_t i = 0; i < n; i++) o[i] = num_max(a[i], b[i]); return;
    case KERNEL_EW_MIN: for (size_t i = 0; i < n; i++) o[i] = num_min(a[i], b[i]); return;
    case KERNEL_EW_GELU: for (size_t i = 0; i < n; i++) o[i] = num_gelu(a[i]); return;
    case KERNEL_EW_GELU_ERF: for (size_t i = 0; i < n; i++) o[i] = num_gelu_erf(a[i]); return;
    case KERNEL_EW_GELU_GRAD: for (size_t i = 0; i < n; i++) o[i] = num_gelu_deriv(a[i]) * b[i]; return;
    case KERNEL_EW_SCALE: for (size_t i = 0; i < n; i++) o[i] = a[i] * f0; return;
    case KERNEL_EW_CAST: memcpy(o, a, n * sizeof(float)); return;
#define X(id, name, ...) \
    case KERNEL_EW_##id: for (size_t i = 0; i < n; i++) o[i] = num_##name(a[i]); return;
    NUM_UNARY_OPS(X, )
#undef X
    case KERNEL_EW_COUNT: break;
    }
    TS_UNREACHABLE();
}

typedef struct ew_ctx {
    const kernel_run *r;
    int nops;         /* out, a and (binary ops) b */
    bool unsaturated; /* an unsaturated cast to an 8-bit type */
} ew_ctx;

static void ew_row(void *v, uint8_t *const p[BOX_MAX_OPS], uint64_t len, const int64_t step[BOX_MAX_OPS]) {
    const ew_ctx *x = v;
    float *f[3] = {scratch_floats(SCR_T0, CHUNK), scratch_floats(SCR_T1, CHUNK), scratch_floats(SCR_T2, CHUNK)};
    opnd o[3];
    for (int i = 0; i < x->nops; i++) o[i] = opnd_of(x->r, p[i], i, step[i]);
    for (uint64_t at = 0; at < len; at += CHUNK) {
        size_t n = len - at < CHUNK ? (size_t)(len - at) : CHUNK;
        for (int i = 1; i < x->nops; i++) opnd_read(&o[i], at, n, f[i]);
        ew_apply((kernel_ew_op)x->r->ew, x->r->f[0], f[1], f[2], f[0], n);
        if (x->r->acc != DT_F32) num_round_buf((dtype)x->r->acc, 0, f[0], n); /* a cast done here: kern.h */
        if (x->unsaturated)
            for (size_t i = 0; i < n; i++) o[0].p[(int64_t)(at + i) * o[0].step] = f8_encode(o[0].t, f[0][i], o[0].scale, false);
        else
            opnd_write(&o[0], at, n, f[0]);
    }
}


static void run_ewise(const kernel_run *r, uint8_t *const ptr[]) {
    ew_ctx x = {r, 1 + kernel_ew_arity[r->ew], r->ew == KERNEL_EW_CAST && r->f[0] != 0.0f && dtype_is_f8((dtype)r->dt[0])};
    box b = kernel_run_box(r, x.nops);
    box_walk(&b, ptr, ew_row, &x);
}

/* ---- SOFTMAX, LAYER_NORM ------------------------------------------------------------------ */

static void run_softmax(const kernel_run *r, uint8_t *const ptr[]) {
    size_t n = r->n[1];
    float *x = scratch_floats(SCR_T0, n);
    for (uint32_t row = 0; row < r->n[0]; row++) {
        opnd in = opnd_dense(r, ptr, 1), out = opnd_dense(r, ptr, 0);
        in.p += (int64_t)row * r->stride[1][0];
        out.p += (int64_t)row * r->stride[0][0];
        opnd_read(&in, 0, n, x);
        float mx = -INFINITY, sum = 0.0f;
        for (size_t e = 0; e < n; e++)
            if (x[e] > mx) mx = x[e];
        float s = r->f[0]; /* a folded scale (graph.h's softmax with a prescale), else 0 */
        for (size_t e = 0; e < n; e++) {
            x[e] = s != 0 ? expf(s * (x[e] - mx)) : expf(x[e] - mx);
            sum = sum + x[e];
        }
        for (size_t e = 0; e < n; e++) x[e] = x[e] / sum;
        row_write(r, &out, n, x);
    }
}

static void run_layer_norm(const kernel_run *r, uint8_t *const ptr[]) {
    size_t n = r->n[1], parts = r->n[2];
    float *x = scratch_floats(SCR_T0, n), *gamma = scratch_floats(SCR_T1, n), *beta = scratch_floats(SCR_T2, n);
    opnd g = opnd_dense(r, ptr, 2), bt = opnd_dense(r, ptr, 3);
    opnd_read(&g, 0, n, gamma);
    opnd_read(&bt, 0, n, beta);
    float eps = r->f[0];
    for (uint32_t row = 0; row < r->n[0]; row++) {
        opnd in = opnd_dense(r, ptr, 1), out = opnd_dense(r, ptr, 0);
        in.p += (int64_t)row * r->stride[1][0];
        out.p += (int64_t)row * r->stride[0][0];
        opnd_read(&in, 0, n, x);
        num_moments s;
        if (parts == 0) {
            s = num_moments_of(x, n);
        } else { /* the parts' statistics, LN_MOMENTS's f32 triples, joined in order */
            const uint8_t *st = ptr[4] + (size_t)row * parts * KERNEL_MOMENTS_BYTES;
            memcpy(&s, st, sizeof s);
            for (size_t k = 1; k < parts; k++) {
                num_moments b;
                memcpy(&b, st + k * KERNEL_MOMENTS_BYTES, sizeof b);
                s = num_moments_join(s, b);
            }
        }
        float rstd = 1.0f / sqrtf(s.m2 / s.n + eps);
        for (size_t e = 0; e < n; e++) x[e] = (x[e] - s.mean) * rstd * gamma[e] + beta[e];
        if (r->acc != DT_F32) num_round_buf((dtype)r->acc, 0, x, n); /* a cast done here: kern.h */
        row_write(r, &out, n, x);
    }
}

static void run_ln_moments(const kernel_run *r, uint8_t *const ptr[]) {
    size_t n = r->n[1];
    float *x = scratch_floats(SCR_T0, n);
    for (uint32_t row = 0; row < r->n[0]; row++) {
        opnd in = opnd_dense(r, ptr, 1);
        in.p += (int64_t)row * r->stride[1][0];
        opnd_read(&in, 0, n, x);
        num_moments s = num_moments_of(x, n);
        memcpy(ptr[0] + (size_t)row * KERNEL_MOMENTS_BYTES, &s, sizeof s);
        if (r->n[2]) memcpy(ptr[2] + (size_t)row * r->n[2] * KERNEL_MOMENTS_BYTES, &s, sizeof s); /* its own slot */
    }
}

/* ---- REDUCE_SUM --------------------------------------------------------------------------- */

/* The summation walks (in, acc) where acc is a host f32 array with one element per output
 * element: its stride is 0 on the summed axes (those where out's stride is 0) and compact on the
 * others; a second walk over the kept axes writes acc to out. */
static void sum_row(void *v, uint8_t *const p[BOX_MAX_OPS], uint64_t len, const int64_t step[BOX_MAX_OPS]) {
    const kernel_run *r = v;
    float *x = scratch_floats(SCR_T0, CHUNK);
    opnd in = opnd_of(r, p[0], 1, step[0]);
    float *acc = (float *)(void *)p[1];
    int64_t as = step[1] / (int64_t)sizeof(float); /* 0 when the row itself is summed */
    for (uint64_t at = 0; at < len; at += CHUNK) {
        size_t n = len - at < CHUNK ? (size_t)(len - at) : CHUNK;
        opnd_read(&in, at, n, x);
        float *ap = acc + (int64_t)at * as;
        for (size_t i = 0; i < n; i++) ap[(int64_t)i * as] = ap[(int64_t)i * as] + x[i];
    }
}

static void store_row(void *v, uint8_t *const p[BOX_MAX_OPS], uint64_t len, const int64_t step[BOX_MAX_OPS]) {
    const kernel_run *r = v;
    opnd out = opnd_of(r, p[0], 0, step[0]);
    opnd acc = {p[1], DT_F32, 0, step[1]};
    float *x = scratch_floats(SCR_T0, CHUNK);
    for (uint64_t at = 0; at < len; at += CHUNK) {
        size_t n = len - at < CHUNK ? (size_t)(len - at) : CHUNK;
        opnd_read(&acc, at, n, x);
        opnd_write(&out, at, n, x);
    }
}

static void run_reduce_sum(const kernel_run *r, uint8_t *const ptr[]) {
    box sum = {.nd = KERNEL_MAX_BOX, .nops = 2}, keep = {.nd = KERNEL_MAX_BOX, .nops = 2};
    uint64_t outs = 1;
    for (int d = KERNEL_MAX_BOX - 1; d >= 0; d--) {
        bool kept = r->stride[0][d] != 0;
        sum.n[d] = r->n[d];
        sum.st[0][d] = r->stride[1][d];
        sum.st[1][d] = kept ? (int64_t)(outs * sizeof(float)) : 0;
        keep.n[d] = kept ? r->n[d] : 1;
        keep.st[0][d] = r->stride[0][d];
        keep.st[1][d] = sum.st[1][d];
        if (kept) outs *= r->n[d];
    }
    float *acc = scratch_floats(SCR_T3, outs);
    memset(acc, 0, outs * sizeof(float));
    kernel_box_collapse(&sum);
    kernel_box_collapse(&keep);
    box_walk(&sum, (uint8_t *const[BOX_MAX_OPS]){ptr[1], (uint8_t *)acc, NULL}, sum_row, (void *)r);
    box_walk(&keep, (uint8_t *const[BOX_MAX_OPS]){ptr[0], (uint8_t *)acc, NULL}, store_row, (void *)r);
}

/* ---- FILL, COPY --------------------------------------------------------------------------- */

static void run_fill(const kernel_run *r, uint8_t *const ptr[]) {
    dtype t = (dtype)r->dt[0];
    size_t bytes = (size_t)dtype_bytes(t);
    uint8_t code[4];
    elem_put(t, dtype_is_f8(t) ? r->scale[0] : 0, code, r->f[0]);
    for (uint32_t e = 0; e < r->n[0]; e++) memcpy(ptr[0] + e * bytes, code, bytes);
}

/* Spans in box order; each span is one contiguous move. */
static void run_copy(const kernel_run *r, uint8_t *const ptr[]) {
    for (uint32_t a = 0; a < r->n[0]; a++)
        for (uint32_t b = 0; b < r->n[1]; b++)
            for (uint32_t c = 0; c < r->n[2]; c++) {
                int64_t d = (int64_t)a * r->stride[0][0] + (int64_t)b * r->stride[0][1] + (int64_t)c * r->stride[0][2];
                int64_t s = (int64_t)a * r->stride[1][0] + (int64_t)b * r->stride[1][1] + (int64_t)c * r->stride[1][2];
                memmove(ptr[0] + d, ptr[1] + s, r->n[3]);
            }
}

/* An embedding lookup's rows, copied as they are stored (dtype and scale equal). */
static void run_gather(const kernel_run *r, uint8_t *const ptr[]) {
    size_t row = (size_t)r->n[1] * (size_t)dtype_bytes((dtype)r->dt[0]);
    for (uint32_t i = 0; i < r->n[0]; i++) {
        int32_t id;
        memcpy(&id, ptr[2] + (size_t)i * 4, 4);
        int64_t at = num_index_row(id, r->n[2]);
        uint8_t *out = ptr[0] + (size_t)i * (size_t)r->stride[0][0];
        if (at >= 0) memmove(out, ptr[1] + (size_t)at * (size_t)r->stride[1][0], row);
        else memset(out, 0, row);
    }
}

/* ---- optimizers and norms ----------------------------------------------------------------- */

/* Chunked over n[0]; every input of a chunk is read before any output of it is written, so an
 * output may alias its own input (w' over w). */
static void run_sgd(const kernel_run *r, uint8_t *const ptr[]) {
    bool momentum = r->f[1] != 0.0f;
    float *w = scratch_floats(SCR_T0, CHUNK), *g = scratch_floats(SCR_T1, CHUNK), *buf = scratch_floats(SCR_T2, CHUNK);
    opnd ow = opnd_dense(r, ptr, 0), ob = momentum ? opnd_dense(r, ptr, 1) : ow;
    opnd iw = opnd_dense(r, ptr, 2), ig = opnd_dense(r, ptr, 3), ib = momentum ? opnd_dense(r, ptr, 4) : iw;
    for (uint64_t at = 0; at < r->n[0]; at += CHUNK) {
        size_t n = r->n[0] - at < CHUNK ? (size_t)(r->n[0] - at) : CHUNK;
        opnd_read(&iw, at, n, w);
        opnd_read(&ig, at, n, g);
        if (momentum) opnd_read(&ib, at, n, buf);
        sgd_update(r->f[0], r->f[1], r->f[2], n, w, g, momentum ? buf : NULL, &ob);
        if (momentum) opnd_write(&ob, at, n, buf);
        opnd_write(&ow, at, n, w);
    }
}

static void run_adamw(const kernel_run *r, uint8_t *const ptr[]) {
    adamw_line k = adamw_line_of(r);
    float *w = scratch_floats(SCR_T0, CHUNK), *g = scratch_floats(SCR_T1, CHUNK), *m = scratch_floats(SCR_T2, CHUNK),
          *v = scratch_floats(SCR_T3, CHUNK);
    opnd ow = opnd_dense(r, ptr, 0), om = opnd_dense(r, ptr, 1), ov = opnd_dense(r, ptr, 2);
    opnd iw = opnd_dense(r, ptr, 3), ig = opnd_dense(r, ptr, 4), im = opnd_dense(r, ptr, 5), iv = opnd_dense(r, ptr, 6);
    for (uint64_t at = 0; at < r->n[0]; at += CHUNK) {
        size_t n = r->n[0] - at < CHUNK ? (size_t)(r->n[0] - at) : CHUNK;
        opnd_read(&iw, at, n, w);
        opnd_read(&ig, at, n, g);
        opnd_read(&im, at, n, m);
        opnd_read(&iv, at, n, v);
        adam_moments(r->f[1], r->f[2], n, g, m, v);
        num_round_buf(om.t, om.scale, m, n);
        num_round_buf(ov.t, ov.scale, v, n);
        adamw_weights(&k, n, w, m, v);
        opnd_write(&ow, at, n, w);
        opnd_write(&om, at, n, m);
        opnd_write(&ov, at, n, v);
    }
}

/* ADAMW's last line from the updated moments an ADAM epilogue stored (already rounded to their
 * dtypes, as ADAMW rounds them before they feed w'). */
static void run_adamw_apply(const kernel_run *r, uint8_t *const ptr[]) {
    adamw_line k = adamw_line_of(r);
    float *w = scratch_floats(SCR_T0, CHUNK), *m = scratch_floats(SCR_T1, CHUNK), *v = scratch_floats(SCR_T2, CHUNK);
    opnd ow = opnd_dense(r, ptr, 0), iw = opnd_dense(r, ptr, 1), im = opnd_dense(r, ptr, 2), iv = opnd_dense(r, ptr, 3);
    for (uint64_t at = 0; at < r->n[0]; at += CHUNK) {
        size_t n = r->n[0] - at < CHUNK ? (size_t)(r->n[0] - at) : CHUNK;
        opnd_read(&iw, at, n, w);
        opnd_read(&im, at, n, m);
        opnd_read(&iv, at, n, v);
        adamw_weights(&k, n, w, m, v);
        opnd_write(&ow, at, n, w);
    }
}

/* s + the sum of in[e] (squared when `square`) over e < n[0], one f32 chain. */
static float chain_sum(const kernel_run *r, uint8_t *const ptr[], bool square, float s) {
    float *x = scratch_floats(SCR_T0, CHUNK);
    opnd in = opnd_dense(r, ptr, 1);
    for (uint64_t at = 0; at < r->n[0]; at += CHUNK) {
        size_t n = r->n[0] - at < CHUNK ? (size_t)(r->n[0] - at) : CHUNK;
        opnd_read(&in, at, n, x);
        if (square)
            for (size_t i = 0; i < n; i++) s = s + x[i] * x[i];
        else
            for (size_t i = 0; i < n; i++) s = s + x[i];
    }
    return s;
}

static void run_sumsq(const kernel_run *r, uint8_t *const ptr[]) {
    float s;
    memcpy(&s, ptr[0], sizeof s);
    s = chain_sum(r, ptr, true, s);
    memcpy(ptr[0], &s, sizeof s);
}

/* A NaN coefficient stays NaN (as torch.clamp keeps it), so a NaN gradient is not hidden. */
static void run_clip_coef(const kernel_run *r, uint8_t *const ptr[]) {
    float c = r->f[0] / (sqrtf(chain_sum(r, ptr, false, 0.0f)) + 1e-6f);
    if (c > 1.0f) c = 1.0f;
    memcpy(ptr[0], &c, sizeof c);
}

/* ---- the kernel table --------------------------------------------------------------------- */

_Static_assert(KERNEL_K_COUNT == 17, "a new kernel needs a run function here (and a cycles function in kern/cycles.c)");
static void (*const SIM_KERNELS[KERNEL_K_COUNT])(const kernel_run *r, uint8_t *const ptr[]) = {
#define X(id, name, nops, box, strides, floats, params) [KERNEL_K_##id] = run_##name,
    KERNEL_TABLE(X)
#undef X
};

void sim_kernel_run(const kernel_run *r, uint8_t *const ptr[KERNEL_MAX_OPERANDS]) {
    TS_ASSERT(r->kernel < KERNEL_K_COUNT);
    SIM_KERNELS[r->kernel](r, ptr);
}

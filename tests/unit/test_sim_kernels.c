/* test_sim_kernels.c: every simulator kernel against a scalar transcription of low.h, bit for bit;
 * the shape of the cycle model; the GEMM kernel's host throughput (printed, not asserted).
 *
 * Each case builds a memory image with random operands (random dtypes and scales, odd sizes,
 * padded, permuted and broadcast strides, unaligned bases), runs the kernel on it and the
 * reference below on a copy, and compares the whole images: values and "nothing else written".
 * The references follow low.h and docs/sim.md one element at a time with num.h's scalar
 * conversions, in the same f32 operation order, so every kernel is expected to be exact.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "machine/machine.h"
#include "sim/sim_kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1du;
static uint64_t rng(void) { /* xorshift64*: deterministic test inputs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}
static int rnd(int lo, int hi) { return lo + (int)(rng() % (uint64_t)(hi - lo + 1)); } /* inclusive */
static float rnd_unit(void) { return (float)((double)(rng() >> 11) / 9007199254740992.0); }
static float rnd_val(float mag) { /* roughly normal, mean 0 */
    return mag * (rnd_unit() + rnd_unit() + rnd_unit() - 1.5f) * 2.0f;
}

static const dtype FLOAT_TYPES[] = {DT_F32, DT_F16, DT_BF16, DT_F8E4M3, DT_F8E5M2, DT_F143};
static const dtype WIDE_TYPES[] = {DT_F32, DT_F16, DT_BF16};
static const dtype F8_TYPES[] = {DT_F8E4M3, DT_F8E5M2, DT_F143};
#define PICK(a) ((a)[rng() % TS_COUNT(a)])

static int rnd_scale(dtype t) { return dtype_is_f8(t) ? rnd(-4, 3) : 0; }
static int bytes_of(dtype t) { return dtype_bytes(t); }

/* Scalar element access, independent of the kernels' bulk paths. */
static float ld(dtype t, int scale, const uint8_t *p) {
    uint16_t h;
    float x;
    switch (t) {
    case DT_F32: memcpy(&x, p, 4); return x;
    case DT_F16: memcpy(&h, p, 2); return f16_to_f32(h);
    case DT_BF16: memcpy(&h, p, 2); return bf16_to_f32(h);
    default: return f8_decode(t, *p, scale);
    }
}

static void st(dtype t, int scale, uint8_t *p, float x) {
    uint16_t h;
    switch (t) {
    case DT_F32: memcpy(p, &x, 4); return;
    case DT_F16: h = f32_to_f16(x); memcpy(p, &h, 2); return;
    case DT_BF16: h = f32_to_bf16(x); memcpy(p, &h, 2); return;
    default: *p = f8_encode(t, x, scale, true); return;
    }
}

static float f16r(float x) { return f16_to_f32(f32_to_f16(x)); }

/* A memory image: random garbage everywhere, operands bump-allocated with a random odd gap so
 * bases are unaligned (relative to their element size they stay aligned). */
typedef struct image {
    uint8_t *mem, *ref;
    size_t size, top;
} image;

static image image_new(size_t size) {
    image im = {malloc(size), malloc(size), size, 0};
    for (size_t i = 0; i < size; i++) im.mem[i] = (uint8_t)rng();
    return im;
}

static void image_free(image *im) {
    free(im->mem);
    free(im->ref);
}

static uint32_t image_alloc(image *im, uint64_t bytes, int align) {
    size_t at = im->top + (size_t)rnd(0, 3) * (size_t)align + (size_t)align;
    at = (at + (size_t)align - 1) / (size_t)align * (size_t)align;
    im->top = at + bytes;
    assert_true(im->top <= im->size);
    return (uint32_t)at;
}

/* Fills the bytes [off, off + bytes) with random values of t (element by element). */
static void image_fill(image *im, uint32_t off, uint64_t bytes, dtype t, int scale, float mag) {
    for (uint64_t e = 0; e + (uint64_t)bytes_of(t) <= bytes; e += (uint64_t)bytes_of(t)) st(t, scale, im->mem + off + e, rnd_val(mag));
}

/* Places operand i of r in the image (its extent from kernel_run_extent), fills inputs, and points
 * ptr[i] at it. */
static uint32_t place(image *im, const kernel_run *r, int i, bool input, float mag) {
    uint64_t ext = kernel_run_extent(r, i);
    uint32_t off = image_alloc(im, ext, bytes_of((dtype)r->dt[i]));
    if (input) image_fill(im, off, ext, (dtype)r->dt[i], r->scale[i], mag);
    return off;
}

/* Runs r again on operands copied into heap blocks of exactly kernel_run_extent bytes, so that
 * AddressSanitizer sees any access outside an operand's extent (inside the image it cannot). */
static void run_isolated(const kernel_run *r, uint8_t *const p[KERNEL_MAX_OPERANDS]) {
    uint8_t *own[KERNEL_MAX_OPERANDS] = {0};
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++)
        if (p[i]) {
            own[i] = malloc(kernel_run_extent(r, i));
            memcpy(own[i], p[i], kernel_run_extent(r, i));
        }
    sim_kernel_run(r, own);
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++) free(own[i]);
}

/* Runs the kernel on the image and `ref` on a copy, then compares every byte. */
typedef void ref_fn(const kernel_run *r, uint8_t *const p[KERNEL_MAX_OPERANDS]);

static void check_run(image *im, const kernel_run *r, const uint32_t off[KERNEL_MAX_OPERANDS], ref_fn *ref) {
    char why[128];
    assert_true(kernel_run_valid(r, why, sizeof why));
    memcpy(im->ref, im->mem, im->size);
    uint8_t *p[KERNEL_MAX_OPERANDS] = {0}, *q[KERNEL_MAX_OPERANDS] = {0};
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++)
        if (kernel_run_uses(r, i)) {
            p[i] = im->mem + off[i];
            q[i] = im->ref + off[i];
        }
    sim_kernel_run(r, p);
    ref(r, q);
    run_isolated(r, p);
    if (memcmp(im->mem, im->ref, im->size) != 0) {
        size_t at = 0;
        while (im->mem[at] == im->ref[at]) at++;
        fail_msg("%s (op %d): byte %zu differs: got %02x want %02x (n = %u %u %u %u, dt %d %d %d)", kernel_names[r->kernel],
                 kernel_run_op_byte(r), at, im->mem[at], im->ref[at], r->n[0], r->n[1], r->n[2], r->n[3], r->dt[0], r->dt[1], r->dt[2]);
    }
}

/* ---- GEMM --------------------------------------------------------------------------------- */

static void ref_gemm(const kernel_run *r, uint8_t *const p[]) {
    dtype ta = (dtype)r->dt[0], tb = (dtype)r->dt[1], tc = (dtype)r->dt[2];
    bool f8 = dtype_is_f8(ta);
    int w = 32 / bytes_of(ta);
    /* 8-bit scales: an f32 chain sums the codes' products and scales the sum; an f16 chain
     * holds the result's units, each product scaled before it is added. */
    float post = f8 ? ldexpf(1.0f, r->scale[0] + r->scale[1]) : 1.0f, pre = 1.0f;
    if (r->acc == DT_F16) pre = post, post = 1.0f;
    for (uint32_t g = 0; g < r->n[0]; g++)
        for (uint32_t m = 0; m < r->n[1]; m++)
            for (uint32_t n = 0; n < r->n[2]; n++) {
                float acc = 0.0f;
                for (uint32_t k = 0; k < r->n[3]; k++) {
                    float a = ld(ta, 0, p[0] + g * r->stride[0][0] + (k / w) * r->stride[0][1] + m * 32 + (k % w) * bytes_of(ta));
                    int64_t bcol = r->stride[1][2] ? r->stride[1][2] : bytes_of(tb);
                    float b = ld(tb, 0, p[1] + g * r->stride[1][0] + k * r->stride[1][1] + n * bcol);
                    float prod = a * b * pre;
                    acc = acc + prod;
                    if (r->acc == DT_F16) acc = f16r(acc);
                }
                st(tc, 0, p[2] + g * r->stride[2][0] + m * r->stride[2][1] + n * bytes_of(tc), acc * post);
            }
}

/* A GEMM run with padded strides (pad* in elements or panels); operands placed and filled. */
static void gemm_case(dtype ta, dtype tb, dtype tc, dtype acc, uint32_t batch, uint32_t M, uint32_t N, uint32_t K) {
    kernel_run r = {.kernel = KERNEL_K_GEMM, .acc = (uint8_t)acc, .dt = {(uint8_t)ta, (uint8_t)tb, (uint8_t)tc}};
    r.scale[0] = (int8_t)rnd_scale(ta);
    r.scale[1] = (int8_t)rnd_scale(tb);
    r.n[0] = batch, r.n[1] = M, r.n[2] = N, r.n[3] = K;
    uint32_t w = (uint32_t)(32 / bytes_of(ta)), panels = (K + w - 1) / w;
    r.stride[0][1] = (int32_t)(M * 32 + (uint32_t)rnd(0, 2) * 32 + (uint32_t)rnd(0, 1) * 4);
    r.stride[0][0] = (int32_t)(panels * (uint32_t)r.stride[0][1] + (uint32_t)rnd(0, 2) * 32);
    r.stride[1][1] = (int32_t)((N + (uint32_t)rnd(0, 3)) * (uint32_t)bytes_of(tb));
    r.stride[1][0] = (int32_t)(K * (uint32_t)r.stride[1][1] + (uint32_t)rnd(0, 2) * (uint32_t)bytes_of(tb));
    if (rnd(0, 1)) { /* B stored transposed (a streamed GEMM's A^T): columns of K, padded apart */
        r.stride[1][1] = (int32_t)bytes_of(tb);
        r.stride[1][2] = (int32_t)((K + (uint32_t)rnd(1, 3)) * (uint32_t)bytes_of(tb));
        r.stride[1][0] = (int32_t)(N * (uint32_t)r.stride[1][2] + (uint32_t)rnd(0, 2) * (uint32_t)bytes_of(tb));
    }
    r.stride[2][1] = (int32_t)((N + (uint32_t)rnd(0, 3)) * (uint32_t)bytes_of(tc));
    r.stride[2][0] = (int32_t)(M * (uint32_t)r.stride[2][1] + (uint32_t)rnd(0, 2) * (uint32_t)bytes_of(tc));
    size_t need = 256;
    for (int i = 0; i < 3; i++) need += kernel_run_extent(&r, i) + 64;
    image im = image_new(need);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    /* Values up to twice the scale's unit: most f16 chains stay finite, yet some cases
     * saturate. */
    float mag_a = dtype_is_f8(ta) ? ldexpf(1.0f, -r.scale[0]) * 2.0f : 2.0f;
    float mag_b = dtype_is_f8(tb) ? ldexpf(1.0f, -r.scale[1]) * 2.0f : 2.0f;
    off[0] = place(&im, &r, 0, true, mag_a);
    off[1] = place(&im, &r, 1, true, mag_b);
    off[2] = place(&im, &r, 2, false, 0);
    check_run(&im, &r, off, ref_gemm);
    image_free(&im);
}

/* The register block is 6 x 16 (12 x 16 on a host with AVX-512F, the last six rows 6 x 16)
 * and K runs in chunks of 256 (panels of 8, 16 or 32): sizes on both sides of every edge. */
static void gemm_edges(void **state) {
    (void)state;
    static const uint32_t shapes[][3] = {{1, 1, 1},   {6, 16, 32},  {7, 17, 33}, {5, 7, 3},    {13, 8, 300}, {12, 33, 257},
                                         {1, 48, 64}, {18, 15, 31}, {2, 3, 256}, {19, 31, 513}, {6, 1, 65},  {11, 24, 17}};
    for (size_t s = 0; s < TS_COUNT(shapes); s++)
        for (int acc = 0; acc < 2; acc++) {
            dtype ac = acc ? DT_F16 : DT_F32;
            gemm_case(DT_F16, DT_F16, DT_F16, ac, 1, shapes[s][0], shapes[s][1], shapes[s][2]);
            gemm_case(DT_F143, DT_F143, DT_F32, ac, 1, shapes[s][0], shapes[s][1], shapes[s][2]);
            gemm_case(DT_F32, DT_F32, DT_F32, ac, 1, shapes[s][0], shapes[s][1], shapes[s][2]);
        }
}

static void gemm_random(void **state) {
    (void)state;
    for (int c = 0; c < 300; c++) {
        dtype ta, tb;
        switch (rnd(0, 2)) {
        case 0: ta = tb = DT_F16; break;
        case 1: ta = tb = DT_F32; break;
        default: ta = PICK(F8_TYPES), tb = PICK(F8_TYPES); break;
        }
        dtype tc = PICK(WIDE_TYPES), acc = rnd(0, 1) ? DT_F16 : DT_F32;
        uint32_t K = (uint32_t)(rnd(0, 4) ? rnd(1, 70) : rnd(200, 300));
        gemm_case(ta, tb, tc, acc, (uint32_t)rnd(1, 3), (uint32_t)rnd(1, 20), (uint32_t)rnd(1, 40), K);
    }
}

/* Runs no AMP or kernel can take are rejected before they reach a kernel. */
static void invalid_runs_rejected(void **state) {
    (void)state;
    char why[64];
    kernel_run g = {.kernel = KERNEL_K_GEMM, .acc = DT_F32, .n = {1, 2, 3, 4}, .dt = {DT_BF16, DT_BF16, DT_F32}};
    assert_false(kernel_run_valid(&g, why, sizeof why));
    g.dt[0] = DT_F32, g.dt[1] = DT_F16;
    assert_false(kernel_run_valid(&g, why, sizeof why));
    assert_string_equal(why, "mixed GEMM operands");
    g.dt[0] = DT_F16;
    assert_true(kernel_run_valid(&g, why, sizeof why));
    kernel_run a = {.kernel = KERNEL_K_ADAMW, .n = {8, 0, 1, 1}};
    for (int i = 0; i < 7; i++) a.dt[i] = DT_F32;
    assert_false(kernel_run_valid(&a, why, sizeof why));
    a.n[1] = 1;
    assert_true(kernel_run_valid(&a, why, sizeof why));
    kernel_run e = {.kernel = KERNEL_K_EWISE, .ew = KERNEL_EW_ADD, .n = {1, 1, 2, 4}, .dt = {DT_F16, DT_F16, DT_F16}};
    e.stride[0][3] = 2;
    assert_false(kernel_run_valid(&e, why, sizeof why)); /* axis 2 writes twice */
    e.stride[0][2] = 8;
    assert_true(kernel_run_valid(&e, why, sizeof why));
    kernel_run c = {.kernel = KERNEL_K_CLIP_COEF, .n = {4, 1, 1, 1}, .dt = {DT_F32, DT_F16}};
    assert_false(kernel_run_valid(&c, why, sizeof why));
}

/* ---- epilogues: GEMM_EPI, REDUCE_EPI and ADAMW_APPLY against the unfused kernels ----------------- */

/* P1 at the kernel level: the fused kernels give, bit for bit, what the GEMM (or REDUCE) then the
 * optimizer kernel give on a stored gradient, whatever the shape (bands of 48 rows, K chunks of
 * 256, SGD with and without momentum, ADAM split into its moments and ADAMW_APPLY) and dtypes. */
typedef struct epi_bufs {
    uint8_t *w, *s1, *s2, *wo, *s1o, *s2o; /* w (SGD) or unused (ADAM); the states and the outputs */
} epi_bufs;

static uint8_t *filled(size_t n, dtype t, float mag) {
    uint8_t *p = malloc(n * (size_t)bytes_of(t) + 1);
    for (size_t i = 0; i < n; i++) st(t, 0, p + i * (size_t)bytes_of(t), rnd_val(mag));
    return p;
}

static void epilogue_case(bool reduce) {
    bool adam = rnd(0, 1), momentum = rnd(0, 1);
    dtype ta = DT_F16, tb = DT_F16;
    switch (rnd(0, 2)) {
    case 0: break;
    case 1: ta = tb = DT_F32; break;
    default: ta = tb = DT_F143; break;
    }
    dtype gt = PICK(WIDE_TYPES), acc = rnd(0, 3) ? DT_F32 : DT_F16;
    dtype tw = rnd(0, 1) ? DT_F32 : PICK(WIDE_TYPES), ts1 = PICK(WIDE_TYPES), ts2 = PICK(WIDE_TYPES);
    uint32_t M = (uint32_t)(rnd(0, 2) ? rnd(1, 20) : rnd(40, 110)), N = (uint32_t)rnd(1, 40), K = (uint32_t)rnd(1, 300);
    uint32_t rs = N + (uint32_t)rnd(0, 3), P = (uint32_t)rnd(2, 5); /* row stride (elements); partials */
    size_t E = (size_t)M * rs;
    float f[5] = {0.01f, momentum ? 0.9f : 0.0f, rnd(0, 1) ? 0.01f : 0.0f, 0, 0};
    float af[5] = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    /* The producer: a GEMM (or REDUCE of partials) writing the gradient, row stride rs. */
    kernel_run pr = {.kernel = reduce ? KERNEL_K_REDUCE : KERNEL_K_GEMM, .acc = (uint8_t)acc};
    uint8_t *A = NULL, *B = NULL, *part = NULL;
    if (!reduce) {
        pr.dt[0] = (uint8_t)ta, pr.dt[1] = (uint8_t)tb, pr.dt[2] = (uint8_t)gt;
        pr.scale[0] = (int8_t)rnd_scale(ta), pr.scale[1] = (int8_t)rnd_scale(tb);
        pr.n[0] = 1, pr.n[1] = M, pr.n[2] = N, pr.n[3] = K;
        pr.stride[0][1] = (int32_t)(M * 32 + (uint32_t)rnd(0, 1) * 32);
        pr.stride[1][1] = (int32_t)((N + (uint32_t)rnd(0, 2)) * (uint32_t)bytes_of(tb));
        pr.stride[2][1] = (int32_t)(rs * (uint32_t)bytes_of(gt));
        A = calloc(kernel_run_extent(&pr, 0) + 1, 1);
        B = calloc(kernel_run_extent(&pr, 1) + 1, 1);
        for (uint64_t i = 0; i + (uint64_t)bytes_of(ta) <= kernel_run_extent(&pr, 0); i += (uint64_t)bytes_of(ta))
            st(ta, pr.scale[0], A + i, rnd_val(dtype_is_f8(ta) ? ldexpf(1.0f, -pr.scale[0]) : 2.0f));
        for (uint64_t i = 0; i + (uint64_t)bytes_of(tb) <= kernel_run_extent(&pr, 1); i += (uint64_t)bytes_of(tb))
            st(tb, pr.scale[1], B + i, rnd_val(dtype_is_f8(tb) ? ldexpf(1.0f, -pr.scale[1]) : 2.0f));
    } else {
        pr.dt[0] = (uint8_t)gt, pr.dt[1] = (uint8_t)PICK(WIDE_TYPES);
        pr.n[0] = P, pr.n[1] = (uint32_t)E;
        pr.stride[1][0] = (int32_t)((E + (size_t)rnd(0, 3)) * (size_t)bytes_of((dtype)pr.dt[1]));
        part = filled((size_t)pr.stride[1][0] / (size_t)bytes_of((dtype)pr.dt[1]) * P, (dtype)pr.dt[1], 3.0f);
    }
    dtype d0 = adam ? ts1 : tw, d1 = adam ? ts2 : ts1;
    uint8_t *e0 = filled(E, d0, adam ? 0.1f : 1.0f), *e1 = filled(E, d1, adam ? 0.1f : 1.0f);
    if (adam) /* v >= 0 */
        for (size_t i = 0; i < E; i++) st(d1, 0, e1 + i * (size_t)bytes_of(d1), fabsf(ld(d1, 0, e1 + i * (size_t)bytes_of(d1))));
    uint8_t *wv = adam ? filled(E, tw, 1.0f) : NULL;
    uint8_t *grad = calloc(E * 4 + 64, 1);
    /* Unfused: the producer stores the gradient, the optimizer kernel reads it, row by row. */
    uint8_t *u2 = calloc(E * 4 + 64, 1), *u3 = calloc(E * 4 + 64, 1), *uw = calloc(E * 4 + 64, 1);
    if (!reduce) sim_kernel_run(&pr, (uint8_t *const[KERNEL_MAX_OPERANDS]){A, B, grad});
    else sim_kernel_run(&pr, (uint8_t *const[KERNEL_MAX_OPERANDS]){grad, part});
    size_t gb = (size_t)bytes_of(gt);
    for (uint32_t m = 0; m < M; m++) {
        size_t o = (size_t)m * rs;
#define AT(p, t) ((p) + o * (size_t)bytes_of(t))
        if (!adam) {
            kernel_run o_ = {.kernel = KERNEL_K_SGD, .dt = {(uint8_t)tw, (uint8_t)ts1, (uint8_t)tw, (uint8_t)gt, (uint8_t)ts1}, .n = {N, 1, 1, 1}};
            memcpy(o_.f, f, sizeof f);
            sim_kernel_run(&o_, (uint8_t *const[KERNEL_MAX_OPERANDS]){AT(u2, tw), momentum ? AT(u3, ts1) : NULL, AT(e0, tw),
                                                                   grad + o * gb, momentum ? AT(e1, ts1) : NULL});
        } else {
            kernel_run o_ = {.kernel = KERNEL_K_ADAMW, .dt = {(uint8_t)tw, (uint8_t)ts1, (uint8_t)ts2, (uint8_t)tw, (uint8_t)gt, (uint8_t)ts1, (uint8_t)ts2}, .n = {N, 3, 1, 1}};
            memcpy(o_.f, af, sizeof af);
            sim_kernel_run(&o_, (uint8_t *const[KERNEL_MAX_OPERANDS]){AT(uw, tw), AT(u2, ts1), AT(u3, ts2), AT(wv, tw), grad + o * gb,
                                                                   AT(e0, ts1), AT(e1, ts2)});
        }
#undef AT
    }
    /* Fused: the epilogue kernel, then (ADAM) ADAMW_APPLY on the stored moments. */
    uint8_t *f2 = calloc(E * 4 + 64, 1), *f3 = calloc(E * 4 + 64, 1), *fw = calloc(E * 4 + 64, 1);
    kernel_run r = pr;
    r.kernel = reduce ? KERNEL_K_REDUCE_EPI : KERNEL_K_GEMM_EPI;
    r.epi = adam ? KERNEL_EPI_ADAM : KERNEL_EPI_SGD;
    int base = reduce ? 1 : 2;
    if (reduce) {
        r.dt[0] = pr.dt[1], r.stride[0][0] = pr.stride[1][0], r.stride[1][0] = 0;
    } else {
        r.stride[2][1] = (int32_t)rs;
    }
    r.grad = (uint8_t)gt;
    r.dt[base] = (uint8_t)d0, r.dt[base + 1] = (uint8_t)d1, r.dt[base + 2] = (uint8_t)d0, r.dt[base + 3] = (uint8_t)d1;
    if (adam) r.f[0] = af[1], r.f[1] = af[2];
    else memcpy(r.f, f, sizeof f);
    kernel_run_canonical(&r); /* what a package holds of it: every field the kernel reads survives */
    char why[64];
    assert_true(kernel_run_valid(&r, why, sizeof why));
    uint8_t *ptr[KERNEL_MAX_OPERANDS] = {0};
    if (reduce) ptr[0] = part;
    else ptr[0] = A, ptr[1] = B;
    bool use1 = adam || momentum;
    ptr[base] = e0, ptr[base + 1] = use1 ? e1 : NULL, ptr[base + 2] = f2, ptr[base + 3] = use1 ? f3 : NULL;
    sim_kernel_run(&r, ptr);
    if (adam) {
        kernel_run ap = {.kernel = KERNEL_K_ADAMW_APPLY, .dt = {(uint8_t)tw, (uint8_t)tw, (uint8_t)ts1, (uint8_t)ts2}, .n = {(uint32_t)E, 3, 1, 1}};
        memcpy(ap.f, af, sizeof af);
        assert_true(kernel_run_valid(&ap, why, sizeof why));
        sim_kernel_run(&ap, (uint8_t *const[KERNEL_MAX_OPERANDS]){fw, wv, f2, f3});
    }
    /* Every valid element (the row padding is not the kernels' to write), bit for bit. */
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            size_t e = (size_t)m * rs + n;
            assert_memory_equal(f2 + e * (size_t)bytes_of(d0), u2 + e * (size_t)bytes_of(d0), (size_t)bytes_of(d0));
            if (use1) assert_memory_equal(f3 + e * (size_t)bytes_of(d1), u3 + e * (size_t)bytes_of(d1), (size_t)bytes_of(d1));
            if (adam) assert_memory_equal(fw + e * (size_t)bytes_of(tw), uw + e * (size_t)bytes_of(tw), (size_t)bytes_of(tw));
        }
    free(A), free(B), free(part), free(e0), free(e1), free(wv), free(grad);
    free(u2), free(u3), free(uw), free(f2), free(f3), free(fw);
}

static void epilogue_matches_unfused(void **state) {
    (void)state;
    for (int c = 0; c < 150; c++) epilogue_case(false);
    for (int c = 0; c < 150; c++) epilogue_case(true);
}

/* ---- EWISE -------------------------------------------------------------------------------- */

static const float GELU_C = (float)0.7978845608028654;

static float ref_gelu(float x) {
    float u = GELU_C * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

static float ref_gelu_grad(float x, float dy) {
    float u = GELU_C * (x + 0.044715f * x * x * x), t = tanhf(u);
    float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
    return d * dy;
}

static float ew(const kernel_run *r, float a, float b) {
    switch ((kernel_ew_op)r->ew) {
    case KERNEL_EW_ADD: return a + b;
    case KERNEL_EW_SUB: return a - b;
    case KERNEL_EW_MUL: return a * b;
    case KERNEL_EW_GELU: return ref_gelu(a);
    case KERNEL_EW_GELU_GRAD: return ref_gelu_grad(a, b);
    case KERNEL_EW_GELU_ERF: return 0.5f * a * (1.0f + erff(a * (float)0.7071067811865476));
    case KERNEL_EW_SCALE: return a * r->f[0];
    case KERNEL_EW_RELU: return isnan(a) ? a : a > 0.0f ? a : 0.0f;
    case KERNEL_EW_SIGMOID: return 1.0f / (1.0f + expf(-a));
    case KERNEL_EW_TANH: return tanhf(a);
    case KERNEL_EW_EXP: return expf(a);
    case KERNEL_EW_LOG: return logf(a);
    case KERNEL_EW_ABS: return fabsf(a);
    case KERNEL_EW_NEG: return -a;
    case KERNEL_EW_SQRT: return sqrtf(a);
    case KERNEL_EW_RECIPROCAL: return 1.0f / a;
    case KERNEL_EW_ERF: return erff(a);
    case KERNEL_EW_SOFTPLUS: return a > 0.0f ? a + log1pf(expf(-a)) : log1pf(expf(a));
    case KERNEL_EW_MAX: return isnan(a) || isnan(b) ? NAN : a == 0.0f && b == 0.0f ? (signbit(a) ? b : a) : fmaxf(a, b);
    case KERNEL_EW_MIN: return isnan(a) || isnan(b) ? NAN : a == 0.0f && b == 0.0f ? (signbit(a) ? a : b) : fminf(a, b);
    default: return a;
    }
}

static const uint8_t *at4(const kernel_run *r, uint8_t *const p[], int i, const uint32_t idx[4]) {
    int64_t off = 0;
    for (int d = 0; d < 4; d++) off += (int64_t)idx[d] * r->stride[i][d];
    return p[i] + off;
}

/* A cast done by its producer: the result rounds to acc first (low.h). */
static float through(const kernel_run *r, float v) { return r->acc == DT_F32 ? v : num_round((dtype)r->acc, 0, v); }

static void ref_ewise(const kernel_run *r, uint8_t *const p[]) {
    bool binary = kernel_ew_arity[r->ew] == 2;
    uint32_t idx[4];
    for (idx[0] = 0; idx[0] < r->n[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < r->n[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < r->n[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < r->n[3]; idx[3]++) {
                    float a = ld((dtype)r->dt[1], r->scale[1], at4(r, p, 1, idx));
                    float b = binary ? ld((dtype)r->dt[2], r->scale[2], at4(r, p, 2, idx)) : 0.0f;
                    uint8_t *o = (uint8_t *)at4(r, p, 0, idx);
                    /* f[0] != 0: an unsaturated cast, whose 8-bit overflow is inf or NaN */
                    if (r->ew == KERNEL_EW_CAST && r->f[0] != 0.0f && dtype_is_f8((dtype)r->dt[0]))
                        *o = f8_encode((dtype)r->dt[0], through(r, a), r->scale[0], false);
                    else
                        st((dtype)r->dt[0], r->scale[0], o, through(r, ew(r, a, b)));
                }
}

/* Strides for operand i over the box: compact in a random axis order (a transpose) with random
 * padding, or (broadcast) 0 on random axes. */
static void box_strides(kernel_run *r, int i, bool permute, bool pad, bool broadcast) {
    int order[4] = {0, 1, 2, 3};
    if (permute)
        for (int k = 3; k > 0; k--) {
            int j = rnd(0, k), t = order[k];
            order[k] = order[j];
            order[j] = t;
        }
    int64_t s = bytes_of((dtype)r->dt[i]);
    for (int k = 3; k >= 0; k--) {
        int d = order[k];
        r->stride[i][d] = broadcast && rnd(0, 2) == 0 ? 0 : (int32_t)s;
        s *= r->n[d];
        if (pad && rnd(0, 1)) s += (int64_t)rnd(1, 3) * bytes_of((dtype)r->dt[i]);
    }
}

static void random_box(kernel_run *r) {
    for (int d = 0; d < 3; d++) r->n[d] = (uint32_t)(rnd(0, 2) ? rnd(1, 4) : 1);
    r->n[3] = (uint32_t)(rnd(0, 5) ? rnd(1, 40) : rnd(500, 1100)); /* long rows cross the 512 chunk */
}

static void ewise_case(kernel_ew_op op) {
    kernel_run r = {.kernel = KERNEL_K_EWISE, .ew = (uint8_t)op};
    for (int i = 0; i < 3; i++) {
        r.dt[i] = (uint8_t)PICK(FLOAT_TYPES);
        r.scale[i] = (int8_t)rnd_scale((dtype)r.dt[i]);
    }
    r.f[0] = op == KERNEL_EW_CAST ? (float)rnd(0, 1) : rnd_val(3.0f); /* cast: saturating or not */
    static const dtype via[] = {DT_F32, DT_F32, DT_F16, DT_BF16};
    r.acc = (uint8_t)via[rnd(0, 3)]; /* a later cast done here, or none */
    random_box(&r);
    bool dense = rnd(0, 3) == 0;
    box_strides(&r, 0, !dense && rnd(0, 1), !dense, false);
    box_strides(&r, 1, !dense && rnd(0, 1), !dense, !dense);
    box_strides(&r, 2, !dense && rnd(0, 1), !dense, !dense);
    if (kernel_ew_arity[op] == 1) memset(r.stride[2], 0, sizeof r.stride[2]);
    size_t need = 256;
    for (int i = 0; i < 3; i++) need += kernel_run_extent(&r, i) + 64;
    image im = image_new(need);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    for (int i = 1; i < 1 + kernel_ew_arity[op]; i++) off[i] = place(&im, &r, i, true, 4.0f);
    off[0] = place(&im, &r, 0, false, 0);
    check_run(&im, &r, off, ref_ewise);
    image_free(&im);
}

static void ewise_random(void **state) {
    (void)state;
    for (int op = 0; op < KERNEL_EW_COUNT; op++)
        for (int c = 0; c < 60; c++) ewise_case((kernel_ew_op)op);
}

/* out over its own input: each chunk is read before it is written. */
static void ewise_in_place(void **state) {
    (void)state;
    kernel_run r = {.kernel = KERNEL_K_EWISE, .ew = KERNEL_EW_MUL, .dt = {DT_F16, DT_F16, DT_F16}, .n = {1, 3, 1, 700}};
    box_strides(&r, 0, false, true, false);
    memcpy(r.stride[1], r.stride[0], sizeof r.stride[0]);
    box_strides(&r, 2, false, false, false);
    image im = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 2) + 256);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    off[0] = off[1] = place(&im, &r, 1, true, 4.0f);
    off[2] = place(&im, &r, 2, true, 4.0f);
    check_run(&im, &r, off, ref_ewise);
    image_free(&im);
}

/* ---- REDUCE, REDUCE_SUM ------------------------------------------------------------------- */

static void ref_reduce(const kernel_run *r, uint8_t *const p[]) {
    for (uint32_t e = 0; e < r->n[1]; e++) {
        float acc = 0.0f;
        for (uint32_t j = 0; j < r->n[0]; j++) {
            const uint8_t *in = j + 1 == r->own ? p[3] : p[1] + j * r->stride[1][0]; /* the own partial: ptr3 */
            acc = acc + ld((dtype)r->dt[1], r->scale[1], in + e * bytes_of((dtype)r->dt[1]));
            if (r->acc == DT_F16) acc = f16r(acc);
        }
        uint32_t rep = r->n[3] > 1 ? r->n[3] : 1; /* elements per bias value (a transposed result's column) */
        acc = num_round((dtype)r->grad, 0, acc); /* the product's dtype, or the one a folded cast reads */
        if (r->n[2]) /* a bias: the bias of its column added to the rounded product */
            acc = acc + ld((dtype)r->dt[2], r->scale[2], p[2] + (e / rep % r->n[2]) * bytes_of((dtype)r->dt[2]));
        size_t ob = bytes_of((dtype)r->dt[0]), at = e * ob;
        if (r->residual) /* a residual: the value in out's dtype, plus the residual's element */
            acc = num_round((dtype)r->dt[0], 0, acc) + ld((dtype)r->dt[4], 0, p[4] + e * ob);
        if (r->stride[0][1]) { /* AMP-left panels of rows of stride[0][2] */
            uint32_t c = (uint32_t)r->stride[0][2], w = 32 / (uint32_t)ob, col = e % c;
            at = (col / w) * (size_t)r->stride[0][1] + (e / c) * 32 + (col % w) * ob;
        }
        st((dtype)r->dt[0], r->scale[0], p[0] + at, acc);
    }
}

static void reduce_random(void **state) {
    (void)state;
    for (int c = 0; c < 200; c++) {
        kernel_run r = {.kernel = KERNEL_K_REDUCE, .acc = (uint8_t)(rnd(0, 1) ? DT_F16 : DT_F32)};
        r.dt[0] = (uint8_t)PICK(FLOAT_TYPES), r.dt[1] = (uint8_t)PICK(FLOAT_TYPES);
        r.scale[0] = (int8_t)rnd_scale((dtype)r.dt[0]), r.scale[1] = (int8_t)rnd_scale((dtype)r.dt[1]);
        r.n[0] = (uint32_t)rnd(1, 9), r.n[1] = (uint32_t)rnd(1, 100);
        if (rnd(0, 1)) { /* a bias along rows of n[2] */
            static const dtype sums[] = {DT_F32, DT_F16, DT_BF16};
            r.n[2] = (uint32_t)rnd(1, 12);
            r.n[3] = rnd(0, 1) ? (uint32_t)rnd(0, 5) : 0; /* each value over n[3] elements in a row */
            r.n[1] = r.n[2] * (r.n[3] > 1 ? r.n[3] : 1) * (uint32_t)rnd(1, 9);
            r.dt[2] = (uint8_t)PICK(FLOAT_TYPES), r.scale[2] = (int8_t)rnd_scale((dtype)r.dt[2]);
            r.grad = (uint8_t)sums[rnd(0, 2)];
        } else if (rnd(0, 1)) { /* a cast done by the reduction: the sum rounded first */
            r.grad = (uint8_t)(rnd(0, 1) ? DT_F16 : DT_BF16);
        }
        if (rnd(0, 2) == 0) { /* an AMP-left result: rows of c, panels at least rows x 32 bytes apart */
            uint32_t cols = r.n[2] ? r.n[2] * (r.n[3] > 1 ? r.n[3] : 1) : (uint32_t)rnd(1, 40);
            if (!r.n[2]) r.n[1] = cols * (uint32_t)rnd(1, 6);
            r.stride[0][2] = (int32_t)cols;
            r.stride[0][1] = (int32_t)((r.n[1] / cols + (uint32_t)rnd(0, 2)) * 32);
        }
        r.stride[1][0] = (int32_t)((r.n[1] + (uint32_t)rnd(0, 3)) * (uint32_t)bytes_of((dtype)r.dt[1]));
        if (rnd(0, 1)) { /* one partial read from its own buffer (the tile's own, where its GEMM left it) */
            r.own = (uint8_t)rnd(1, (int)r.n[0]);
            r.dt[3] = r.dt[1], r.scale[3] = r.scale[1];
        }
        if (!r.stride[0][1] && !dtype_is_f8((dtype)r.dt[0]) && rnd(0, 1)) { /* a residual add done by the reduction */
            r.residual = true;
            r.dt[4] = r.dt[0];
        }
        image im = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 1) + kernel_run_extent(&r, 2) +
                             kernel_run_extent(&r, 3) + kernel_run_extent(&r, 4) + 320);
        uint32_t off[KERNEL_MAX_OPERANDS] = {0};
        off[1] = place(&im, &r, 1, true, 4.0f);
        if (r.n[2]) off[2] = place(&im, &r, 2, true, 4.0f);
        if (r.own) off[3] = place(&im, &r, 3, true, 4.0f);
        if (r.residual) off[4] = place(&im, &r, 4, true, 4.0f);
        off[0] = place(&im, &r, 0, false, 0);
        check_run(&im, &r, off, ref_reduce);
        image_free(&im);
    }
}

/* One f32 accumulator per output element, its terms in box order. */
static void ref_reduce_sum(const kernel_run *r, uint8_t *const p[]) {
    uint64_t outs = 1, ks[4];
    for (int d = 3; d >= 0; d--) {
        ks[d] = r->stride[0][d] ? outs : 0;
        if (r->stride[0][d]) outs *= r->n[d];
    }
    float *acc = calloc(outs, sizeof(float));
    uint8_t **where = calloc(outs, sizeof(uint8_t *));
    uint32_t idx[4];
    for (idx[0] = 0; idx[0] < r->n[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < r->n[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < r->n[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < r->n[3]; idx[3]++) {
                    uint64_t o = 0;
                    for (int d = 0; d < 4; d++) o += idx[d] * ks[d];
                    acc[o] = acc[o] + ld((dtype)r->dt[1], r->scale[1], at4(r, p, 1, idx));
                    where[o] = (uint8_t *)at4(r, p, 0, idx);
                }
    for (uint64_t o = 0; o < outs; o++) st((dtype)r->dt[0], r->scale[0], where[o], acc[o]);
    free(acc);
    free(where);
}

static void reduce_sum_random(void **state) {
    (void)state;
    for (int c = 0; c < 200; c++) {
        kernel_run r = {.kernel = KERNEL_K_REDUCE_SUM};
        r.dt[0] = (uint8_t)PICK(FLOAT_TYPES), r.dt[1] = (uint8_t)PICK(FLOAT_TYPES);
        r.scale[0] = (int8_t)rnd_scale((dtype)r.dt[0]), r.scale[1] = (int8_t)rnd_scale((dtype)r.dt[1]);
        random_box(&r);
        if (r.n[3] > 200) r.n[3] = 200;
        box_strides(&r, 1, rnd(0, 1), rnd(0, 1), false);
        /* out: compact over the kept axes, 0 on the summed ones (at least one of them). */
        int summed = rnd(1, 15);
        int64_t s = bytes_of((dtype)r.dt[0]);
        for (int d = 3; d >= 0; d--) {
            bool sum = (summed >> d) & 1;
            r.stride[0][d] = sum ? 0 : (int32_t)s;
            if (!sum) s = s * r.n[d] + (rnd(0, 1) ? bytes_of((dtype)r.dt[0]) : 0);
        }
        image im = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 1) + 256);
        uint32_t off[KERNEL_MAX_OPERANDS] = {0};
        off[1] = place(&im, &r, 1, true, 4.0f);
        off[0] = place(&im, &r, 0, false, 0);
        check_run(&im, &r, off, ref_reduce_sum);
        image_free(&im);
    }
}

/* ---- SOFTMAX, LAYER_NORM ------------------------------------------------------------------ */

/* Where a row kernel writes element i of row `row`: contiguous rows, or AMP-left panels of 32
 * bytes stride[0][1] apart (low.h). */
static uint8_t *row_out(const kernel_run *r, uint8_t *p0, uint32_t row, uint32_t i) {
    size_t b = (size_t)bytes_of((dtype)r->dt[0]), w = 32 / b;
    if (r->stride[0][1] == 0) return p0 + row * r->stride[0][0] + i * b;
    return p0 + row * r->stride[0][0] + (i / w) * (size_t)r->stride[0][1] + (i % w) * b;
}

static void ref_softmax(const kernel_run *r, uint8_t *const p[]) {
    uint32_t n = r->n[1];
    float *e = malloc(n * sizeof(float));
    dtype tx = (dtype)r->dt[1], to = (dtype)r->dt[0];
    for (uint32_t row = 0; row < r->n[0]; row++) {
        const uint8_t *x = p[1] + row * r->stride[1][0];
        float mx = -INFINITY, sum = 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            float v = ld(tx, r->scale[1], x + i * bytes_of(tx));
            if (v > mx) mx = v;
        }
        for (uint32_t i = 0; i < n; i++) {
            float d = ld(tx, r->scale[1], x + i * bytes_of(tx)) - mx;
            e[i] = r->f[0] != 0 ? expf(r->f[0] * d) : expf(d); /* f[0]: a folded scale */
            sum = sum + e[i];
        }
        for (uint32_t i = 0; i < n; i++) st(to, r->scale[0], row_out(r, p[0], row, i), e[i] / sum);
    }
    free(e);
}

static void ref_layer_norm(const kernel_run *r, uint8_t *const p[]) {
    uint32_t n = r->n[1];
    dtype tx = (dtype)r->dt[1], to = (dtype)r->dt[0], tg = (dtype)r->dt[2], tb = (dtype)r->dt[3];
    for (uint32_t row = 0; row < r->n[0]; row++) {
        const uint8_t *x = p[1] + row * r->stride[1][0];
        float sum = 0.0f, sq = 0.0f;
        for (uint32_t i = 0; i < n; i++) sum = sum + ld(tx, r->scale[1], x + i * bytes_of(tx));
        float mean = sum / (float)n;
        for (uint32_t i = 0; i < n; i++) {
            float d = ld(tx, r->scale[1], x + i * bytes_of(tx)) - mean;
            sq = sq + d * d;
        }
        float rstd = 1.0f / sqrtf(sq / (float)n + r->f[0]);
        for (uint32_t i = 0; i < n; i++) {
            float v = (ld(tx, r->scale[1], x + i * bytes_of(tx)) - mean) * rstd * ld(tg, r->scale[2], p[2] + i * bytes_of(tg)) +
                      ld(tb, r->scale[3], p[3] + i * bytes_of(tb));
            st(to, r->scale[0], row_out(r, p[0], row, i), through(r, v));
        }
    }
}

static void rows_case(kernel_id k) {
    int nops = kernel_operands[k];
    kernel_run r = {.kernel = (uint8_t)k, .f = {1e-5f}};
    if (k == KERNEL_K_LAYER_NORM) r.acc = (uint8_t)(rnd(0, 1) ? DT_F16 : DT_F32); /* a later cast done here, or none */
    if (k == KERNEL_K_SOFTMAX) r.f[0] = rnd(0, 1) ? 0.0f : (float)rnd(1, 40) / 16.0f + 0.01f; /* an earlier scale done here, or none */
    for (int i = 0; i < nops; i++) {
        r.dt[i] = (uint8_t)PICK(FLOAT_TYPES);
        r.scale[i] = (int8_t)rnd_scale((dtype)r.dt[i]);
    }
    r.n[0] = (uint32_t)rnd(1, 6), r.n[1] = (uint32_t)(rnd(0, 3) ? rnd(1, 80) : rnd(300, 1200));
    for (int i = 0; i < 2; i++) r.stride[i][0] = (int32_t)((r.n[1] + (uint32_t)rnd(0, 3)) * (uint32_t)bytes_of((dtype)r.dt[i]));
    if (rnd(0, 2) == 0) { /* the result in AMP-left panels (the next GEMM's operand): rows 32 bytes apart */
        r.stride[0][0] = 32;
        r.stride[0][1] = (int32_t)(32 * (r.n[0] + (uint32_t)rnd(0, 2)));
    }
    size_t need = 256;
    for (int i = 0; i < nops; i++) need += kernel_run_extent(&r, i) + 64;
    image im = image_new(need);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    for (int i = 1; i < nops; i++) off[i] = place(&im, &r, i, true, k == KERNEL_K_SOFTMAX ? 6.0f : 3.0f);
    off[0] = place(&im, &r, 0, false, 0);
    check_run(&im, &r, off, k == KERNEL_K_SOFTMAX ? ref_softmax : ref_layer_norm);
    image_free(&im);
}

static void softmax_layer_norm_random(void **state) {
    (void)state;
    for (int c = 0; c < 150; c++) {
        rows_case(KERNEL_K_SOFTMAX);
        rows_case(KERNEL_K_LAYER_NORM);
    }
}

/* A row cut into parts over tiles: LN_MOMENTS per part, the parts' triples
 * gathered (as the exchange does), LAYER_NORM per part joining them; against
 * a scalar definition of low.h's arithmetic written out here (two-pass
 * moments per part, Chan's join in part order). */
static void layer_norm_parts_random(void **state) {
    (void)state;
    for (int c = 0; c < 80; c++) {
        uint32_t R = (uint32_t)rnd(1, 4), N = (uint32_t)(rnd(0, 2) ? rnd(2, 90) : rnd(300, 1200)), Pw = (uint32_t)rnd(2, 6);
        uint32_t block = (N + Pw - 1) / Pw, P = (N + block - 1) / block;
        dtype tx = (dtype)PICK(FLOAT_TYPES), to = (dtype)PICK(FLOAT_TYPES);
        int sx = rnd_scale(tx), so = rnd_scale(to);
        size_t bx = (size_t)bytes_of(tx), bo = (size_t)bytes_of(to);
        uint8_t *x = malloc(R * N * bx), *g = malloc(N * 2), *b = malloc(N * 2), *out = calloc(R * N, bo), *ref = calloc(R * N, bo);
        float *stats = malloc(sizeof(float) * 3 * R), *all = malloc(sizeof(float) * 3 * R * P),
              *own = malloc(sizeof(float) * 3 * R * P);
        float shift = (float)rnd(-50, 50);
        for (uint32_t i = 0; i < R * N; i++) st(tx, sx, x + i * bx, shift + (float)((int)(rng() % 2001) - 1000) / 250.0f);
        for (uint32_t i = 0; i < N; i++) {
            st(DT_F16, 0, g + 2 * i, (float)((int)(rng() % 201) - 100) / 50.0f);
            st(DT_F16, 0, b + 2 * i, (float)((int)(rng() % 201) - 100) / 100.0f);
        }
        for (uint32_t p = 0; p < P; p++) { /* each part's statistics, gathered row by row; each run also
                                             writes its own slot of every row (n[2] = P) */
            uint32_t len = p + 1 < P ? block : N - p * block;
            kernel_run m = {.kernel = KERNEL_K_LN_MOMENTS, .dt = {DT_F32, (uint8_t)tx, DT_F32}, .scale = {0, (int8_t)sx},
                         .n = {R, len, P}};
            m.stride[1][0] = (int32_t)(N * bx);
            char why[128];
            assert_true(kernel_run_valid(&m, why, sizeof why));
            sim_kernel_run(&m, (uint8_t *const[KERNEL_MAX_OPERANDS]){(uint8_t *)stats, x + p * block * bx, (uint8_t *)(own + 3 * p)});
            for (uint32_t r = 0; r < R; r++) memcpy(all + 3 * (r * P + p), stats + 3 * r, 12);
        }
        assert_memory_equal(all, own, sizeof(float) * 3 * R * P);
        for (uint32_t p = 0; p < P; p++) {
            uint32_t len = p + 1 < P ? block : N - p * block;
            kernel_run l = {.kernel = KERNEL_K_LAYER_NORM, .acc = DT_F32, .dt = {(uint8_t)to, (uint8_t)tx, DT_F16, DT_F16, DT_F32},
                         .scale = {(int8_t)so, (int8_t)sx}, .n = {R, len, P}, .f = {1e-5f}};
            l.stride[0][0] = (int32_t)(N * bo), l.stride[1][0] = (int32_t)(N * bx);
            char why[128];
            assert_true(kernel_run_valid(&l, why, sizeof why));
            sim_kernel_run(&l, (uint8_t *const[KERNEL_MAX_OPERANDS]){out + p * block * bo, x + p * block * bx, g + p * block * 2,
                                                                   b + p * block * 2, (uint8_t *)all});
        }
        for (uint32_t r = 0; r < R; r++) {
            const uint8_t *xr = x + r * N * bx;
            float n = 0, mean = 0, m2 = 0;
            for (uint32_t p = 0; p < P; p++) {
                uint32_t len = p + 1 < P ? block : N - p * block;
                float sum = 0.0f, q = 0.0f;
                for (uint32_t i = 0; i < len; i++) sum = sum + ld(tx, sx, xr + (p * block + i) * bx);
                float mp = sum / (float)len;
                for (uint32_t i = 0; i < len; i++) {
                    float d = ld(tx, sx, xr + (p * block + i) * bx) - mp;
                    q = q + d * d;
                }
                if (p == 0) {
                    n = (float)len, mean = mp, m2 = q;
                } else {
                    float nn = n + (float)len, d = mp - mean;
                    mean = mean + d * ((float)len / nn);
                    m2 = m2 + q + d * d * (n * (float)len / nn);
                    n = nn;
                }
            }
            float rstd = 1.0f / sqrtf(m2 / n + 1e-5f);
            for (uint32_t i = 0; i < N; i++)
                st(to, so, ref + (r * N + i) * bo,
                   (ld(tx, sx, xr + i * bx) - mean) * rstd * ld(DT_F16, 0, g + 2 * i) + ld(DT_F16, 0, b + 2 * i));
        }
        assert_memory_equal(out, ref, R * N * bo);
        free(x), free(g), free(b), free(out), free(ref), free(stats), free(all), free(own);
    }
}

/* ---- FILL, COPY --------------------------------------------------------------------------- */

static void ref_fill(const kernel_run *r, uint8_t *const p[]) {
    for (uint32_t e = 0; e < r->n[0]; e++) st((dtype)r->dt[0], r->scale[0], p[0] + e * bytes_of((dtype)r->dt[0]), r->f[0]);
}

static void ref_copy(const kernel_run *r, uint8_t *const p[]) {
    for (uint32_t a = 0; a < r->n[0]; a++)
        for (uint32_t b = 0; b < r->n[1]; b++)
            for (uint32_t c = 0; c < r->n[2]; c++)
                for (uint32_t e = 0; e < r->n[3]; e++)
                    p[0][a * r->stride[0][0] + b * r->stride[0][1] + c * r->stride[0][2] + e] =
                        p[1][a * r->stride[1][0] + b * r->stride[1][1] + c * r->stride[1][2] + e];
}

static void fill_copy_random(void **state) {
    (void)state;
    for (int c = 0; c < 100; c++) {
        kernel_run r = {.kernel = KERNEL_K_FILL, .dt = {(uint8_t)PICK(FLOAT_TYPES)}, .n = {(uint32_t)rnd(1, 300)}};
        r.scale[0] = (int8_t)rnd_scale((dtype)r.dt[0]);
        r.f[0] = rnd(0, 4) ? rnd_val(10.0f) : 1e9f; /* 8-bit fills saturate */
        image im = image_new(kernel_run_extent(&r, 0) + 64);
        uint32_t off[KERNEL_MAX_OPERANDS] = {place(&im, &r, 0, false, 0)};
        check_run(&im, &r, off, ref_fill);
        image_free(&im);

        /* Spans of n[3] bytes in a strided 3-D box, gaps on both sides. */
        kernel_run cp = {.kernel = KERNEL_K_COPY, .dt = {DT_F32, DT_F32},
                      .n = {(uint32_t)rnd(1, 3), (uint32_t)rnd(1, 4), (uint32_t)rnd(1, 5), (uint32_t)rnd(1, 300)}};
        for (int i = 0; i < 2; i++) {
            cp.stride[i][2] = (int32_t)(cp.n[3] + (uint32_t)rnd(0, 7));
            cp.stride[i][1] = cp.stride[i][2] * (int32_t)cp.n[2] + (int32_t)rnd(0, 5);
            cp.stride[i][0] = cp.stride[i][1] * (int32_t)cp.n[1] + (int32_t)rnd(0, 5);
        }
        im = image_new(kernel_run_extent(&cp, 0) + kernel_run_extent(&cp, 1) + 64);
        uint32_t o2[KERNEL_MAX_OPERANDS] = {0};
        o2[1] = image_alloc(&im, kernel_run_extent(&cp, 1), 1);
        image_fill(&im, o2[1], kernel_run_extent(&cp, 1), DT_F32, 0, 4.0f);
        o2[0] = image_alloc(&im, kernel_run_extent(&cp, 0), 1);
        check_run(&im, &cp, o2, ref_copy);
        image_free(&im);
    }
}

/* ---- GATHER ------------------------------------------------------------------------------- */

/* low.h's definition, element by element: row ids[i] (negative: from the end) or zeros. */
static void ref_gather(const kernel_run *r, uint8_t *const p[]) {
    uint32_t b = (uint32_t)bytes_of((dtype)r->dt[0]);
    for (uint32_t i = 0; i < r->n[0]; i++) {
        int32_t id;
        memcpy(&id, p[2] + 4 * i, 4);
        int64_t row = id < 0 ? (int64_t)id + r->n[2] : id;
        for (uint32_t e = 0; e < r->n[1] * b; e++)
            p[0][i * (uint32_t)r->stride[0][0] + e] =
                row >= 0 && row < (int64_t)r->n[2] ? p[1][(uint32_t)row * (uint32_t)r->stride[1][0] + e] : 0;
    }
}

static void gather_random(void **state) {
    (void)state;
    for (int c = 0; c < 100; c++) {
        dtype t = PICK(FLOAT_TYPES);
        kernel_run r = {.kernel = KERNEL_K_GATHER, .dt = {(uint8_t)t, (uint8_t)t, DT_I32},
                     .n = {(uint32_t)rnd(1, 60), (uint32_t)rnd(1, 40), (uint32_t)rnd(1, 50)}};
        r.scale[0] = r.scale[1] = (int8_t)rnd_scale(t);
        for (int i = 0; i < 2; i++) r.stride[i][0] = (int32_t)((r.n[1] + (uint32_t)rnd(0, 3)) * (uint32_t)bytes_of(t));
        image im = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 1) + kernel_run_extent(&r, 2) + 256);
        uint32_t off[KERNEL_MAX_OPERANDS] = {0};
        off[1] = place(&im, &r, 1, true, 4.0f);
        off[2] = image_alloc(&im, kernel_run_extent(&r, 2), 4);
        for (uint32_t i = 0; i < r.n[0]; i++) { /* every row, both ends, and past them */
            int32_t id = (int32_t)rnd(-(int)r.n[2] - 3, (int)r.n[2] + 3);
            memcpy(im.mem + off[2] + 4 * i, &id, 4);
        }
        off[0] = place(&im, &r, 0, false, 0);
        check_run(&im, &r, off, ref_gather);
        image_free(&im);
    }
    /* One dtype for table and result, and rows that do not overlap. */
    char why[128];
    kernel_run bad = {.kernel = KERNEL_K_GATHER, .dt = {DT_F16, DT_F32, DT_I32}, .n = {2, 4, 8}, .stride = {{8}, {8}}};
    assert_false(kernel_run_valid(&bad, why, sizeof why));
    bad.dt[1] = DT_F16;
    assert_true(kernel_run_valid(&bad, why, sizeof why));
    bad.stride[0][0] = 6;
    assert_false(kernel_run_valid(&bad, why, sizeof why));
    bad.stride[0][0] = 8, bad.dt[2] = DT_F16; /* indices are i32 */
    assert_false(kernel_run_valid(&bad, why, sizeof why));

    /* Integers become floats only through a cast (a mask from token data), each value rounded once. */
    const int32_t ints[5] = {-5, 3, 70000, (1 << 24) + 1, INT32_MIN};
    const float want16[5] = {-5.0f, 3.0f, INFINITY, INFINITY, -INFINITY}; /* past f16's 65504 */
    for (int k = 0; k < 2; k++) {
        dtype to = k ? DT_F32 : DT_F16;
        kernel_run cast = {.kernel = KERNEL_K_EWISE, .ew = KERNEL_EW_CAST, .acc = DT_F32, .dt = {(uint8_t)to, DT_I32},
                        .n = {1, 1, 1, 5}, .stride = {{0, 0, 0, (int32_t)bytes_of(to)}, {0, 0, 0, 4}}};
        assert_true(kernel_run_valid(&cast, why, sizeof why));
        uint8_t in[20], out[20];
        memcpy(in, ints, sizeof in);
        uint8_t *p[KERNEL_MAX_OPERANDS] = {out, in};
        sim_kernel_run(&cast, p);
        for (int i = 0; i < 5; i++) {
            float got = ld(to, 0, out + i * bytes_of(to));
            if (k) assert_true(got == (float)ints[i]);
            else assert_true(got == want16[i]);
        }
        cast.ew = KERNEL_EW_ADD; /* nothing else reads them */
        assert_false(kernel_run_valid(&cast, why, sizeof why));
    }
}

/* ---- SGD, ADAMW, SUMSQ, CLIP_COEF --------------------------------------------------------- */

static void ref_sgd(const kernel_run *r, uint8_t *const p[]) {
    float lr = r->f[0], mom = r->f[1], wd = r->f[2];
    for (uint32_t e = 0; e < r->n[0]; e++) {
#define EL(i) (p[i] + e * bytes_of((dtype)r->dt[i]))
        float w = ld((dtype)r->dt[2], r->scale[2], EL(2)), g = ld((dtype)r->dt[3], r->scale[3], EL(3));
        g = g + wd * w;
        float step = g;
        if (mom != 0.0f) {
            float buf = mom * ld((dtype)r->dt[4], r->scale[4], EL(4)) + g;
            step = num_round((dtype)r->dt[1], r->scale[1], buf);
            st((dtype)r->dt[1], r->scale[1], EL(1), step);
        }
        st((dtype)r->dt[0], r->scale[0], EL(0), w - lr * step);
    }
}

static void ref_adamw(const kernel_run *r, uint8_t *const p[]) {
    float lr = r->f[0], b1 = r->f[1], b2 = r->f[2], eps = r->f[3], wd = r->f[4];
    float bc1 = (float)(1.0 - pow(b1, (double)r->n[1])), bc2 = (float)(1.0 - pow(b2, (double)r->n[1]));
    for (uint32_t e = 0; e < r->n[0]; e++) {
        float w = ld((dtype)r->dt[3], r->scale[3], EL(3)), g = ld((dtype)r->dt[4], r->scale[4], EL(4));
        float m = ld((dtype)r->dt[5], r->scale[5], EL(5)), v = ld((dtype)r->dt[6], r->scale[6], EL(6));
        m = num_round((dtype)r->dt[1], r->scale[1], b1 * m + (1.0f - b1) * g);
        v = num_round((dtype)r->dt[2], r->scale[2], b2 * v + (1.0f - b2) * g * g);
        float w2 = w * (1.0f - lr * wd) - lr / bc1 * m / (sqrtf(v) / sqrtf(bc2) + eps);
        st((dtype)r->dt[0], r->scale[0], EL(0), w2);
        st((dtype)r->dt[1], r->scale[1], EL(1), m);
        st((dtype)r->dt[2], r->scale[2], EL(2), v);
#undef EL
    }
}

static void ref_sumsq(const kernel_run *r, uint8_t *const p[]) {
    float s;
    memcpy(&s, p[0], 4); /* the chain continues from the output's value */
    for (uint32_t e = 0; e < r->n[0]; e++) {
        float x = ld((dtype)r->dt[1], r->scale[1], p[1] + e * bytes_of((dtype)r->dt[1]));
        s = s + x * x;
    }
    memcpy(p[0], &s, 4);
}

static void ref_clip_coef(const kernel_run *r, uint8_t *const p[]) {
    float s = 0.0f;
    for (uint32_t e = 0; e < r->n[0]; e++) s = s + ld(DT_F32, 0, p[1] + 4 * e);
    float c = r->f[0] / (sqrtf(s) + 1e-6f);
    c = c > 1.0f ? 1.0f : c;
    memcpy(p[0], &c, 4);
}

/* A run over n[0] contiguous elements; state operands (v of adamw, sumsq inputs) positive. */
static void elems_case(kernel_id k, bool momentum) {
    int nops = kernel_operands[k];
    kernel_run r = {.kernel = (uint8_t)k, .n = {(uint32_t)(rnd(0, 3) ? rnd(1, 100) : rnd(500, 1500)), (uint32_t)rnd(1, 12)}};
    for (int i = 0; i < nops; i++) {
        r.dt[i] = (uint8_t)(rnd(0, 2) ? DT_F32 : PICK(FLOAT_TYPES));
        r.scale[i] = (int8_t)rnd_scale((dtype)r.dt[i]);
    }
    if (k == KERNEL_K_SUMSQ || k == KERNEL_K_CLIP_COEF) r.dt[0] = DT_F32;
    if (k == KERNEL_K_CLIP_COEF) r.dt[1] = DT_F32;
    if (k == KERNEL_K_SGD) r.f[0] = 0.1f, r.f[1] = momentum ? 0.9f : 0.0f, r.f[2] = rnd(0, 1) ? 0.01f : 0.0f;
    if (k == KERNEL_K_ADAMW) r.f[0] = 1e-3f, r.f[1] = 0.9f, r.f[2] = 0.999f, r.f[3] = 1e-8f, r.f[4] = 0.01f;
    if (k == KERNEL_K_CLIP_COEF) r.f[0] = rnd(0, 1) ? 1.0f : 1e6f; /* below and above the norm */
    size_t need = 256;
    for (int i = 0; i < nops; i++) need += kernel_run_extent(&r, i) + 64;
    image im = image_new(need);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    int first_in = k == KERNEL_K_SGD ? 2 : k == KERNEL_K_ADAMW ? 3 : 1;
    for (int i = first_in; i < nops; i++)
        if (kernel_run_uses(&r, i)) {
            off[i] = place(&im, &r, i, true, 2.0f);
            if ((k == KERNEL_K_ADAMW && i == 6) || k == KERNEL_K_CLIP_COEF) /* second moments, squared sums: >= 0 */
                for (uint32_t e = 0; e < r.n[0]; e++) {
                    uint8_t *q = im.mem + off[i] + e * (uint32_t)bytes_of((dtype)r.dt[i]);
                    st((dtype)r.dt[i], r.scale[i], q, fabsf(ld((dtype)r.dt[i], r.scale[i], q)));
                }
        }
    for (int i = 0; i < first_in; i++)
        if (kernel_run_uses(&r, i)) off[i] = place(&im, &r, i, false, 0);
    ref_fn *ref = k == KERNEL_K_SGD ? ref_sgd : k == KERNEL_K_ADAMW ? ref_adamw : k == KERNEL_K_SUMSQ ? ref_sumsq : ref_clip_coef;
    check_run(&im, &r, off, ref);
    image_free(&im);
}

static void optimizer_norm_random(void **state) {
    (void)state;
    for (int c = 0; c < 60; c++) {
        elems_case(KERNEL_K_SGD, false);
        elems_case(KERNEL_K_SGD, true);
        elems_case(KERNEL_K_ADAMW, false);
        elems_case(KERNEL_K_SUMSQ, false);
        elems_case(KERNEL_K_CLIP_COEF, false);
    }
}

/* ---- threads ------------------------------------------------------------------------------ */

/* Kernels on several host threads at once (each with its own scratch, freed when the thread
 * ends) give the bytes one thread gives. */
enum { THREAD_JOBS = 16 };

typedef struct thread_job {
    kernel_run r;
    uint8_t *mem;          /* the job's image */
    uint32_t off[3];
} thread_job;

static void run_jobs(void *ctx, int64_t begin, int64_t end) {
    thread_job *jobs = ctx;
    for (int64_t j = begin; j < end; j++) {
        uint8_t *p[KERNEL_MAX_OPERANDS] = {jobs[j].mem + jobs[j].off[0], jobs[j].mem + jobs[j].off[1], jobs[j].mem + jobs[j].off[2]};
        sim_kernel_run(&jobs[j].r, p);
    }
}

static void threads_agree(void **state) {
    (void)state;
    thread_job jobs[THREAD_JOBS];
    image ims[THREAD_JOBS];
    for (int j = 0; j < THREAD_JOBS; j++) {
        uint32_t M = (uint32_t)rnd(20, 90), N = (uint32_t)rnd(20, 90), K = (uint32_t)rnd(100, 600);
        dtype t = j % 2 ? DT_F143 : DT_F16;
        kernel_run r = {.kernel = KERNEL_K_GEMM, .acc = (uint8_t)(j % 4 < 2 ? DT_F32 : DT_F16), .dt = {(uint8_t)t, (uint8_t)t, DT_F32}, .n = {1, M, N, K}};
        uint32_t w = (uint32_t)(32 / bytes_of(t));
        r.stride[0][1] = (int32_t)(M * 32), r.stride[0][0] = (int32_t)((K + w - 1) / w * M * 32);
        r.stride[1][1] = (int32_t)(N * (uint32_t)bytes_of(t)), r.stride[1][0] = (int32_t)K * r.stride[1][1];
        r.stride[2][1] = (int32_t)(N * 4), r.stride[2][0] = (int32_t)(M * N * 4);
        ims[j] = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 1) + kernel_run_extent(&r, 2) + 256);
        jobs[j] = (thread_job){.r = r, .mem = ims[j].mem};
        jobs[j].off[0] = place(&ims[j], &r, 0, true, 1.0f);
        jobs[j].off[1] = place(&ims[j], &r, 1, true, 1.0f);
        jobs[j].off[2] = place(&ims[j], &r, 2, false, 0);
        memcpy(ims[j].ref, ims[j].mem, ims[j].size);
    }
    run_jobs(jobs, 0, THREAD_JOBS); /* one thread: the expected bytes */
    for (int j = 0; j < THREAD_JOBS; j++) {
        uint8_t *t = ims[j].ref; /* swap: results move to ref, inputs come back to mem */
        ims[j].ref = ims[j].mem;
        ims[j].mem = t;
        jobs[j].mem = t;
    }
    for (int round = 0; round < 3; round++) util_parallel(THREAD_JOBS, 1, run_jobs, jobs); /* idempotent runs */
    for (int j = 0; j < THREAD_JOBS; j++) {
        assert_memory_equal(ims[j].mem, ims[j].ref, ims[j].size);
        image_free(&ims[j]);
    }
}

/* ---- cycle model -------------------------------------------------------------------------- */

static uint64_t ceil_div_u64(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static machine preset(const char *name) {
    machine m;
    assert_int_equal(machine_preset(name, &m), 0);
    return m;
}

static uint64_t gemm_cycles_acc(const machine *m, dtype t, dtype acc, uint32_t batch, uint32_t M, uint32_t N, uint32_t K,
                                bool interleaved) {
    kernel_run r = {.kernel = KERNEL_K_GEMM, .acc = (uint8_t)acc, .dt = {(uint8_t)t, (uint8_t)t, DT_F16}, .n = {batch, M, N, K}};
    bool il[KERNEL_MAX_OPERANDS] = {interleaved, interleaved, interleaved};
    return kernel_run_cycles(&r, m, il);
}

static uint64_t gemm_cycles(const machine *m, dtype t, uint32_t M, uint32_t N, uint32_t K, bool interleaved) {
    return gemm_cycles_acc(m, t, DT_F32, 1, M, N, K, interleaved);
}

static void cycles_gemm_shape(void **state) {
    (void)state;
    machine c600 = preset("c600");
    static const dtype ts[] = {DT_F16, DT_F143, DT_F32};
    for (size_t i = 0; i < TS_COUNT(ts); i++)
        for (int il = 0; il < 2; il++) {
            uint64_t prev = 0;
            for (uint32_t K = 1; K <= 400; K++) { /* monotone in K */
                uint64_t c = gemm_cycles(&c600, ts[i], 37, 40, K, il);
                assert_true(c >= prev);
                prev = c;
            }
            prev = 0;
            for (uint32_t M = 1; M <= 300; M++) {
                uint64_t c = gemm_cycles(&c600, ts[i], M, 40, 100, il);
                /* rows are dealt over the workers: every sixth row costs AMP time */
                assert_true(M % c600.workers == 1 ? c > prev : c >= prev);
                prev = c;
            }
            prev = 0;
            for (uint32_t N = 1; N <= 300; N++) {
                uint64_t c = gemm_cycles(&c600, ts[i], 37, N, 100, il);
                assert_true(c >= prev);
                prev = c;
            }
        }
    /* K counts in panel depths (f16 16): a partial panel costs a whole one, the next costs more
     * (docs/calibration.md: the three GEMMs with K not a multiple of 64). */
    assert_int_equal(gemm_cycles(&c600, DT_F16, 64, 64, 65, false), gemm_cycles(&c600, DT_F16, 64, 64, 80, false));
    assert_true(gemm_cycles(&c600, DT_F16, 64, 64, 64, false) < gemm_cycles(&c600, DT_F16, 64, 64, 65, false));
    assert_true(gemm_cycles(&c600, DT_F16, 64, 64, 80, false) < gemm_cycles(&c600, DT_F16, 64, 64, 128, false));
    /* So does a partial column panel. */
    assert_int_equal(gemm_cycles(&c600, DT_F16, 64, 17, 128, true), gemm_cycles(&c600, DT_F16, 64, 32, 128, true));
    /* The machine.h formula, worked: 244 x 128 x 64 f143 with f16 partials in the AMP's panel
     * order (the predecessor's QKV kernel, measured 18,576; docs/calibration.md): 4 column panels
     * as a batch, 4 K panels each of 146 + 246 rows (244 over six workers) * 4, plus 389. */
    assert_int_equal(gemm_cycles_acc(&c600, DT_F143, DT_F16, 4, 244, 16, 128, true), 389 + 16 * (146 + 246 * 4));
    /* Written row-major over the four panels, each row of each panel pays 3 more. */
    assert_int_equal(gemm_cycles_acc(&c600, DT_F143, DT_F16, 1, 244, 64, 128, true), 389 + 16 * (146 + 246 * 7));
    /* With f16 partials 8-bit AMP work is half of f16's on c600 (twice the rate) once the AMP
     * is the limit; with f32 partials no measurement shows more than the f16 rate. */
    uint64_t f16 = gemm_cycles_acc(&c600, DT_F16, DT_F16, 1, 256, 64, 512, true);
    uint64_t f8 = gemm_cycles_acc(&c600, DT_F143, DT_F16, 1, 256, 64, 512, true);
    assert_int_equal(f16 - c600.gemm_run_cycles, 2 * (f8 - c600.gemm_run_cycles));
    uint64_t f8w = gemm_cycles_acc(&c600, DT_F143, DT_F32, 1, 256, 64, 512, true);
    assert_true(f8w > f8 && f8w < f16);
    /* mk2 has no 8-bit AMP path: the cost says so; f16 is fine there. */
    machine mk2 = preset("mk2");
    for (size_t i = 0; i < TS_COUNT(F8_TYPES); i++) assert_true(gemm_cycles(&mk2, F8_TYPES[i], 16, 16, 64, false) == KERNEL_CYCLES_UNSUPPORTED);
    assert_true(gemm_cycles(&mk2, DT_F16, 16, 16, 64, false) < 10000);
    /* bf16 has no AMP path anywhere. */
    assert_true(gemm_cycles(&c600, DT_BF16, 16, 16, 64, false) == KERNEL_CYCLES_UNSUPPORTED);
    /* The load floor: with no per-panel overhead the AMP eats A as fast as ordinary memory
     * delivers it, so A and B together are load-bound unless they are interleaved. */
    machine lean = c600;
    lean.gemm_panel_cycles = 0, lean.gemm_run_cycles = 0, lean.gemm_packed_row_cycles = 0;
    uint64_t plain = gemm_cycles(&lean, DT_F16, 128, 64, 256, false), fast = gemm_cycles(&lean, DT_F16, 128, 64, 256, true);
    assert_true(plain > fast);
    /* 16 K panels x 4 column panels at 4 cycles per row, the busiest worker taking 22 of 128 rows */
    assert_int_equal(fast, 4 * 16 * (132 * 4));
    assert_int_equal(plain, 4 * 128 * 256 * 2 / 8 + 256 * 64 * 2 / 8);
}

static uint64_t ew_cycles(const machine *m, kernel_ew_op op, dtype t, uint32_t rows, uint32_t len, int32_t row_pad) {
    kernel_run r = {.kernel = KERNEL_K_EWISE, .ew = (uint8_t)op, .dt = {(uint8_t)t, (uint8_t)t, (uint8_t)t}, .n = {1, 1, rows, len}};
    for (int i = 0; i < 3; i++) r.stride[i][3] = dtype_bytes(t), r.stride[i][2] = (int32_t)len * dtype_bytes(t) + row_pad;
    return kernel_run_cycles(&r, m, NULL);
}

static void cycles_vector_shape(void **state) {
    (void)state;
    machine c600 = preset("c600");
    uint64_t prev = 0, g = c600.ewise_grain_elems;
    for (uint32_t n = (uint32_t)g; n <= 3000; n += (uint32_t)g) { /* monotone in whole grains */
        uint64_t c = ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 1, n, 0);
        assert_true(c >= prev);
        prev = c;
    }
    /* Pinned, the worked example of docs/sim.md: 576 f16 adds are 36 grains of 16, six rounds
     * of six workers at 15 instructions of 6 cycles, plus 309. */
    assert_int_equal(ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 1, 576, 0), 309 + 6 * 6 * 15);
    /* The tail goes in pairs on one worker: 30 GeLU values cost more than 96 (measured 1,182
     * and 792 cycles, docs/calibration.md). */
    assert_true(ew_cycles(&c600, KERNEL_EW_GELU, DT_F16, 1, 30, 0) > ew_cycles(&c600, KERNEL_EW_GELU, DT_F16, 1, 96, 0));
    /* gelu pays a function per element; 8-bit moves fewer bytes than f16, f32 more. */
    assert_true(ew_cycles(&c600, KERNEL_EW_GELU, DT_F16, 1, 1000, 0) > ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 1, 1000, 0) + 3000);
    assert_true(ew_cycles(&c600, KERNEL_EW_CAST, DT_F143, 1, 1000, 0) > ew_cycles(&c600, KERNEL_EW_CAST, DT_F16, 1, 1000, 0));
    assert_true(ew_cycles(&c600, KERNEL_EW_CAST, DT_F32, 1, 1000, 0) > ew_cycles(&c600, KERNEL_EW_CAST, DT_F16, 1, 1000, 0));
    /* Dense rows merge into one; padded rows each make their own pass over the workers. */
    assert_int_equal(ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 10, 64, 0), ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 1, 640, 0));
    assert_int_equal(ew_cycles(&c600, KERNEL_EW_ADD, DT_F16, 10, 64, 2), 309 + 10 * 6 * 15);
    /* Softmax rows go one per worker: up to six rows cost one, 7 and 8 rows cost the same
     * (measured, docs/calibration.md). Layer norm rows go one after another. */
    kernel_run sm = {.kernel = KERNEL_K_SOFTMAX, .dt = {DT_F16, DT_F16}, .n = {4, 100}};
    kernel_run ln = {.kernel = KERNEL_K_LAYER_NORM, .dt = {DT_F16, DT_F16, DT_F16, DT_F16}, .n = {4, 100}};
    uint64_t s0 = kernel_run_cycles(&sm, &c600, NULL), l0 = kernel_run_cycles(&ln, &c600, NULL);
    sm.n[0] = 6;
    assert_true(kernel_run_cycles(&sm, &c600, NULL) == s0);
    sm.n[0] = 7;
    uint64_t s7 = kernel_run_cycles(&sm, &c600, NULL);
    sm.n[0] = 8;
    assert_true(s7 > s0 && kernel_run_cycles(&sm, &c600, NULL) == s7);
    ln.n[0] = 5;
    assert_true(kernel_run_cycles(&ln, &c600, NULL) > l0);
    sm.n[0] = 4, sm.n[1] = 101, ln.n[1] = 200;
    assert_true(kernel_run_cycles(&sm, &c600, NULL) > s0 && kernel_run_cycles(&ln, &c600, NULL) > l0);
    /* One row over six workers is split into segments and merged: far less than a whole row. */
    kernel_run sm1 = {.kernel = KERNEL_K_SOFTMAX, .dt = {DT_F16, DT_F16}, .n = {1, 729}};
    assert_true(kernel_run_cycles(&sm1, &c600, NULL) < ceil_div_u64(729ull * c600.softmax_key_centi, 100));
    /* Interleaved operands never cost more; copies go at copy_bytes_per_cycle. */
    kernel_run cp = {.kernel = KERNEL_K_COPY, .n = {1, 1, 1, 8000}};
    bool il[KERNEL_MAX_OPERANDS] = {true, true};
    assert_int_equal(kernel_run_cycles(&cp, &c600, NULL), 277 + 8 + 1000);
    cp.n[2] = 10; /* ten spans cost ten loop steps more than one of the same bytes */
    cp.n[3] = 800;
    cp.stride[0][2] = cp.stride[1][2] = 800;
    assert_int_equal(kernel_run_cycles(&cp, &c600, NULL), 277 + 80 + 1000);
    assert_true(kernel_run_cycles(&cp, &c600, il) <= kernel_run_cycles(&cp, &c600, NULL));
    /* A residual added by a reduce costs one addend more; an epilogue reduction's floats are
     * its optimizer's (momentum in f[1]) and never read as a residual. */
    kernel_run rd = {.kernel = KERNEL_K_REDUCE, .dt = {DT_F16, DT_F16, 0, 0, DT_F16}, .n = {4, 512}};
    uint64_t r0 = kernel_run_cycles(&rd, &c600, NULL);
    rd.residual = true;
    assert_true(kernel_run_cycles(&rd, &c600, NULL) > r0);
    kernel_run re = {.kernel = KERNEL_K_REDUCE_EPI, .epi = KERNEL_EPI_ADAM, .grad = DT_F16,
                  .dt = {DT_F16, DT_F32, DT_F32, DT_F32, DT_F32}, .n = {4, 512}, .f = {0.9f, 0.0f}};
    uint64_t e0 = kernel_run_cycles(&re, &c600, NULL);
    re.f[1] = 0.999f; /* Adam's beta2: the same work */
    assert_int_equal(kernel_run_cycles(&re, &c600, NULL), e0);
    /* Every kernel has a cost. */
    kernel_run adam = {.kernel = KERNEL_K_ADAMW, .dt = {0}, .n = {100, 1}};
    assert_true(kernel_run_cycles(&adam, &c600, NULL) > 850 + 100 * 4);
}

/* ---- throughput ------------------------------------------------------------------------- */

/* One tile's share of the big FP8 MLP (729 x 1152 x 4304 over 1472 tiles): 496 x 1152 by
 * 1152 x 48, f143 operands, f32 accumulation, f16 result. Printed, never asserted. */
static void gemm_throughput(void **state) {
    (void)state;
    const uint32_t M = 496, K = 1152, N = 48, w = 32;
    kernel_run r = {.kernel = KERNEL_K_GEMM, .acc = DT_F32, .dt = {DT_F143, DT_F143, DT_F16}, .scale = {-3, -4}, .n = {1, M, N, K}};
    r.stride[0][1] = (int32_t)(M * 32), r.stride[0][0] = (int32_t)(K / w * M * 32);
    r.stride[1][1] = (int32_t)N, r.stride[1][0] = (int32_t)(K * N);
    r.stride[2][1] = (int32_t)(N * 2), r.stride[2][0] = (int32_t)(M * N * 2);
    image im = image_new(kernel_run_extent(&r, 0) + kernel_run_extent(&r, 1) + kernel_run_extent(&r, 2) + 1024);
    uint32_t off[KERNEL_MAX_OPERANDS] = {0};
    off[0] = place(&im, &r, 0, true, 8.0f);
    off[1] = place(&im, &r, 1, true, 16.0f);
    off[2] = place(&im, &r, 2, false, 0);
    uint8_t *p[KERNEL_MAX_OPERANDS] = {im.mem + off[0], im.mem + off[1], im.mem + off[2]};
    double fast = INFINITY; /* the best of a few runs: the host may be busy */
    for (int i = 0; i < 8; i++) {
        double t0 = util_now_seconds();
        sim_kernel_run(&r, p);
        double t = util_now_seconds() - t0;
        fast = t < fast ? t : fast;
    }

    /* The naive way: decode everything, then the triple loop of the definition. */
    double t0 = util_now_seconds();
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t k = 0; k < K; k++) a[m * K + k] = f8_decode(DT_F143, p[0][(k / w) * (uint32_t)r.stride[0][1] + m * 32 + k % w], 0);
    for (uint32_t k = 0; k < K * N; k++) b[k] = f8_decode(DT_F143, p[1][k], 0);
    float post = ldexpf(1.0f, -7);
    bool same = true;
    for (uint32_t m = 0; m < M; m++)
        for (uint32_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (uint32_t k = 0; k < K; k++) acc = acc + a[m * K + k] * b[k * N + n];
            uint16_t h = f32_to_f16(acc * post), got;
            memcpy(&got, p[2] + m * (uint32_t)r.stride[2][1] + 2 * n, 2);
            same = same && h == got;
        }
    double naive = util_now_seconds() - t0;
    assert_true(same);
    double macs = (double)M * N * K;
    fprintf(stderr, "gemm %ux%ux%u f143: kernel %.2f G multiply-adds/s (%.2f ms), naive triple loop %.2f G/s (%.2f ms): %.1fx\n", M,
            K, N, macs / fast / 1e9, fast * 1e3, macs / naive / 1e9, naive * 1e3, naive / fast);
    free(a);
    free(b);
    image_free(&im);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gemm_edges),
        cmocka_unit_test(gemm_random),
        cmocka_unit_test(invalid_runs_rejected),
        cmocka_unit_test(epilogue_matches_unfused),
        cmocka_unit_test(ewise_random),
        cmocka_unit_test(ewise_in_place),
        cmocka_unit_test(reduce_random),
        cmocka_unit_test(reduce_sum_random),
        cmocka_unit_test(softmax_layer_norm_random),
        cmocka_unit_test(layer_norm_parts_random),
        cmocka_unit_test(fill_copy_random),
        cmocka_unit_test(gather_random),
        cmocka_unit_test(optimizer_norm_random),
        cmocka_unit_test(threads_agree),
        cmocka_unit_test(cycles_gemm_shape),
        cmocka_unit_test(cycles_vector_shape),
        cmocka_unit_test(gemm_throughput),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* init.c: the data behind parameters and default inputs.
 *
 * normal(mean, std, seed) is counter-based so any element can be generated
 * independently (and in parallel) with the same result: pair k of the
 * tensor, elements 2k and 2k+1, comes from the two 64-bit words
 * h(2k) and h(2k+1), h(j) = mix(mix(seed + G) + (j+1) * G), G = 0x9e3779b97f4a7c15,
 * through Box-Muller: u1 = ((h(2k) >> 11) + 1) * 2^-53, u2 = (h(2k+1) >> 11) * 2^-53,
 * r = sqrt(-2 ln u1), element 2k = mean + std * r cos(2 pi u2),
 * element 2k+1 = mean + std * r sin(2 pi u2), computed in double, stored as f32.
 * ln, sin and cos are this file's own series (normal_block), good to a few
 * units in the last place of a double, so the f32 values equal those of
 * glibc's log and sincos but for the rare one on a rounding edge; written to
 * run in vector lanes, since a zoo model has hundreds of millions of
 * weights, and built twice: for AVX2 and, where num_wide(), for AVX-512
 * (whose 64-bit multiplies make the integer pass two and a half times as
 * fast). Pure arithmetic (no FMA contraction, correctly rounded division
 * and square root), so the same bits in every lane width and on every
 * machine.
 */
#include "graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct normal_job {
    uint64_t key;
    double mean, std;
    int64_t first, n;  /* elements [first, first + n) of the stream */
    float *out;        /* receives element first + i at out[i] */
} normal_job;

enum { NORMAL_BLOCK = 256 }; /* pairs per pass: the arithmetic runs over arrays, in vector lanes */

/* Box-Muller for pairs [k0, k0 + NORMAL_BLOCK) in two branch-free passes,
 * both in vector lanes. The first, on integers, makes each pair's words and
 * splits u1 = m 2^e with m in [sqrt(1/2), sqrt(2)). The second takes
 *   ln u1 = e ln 2 + 2 atanh(s) = e ln 2 + 2 (s + s^3/3 + ... + s^19/19), s = (m - 1) / (m + 1),
 *     |s| <= 0.1716, so the series' tail is below 10^-16 of its sum;
 *   sin and cos of 2 pi u2 from 4 u2 = q + r, q the nearest whole number of
 *     quarter turns, the angle past them f = r pi/2, |f| <= pi/4, where the
 *     Taylor series to f^15 (sine) and f^16 (cosine) are exact to 10^-16,
 *     summed from the inside out: sin f = f (1 - f^2/(2*3) (1 - f^2/(4*5) (...))).
 * Results: r, cos and sin per pair. */
static inline __attribute__((always_inline)) void normal_block(uint64_t key, int64_t k0, double *restrict rr,
                                                               double *restrict c, double *restrict s) {
    double m[NORMAL_BLOCK], e[NORMAL_BLOCK], f[NORMAL_BLOCK], swap[NORMAL_BLOCK], neg_s[NORMAL_BLOCK], neg_c[NORMAL_BLOCK];
    /* Integer to double without a conversion instruction AVX2 lacks (so this
     * pass runs in vector lanes too): v + 2^52 has v as its significand
     * bits for 0 <= v < 2^52, and v + 1.5 2^52 for |v| < 2^51; both exact. */
    const uint64_t two52 = 0x4330000000000000ull, three51 = 0x4338000000000000ull;
    for (int i = 0; i < NORMAL_BLOCK; i++) {
        uint64_t k = (uint64_t)(k0 + i);
        uint64_t a = mix64(key + (2 * k + 1) * 0x9e3779b97f4a7c15ull);
        uint64_t b = mix64(key + (2 * k + 2) * 0x9e3779b97f4a7c15ull);
        /* u1 = x 2^-53, x = (a >> 11) + 1 in [1, 2^53]: x's halves are exact
         * doubles, so is their sum, and u1 is a normal double in (0, 1]. */
        uint64_t x = (a >> 11) + 1, hi_bits = two52 | x >> 26, lo_bits = two52 | (x & 0x3ffffff), bits;
        double hi, lo;
        memcpy(&hi, &hi_bits, sizeof hi);
        memcpy(&lo, &lo_bits, sizeof lo);
        double u1 = ((hi - 0x1p52) * 0x1p26 + (lo - 0x1p52)) * 0x1p-53;
        memcpy(&bits, &u1, sizeof bits);
        /* m = u1's significand in [1, 2), halved (one off its exponent field)
         * where above sqrt(2), compared as bits (0x3ff6a09e667f3bcd = sqrt(2));
         * e = u1's exponent, plus one where halved, as 2^52 + 1024 + e - (2^52 + 1024). */
        uint64_t mb = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull, over = mb > 0x3ff6a09e667f3bcdull;
        mb -= over << 52;
        uint64_t eb = two52 | ((bits >> 52) + 1 + over);
        double ed;
        memcpy(&m[i], &mb, sizeof mb);
        memcpy(&ed, &eb, sizeof ed);
        e[i] = ed - (0x1p52 + 1024);
        /* u2 = w 2^-53, so 4 u2 = w 2^-51: q = round(w 2^-51), r = (w - q 2^51) 2^-51, exactly. */
        uint64_t w = b >> 11, q = (w + (1ull << 50)) >> 51, rb = three51 + (w - (q << 51));
        double r;
        memcpy(&r, &rb, sizeof r);
        f[i] = (r - 0x1.8p52) * 0x1p-51 * 1.57079632679489661923;
        /* q quarter turns on from (sin f, cos f): each takes (s, c) to (c, -s). */
        swap[i] = (q & 1) ? 1.0 : 0.0;
        neg_s[i] = (q & 2) ? 1.0 : 0.0;
        neg_c[i] = ((q + 1) & 2) ? 1.0 : 0.0;
    }
    for (int i = 0; i < NORMAL_BLOCK; i++) {
        double sl = (m[i] - 1.0) / (m[i] + 1.0), s2 = sl * sl, p = 1.0 / 19;
        p = p * s2 + 1.0 / 17, p = p * s2 + 1.0 / 15, p = p * s2 + 1.0 / 13, p = p * s2 + 1.0 / 11;
        p = p * s2 + 1.0 / 9, p = p * s2 + 1.0 / 7, p = p * s2 + 1.0 / 5, p = p * s2 + 1.0 / 3, p = p * s2 + 1.0;
        rr[i] = sqrt(-2.0 * (e[i] * 0.69314718055994530942 + 2.0 * sl * p));
        double f2 = f[i] * f[i];
        double sf = 1.0 - f2 * (1.0 / (14 * 15));
        sf = 1.0 - f2 * (1.0 / (12 * 13)) * sf, sf = 1.0 - f2 * (1.0 / (10 * 11)) * sf, sf = 1.0 - f2 * (1.0 / (8 * 9)) * sf;
        sf = 1.0 - f2 * (1.0 / (6 * 7)) * sf, sf = 1.0 - f2 * (1.0 / (4 * 5)) * sf, sf = f[i] * (1.0 - f2 * (1.0 / (2 * 3)) * sf);
        double cf = 1.0 - f2 * (1.0 / (15 * 16));
        cf = 1.0 - f2 * (1.0 / (13 * 14)) * cf, cf = 1.0 - f2 * (1.0 / (11 * 12)) * cf, cf = 1.0 - f2 * (1.0 / (9 * 10)) * cf;
        cf = 1.0 - f2 * (1.0 / (7 * 8)) * cf, cf = 1.0 - f2 * (1.0 / (5 * 6)) * cf, cf = 1.0 - f2 * (1.0 / (3 * 4)) * cf;
        cf = 1.0 - f2 * (1.0 / (1 * 2)) * cf;
        double sn = swap[i] != 0.0 ? cf : sf, cs = swap[i] != 0.0 ? sf : cf;
        s[i] = neg_s[i] != 0.0 ? -sn : sn;
        c[i] = neg_c[i] != 0.0 ? -cs : cs;
    }
}

/* The block in 256-bit lanes and in 512-bit ones (restrict: the outputs
 * apart, or the second pass would not vectorize). */
typedef void normal_block_fn(uint64_t key, int64_t k0, double *restrict rr, double *restrict c, double *restrict s);
static void normal_block8(uint64_t key, int64_t k0, double *restrict rr, double *restrict c, double *restrict s) {
    normal_block(key, k0, rr, c, s);
}
__attribute__((target("avx512f,avx512dq"))) static void normal_block16(uint64_t key, int64_t k0, double *restrict rr,
                                                                         double *restrict c, double *restrict s) {
    normal_block(key, k0, rr, c, s);
}

static void normal_pairs(void *ctx, int64_t begin, int64_t end) {
    const normal_job *j = ctx;
    normal_block_fn *block = num_wide() ? normal_block16 : normal_block8;
    double r[NORMAL_BLOCK], c[NORMAL_BLOCK], s[NORMAL_BLOCK];
    for (int64_t k0 = j->first / 2 + begin; k0 < j->first / 2 + end; k0 += NORMAL_BLOCK) {
        block(j->key, k0, r, c, s);
        int64_t nk = j->first / 2 + end - k0 < NORMAL_BLOCK ? j->first / 2 + end - k0 : NORMAL_BLOCK;
        float even[NORMAL_BLOCK], odd[NORMAL_BLOCK]; /* the pairs' elements, in vector lanes */
        const double mean = j->mean, sd = j->std;
        for (int64_t i = 0; i < NORMAL_BLOCK; i++) {
            even[i] = (float)(mean + sd * r[i] * c[i]);
            odd[i] = (float)(mean + sd * r[i] * s[i]);
        }
        int64_t e = 2 * k0 - j->first; /* element of pair k0 */
        if (e >= 0 && e + 2 * nk <= j->n) { /* every pair whole */
            float *restrict o = j->out + e;
            for (int64_t i = 0; i < nk; i++) o[2 * i] = even[i], o[2 * i + 1] = odd[i];
            continue;
        }
        for (int64_t i = 0; i < nk; i++) {
            int64_t e0 = e + 2 * i, e1 = e0 + 1;
            if (e0 >= 0 && e0 < j->n) j->out[e0] = even[i];
            if (e1 >= 0 && e1 < j->n) j->out[e1] = odd[i];
        }
    }
}

void graph_normal_fill_at(uint64_t seed, double mean, double std, int64_t first, float *out, int64_t n) {
    if (n <= 0) return;
    normal_job j = {mix64(seed + 0x9e3779b97f4a7c15ull), mean, std, first, n, out};
    int64_t pairs = (first + n - 1) / 2 - first / 2 + 1;
    util_parallel(pairs, 1 << 16, normal_pairs, &j);
}

/* The largest |value| of elements [0, n): each chunk of MAXABS_CHUNK pairs
 * its own maximum (max is exact, so the split changes nothing), no values
 * kept. */
enum { MAXABS_CHUNK = 1 << 16 };

typedef struct maxabs_job {
    normal_job j;    /* out unused */
    float *chunk_max; /* per chunk */
} maxabs_job;

static void maxabs_chunks(void *ctx, int64_t begin, int64_t end) {
    const maxabs_job *m = ctx;
    float v[2 * NORMAL_BLOCK];
    for (int64_t ch = begin; ch < end; ch++) {
        float mx = 0;
        int64_t first = 2 * ch * MAXABS_CHUNK, last = first + 2 * MAXABS_CHUNK < m->j.n ? first + 2 * MAXABS_CHUNK : m->j.n;
        for (int64_t e = first; e < last; e += 2 * NORMAL_BLOCK) {
            /* normal_pairs itself, so the values are the stream's */
            normal_job j = m->j;
            j.first = e;
            j.n = last - e < 2 * NORMAL_BLOCK ? last - e : 2 * NORMAL_BLOCK;
            j.out = v;
            normal_pairs(&j, 0, (j.n + 1) / 2);
            for (int64_t i = 0; i < j.n; i++) { /* no NaN comes out of the sampler: a compare, not fmaxf */
                float a = fabsf(v[i]);
                mx = a > mx ? a : mx;
            }
        }
        m->chunk_max[ch] = mx;
    }
}

float graph_normal_maxabs(uint64_t seed, double mean, double std, int64_t n) {
    if (n <= 0) return 0;
    int64_t chunks = ((n + 1) / 2 + MAXABS_CHUNK - 1) / MAXABS_CHUNK;
    maxabs_job m = {{mix64(seed + 0x9e3779b97f4a7c15ull), mean, std, 0, n, NULL}, xmalloc(sizeof(float) * (size_t)chunks)};
    util_parallel(chunks, 1, maxabs_chunks, &m);
    float mx = 0;
    for (int64_t i = 0; i < chunks; i++) mx = m.chunk_max[i] > mx ? m.chunk_max[i] : mx;
    free(m.chunk_max);
    return mx;
}

void graph_normal_fill(uint64_t seed, double mean, double std, float *out, int64_t n) {
    graph_normal_fill_at(seed, mean, std, 0, out, n);
}

/* The npy file behind a parameter (or one piece of a concat parameter, of
 * type t), relative to the graph's own file. */
static int load_npy(const graph *g, int32_t op, const char *file, const graph_type *t, float *out, diag *d) {
    const graph_op *o = graph_opr(g, op);
    char *dir = path_dirname(g->path), *path = path_join(dir, file);
    free(dir);
    npy_array a;
    diag nd = {0};
    int rc = npy_read(path, &a, &nd);
    if (rc) {
        /* Say which parameter wanted the file, then what went wrong. */
        nd.text[strcspn(nd.text, "\n")] = 0;
        graph_fail_op(g, op, d, "cannot load parameter '%%%s': %s", graph_val(g, o->out[0])->name, nd.text);
        free(path);
        return -1;
    }
    char got[160];
    if (!npy_has_shape(&a, t->rank, t->dim, got, sizeof got)) {
        char want[128];
        graph_type_str(t, want, sizeof want);
        graph_fail_op(g, op, d, "%s has shape %s but parameter '%%%s' is %s", path, got, graph_val(g, o->out[0])->name, want);
        npy_free(&a);
        free(path);
        return -1;
    }
    num_decode_buf(a.dtype, 0, a.data, out, (size_t)a.numel);
    npy_free(&a);
    free(path);
    return 0;
}

/* Elements [first, first + n) of init `in` for a tensor of type t, as f32
 * before any rounding; op is the parameter, for messages. */
static int init_values_at(const graph *g, int32_t op, const graph_init *in, const graph_type *t, int64_t first, int64_t n,
                          float *out, diag *d) {
    int64_t numel = graph_type_numel(t);
    switch (in->kind) {
    case INIT_ZEROS: memset(out, 0, sizeof(float) * (size_t)n); break;
    case INIT_ONES:
        for (int64_t i = 0; i < n; i++) out[i] = 1.0f;
        break;
    case INIT_NORMAL: graph_normal_fill_at(in->seed, in->mean, in->std, in->skip + first, out, n); break;
    case INIT_DATA: {
        if (!in->parts) /* parsed from a mid file, which carries no values */
            return diag_fail(d, "%s: error: parameter '%s' holds imported data the text does not carry", g->path,
                             graph_val(g, graph_opr(g, op)->out[0])->name);
        /* Equal pieces of little-endian f32, possibly unaligned (memcpy). */
        int64_t per = numel / in->nparts;
        for (int64_t at = first; at < first + n;) {
            int64_t p = at / per, off = at - p * per, k = per - off < first + n - at ? per - off : first + n - at;
            memcpy(out + (at - first), (const uint8_t *)in->parts[p] + off * 4, (size_t)k * 4);
            at += k;
        }
        break;
    }
    case INIT_NPY: {
        /* The file holds the whole tensor: read it, keep the window. */
        float *all = first == 0 && n == numel ? out : xmalloc(sizeof(float) * (size_t)(numel ? numel : 1));
        int rc = load_npy(g, op, in->path, t, all, d);
        if (rc == 0 && all != out) memcpy(out, all + first, sizeof(float) * (size_t)n);
        if (all != out) free(all);
        if (rc) return -1;
        break;
    }
    case INIT_CONCAT: {
        /* Row r of the last axis is piece 0's row r, then piece 1's, ...:
         * each piece gives its part of the window's rows as one run. */
        int64_t W = t->dim[t->rank - 1], r0 = first / W, r1 = (first + n + W - 1) / W, off = 0;
        for (int32_t k = 0; k < in->ncat; k++) {
            graph_type pt = *t;
            int64_t w = in->width[k];
            pt.dim[pt.rank - 1] = w;
            float *row = xmalloc(sizeof(float) * (size_t)(w * (r1 - r0) + 1));
            int rc = init_values_at(g, op, &in->cat[k], &pt, r0 * w, w * (r1 - r0), row, d);
            for (int64_t r = r0; rc == 0 && r < r1; r++)
                for (int64_t c = 0; c < w; c++) {
                    int64_t at = r * W + off + c;
                    if (at >= first && at < first + n) out[at - first] = row[(r - r0) * w + c];
                }
            free(row);
            if (rc) return -1;
            off += w;
        }
        break;
    }
    }
    return 0;
}

int graph_param_values_at(const graph *g, int32_t op, bool keep_f32, int64_t first, int64_t n, float *out, diag *d) {
    const graph_op *o = graph_opr(g, op);
    TS_ASSERT(o->kind == OP_PARAM);
    const graph_type *t = &graph_val(g, o->out[0])->type;
    TS_ASSERT(first >= 0 && n >= 0 && first + n <= graph_type_numel(t));
    if (init_values_at(g, op, &o->init, t, first, n, out, d)) return -1;
    if (!keep_f32) num_round_buf(t->dtype, t->scale, out, (size_t)n);
    return 0;
}

static bool init_windows_cheaply(const graph_init *in) {
    if (in->kind == INIT_NPY) return false;
    for (int32_t k = 0; in->kind == INIT_CONCAT && k < in->ncat; k++)
        if (!init_windows_cheaply(&in->cat[k])) return false;
    return true;
}

bool graph_param_windows_cheaply(const graph *g, int32_t op) { return init_windows_cheaply(&graph_opr(g, op)->init); }

int graph_param_values(const graph *g, int32_t op, bool keep_f32, float *out, diag *d) {
    return graph_param_values_at(g, op, keep_f32, 0, graph_type_numel(&graph_val(g, graph_opr(g, op)->out[0])->type), out, d);
}

void graph_input_fill_seeded(uint64_t seed, dtype dt, int scale, float *out, int64_t n) {
    /* i32 inputs are indices: the same stream times 64, so a default lookup
     * reads rows from both ends of a table (negative ids count from the end). */
    graph_normal_fill(seed, 0.0, dt == DT_I32 ? 64.0 : 1.0, out, n);
    num_round_buf(dt, scale, out, (size_t)n);
}

void graph_default_input_fill(int k, dtype dt, int scale, float *out, int64_t n) {
    graph_input_fill_seeded(1000 + (uint64_t)k, dt, scale, out, n);
}

void graph_input_default(const graph *g, int32_t value, int k, float *out) {
    const graph_type *t = &graph_val(g, value)->type;
    graph_default_input_fill(k, t->dtype, t->scale, out, graph_type_numel(t));
}

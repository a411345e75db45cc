/* test_num.c: dtypes and conversions against tables derived here, from the
 * format specifications, independently of src/num/convert.c.
 *
 * Oracles: the 8-bit and f16 decoders below follow each format's definition
 * with ldexp; the encoders pick the nearest representable value by exact
 * comparison in double (ties to the even code); f32 -> f16 is also checked
 * against the compiler's own _Float16 conversion where the compiler has it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"

/* ---- helpers ---------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void) { /* xorshift64*: deterministic, good enough for test inputs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Same value and same sign of zero (NaN equals NaN). */
static bool same_value(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* Failures are counted, the first few printed, and the test fails once at the end. */
typedef struct fails {
    int n;
} fails;

static void fail_note(fails *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_note(fails *f, const char *fmt, ...) {
    if (f->n++ >= 12) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    print_error("%s\n", buf);
}

static const dtype F8_TYPES[3] = {DT_F8E4M3, DT_F8E5M2, DT_F143};

/* ---- independent format definitions ---------------------------------- */

/* Value of an 8-bit code straight from the format's definition. */
static double spec_f8(dtype t, int code) {
    int s = code >> 7;
    double v;
    if (t == DT_F8E4M3) { /* OCP E4M3FN: bias 7, S.1111.111 is NaN, no inf */
        int e = (code >> 3) & 15, m = code & 7;
        if (e == 15 && m == 7) return NAN;
        v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    } else if (t == DT_F8E5M2) { /* OCP E5M2: IEEE-like, bias 15 */
        int e = (code >> 2) & 31, m = code & 3;
        if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
        v = e ? ldexp(1.0 + m / 4.0, e - 15) : ldexp(m / 4.0, -14);
    } else { /* IPU21 f143: bias 8, all exponents finite, 0x80 is the NaN */
        if (code == 0x80) return NAN;
        int e = (code >> 3) & 15, m = code & 7;
        v = e ? ldexp(1.0 + m / 8.0, e - 8) : ldexp(m / 8.0, -7);
    }
    return s ? -v : v;
}

/* IEEE binary16 from its fields. */
static double spec_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return s ? -v : v;
}

/* bfloat16 from its fields. */
static double spec_bf16(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
    return s ? -v : v;
}

/* A format's non-negative finite values in increasing order with their codes,
 * and the value the code after the largest would have if the format went on
 * (one more step of the top binade's spacing): what RNE rounds against. */
typedef struct grid {
    double *val;
    int *code;
    int n;
    double above;  /* continuation value past val[n-1] */
} grid;

typedef struct pair {
    double v;
    int c;
} pair;

static int pair_cmp(const void *a, const void *b) {
    double x = ((const pair *)a)->v, y = ((const pair *)b)->v;
    return (x > y) - (x < y);
}

static grid grid_make(const double *vals, const int *codes, int n) {
    pair *p = malloc((size_t)n * sizeof *p);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(vals[i]) && !signbit(vals[i])) p[k++] = (pair){vals[i], codes[i]};
    qsort(p, (size_t)k, sizeof *p, pair_cmp);
    grid g = {malloc((size_t)k * sizeof(double)), malloc((size_t)k * sizeof(int)), k, 0};
    for (int i = 0; i < k; i++) {
        g.val[i] = p[i].v;
        g.code[i] = p[i].c;
    }
    g.above = 2 * g.val[k - 1] - g.val[k - 2];
    free(p);
    return g;
}

static void grid_free(grid *g) {
    free(g->val);
    free(g->code);
}

/* Code nearest to a >= 0 (exact: 2a against lo + hi), ties to the even
 * code; -1 if a rounds past the largest finite value. */
static int grid_nearest(const grid *g, double a) {
    int top = g->n - 1;
    if (a >= g->val[top]) {
        double twice = 2 * a, mid2 = g->val[top] + g->above;
        bool up = twice > mid2 || (twice == mid2 && (g->code[top] & 1));
        return up ? -1 : g->code[top];
    }
    int lo = 0, hi = top; /* val[lo] <= a < val[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (g->val[mid] <= a) lo = mid;
        else hi = mid;
    }
    double twice = 2 * a, mid2 = g->val[lo] + g->val[hi];
    if (twice < mid2) return g->code[lo];
    if (twice > mid2) return g->code[hi];
    return (g->code[lo] & 1) ? g->code[hi] : g->code[lo];
}

/* The 8-bit encoding rules of num.h, on top of grid_nearest. */
typedef struct f8_ref {
    dtype t;
    double val[256];  /* spec_f8 of every code */
    grid g;
    int max_code;
    bool signed_specials; /* e4m3/e5m2: -0 and NaN keep the sign; f143: unsigned */
    int nan_code, ovf_code; /* positive NaN encoding; unsaturated overflow */
} f8_ref;

static f8_ref f8_ref_make(dtype t) {
    f8_ref r = {.t = t};
    int codes[256];
    for (int c = 0; c < 256; c++) {
        r.val[c] = spec_f8(t, c);
        codes[c] = c;
    }
    r.g = grid_make(r.val, codes, 256);
    r.max_code = r.g.code[r.g.n - 1];
    r.signed_specials = t != DT_F143;
    r.nan_code = t == DT_F8E4M3 ? 0x7f : t == DT_F8E5M2 ? 0x7e : 0x80;
    r.ovf_code = t == DT_F8E4M3 ? 0x7f : t == DT_F8E5M2 ? 0x7c : 0x80;
    return r;
}

static int f8_oracle(const f8_ref *r, float xf, int scale, bool sat) {
    double x = ldexp((double)xf, -scale); /* exact in double */
    int sign = signbit(x) && r->signed_specials ? 0x80 : 0;
    if (isnan(x)) return r->nan_code | sign;
    int c = isinf(x) ? -1 : grid_nearest(&r->g, fabs(x));
    sign = signbit(x) ? 0x80 : 0;
    if (c < 0) return sat ? r->max_code | sign : r->ovf_code | (r->signed_specials ? sign : 0);
    if (c == 0 && !r->signed_specials) return 0;
    return c | sign;
}

/* ---- dtype table ------------------------------------------------------ */

static void test_dtype_table(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int bytes;
        bool fl, f8;
    } want[DT_COUNT] = {{"f32", 4, 1, 0}, {"f16", 2, 1, 0},    {"bf16", 2, 1, 0}, {"f8e4m3", 1, 1, 1},
                        {"f8e5m2", 1, 1, 1}, {"f143", 1, 1, 1}, {"i32", 4, 0, 0}};
    for (int t = 0; t < DT_COUNT; t++) {
        assert_string_equal(dtype_name((dtype)t), want[t].name);
        assert_int_equal(dtype_bytes((dtype)t), want[t].bytes);
        assert_int_equal(dtype_is_float((dtype)t), want[t].fl);
        assert_int_equal(dtype_is_f8((dtype)t), want[t].f8);
        dtype got = DT_COUNT;
        assert_true(dtype_parse(want[t].name, strlen(want[t].name), &got));
        assert_int_equal(got, t);
    }
    dtype got;
    assert_false(dtype_parse("f3", 2, &got));
    assert_false(dtype_parse("f32x", 4, &got));
    assert_false(dtype_parse("", 0, &got));
    assert_true(dtype_parse("f16garbage", 3, &got)); /* n bytes, not NUL-terminated */
    assert_int_equal(got, DT_F16);
}

/* ---- 8-bit decode ----------------------------------------------------- */

static void test_f8_spot_values(void **state) {
    (void)state;
    static const struct {
        dtype t;
        uint8_t code;
        double v;
    } spots[] = {
        {DT_F8E4M3, 0x7e, 448},      {DT_F8E4M3, 0xfe, -448},         {DT_F8E4M3, 0x01, 0x1p-9},
        {DT_F8E4M3, 0x07, 7 * 0x1p-9}, {DT_F8E4M3, 0x08, 0x1p-6},     {DT_F8E4M3, 0x38, 1.0},
        {DT_F8E4M3, 0x7d, 416},      {DT_F8E5M2, 0x7b, 57344},        {DT_F8E5M2, 0x01, 0x1p-16},
        {DT_F8E5M2, 0x04, 0x1p-14},  {DT_F8E5M2, 0x3c, 1.0},          {DT_F8E5M2, 0xbc, -1.0},
        {DT_F8E5M2, 0x7c, INFINITY}, {DT_F8E5M2, 0xfc, -INFINITY},    {DT_F143, 0x7f, 240},
        {DT_F143, 0xff, -240},       {DT_F143, 0x01, 0x1p-10},        {DT_F143, 0x08, 0x1p-7},
        {DT_F143, 0x40, 1.0},        {DT_F143, 0x00, 0.0},            {DT_F143, 0x78, 128},
    };
    for (size_t i = 0; i < TS_COUNT(spots); i++) {
        float got = f8_decode(spots[i].t, spots[i].code, 0);
        if (!same_value(got, spots[i].v))
            fail_msg("%s 0x%02x: got %a want %a", dtype_name(spots[i].t), spots[i].code, got, spots[i].v);
    }
    assert_true(isnan(f8_decode(DT_F8E4M3, 0x7f, 0)) && isnan(f8_decode(DT_F8E4M3, 0xff, 0)));
    for (int c = 0x7d; c <= 0x7f; c++)
        assert_true(isnan(f8_decode(DT_F8E5M2, (uint8_t)c, 0)) && isnan(f8_decode(DT_F8E5M2, (uint8_t)(c | 0x80), 0)));
    assert_true(isnan(f8_decode(DT_F143, 0x80, 0)));
    assert_true(signbit(f8_decode(DT_F8E4M3, 0x80, 0)) && f8_decode(DT_F8E4M3, 0x80, 0) == 0);
    assert_true(f8_decode(DT_F8E4M3, 0x7e, 5) == 448 * 32);
    assert_true(f8_decode(DT_F8E5M2, 0x01, -16) == 0x1p-32);
    assert_true(f8_max(DT_F8E4M3) == 448 && f8_max(DT_F8E5M2) == 57344 && f8_max(DT_F143) == 240);
}

static void test_f8_decode_all_codes(void **state) {
    (void)state;
    fails f = {0};
    for (int i = 0; i < 3; i++) {
        dtype t = F8_TYPES[i];
        for (int s = NUM_SCALE_MIN; s <= NUM_SCALE_MAX; s++)
            for (int c = 0; c < 256; c++) {
                double want = ldexp(spec_f8(t, c), s);
                float got = f8_decode(t, (uint8_t)c, s);
                if (!same_value(got, want)) fail_note(&f, "%s 0x%02x scale %d: got %a want %a", dtype_name(t), c, s, got, want);
            }
    }
    assert_int_equal(f.n, 0);
}

/* ---- 8-bit encode ----------------------------------------------------- */

static void test_f8_spot_encodes(void **state) {
    (void)state;
    static const struct {
        dtype t;
        float x;
        int scale;
        bool sat;
        uint8_t want;
    } spots[] = {
        {DT_F8E4M3, 448, 0, true, 0x7e},        {DT_F8E4M3, 464, 0, false, 0x7e},  /* tie, 448 even */
        {DT_F8E4M3, 464.00003f, 0, false, 0x7f}, {DT_F8E4M3, 464.00003f, 0, true, 0x7e},
        {DT_F8E4M3, 1e9f, 0, true, 0x7e},       {DT_F8E4M3, -INFINITY, 0, true, 0xfe},
        {DT_F8E4M3, -INFINITY, 0, false, 0xff}, {DT_F8E4M3, NAN, 0, true, 0x7f},
        {DT_F8E4M3, -NAN, 0, true, 0xff},       {DT_F8E4M3, -0.0f, 0, true, 0x80},
        {DT_F8E4M3, 0x1p-10f, 0, true, 0x00},   {DT_F8E4M3, 3 * 0x1p-10f, 0, true, 0x02},
        {DT_F8E4M3, -0x1p-11f, 0, true, 0x80},  {DT_F8E4M3, 448 * 32, 5, true, 0x7e},
        {DT_F8E4M3, 1.0f, -16, true, 0x7e},     {DT_F8E4M3, 0x1p-25f, -16, true, 0x01},
        {DT_F8E5M2, 57344, 0, false, 0x7b},     {DT_F8E5M2, 61440, 0, false, 0x7c}, /* tie, 57344 odd */
        {DT_F8E5M2, 61439.996f, 0, false, 0x7b}, {DT_F8E5M2, 1e6f, 0, true, 0x7b},
        {DT_F8E5M2, INFINITY, 0, false, 0x7c},  {DT_F8E5M2, -INFINITY, 0, false, 0xfc},
        {DT_F8E5M2, -INFINITY, 0, true, 0xfb},  {DT_F8E5M2, NAN, 0, true, 0x7e},
        {DT_F8E5M2, -0.0f, 3, true, 0x80},      {DT_F8E5M2, 0x1p-17f, 0, true, 0x00},
        {DT_F8E5M2, 0x1p-32f, -16, true, 0x01}, {DT_F8E5M2, 1.25f, 0, true, 0x3d},
        {DT_F143, 240, 0, true, 0x7f},          {DT_F143, 248, 0, false, 0x80},    /* tie, 240 odd */
        {DT_F143, 247.99998f, 0, false, 0x7f},  {DT_F143, -1e9f, 0, true, 0xff},
        {DT_F143, INFINITY, 0, true, 0x7f},     {DT_F143, 1e9f, 0, false, 0x80},
        {DT_F143, NAN, 0, true, 0x80},          {DT_F143, -NAN, 0, false, 0x80},
        {DT_F143, -0.0f, 0, true, 0x00},        {DT_F143, -0x1p-12f, 0, true, 0x00},
        {DT_F143, -0x1p-10f, 0, true, 0x81},    {DT_F143, 0x1p-11f, 0, true, 0x00},
        {DT_F143, 3 * 0x1p-11f, 0, true, 0x02}, {DT_F143, 1.0f, 0, true, 0x40},
        {DT_F143, 240.0f * 0x1p15f, 15, true, 0x7f},
    };
    for (size_t i = 0; i < TS_COUNT(spots); i++) {
        uint8_t got = f8_encode(spots[i].t, spots[i].x, spots[i].scale, spots[i].sat);
        if (got != spots[i].want)
            fail_msg("%s encode(%a, scale %d, sat %d): got 0x%02x want 0x%02x", dtype_name(spots[i].t), spots[i].x,
                     spots[i].scale, spots[i].sat, got, spots[i].want);
    }
}

static void check_encode(fails *f, const f8_ref *r, float x, int s, bool sat) {
    int want = f8_oracle(r, x, s, sat);
    int got = f8_encode(r->t, x, s, sat);
    if (got != want)
        fail_note(f, "%s encode(%a, scale %d, sat %d): got 0x%02x want 0x%02x", dtype_name(r->t), x, s, sat, got, want);
}

/* Every f16 value, at every scale, saturating and not. */
static void test_f8_encode_all_f16(void **state) {
    (void)state;
    fails f = {0};
    for (int i = 0; i < 3; i++) {
        f8_ref r = f8_ref_make(F8_TYPES[i]);
        for (int s = NUM_SCALE_MIN; s <= NUM_SCALE_MAX; s++)
            for (uint32_t h = 0; h < 65536; h++) {
                float x = (float)spec_f16((uint16_t)h);
                check_encode(&f, &r, x, s, true);
                check_encode(&f, &r, x, s, false);
            }
        grid_free(&r.g);
    }
    assert_int_equal(f.n, 0);
}

/* Midpoints between neighbouring codes (0 and the smallest subnormal, the
 * subnormal/normal boundary, and the largest value and its continuation),
 * and the f32 values either side of each. */
static void test_f8_ties(void **state) {
    (void)state;
    fails f = {0};
    for (int i = 0; i < 3; i++) {
        f8_ref r = f8_ref_make(F8_TYPES[i]);
        const grid *g = &r.g;
        for (int k = 0; k < g->n; k++) {
            double lo = g->val[k], hi = k + 1 < g->n ? g->val[k + 1] : g->above;
            int lo_code = g->code[k];
            bool hi_over = k + 1 == g->n;
            int hi_code = hi_over ? -1 : g->code[k + 1];
            int tie_code = (lo_code & 1) ? hi_code : lo_code; /* next code has the other parity */
            for (int s = NUM_SCALE_MIN; s <= NUM_SCALE_MAX; s += 3) {
                float mid = (float)ldexp((lo + hi) / 2, s); /* few bits: exact */
                float below = nextafterf(mid, 0), above = nextafterf(mid, INFINITY);
                const struct {
                    float x;
                    int code;
                } cases[] = {{mid, tie_code}, {below, lo_code}, {above, hi_code}};
                for (size_t c = 0; c < TS_COUNT(cases); c++)
                    for (int neg = 0; neg < 2; neg++) {
                        float x = neg ? -cases[c].x : cases[c].x;
                        int want = cases[c].code;
                        int sign = neg ? 0x80 : 0;
                        int want_sat = want < 0 ? r.max_code | sign : (want == 0 && !r.signed_specials ? 0 : want | sign);
                        int want_raw = want < 0 ? r.ovf_code | (r.signed_specials ? sign : 0) : want_sat;
                        int got = f8_encode(r.t, x, s, true), got_raw = f8_encode(r.t, x, s, false);
                        if (got != want_sat || got_raw != want_raw)
                            fail_note(&f, "%s tie %a scale %d: got 0x%02x/0x%02x want 0x%02x/0x%02x", dtype_name(r.t),
                                      x, s, got, got_raw, want_sat, want_raw);
                    }
            }
        }
        grid_free(&r.g);
    }
    assert_int_equal(f.n, 0);
}

/* f32 inputs that are not f16 values: random bit patterns, and random
 * values concentrated where the formats live. */
static void test_f8_encode_random(void **state) {
    (void)state;
    fails f = {0};
    f8_ref refs[3];
    for (int i = 0; i < 3; i++) refs[i] = f8_ref_make(F8_TYPES[i]);
    for (int n = 0; n < 400000; n++) {
        uint64_t r = rng();
        const f8_ref *ref = &refs[r % 3];
        int s = NUM_SCALE_MIN + (int)((r >> 2) % 32);
        uint32_t bits = (uint32_t)(r >> 32);
        if (n & 1) { /* exponent within 2^-40 .. 2^24 */
            uint32_t e = 127 - 40 + (uint32_t)((r >> 8) % 65);
            bits = (bits & 0x807fffffu) | e << 23;
        }
        check_encode(&f, ref, float_of(bits), s, (r >> 16) & 1);
    }
    for (int i = 0; i < 3; i++) grid_free(&refs[i].g);
    assert_int_equal(f.n, 0);
}

static void test_f8_scale_for_max(void **state) {
    (void)state;
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, 448), 0);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, 448.00003f), 1);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, 1.0f), -8);
    assert_int_equal(f8_scale_for_max(DT_F143, 240), 0);
    assert_int_equal(f8_scale_for_max(DT_F8E5M2, 57344 * 4.0f), 2);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, 0), NUM_SCALE_MIN);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, 1e30f), NUM_SCALE_MAX);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, INFINITY), NUM_SCALE_MAX);
    assert_int_equal(f8_scale_for_max(DT_F8E4M3, NAN), NUM_SCALE_MAX);
    /* The defining property on random magnitudes. */
    for (int n = 0; n < 20000; n++) {
        uint64_t r = rng();
        dtype t = F8_TYPES[r % 3];
        float m = (float)ldexp((double)((r >> 8) & 0xffffff) / 0x1p24, (int)((r >> 40) % 50) - 10);
        int s = f8_scale_for_max(t, m);
        double max = spec_f8(t, t == DT_F8E4M3 ? 0x7e : t == DT_F8E5M2 ? 0x7b : 0x7f);
        bool fits = m <= ldexp(max, s), tighter_fits = s > NUM_SCALE_MIN && m <= ldexp(max, s - 1);
        assert_true((fits || s == NUM_SCALE_MAX) && !tighter_fits);
    }
}

/* ---- f16 -------------------------------------------------------------- */

static void test_f16_all_codes(void **state) {
    (void)state;
    fails f = {0};
    for (uint32_t h = 0; h < 65536; h++) {
        double want = spec_f16((uint16_t)h);
        float got = f16_to_f32((uint16_t)h);
        if (!same_value(got, want)) fail_note(&f, "f16 0x%04x: got %a want %a", h, got, want);
        uint16_t back = f32_to_f16(got);
        /* A NaN comes back quiet: the same code with the quiet bit set. */
        uint16_t want_back = isnan(want) ? (uint16_t)(h | 0x200) : (uint16_t)h;
        if (back != want_back) fail_note(&f, "f16 0x%04x re-encodes to 0x%04x", h, back);
    }
    assert_int_equal(f.n, 0);
}

/* Positive finite f16 values, for the nearest-value oracle. */
static grid f16_grid(void) {
    static double vals[0x7c00];
    static int codes[0x7c00];
    for (int h = 0; h < 0x7c00; h++) {
        vals[h] = spec_f16((uint16_t)h);
        codes[h] = h;
    }
    return grid_make(vals, codes, 0x7c00);
}

static uint16_t f16_oracle(const grid *g, float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x)) return 0x7e00 | sign;
    int c = isinf(x) ? -1 : grid_nearest(g, fabs((double)x));
    return (uint16_t)((c < 0 ? 0x7c00 : c) | sign);
}

static void check_f16(fails *f, const grid *g, float x) {
    uint16_t got = f32_to_f16(x);
    if (isnan(x)) {
        if ((got & 0x7c00) != 0x7c00 || !(got & 0x200) || (got & 0x8000) != ((bits_of(x) >> 16) & 0x8000))
            fail_note(f, "f16 encode NaN 0x%08x: got 0x%04x", bits_of(x), got);
        return;
    }
    uint16_t want = f16_oracle(g, x);
#ifdef __FLT16_MAX__
    /* The compiler's conversion is a second, separate party. */
    _Float16 c = (_Float16)x;
    uint16_t cbits;
    memcpy(&cbits, &c, 2);
    if (cbits != want) fail_note(f, "f16 oracles disagree on %a: 0x%04x vs _Float16 0x%04x", x, want, cbits);
#endif
    if (got != want) fail_note(f, "f16 encode %a (0x%08x): got 0x%04x want 0x%04x", x, bits_of(x), got, want);
}

static void test_f16_encode(void **state) {
    (void)state;
    fails f = {0};
    grid g = f16_grid();
    /* Every midpoint between neighbours (incl. 65504..65536, the overflow
     * tie) and the f32 values on either side of it, both signs. */
    for (int h = 0; h < 0x7c00; h++) {
        double lo = spec_f16((uint16_t)h), hi = h + 1 < 0x7c00 ? spec_f16((uint16_t)(h + 1)) : 65536.0;
        float mid = (float)((lo + hi) / 2);
        float xs[] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)lo};
        for (size_t i = 0; i < TS_COUNT(xs); i++) {
            check_f16(&f, &g, xs[i]);
            check_f16(&f, &g, -xs[i]);
        }
    }
    static const float edges[] = {0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, INFINITY, NAN,
                                  0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1p-26f, 3 * 0x1p-25f, 0x1p-14f,
                                  0x1.ffcp-15f, 0x1.ffep-15f, 0x1p-149f, 0x1p-126f, 0x1.fffffep127f};
    for (size_t i = 0; i < TS_COUNT(edges); i++) {
        check_f16(&f, &g, edges[i]);
        check_f16(&f, &g, -edges[i]);
    }
    assert_int_equal(f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(f32_to_f16(3 * 0x1p-25f), 0x0002);
    assert_int_equal(f32_to_f16(-0.0f), 0x8000);
    for (int n = 0; n < 1000000; n++) {
        uint64_t r = rng();
        uint32_t bits = (uint32_t)r;
        if (n & 1) bits = (bits & 0x807fffffu) | (uint32_t)(127 - 30 + (r >> 40) % 50) << 23;
        check_f16(&f, &g, float_of(bits));
    }
    grid_free(&g);
    assert_int_equal(f.n, 0);
}

/* ---- bf16 ------------------------------------------------------------- */

/* The two candidates are the truncation toward zero and the next code up
 * in magnitude; nearest wins (exact in double), ties to the even code. The
 * code past the largest finite one is inf, at the value 2^128. */
static uint16_t bf16_oracle(float x) {
    uint32_t u = bits_of(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    uint16_t t = (uint16_t)(u >> 16);
    if ((t & 0x7fff) == 0x7f80) return t; /* inf */
    double a = fabs((double)x), lo = fabs(spec_bf16(t));
    uint16_t up = (uint16_t)(t + 1);
    double hi = (up & 0x7fff) == 0x7f80 ? 0x1p128 : fabs(spec_bf16(up));
    if (2 * a < lo + hi) return t;
    if (2 * a > lo + hi) return up;
    return (t & 1) ? up : t;
}

static void test_bf16(void **state) {
    (void)state;
    fails f = {0};
    for (uint32_t h = 0; h < 65536; h++) {
        double want = spec_bf16((uint16_t)h);
        float got = bf16_to_f32((uint16_t)h);
        if (!same_value(got, want)) fail_note(&f, "bf16 0x%04x: got %a want %a", h, got, want);
        uint16_t back = f32_to_bf16(got);
        if (back != (isnan(want) ? (uint16_t)(h | 0x40) : (uint16_t)h)) fail_note(&f, "bf16 0x%04x -> 0x%04x", h, back);
        /* Midpoints to the next code, and either side. */
        uint32_t mid = h << 16 | 0x8000;
        uint32_t xs[] = {mid, mid - 1, mid + 1, h << 16 | 1, h << 16 | 0xffff};
        for (size_t i = 0; i < TS_COUNT(xs); i++) {
            uint16_t g = f32_to_bf16(float_of(xs[i])), w = bf16_oracle(float_of(xs[i]));
            if (g != w) fail_note(&f, "bf16 encode 0x%08x: got 0x%04x want 0x%04x", xs[i], g, w);
        }
    }
    for (int n = 0; n < 1000000; n++) {
        uint32_t u = (uint32_t)rng();
        uint16_t g = f32_to_bf16(float_of(u)), w = bf16_oracle(float_of(u));
        if (g != w) fail_note(&f, "bf16 encode 0x%08x: got 0x%04x want 0x%04x", u, g, w);
    }
    assert_int_equal(f32_to_bf16(float_of(0x7f800001u)), 0x7fc0); /* sNaN stays NaN, not inf */
    assert_int_equal(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80); /* rounds up to inf */
    assert_int_equal(f.n, 0);
}

/* ---- i32 and num_round ----------------------------------------------- */

static void test_i32_and_round(void **state) {
    (void)state;
    static const struct {
        float x, want;
    } cases[] = {{0.5f, 0},          {1.5f, 2},          {2.5f, 2},           {-2.5f, -2},     {-3.5f, -4},
                 {0.49999997f, 0},   {1e9f, 1e9f},       {3e9f, 2147483648.0f}, {-3e9f, -2147483648.0f},
                 {INFINITY, 2147483648.0f}, {-INFINITY, -2147483648.0f}, {NAN, 0}, {8388609.5f, 8388610.0f}};
    for (size_t i = 0; i < TS_COUNT(cases); i++) {
        float got = num_round(DT_I32, 0, cases[i].x);
        if (got != cases[i].want) fail_msg("i32 round %a: got %a want %a", cases[i].x, got, cases[i].want);
    }
    float src[] = {2.5f, -2.5f, 3e9f, -INFINITY, NAN, 7.0f};
    int32_t want[] = {2, -2, INT32_MAX, INT32_MIN, 0, 7}, got[6];
    num_encode_buf(DT_I32, 0, src, got, 6);
    assert_memory_equal(got, want, sizeof want);
    float back[6];
    num_decode_buf(DT_I32, 0, want, back, 6);
    assert_true(back[0] == 2 && back[2] == 2147483648.0f && back[3] == -2147483648.0f && back[5] == 7);
    /* num_round is decode(encode(x)) for the float types. */
    assert_true(num_round(DT_F32, 0, 0.1f) == 0.1f);
    assert_true(num_round(DT_F16, 0, 0.1f) == (float)spec_f16(0x2e66));
    assert_true(num_round(DT_BF16, 0, 1.00390625f) == 1.0f); /* tie to even */
    assert_true(num_round(DT_F8E4M3, 0, 1000.0f) == 448.0f);
    assert_true(num_round(DT_F8E4M3, 3, 1000.0f) == 1024.0f);
    assert_true(num_round(DT_F143, -2, 0.3f) == 0.3125f);
    assert_true(num_round(DT_F143, 0, -0x1p-12f) == 0 && !signbit(num_round(DT_F143, 0, -0x1p-12f)));
}

/* ---- bulk paths equal the scalar functions bit for bit ---------------- */

/* Random floats mixed with the awkward ones. */
static void fill_inputs(float *x, size_t n) {
    static const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                        0xffc00001u, 0x7f800001u, 0x7fa01234u, 0x00000001u, 0x477ff000u,
                                        0x43e80000u, 0x43e80001u, 0x3a800000u, 0x3b000000u};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng();
        uint32_t bits = (uint32_t)r;
        if (r >> 62 == 0) bits = specials[(r >> 32) % TS_COUNT(specials)];
        else if (r >> 62 == 1) bits = (bits & 0x807fffffu) | (uint32_t)(127 - 30 + (r >> 40) % 50) << 23;
        x[i] = float_of(bits);
    }
}

static uint16_t scalar16(dtype t, float x) { return t == DT_F16 ? f32_to_f16(x) : f32_to_bf16(x); }
static float scalar16_back(dtype t, uint16_t h) { return t == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h); }

static void check_bulk(fails *f, dtype t, int s, size_t n) {
    float *x = malloc(n * sizeof(float) + 1), *y = malloc(n * sizeof(float) + 1);
    unsigned char *enc = malloc(n * 4 + 1);
    fill_inputs(x, n);
    memcpy(y, x, n * sizeof(float));
    num_round_buf(t, s, y, n);
    /* Odd byte offset: the encoded buffer needs no alignment. */
    num_encode_buf(t, s, x, enc + 1, n);
    for (size_t i = 0; i < n; i++) {
        float want = num_round(t, s, x[i]);
        if (bits_of(y[i]) != bits_of(want))
            fail_note(f, "%s round_buf[%zu] of 0x%08x: 0x%08x, scalar 0x%08x", dtype_name(t), i, bits_of(x[i]),
                      bits_of(y[i]), bits_of(want));
        uint32_t want_code = 0, got_code = 0;
        int bytes = dtype_bytes(t);
        memcpy(&got_code, enc + 1 + i * (size_t)bytes, (size_t)bytes);
        if (dtype_is_f8(t)) want_code = f8_encode(t, x[i], s, true);
        else if (bytes == 2) want_code = scalar16(t, x[i]);
        else if (t == DT_F32) want_code = bits_of(x[i]);
        else want_code = got_code; /* i32: the stored integer must convert back to num_round */
        bool i32_bad = t == DT_I32 && bits_of((float)(int32_t)got_code) != bits_of(want);
        if (got_code != want_code || i32_bad)
            fail_note(f, "%s encode_buf[%zu] of 0x%08x: 0x%x, scalar 0x%x", dtype_name(t), i, bits_of(x[i]), got_code,
                      want_code);
    }
    free(x);
    free(y);
    free(enc);
}

static void test_bulk_equals_scalar(void **state) {
    (void)state;
    fails f = {0};
    static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 1003, 70001};
    for (int t = 0; t < DT_COUNT; t++)
        for (size_t l = 0; l < TS_COUNT(lens); l++) {
            int s = dtype_is_f8((dtype)t) ? NUM_SCALE_MIN + (int)(rng() % 32) : 0;
            check_bulk(&f, (dtype)t, s, lens[l]);
        }
    assert_int_equal(f.n, 0);
}

/* Every code through the bulk decoders, at odd lengths and offsets. */
static void test_bulk_decode_all_codes(void **state) {
    (void)state;
    fails f = {0};
    enum { N = 65536 + 5 };
    unsigned char *src = malloc(2 * N + 1);
    float *dst = malloc(N * sizeof(float));
    for (int i = 0; i < 3; i++)
        for (int s = NUM_SCALE_MIN; s <= NUM_SCALE_MAX; s++) {
            for (int c = 0; c < 256 + 3; c++) src[1 + c] = (unsigned char)c;
            num_decode_buf(F8_TYPES[i], s, src + 1, dst, 256 + 3);
            for (int c = 0; c < 256 + 3; c++) {
                float want = f8_decode(F8_TYPES[i], (uint8_t)c, s);
                if (bits_of(dst[c]) != bits_of(want)) fail_note(&f, "%s decode_buf 0x%02x", dtype_name(F8_TYPES[i]), c);
            }
        }
    for (int t = DT_F16; t <= DT_BF16; t++) {
        for (uint32_t h = 0; h < N; h++) memcpy(src + 1 + 2 * h, &(uint16_t){(uint16_t)h}, 2);
        num_decode_buf((dtype)t, 0, src + 1, dst, N);
        for (uint32_t h = 0; h < N; h++) {
            float want = scalar16_back((dtype)t, (uint16_t)h);
            if (bits_of(dst[h]) != bits_of(want))
                fail_note(&f, "%s decode_buf 0x%04x: 0x%08x, scalar 0x%08x", dtype_name((dtype)t), h, bits_of(dst[h]),
                          bits_of(want));
        }
    }
    free(src);
    free(dst);
    assert_int_equal(f.n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),        cmocka_unit_test(test_f8_spot_values),
        cmocka_unit_test(test_f8_decode_all_codes), cmocka_unit_test(test_f8_spot_encodes),
        cmocka_unit_test(test_f8_encode_all_f16),  cmocka_unit_test(test_f8_ties),
        cmocka_unit_test(test_f8_encode_random),   cmocka_unit_test(test_f8_scale_for_max),
        cmocka_unit_test(test_f16_all_codes),      cmocka_unit_test(test_f16_encode),
        cmocka_unit_test(test_bf16),               cmocka_unit_test(test_i32_and_round),
        cmocka_unit_test(test_bulk_equals_scalar), cmocka_unit_test(test_bulk_decode_all_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

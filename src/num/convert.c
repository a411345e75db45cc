/* convert.c: f32 <-> f16, bf16, the 8-bit floats and i32, scalar and bulk.
 *
 * Every rounding is done on the f32 bit pattern with one helper, rne_shift
 * (drop low bits, round to nearest, ties to even), so the normal range, the
 * subnormal range and the carry into the exponent are one computation. The
 * bulk paths (AVX2 for the 8-bit formats, F16C for f16) compute exactly what
 * the scalar functions compute; tests/unit/test_num.c checks them bit for bit.
 */
#define _POSIX_C_SOURCE 200809L
#include "num.h"
#include "chain.h"

#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* v / 2^sh rounded to nearest, ties to even. Needs 1 <= sh <= 31 and
 * v < 2^31 so the rounding increment cannot wrap. */
static uint32_t rne_shift(uint32_t v, uint32_t sh) {
    return (v + (1u << (sh - 1)) - 1 + ((v >> sh) & 1)) >> sh;
}

/* 2^s as a float, exact for -126 <= s <= 127. */
static float pow2f(int s) { return f32_from_bits((uint32_t)(127 + s) << 23); }

/* ---- f16 -------------------------------------------------------------- */

/* f32 bit patterns of the thresholds. */
enum {
    F16_INF_AT = 0x477ff000,     /* 65520: from here on RNE reaches 2^16 */
    F16_NORMAL_AT = 0x38800000,  /* 2^-14, the smallest normal f16 */
    F16_ZERO_BELOW = 0x33000000  /* 2^-25, half the smallest subnormal; itself a tie to 0 */
};

uint16_t f32_to_f16(float x) {
    uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    /* NaN: set the quiet bit, keep the top payload bits (as VCVTPS2PH does). */
    if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x1ffu);
    if (a >= F16_INF_AT) return sign | 0x7c00u;
    /* Rebiasing the exponent (127 -> 15) leaves the code in the top bits;
     * a mantissa carry steps into the exponent as it should. */
    if (a >= F16_NORMAL_AT) return sign | (uint16_t)rne_shift(a - (112u << 23), 13);
    if (a < F16_ZERO_BELOW) return sign;
    /* Subnormal: the code counts units of 2^-24; shift is 14..24. */
    uint32_t e = a >> 23;
    return sign | (uint16_t)rne_shift((a & 0x7fffffu) | 0x800000u, 126 - e);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return f32_from_bits(sign);
        /* Subnormal m * 2^-24 is normal in f32: with the top set bit of m at
         * position p, the exponent is p - 24 and the bits below p the mantissa. */
        uint32_t p = 31 - (uint32_t)__builtin_clz(m);
        return f32_from_bits(sign | ((p + 103) << 23) | ((m << (23 - p)) & 0x7fffffu));
    }
    /* NaN comes back quiet, as VCVTPH2PS returns it. */
    if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

/* ---- bf16 ------------------------------------------------------------- */

float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    /* A NaN whose payload sits only in the low half must not become inf. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    /* Overflow needs no case: rounding up from the largest finite gives inf. */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---- 8-bit floats ----------------------------------------------------- */

/* One descriptor per format; a code is sign | magnitude, the magnitude
 * being exponent field << mant_bits | mantissa. */
typedef struct f8_format {
    uint32_t mant_bits;  /* stored mantissa bits */
    int bias;            /* exponent bias; field 0 holds the subnormals */
    uint32_t max_mag;    /* magnitude code of the largest finite value */
    uint32_t nan_code;   /* what a NaN encodes to, before the sign is or'ed in */
    uint32_t ovf_code;   /* unsaturated overflow (inf or NaN), before the sign */
    uint32_t inf_mag;    /* magnitude code of infinity; 0: the format has none */
    bool signed_zero;    /* false (f143): -0 encodes as 0x00 and 0x80 is NaN */
} f8_format;

_Static_assert(DT_F8E5M2 == DT_F8E4M3 + 1 && DT_F143 == DT_F8E4M3 + 2,
               "the 8-bit dtypes are contiguous and index F8_FORMATS");
static const f8_format F8_FORMATS[3] = {
    /*            mant bias max   NaN   ovf   inf   signed_zero */
    /* f8e4m3 */ {3, 7, 0x7e, 0x7f, 0x7f, 0x00, true},
    /* f8e5m2 */ {2, 15, 0x7b, 0x7e, 0x7c, 0x7c, true},   /* 0x7e: the quiet NaN */
    /* f143   */ {3, 8, 0x7f, 0x80, 0x80, 0x00, false},
};

static int f8_index(dtype t) {
    TS_ASSERT(dtype_is_f8(t));
    return (int)t - DT_F8E4M3;
}

static void check_scale(int scale) { TS_ASSERT(scale >= NUM_SCALE_MIN && scale <= NUM_SCALE_MAX); }

/* The unscaled value of a code, from the descriptor. */
static float f8_value(const f8_format *f, uint32_t code) {
    uint32_t mag = code & 0x7fu, neg = code & 0x80u;
    if (!f->signed_zero && code == 0x80u) return f32_from_bits(0x7fc00000u);
    if (mag > f->max_mag) {
        if (f->inf_mag && mag == f->inf_mag) return neg ? -INFINITY : INFINITY;
        return f32_from_bits((neg << 24) | 0x7fc00000u);
    }
    uint32_t field = mag >> f->mant_bits, mant = mag & ((1u << f->mant_bits) - 1);
    /* Subnormals (field 0) share the exponent of field 1, without the implicit 1. */
    uint32_t digits = (field ? 1u << f->mant_bits : 0) | mant;
    int exp = (field ? (int)field : 1) - f->bias - (int)f->mant_bits;
    float v = ldexpf((float)digits, exp);
    return neg ? -v : v;
}

/* Decode tables, built once on first use: the bulk paths gather from them. */
static float f8_table[3][256];
static pthread_once_t f8_table_once = PTHREAD_ONCE_INIT;

static void f8_table_build(void) {
    for (int i = 0; i < 3; i++)
        for (uint32_t c = 0; c < 256; c++) f8_table[i][c] = f8_value(&F8_FORMATS[i], c);
}

static const float *f8_table_for(int index) {
    pthread_once(&f8_table_once, f8_table_build);
    return f8_table[index];
}

/* The encoder on f32 bits u; the scale becomes an exponent offset, so
 * x * 2^-scale is never formed. The bulk encoder below is this, 8 lanes wide. */
static uint32_t f8_encode_bits(const f8_format *f, uint32_t u, int scale, bool saturate) {
    uint32_t a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
    if (a > 0x7f800000u) return f->nan_code | sign;
    /* Target exponent field; below 1 the value is subnormal in the format and
     * loses `sub` more bits. f32 zeros and subnormals land far below and
     * round to 0; infinity lands far above and overflows. */
    int field = (int)(a >> 23) - 127 - scale + f->bias;
    int sub = field < 1 ? 1 - field : 0;
    int shift = (int)(23 - f->mant_bits) + sub;
    if (shift > 31) shift = 31;
    /* (field - 1) << 23 plus the mantissa with its implicit 1 is exactly the
     * code << (23 - mant_bits), so a mantissa carry steps the exponent. */
    int k = field - 1 < 0 ? 0 : (field - 1 > 31 ? 31 : field - 1);
    uint32_t v = ((uint32_t)k << 23) + ((a & 0x7fffffu) | 0x800000u);
    uint32_t mag = rne_shift(v, (uint32_t)shift);
    if (mag > f->max_mag) mag = saturate ? f->max_mag : f->ovf_code;
    if (mag == 0 && !f->signed_zero) sign = 0;
    return mag | sign;
}

float f8_decode(dtype t, uint8_t code, int scale) {
    check_scale(scale);
    return f8_table_for(f8_index(t))[code] * pow2f(scale);
}

uint8_t f8_encode(dtype t, float x, int scale, bool saturate) {
    check_scale(scale);
    return (uint8_t)f8_encode_bits(&F8_FORMATS[f8_index(t)], f32_bits(x), scale, saturate);
}

float num_clamp_finite(dtype t, float x) {
    float m = t == DT_F16 ? 65504.0f : t == DT_BF16 ? bf16_to_f32(0x7F7F) : t == DT_F32 ? FLT_MAX : 0;
    if (m == 0 || !(x == x)) return x;
    return x > m ? m : x < -m ? -m : x;
}

float f8_max(dtype t) {
    const f8_format *f = &F8_FORMATS[f8_index(t)];
    return f8_value(f, f->max_mag);
}

/* A NaN or infinite maxabs fits no scale: it gets the largest. */
int f8_scale_for_max(dtype t, float maxabs) {
    double m = f8_max(t), v = fabs((double)maxabs);
    for (int s = NUM_SCALE_MIN; s <= NUM_SCALE_MAX; s++)
        if (v <= ldexp(m, s)) return s;
    return NUM_SCALE_MAX;
}

/* f8_encode_bits for 8 lanes; returns one code per 32-bit lane. */
static __m256i f8_encode_v8(const f8_format *f, __m256 x, int scale, bool saturate) {
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    __m256i u = _mm256_castps_si256(x);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    __m256i field = _mm256_sub_epi32(_mm256_srli_epi32(a, 23), _mm256_set1_epi32(127 + scale - f->bias));
    __m256i sub = _mm256_max_epi32(_mm256_sub_epi32(one, field), zero);
    __m256i shift = _mm256_min_epi32(_mm256_add_epi32(sub, _mm256_set1_epi32((int)(23 - f->mant_bits))),
                                     _mm256_set1_epi32(31));
    __m256i k = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(field, one), zero), _mm256_set1_epi32(31));
    __m256i v = _mm256_add_epi32(_mm256_slli_epi32(k, 23),
                                 _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7fffff)),
                                                 _mm256_set1_epi32(0x800000)));
    __m256i half_less = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
    __m256i odd = _mm256_and_si256(_mm256_srlv_epi32(v, shift), one);
    __m256i mag = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(v, half_less), odd), shift);
    __m256i over = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32((int)f->max_mag));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32((int)(saturate ? f->max_mag : f->ovf_code)), over);
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32((int)f->nan_code), is_nan);
    if (!f->signed_zero) sign = _mm256_andnot_si256(_mm256_cmpeq_epi32(mag, zero), sign);
    return _mm256_or_si256(mag, sign);
}

/* Low byte of each 32-bit lane, packed into 8 bytes at dst. */
static void store_codes8(uint8_t *dst, __m256i codes) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(codes, pick);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64((__m128i *)(void *)dst, _mm256_castsi256_si128(b));
}

static __m256 f8_gather8(const float *table, __m256i codes, __m256 scale) {
    return _mm256_mul_ps(_mm256_i32gather_ps(table, codes, 4), scale);
}

static void f8_round_buf(dtype t, int scale, float *x, size_t n) {
    const f8_format *f = &F8_FORMATS[f8_index(t)];
    const float *table = f8_table_for(f8_index(t));
    __m256 s = _mm256_set1_ps(pow2f(scale));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i codes = f8_encode_v8(f, _mm256_loadu_ps(x + i), scale, true);
        _mm256_storeu_ps(x + i, f8_gather8(table, codes, s));
    }
    for (; i < n; i++) x[i] = f8_decode(t, f8_encode(t, x[i], scale, true), scale);
}

static void f8_encode_buf(dtype t, int scale, const float *src, uint8_t *dst, size_t n) {
    const f8_format *f = &F8_FORMATS[f8_index(t)];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) store_codes8(dst + i, f8_encode_v8(f, _mm256_loadu_ps(src + i), scale, true));
    for (; i < n; i++) dst[i] = f8_encode(t, src[i], scale, true);
}

static void f8_decode_buf(dtype t, int scale, const uint8_t *src, float *dst, size_t n) {
    const float *table = f8_table_for(f8_index(t));
    __m256 s = _mm256_set1_ps(pow2f(scale));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, f8_gather8(table, _mm256_cvtepu8_epi32(bytes), s));
    }
    for (; i < n; i++) dst[i] = f8_decode(t, src[i], scale);
}

/* ---- f16 and bf16 buffers -------------------------------------------- */

/* F16C converts with the same rounding, subnormals and NaN handling as the
 * scalar functions (checked on every f16 code and random f32 patterns). */
static void f16_encode_buf(const float *src, char *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        uint16_t h = f32_to_f16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

static void f16_decode_buf(const char *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i))));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
    }
}

static void f16_round_buf(float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

/* ---- i32 -------------------------------------------------------------- */

/* Nearest integer, ties to even (rintf in the default rounding mode);
 * saturates to the int32 range; NaN gives 0. */
static int32_t i32_from_f32(float x) {
    if (isnan(x)) return 0;
    if (x >= 2147483648.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return (int32_t)rintf(x);
}

/* ---- dispatch --------------------------------------------------------- */

float num_round(dtype t, int scale, float x) {
    switch (t) {
    case DT_F32: return x;
    case DT_F16: return f16_to_f32(f32_to_f16(x));
    case DT_BF16: return bf16_to_f32(f32_to_bf16(x));
    case DT_I32: return (float)i32_from_f32(x);
    default: return f8_decode(t, f8_encode(t, x, scale, true), scale);
    }
}

void num_round_buf(dtype t, int scale, float *x, size_t n) {
    switch (t) {
    case DT_F32: return;
    case DT_F16: f16_round_buf(x, n); return;
    case DT_BF16:
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
        return;
    case DT_I32:
        for (size_t i = 0; i < n; i++) x[i] = (float)i32_from_f32(x[i]);
        return;
    default: check_scale(scale); f8_round_buf(t, scale, x, n); return;
    }
}

/* dst and src need no alignment: 2- and 4-byte elements go through memcpy. */
void num_encode_buf(dtype t, int scale, const float *src, void *dst, size_t n) {
    switch (t) {
    case DT_F32: memcpy(dst, src, n * sizeof(float)); return;
    case DT_F16: f16_encode_buf(src, dst, n); return;
    case DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        return;
    case DT_I32:
        for (size_t i = 0; i < n; i++) {
            int32_t v = i32_from_f32(src[i]);
            memcpy((char *)dst + 4 * i, &v, 4);
        }
        return;
    default: check_scale(scale); f8_encode_buf(t, scale, src, dst, n); return;
    }
}

void num_decode_buf(dtype t, int scale, const void *src, float *dst, size_t n) {
    switch (t) {
    case DT_F32: memcpy(dst, src, n * sizeof(float)); return;
    case DT_F16: f16_decode_buf(src, dst, n); return;
    case DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        return;
    case DT_I32:
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, (const char *)src + 4 * i, 4);
            dst[i] = (float)v;
        }
        return;
    default: check_scale(scale); f8_decode_buf(t, scale, src, dst, n); return;
    }
}

/* ---- whether the 512-bit paths run (num.h) ------------------------------ */

static bool wide;
static pthread_once_t wide_once = PTHREAD_ONCE_INIT;

static void wide_init(void) {
    const char *e = getenv("TESSEL_SIMD");
    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && !(e && strcmp(e, "avx2") == 0);
}

bool num_wide(void) {
    pthread_once(&wide_once, wide_init);
    return wide;
}

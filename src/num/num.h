/* num: element types, conversions between them, and .npy tensor files.
 *
 *   dtype    bytes  sign|exp|mant  bias  largest finite  specials
 *   f32        4    1|8|23         127   3.40e38         inf, NaN
 *   f16        2    1|5|10          15   65504           inf, NaN
 *   bf16       2    1|8|7          127   3.39e38         inf, NaN
 *   f8e4m3     1    1|4|3            7   448             NaN 0x7f/0xff; no inf (OCP E4M3FN)
 *   f8e5m2     1    1|5|2           15   57344           inf 0x7c/0xfc; NaN above (OCP E5M2)
 *   f143       1    1|4|3            8   240             NaN 0x80 only; unsigned zero; no inf (IPU21)
 *   i32        4    two's complement integer
 *
 * An 8-bit tensor carries a power-of-two scale exponent s in [-16, 15]: the
 * stored code c means decode(c) * 2^s, so encoding x stores the code nearest
 * x * 2^-s. Every conversion rounds to nearest, ties to even. Conversion to an
 * 8-bit format saturates to the largest finite value by default (NaN stays
 * NaN); unsaturated, an overflow becomes inf (f8e5m2) or NaN (the others).
 */
#ifndef TESSEL_NUM_H
#define TESSEL_NUM_H

#include "../util/util.h"

/* The row a table of `rows` rows gives index id (a gather: the reference and
 * the GATHER kernel alike): a negative id counts from the end; -1 when out of
 * range, whose row reads as zeros. */
static inline int64_t num_index_row(int64_t id, int64_t rows) {
    if (id < 0) id += rows;
    return id >= 0 && id < rows ? id : -1;
}

/*        id       name      bytes  float  bits8 */
#define NUM_DTYPES(X)                            \
    X(F32,    "f32",    4, 1, 0)                 \
    X(F16,    "f16",    2, 1, 0)                 \
    X(BF16,   "bf16",   2, 1, 0)                 \
    X(F8E4M3, "f8e4m3", 1, 1, 1)                 \
    X(F8E5M2, "f8e5m2", 1, 1, 1)                 \
    X(F143,   "f143",   1, 1, 1)                 \
    X(I32,    "i32",    4, 0, 0)

typedef enum {
#define X(id, name, bytes, fl, b8) DT_##id,
    NUM_DTYPES(X)
#undef X
    DT_COUNT
} dtype;

enum { NUM_SCALE_MIN = -16, NUM_SCALE_MAX = 15 };

const char *dtype_name(dtype t);
int dtype_bytes(dtype t);                 /* bytes per element */
bool dtype_is_float(dtype t);             /* every dtype but i32 */
bool dtype_is_f8(dtype t);                /* the three 8-bit float formats */
/* Looks up a dtype by name (n bytes of s, not NUL-terminated). */
bool dtype_parse(const char *s, size_t n, dtype *out);

/* ---- convert.c -------------------------------------------------------- */

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float x);             /* RNE; overflow -> inf */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float x);            /* RNE; NaN stays a quiet NaN */

/* t must be an 8-bit format; scale in [NUM_SCALE_MIN, NUM_SCALE_MAX]. */
float f8_decode(dtype t, uint8_t code, int scale);          /* decode(code) * 2^scale */
uint8_t f8_encode(dtype t, float x, int scale, bool saturate);
float f8_max(dtype t);                                       /* largest finite, unscaled */
/* The smallest scale s with maxabs <= f8_max(t) * 2^s, clamped to the legal
 * range; the scale that keeps the most precision without saturating. */
int f8_scale_for_max(dtype t, float maxabs);

/* x limited to the finite range of float type t (f16: +-65504; bf16 and
 * f32 their largest finite; 8-bit types and NaN: x as it is, their
 * rounding saturates by itself). */
float num_clamp_finite(dtype t, float x);
/* x rounded to dtype t (with scale for 8-bit types): decode(encode(x)).
 * f32 returns x; i32 rounds to nearest even integer and saturates. */
float num_round(dtype t, int scale, float x);
void num_round_buf(dtype t, int scale, float *x, size_t n);  /* in place */
/* Element conversion between f32 and the stored bytes of dtype t. */
void num_encode_buf(dtype t, int scale, const float *src, void *dst, size_t n);
void num_decode_buf(dtype t, int scale, const void *src, float *dst, size_t n);

/* ---- pointwise: the scalar functions of the machine's elementwise kernels --

 * One definition serves the tile kernels and every reference, in f32 with
 * tanhf, evaluated left to right (the build never contracts into FMAs). */
#define NUM_GELU_C ((float)0.7978845608028654) /* sqrt(2 / pi) */

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form. */
float num_gelu(float x);
/* d gelu / dx of the tanh form:
 * 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2). */
float num_gelu_deriv(float x);
/* 0.5 x (1 + erf(x / sqrt(2))), the exact form (PyTorch's default), with erff. */
float num_gelu_erf(float x);

/* The plain unary pointwise ops, declared here once: each row is a graph op
 * (OP_ID), an EWISE kernel op (KERNEL_EW_ID, its package code in this order:
 * append new rows), an ONNX op of the same name (any case) and
 *
 *   num_NAME(x)      the one f32 definition the simulator's kernel and both
 *                    references use,
 *   num_NAME_f64(x)  the double one the ONNX importer folds constants with,
 *
 * both in pointwise.c: relu max(x, 0) (NaN stays NaN), sigmoid
 * 1 / (1 + exp(-x)), tanh, exp, log, abs, neg -x, sqrt, reciprocal 1 / x, erf,
 * softplus log(1 + exp(x)) (as max(x, 0) + log1p(exp(-|x|)), which never
 * overflows).
 * COST prices the kernel (kern.h's MACHINE_EW_COST): ARITH a few
 * instructions, GELU a transcendental (priced as GELU's tanh; neither
 * measured on the machine, docs/sim.md). X(ID, name, COST, ...) receives
 * the list's further arguments.
 *
 * A new plain unary op is a row here, its two functions in pointwise.c and
 * its row in the ONNX importer's table (src/models/onnx_impl.h): nothing
 * else names it. */
#define NUM_UNARY_OPS(X, ...)                                                                   \
    X(RELU, relu, ARITH, __VA_ARGS__) X(SIGMOID, sigmoid, GELU, __VA_ARGS__)                    \
    X(TANH, tanh, GELU, __VA_ARGS__) X(EXP, exp, GELU, __VA_ARGS__) X(LOG, log, GELU, __VA_ARGS__) \
    X(ABS, abs, ARITH, __VA_ARGS__) X(NEG, neg, ARITH, __VA_ARGS__)                             \
    X(SQRT, sqrt, GELU, __VA_ARGS__) X(RECIPROCAL, reciprocal, GELU, __VA_ARGS__)               \
    X(ERF, erf, GELU, __VA_ARGS__) X(SOFTPLUS, softplus, GELU, __VA_ARGS__)
/* max and min as the vector unit's f32 max/min take them: a NaN operand
 * gives NaN (so a clamp never hides one), -0 below +0. */
float num_max(float a, float b);
float num_min(float a, float b);
#define X(id, name, ...)        \
    float num_##name(float x);  \
    double num_##name##_f64(double x);
NUM_UNARY_OPS(X, )
#undef X
enum {
#define X(id, ...) NUM_UNARY_##id,
    NUM_UNARY_OPS(X, )
#undef X
    NUM_UNARY_COUNT
};

/* A layer norm's statistics of one stretch of a row: its count, mean and
 * centred sum of squares, each in f32. num_moments_of takes two passes
 * (mean = f32 sum in order / n, then m2 = f32 sum of (x - mean)^2 in order);
 * num_moments_join merges the stretch after a into a (Chan et al.:
 * d = b.mean - a.mean, mean = a.mean + d * (b.n / n), m2 = a.m2 + b.m2 +
 * d * d * (a.n * b.n / n), n = a.n + b.n), so a row cut into parts has one
 * arithmetic wherever its parts lie. A whole row's variance is m2 / n. */
typedef struct num_moments {
    float n, mean, m2;
} num_moments;
num_moments num_moments_of(const float *x, size_t n);
num_moments num_moments_join(num_moments a, num_moments b);

/* ---- compare.c -------------------------------------------------------- */

/* How far a tensor is from a reference: the figures every check reports. */
typedef struct num_diff {
    double cosine;       /* of the two as vectors; 1 when both are all zero */
    double max_abs_err;  /* largest |got - want| */
    double rms_err;      /* root mean square of got - want */
    double want_rms;     /* root mean square of want, to put errors in scale */
    int64_t nonfinite;   /* elements where either side is NaN or infinite */
} num_diff;

num_diff num_compare(const float *got, const float *want, size_t n);

/* Where two tensors differ bit for bit (every NaN equal to every NaN: a NaN's
 * payload is not a result). */
typedef struct num_mismatch {
    int64_t count;       /* elements that differ */
    int64_t first;       /* the first of them, -1 if none */
    float got, want;     /* its two values */
} num_mismatch;

num_mismatch num_mismatches(const float *got, const float *want, size_t n);

/* ---- npy.c ------------------------------------------------------------ */

/* A host tensor as it crosses the command line: NumPy .npy, C order,
 * little-endian f32, f16 or i32, or float64 read into f32. */
enum { NPY_MAX_RANK = 8 };
typedef struct npy_array {
    dtype dtype;                   /* DT_F32, DT_F16 or DT_I32 */
    int32_t rank;
    int64_t dim[NPY_MAX_RANK];     /* elements per axis */
    int64_t numel;                 /* product of dim */
    void *data;                    /* numel * dtype_bytes, malloc'd */
    bool wide;                     /* the file held float64 or int64, narrowed into f32 or i32 data */
    bool wide_exact;               /* ... and every value survived that exactly */
} npy_array;

/* Parses a .npy image; `path` names it in errors. Rejects anything it cannot
 * read exactly: other dtypes, Fortran order, bad headers, wrong lengths. */
int npy_parse(const void *bytes, size_t len, const char *path, npy_array *out, diag *d);
int npy_read(const char *path, npy_array *out, diag *d);
/* What the file held: "float64", "int64", else the dtype's name. */
const char *npy_held_name(const npy_array *a);
/* Writes a version 1.0 .npy image of the tensor to f. */
int npy_write(FILE *f, const npy_array *a);
void npy_free(npy_array *a);
/* Whether a has exactly the shape (rank, dim); if not, writes a's shape as
 * "[3, 4]" into buf (cap bytes) for the message. */
bool npy_has_shape(const npy_array *a, int rank, const int64_t *dim, char *buf, size_t cap);

/* Whether the host's 512-bit vector paths run: it has AVX-512F and DQ and
 * TESSEL_SIMD is not "avx2" (which keeps every kernel on its 256-bit path,
 * for comparing the two; both give the same bits). Read once per process.
 * The GEMM chains (chain.h) and the weights' sampler (graph/init.c) use it. */
bool num_wide(void);

#endif

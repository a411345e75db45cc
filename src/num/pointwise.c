/* pointwise.c: the scalar functions behind the elementwise kernels, defined
 * once for the simulator and the references (num.h). */
#include "num.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

float num_gelu(float x) {
    float u = NUM_GELU_C * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

float num_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * (float)0.7071067811865476)); }

float num_max(float a, float b) {
    if (a != a || b != b) return a + b;  /* NaN */
    if (a == b) return signbit(a) ? b : a; /* +0 above -0 */
    return a > b ? a : b;
}

float num_min(float a, float b) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

float num_relu(float x) { return x > 0.0f || x != x ? x : 0.0f; }
float num_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float num_tanh(float x) { return tanhf(x); }
float num_exp(float x) { return expf(x); }
float num_log(float x) { return logf(x); }
float num_abs(float x) { return fabsf(x); }
float num_neg(float x) { return -x; }
float num_sqrt(float x) { return sqrtf(x); }
float num_reciprocal(float x) { return 1.0f / x; }
float num_erf(float x) { return erff(x); }
float num_softplus(float x) { return (x > 0.0f ? x : 0.0f) + log1pf(expf(-fabsf(x))); }

double num_relu_f64(double x) { return x > 0.0 || x != x ? x : 0.0; }
double num_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
double num_tanh_f64(double x) { return tanh(x); }
double num_exp_f64(double x) { return exp(x); }
double num_log_f64(double x) { return log(x); }
double num_abs_f64(double x) { return fabs(x); }
double num_neg_f64(double x) { return -x; }
double num_sqrt_f64(double x) { return sqrt(x); }
double num_reciprocal_f64(double x) { return 1.0 / x; }
double num_erf_f64(double x) { return erf(x); }
double num_softplus_f64(double x) { return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))); }

float num_gelu_deriv(float x) {
    float u = NUM_GELU_C * (x + 0.044715f * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * NUM_GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
}

num_moments num_moments_of(const float *x, size_t n) {
    float sum = 0.0f, m2 = 0.0f, fn = (float)n;
    for (size_t e = 0; e < n; e++) sum = sum + x[e];
    float mean = sum / fn;
    for (size_t e = 0; e < n; e++) {
        float d = x[e] - mean;
        m2 = m2 + d * d;
    }
    return (num_moments){fn, mean, m2};
}

num_moments num_moments_join(num_moments a, num_moments b) {
    float n = a.n + b.n, d = b.mean - a.mean;
    return (num_moments){n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
}

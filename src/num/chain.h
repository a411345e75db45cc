/* chain.h: one step of a GEMM output element's chain, eight chains at once,
 * with the device's arithmetic (docs/sim.md): an exact product (f16 or 8-bit
 * operands) may fuse with the add, giving the same bits; any other product is
 * rounded to f32 first; an f16 accumulator is rounded to f16 after every add
 * (VCVTPS2PH's round to nearest even). The simulator's GEMM kernels and the
 * plan-exact reference both step their chains with it. Needs AVX2, FMA, F16C;
 * num_chain_step16 does the same step on sixteen chains (AVX-512F), for the
 * kernels num_wide() picks. */
#ifndef TESSEL_NUM_CHAIN_H
#define TESSEL_NUM_CHAIN_H

#include "num.h"

#include <immintrin.h>
#include <stdbool.h>

static inline __attribute__((always_inline)) __m256 num_chain_step(__m256 acc, __m256 a, __m256 b, bool exact,
                                                                   bool f16acc) {
    acc = exact ? _mm256_fmadd_ps(a, b, acc) : _mm256_add_ps(acc, _mm256_mul_ps(a, b));
    if (f16acc) acc = _mm256_cvtph_ps(_mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT));
    return acc;
}

/* num_chain_step on sixteen lanes: the same instructions' 512-bit forms,
 * the same bits in every lane. Call it only from a function built for
 * AVX-512F (target("avx512f")) and only when num_wide() (num.h) says the host runs it. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) __m512
num_chain_step16(__m512 acc, __m512 a, __m512 b, bool exact, bool f16acc) {
    acc = exact ? _mm512_fmadd_ps(a, b, acc) : _mm512_add_ps(acc, _mm512_mul_ps(a, b));
    if (f16acc) acc = _mm512_cvtph_ps(_mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT));
    return acc;
}

#endif

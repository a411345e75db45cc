/* compare.c: distance between a tensor and its reference, in double. */
#include "num.h"

#include <math.h>
#include <string.h>

num_diff num_compare(const float *got, const float *want, size_t n) {
    num_diff r = {0};
    double dot = 0, gg = 0, ww = 0, ee = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!isfinite(g) || !isfinite(w)) {
            r.nonfinite++;
            continue;
        }
        double e = g - w;
        dot += g * w;
        gg += g * g;
        ww += w * w;
        ee += e * e;
        if (fabs(e) > r.max_abs_err) r.max_abs_err = fabs(e);
    }
    /* Non-finite values are errors of unbounded size: they poison the result. */
    if (r.nonfinite) {
        r.cosine = NAN;
        r.max_abs_err = INFINITY;
    } else {
        r.cosine = gg == 0 && ww == 0 ? 1.0 : gg == 0 || ww == 0 ? 0.0 : dot / sqrt(gg * ww);
    }
    r.rms_err = n ? sqrt(ee / (double)n) : 0;
    r.want_rms = n ? sqrt(ww / (double)n) : 0;
    return r;
}

num_mismatch num_mismatches(const float *got, const float *want, size_t n) {
    num_mismatch m = {0, -1, 0, 0};
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a == b || (isnan(got[i]) && isnan(want[i]))) continue;
        if (m.count++ == 0) {
            m.first = (int64_t)i;
            m.got = got[i];
            m.want = want[i];
        }
    }
    return m;
}

/* passes.c: the pipeline's pass list: the graph passes, expansion and the
 * mid passes (mid_passes, in their order), then lowering, the schedule and
 * placement. The driver runs them in this order (compile.c). */
#include "driver.h"

#include <string.h>

static const driver_pass before[] = {
    {"join-siblings", "matmuls that read one operand become one GEMM (a search choice)", PASS_GRAPH},
    {"fuse-epilogue", "an optimizer step runs in its weight-gradient GEMM's epilogue where legal", PASS_GRAPH},
    {"expand", "each graph op by its chosen implementation, a copy at every layout boundary", PASS_MID},
};
static const driver_pass after[] = {
    {"lower", "per-tile kernel runs and exchange fragments over buffers", PASS_LOW},
    {"schedule", "independent steps joined into shared compute sets and exchange phases", PASS_LOW},
    {"place", "buffers at tile addresses and the exchange tables encoded: the package", PASS_LOW},
};
enum { NBEFORE = sizeof before / sizeof before[0], NAFTER = sizeof after / sizeof after[0] };

static int mid_count(void) {
    int n = 0;
    while (mid_passes[n].name) n++;
    return n;
}

int driver_pass_count(void) { return NBEFORE + mid_count() + NAFTER; }

driver_pass driver_pass_at(int i) {
    int nm = mid_count();
    TS_ASSERT(i >= 0 && i < NBEFORE + nm + NAFTER);
    if (i < NBEFORE) return before[i];
    if (i < NBEFORE + nm) return (driver_pass){mid_passes[i - NBEFORE].name, mid_passes[i - NBEFORE].summary, PASS_MID};
    return after[i - NBEFORE - nm];
}

bool driver_pass_find(const char *name, driver_pass *out) {
    for (int i = 0; i < driver_pass_count(); i++)
        if (strcmp(driver_pass_at(i).name, name) == 0) {
            if (out) *out = driver_pass_at(i);
            return true;
        }
    return false;
}

void driver_pass_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < driver_pass_count() && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", driver_pass_at(i).name);
}

/* dtype.c: per-dtype facts, every table derived from the NUM_DTYPES X-macro. */
#include "num.h"

#include <string.h>

typedef struct dtype_info {
    const char *name;
    int bytes;      /* bytes per element */
    bool is_float;
    bool is_f8;
} dtype_info;

static const dtype_info DTYPE_INFO[] = {
#define X(id, name, bytes, fl, b8) {name, bytes, fl, b8},
    NUM_DTYPES(X)
#undef X
};
_Static_assert(TS_COUNT(DTYPE_INFO) == DT_COUNT, "one info row per dtype");

static const dtype_info *info(dtype t) {
    TS_ASSERT((unsigned)t < DT_COUNT);
    return &DTYPE_INFO[t];
}

const char *dtype_name(dtype t) { return info(t)->name; }
int dtype_bytes(dtype t) { return info(t)->bytes; }
bool dtype_is_float(dtype t) { return info(t)->is_float; }
bool dtype_is_f8(dtype t) { return info(t)->is_f8; }

bool dtype_parse(const char *s, size_t n, dtype *out) {
    for (int t = 0; t < DT_COUNT; t++) {
        const char *name = DTYPE_INFO[t].name;
        if (strlen(name) == n && memcmp(name, s, n) == 0) {
            *out = (dtype)t;
            return true;
        }
    }
    return false;
}

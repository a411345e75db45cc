/* fuzz_npy.c: libFuzzer target: npy_parse on arbitrary bytes must never read
 * out of bounds, and must either fail with a message or return a consistent array. */
#include "num/num.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    diag d = {0};
    if (npy_parse(data, size, "fuzz.npy", &a, &d) != 0) {
        TS_ASSERT(d.set && a.data == NULL);
        return 0;
    }
    /* An accepted image holds exactly the data its shape describes. */
    uint64_t numel = 1; /* unsigned: a zero axis after huge ones may wrap first */
    for (int32_t i = 0; i < a.rank; i++) {
        TS_ASSERT(a.dim[i] >= 0);
        numel *= (uint64_t)a.dim[i];
    }
    TS_ASSERT(a.rank >= 0 && a.rank <= NPY_MAX_RANK && numel == (uint64_t)a.numel);
    TS_ASSERT((size_t)a.numel * (size_t)dtype_bytes(a.dtype) <= size);
    npy_free(&a);
    return 0;
}

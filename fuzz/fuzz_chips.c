/* fuzz_chips.c: libFuzzer target: pkg_chips_parse (a package for several
 * chips, docs/chips.md) on arbitrary bytes must never read out of bounds or
 * crash; it refuses with a message naming the file, or accepts a container
 * whose chips' packages each write back to an image they accept again (a
 * training step's: whose manifest's feeds read or refuse alike).
 * Even-sized inputs have the header's and the texts' checksums forged
 * first, so the fuzzer reaches the checks behind them. */
#include "driver/driver.h"
#include "package/package.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size + 1);
    memcpy(copy, data, size);
    if (size % 2 == 0) pkg_chips_fix_checksums(copy, size);
    pkg_chips pc;
    diag d = {0};
    int rc = pkg_chips_parse(copy, size, "fuzz.tpk", NULL, &pc, &d);
    free(copy);
    if (rc != 0) {
        TS_ASSERT(d.set && strstr(d.text, "fuzz.tpk") != NULL && pc.pkg == NULL);
        return 0;
    }
    TS_ASSERT((pc.kind == PKG_CHIPS_PIPELINE ? pc.n * pc.replicas : pc.n - 1) == (int32_t)pc.machine.chips &&
              (pc.kind == PKG_CHIPS_PIPELINE || pc.n == pc.replicas + 1) && pc.micro_batches >= 1 &&
              pc.batch % (pc.replicas * pc.micro_batches) == 0);
    if (pc.kind == PKG_CHIPS_TRAIN) {
        graph_feed **feed;
        int32_t *nfeed;
        int64_t *gather;
        diag fd = {0};
        if (driver_train_feeds(pc.manifest, pc.replicas, &feed, &nfeed, &gather, "fuzz.tpk", &fd) == 0) {
            train_shape s;
            driver_train_shape_of_packages(pc.pkg, pc.replicas, pc.micro_batches, feed, nfeed, gather, true, &s);
            train_shape_free(&s);
        } else {
            TS_ASSERT(fd.set && strstr(fd.text, "fuzz.tpk") != NULL);
        }
    }
    for (int32_t c = 0; c < pc.n; c++) {
        TS_ASSERT(pc.loaded[c]);
        size_t len;
        uint8_t *img = package_image(&pc.pkg[c], &len, "test", NULL);
        package q;
        TS_ASSERT(package_parse(img, len, "again.tpk", &q, &d) == 0);
        package_free(&q);
        free(img);
    }
    pkg_chips_free(&pc);
    return 0;
}

/* fuzz_pkg.c: libFuzzer target: package_parse on arbitrary bytes must never
 * read out of bounds or crash; it either refuses with a message naming the
 * file, or accepts a package that writes back to an image it accepts again,
 * which writes back to the very same bytes. Odd-sized inputs keep their
 * checksums (so damage is refused); even-sized ones have them forged first,
 * so the fuzzer reaches every check behind them. */
#include "package/package.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    package p, q;
    diag d = {0};
    uint8_t *copy = malloc(size + 1);
    memcpy(copy, data, size);
    if (size % 2 == 0) package_fix_checksums(copy, size);
    int rc = package_parse(copy, size, "fuzz.tpk", &p, &d);
    free(copy);
    if (rc != 0) {
        TS_ASSERT(d.set && strncmp(d.text, "fuzz.tpk", 8) == 0 && p.arena.head == NULL);
        package_free(&p);
        return 0;
    }
    /* The first write may normalise (machine JSON layout, string offsets);
     * after that the image is a fixed point. */
    size_t len1, len2;
    uint8_t *img1 = package_image(&p, &len1, "test", NULL);
    TS_ASSERT(package_parse(img1, len1, "again.tpk", &q, &d) == 0);
    uint8_t *img2 = package_image(&q, &len2, "test", NULL);
    TS_ASSERT(len1 == len2 && memcmp(img1, img2, len1) == 0);
    free(img1);
    free(img2);
    package_free(&q);
    package_free(&p);
    return 0;
}

/* crc32c.c: CRC-32C, the SSE4.2 crc32 instruction over 8-byte words (the
 * build targets x86-64-v3), the same polynomial bit by bit for the tail. */
#include "util.h"

#include <nmmintrin.h>
#include <string.h>

uint32_t util_crc32c(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t c = 0xffffffffu;
    for (; n >= 8; n -= 8, s += 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--, s++) c32 = _mm_crc32_u8(c32, *s);
    return ~c32;
}

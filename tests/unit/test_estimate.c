/* test_estimate.c: the estimate's memory model (docs/search.md, "The cost
 * model", Memory). What buffers live at once on a tile reserve under
 * placement's memory map: packed in the ordinary region while they fit;
 * then the largest take whole interleaved elements, each its own, until the
 * rest packs; and more than the tile has when that needs more elements than
 * the region holds. Checked on tiny (64 KiB ordinary, two 32 KiB interleaved
 * elements, the second clipped by the loader limit) and c600. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "estimate/estimate.h"

static int64_t reserve(const machine *m, double tables, const int64_t *sizes, int32_t n) {
    return est_tile_reserved(m, tables, sizes, n);
}

static void tiny_regions(void **state) {
    (void)state;
    machine m;
    assert_int_equal(machine_preset("tiny", &m), 0);
    const int64_t el = 32768, ordinary = 65536 - EST_CODE_BYTES; /* no tables */
    double room = est_buffer_room(&m, 0);
    assert_true(room == (double)(0x6bbb0 - 0x4c000 - EST_CODE_BYTES));
    /* Packed: the payload. */
    int64_t packed[] = {20000, 20000, 16};
    assert_int_equal(reserve(&m, 0, packed, 3), 40016);
    assert_int_equal(reserve(&m, 0, packed, 0), 0);
    /* One buffer more than the ordinary region holds: the largest takes an element. */
    int64_t one[] = {30000, 30000};
    assert_int_equal(reserve(&m, 0, one, 2), 60000 + (el - 30000));
    /* Two elements, and a buffer larger than one element takes two. */
    int64_t three[] = {30000, 30000, 30000};
    assert_int_equal(reserve(&m, 0, three, 3), 90000 + 2 * (el - 30000));
    assert_true(reserve(&m, 0, three, 3) <= room);
    int64_t big[] = {6144, 40000, 6144, 6144, 6144};
    assert_int_equal(reserve(&m, 0, big, 5), 64576 + (2 * el - 40000));
    /* Each buffer owns its elements: three 6 KiB temporaries beside ten
     * small parameters that nearly fill the ordinary region need three of
     * the two elements, so they do not fit although their payload would
     * (the case the payload alone missed). */
    int64_t small[13], payload = 0;
    for (int i = 0; i < 13; i++) payload += small[i] = i < 10 ? 4505 : 6144;
    assert_true(payload <= room);
    assert_true(reserve(&m, 0, small, 13) > room);
    assert_int_equal(reserve(&m, 0, small, 12), payload - 6144 + 2 * (el - 6144));
    int64_t four[] = {30000, 30000, 30000, 30000};
    assert_int_equal(reserve(&m, 0, four, 4), ordinary + 3 * el);
    /* The order buffers come in does not matter. */
    int64_t a[] = {100, 30000, 2000, 30000, 5000}, b[] = {30000, 5000, 2000, 100, 30000};
    assert_int_equal(reserve(&m, 0, a, 5), reserve(&m, 0, b, 5));
    /* Exchange tables take ordinary room first. */
    int64_t fits[] = {ordinary};
    assert_int_equal(reserve(&m, 0, fits, 1), ordinary);
    assert_int_equal(reserve(&m, 1024, fits, 1), 2 * el);
    assert_true(est_buffer_room(&m, 1024) == room - 1024);
}

static void c600_regions(void **state) {
    (void)state;
    machine m;
    assert_int_equal(machine_preset("c600", &m), 0);
    const int64_t el = 32768, ordinary = 208 * 1024 - EST_CODE_BYTES;
    double room = est_buffer_room(&m, 0);
    /* 100,000 bytes take four elements (31,072 wasted), then seven whole-element buffers go beside them. */
    int64_t v[20];
    v[0] = 100000;
    for (int i = 1; i < 20; i++) v[i] = el;
    assert_int_equal(reserve(&m, 0, v, 14), 100000 + 13 * el + (4 * el - 100000));
    assert_true(reserve(&m, 0, v, 14) <= room);
    /* Twenty whole elements: fourteen would have to go interleaved, of thirteen. */
    for (int i = 0; i < 20; i++) v[i] = el;
    assert_int_equal(reserve(&m, 0, v, 20), ordinary + 14 * el);
    assert_true(reserve(&m, 0, v, 20) > room);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_regions),
        cmocka_unit_test(c600_regions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_tables.c: the exchange tables (docs/placement.md, "Exchange tables";
 * docs/package.md, "Exchange tables"). Rows encode and decode at the field
 * widths of several machines; a program with a multicast, receives from
 * several senders into one range, discontiguous receives and strided
 * addresses in a repeat encodes into the rows docs/placement.md prices and
 * decodes back to exactly its fragments; receives that are back to back in
 * two buffers take two rows; and hundreds of random programs do the same,
 * with the bytes place_table_bytes counts equal to the bytes encoded. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "place/place.h"

enum { BASE = 0x4c000 };

static kernel_addr at(uint32_t a, int32_t stride) { return (kernel_addr){.buf = KERNEL_ABSOLUTE, .off = a, .iter_stride = stride}; }

/* ---- rows --------------------------------------------------------------- */

static void rows_at(const machine *m, uint32_t groups) {
    kernel_xt_format f;
    kernel_xt_format_init(&f, m, groups);
    uint32_t top = m->tile_memory_end - 1, most_slot = (uint32_t)((1ull << f.addr_bits) - 1);
    pkg_xt_send cases[] = {
        {m->tile_memory_base, 1, 0, 0},
        {top, m->max_send_bytes, most_slot, m->tiles + groups - 1},
        {m->tile_memory_base + 0x1234, 77, most_slot / 3, m->tiles - 1},
    };
    for (size_t i = 0; i < TS_COUNT(cases); i++) {
        uint8_t row[16] = {0};
        pkg_xt_send back;
        pkg_xt_put_send(&f, row, &cases[i]);
        assert_true(pkg_xt_get_send(&f, row, &back));
        assert_memory_equal(&back, &cases[i], sizeof back);
        /* A bit past the fields is refused. */
        unsigned used = 2u * f.addr_bits + f.len_bits + f.dst_bits;
        if (used < 8u * f.send_bytes) {
            row[used / 8] |= (uint8_t)(1u << (used % 8));
            assert_false(pkg_xt_get_send(&f, row, &back));
        }
    }
    pkg_xt_recv r = {top, (uint32_t)((1ull << f.count_bits) > UINT32_MAX ? UINT32_MAX : (1ull << f.count_bits))}, rb;
    uint8_t row[16] = {0};
    pkg_xt_put_recv(&f, row, &r);
    assert_true(pkg_xt_get_recv(&f, row, &rb));
    assert_memory_equal(&r, &rb, sizeof r);
    pkg_xt_patch p = {PKG_XT_RECV_ROW | 7, -0x12345}, pb;
    pkg_xt_put_patch(row, &p);
    pkg_xt_get_patch(row, &pb);
    assert_memory_equal(&p, &pb, sizeof p);
}

static void row_layouts(void **state) {
    (void)state;
    machine m;
    assert_int_equal(machine_preset("c600", &m), 0);
    kernel_xt_format f;
    /* c600: 20-bit offsets and slots, 8-bit lengths; a destination field of
     * 13 bits for 1,472 tiles and SigLIP's 3,674 groups: 61 bits, 8 bytes;
     * a receive row of a pointer and a 12-bit count, 4 bytes. */
    kernel_xt_format_init(&f, &m, 3674);
    assert_int_equal(f.addr_bits, 20);
    assert_int_equal(f.len_bits, 8);
    assert_int_equal(f.dst_bits, 13);
    assert_int_equal(f.send_bytes, 8);
    assert_int_equal(f.recv_bytes, 4);
    assert_int_equal(f.count_bits, 12);
    rows_at(&m, 3674);
    rows_at(&m, 0);
    /* More groups than 16 bits hold widen the send row to 12 bytes. */
    kernel_xt_format_init(&f, &m, 70000);
    assert_int_equal(f.send_bytes, 12);
    rows_at(&m, 70000);
    assert_int_equal(machine_preset("tiny", &m), 0);
    kernel_xt_format_init(&f, &m, 5);
    assert_int_equal(f.send_bytes, 8);
    assert_int_equal(f.recv_bytes, 4);
    rows_at(&m, 5);
    /* A 4 GiB tile: 32-bit offsets and slots make 12-byte sends, 8-byte receives. */
    m.tile_memory_base = 0;
    m.tile_memory_end = 0xfffffff0u;
    m.max_send_bytes = 1u << 20;
    kernel_xt_format_init(&f, &m, 9);
    assert_int_equal(f.send_bytes, 12);
    assert_int_equal(f.recv_bytes, 8);
    rows_at(&m, 9);
}

/* ---- programs ------------------------------------------------------------ */

static void add_step(package *p, low_step_kind k, uint32_t first, uint32_t count, uint32_t it) {
    low_step s;
    memset(&s, 0, sizeof s);
    s.kind = (uint8_t)k, s.first = first, s.count = count, s.iterations = it;
    vec_push(&p->arena, &p->prog.steps, s);
}

static void add_frag(package *p, uint32_t src_tile, kernel_addr src, kernel_addr dst, uint32_t bytes, const uint32_t *dsts,
                     uint32_t ndst) {
    low_frag f = {.src_tile = src_tile, .src = src, .dst = dst, .bytes = bytes, .dst0 = (uint32_t)p->prog.dst_tiles.n,
                  .ndst = ndst};
    for (uint32_t k = 0; k < ndst; k++) vec_push(&p->arena, &p->prog.dst_tiles, dsts[k]);
    vec_push(&p->arena, &p->prog.frags, f);
}

/* One (fragment, destination) pair as the simulator sees it. */
typedef struct delivery {
    uint32_t src_tile, src;
    int32_t src_stride;
    uint32_t bytes, dst_tile, dst;
    int32_t dst_stride;
    uint32_t phase;
} delivery;

static int cmp_delivery(const void *a, const void *b) { return memcmp(a, b, sizeof(delivery)); }

/* What p's fragments deliver, sorted. */
static delivery *from_frags(const package *p, uint64_t *n) {
    uint64_t k = 0;
    for (int32_t i = 0; i < p->prog.frags.n; i++) k += p->prog.frags.v[i].ndst;
    delivery *d = calloc(k + 1, sizeof(delivery));
    k = 0;
    for (int32_t s = 0, ph = 0; s < p->prog.steps.n; s++) {
        const low_step *st = &p->prog.steps.v[s];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        for (uint32_t i = st->first; i < st->first + st->count; i++) {
            const low_frag *f = &p->prog.frags.v[i];
            for (uint32_t j = 0; j < f->ndst; j++) {
                delivery *e = &d[k++];
                memset(e, 0, sizeof *e);
                *e = (delivery){f->src_tile, f->src.off, f->src.iter_stride, f->bytes, p->prog.dst_tiles.v[f->dst0 + j], f->dst.off,
                                f->dst.iter_stride, (uint32_t)ph};
            }
        }
        ph++;
    }
    qsort(d, k, sizeof(delivery), cmp_delivery);
    *n = k;
    return d;
}

/* What p's tables deliver, decoded, sorted. */
static delivery *from_tables(const package *p, uint64_t *n) {
    pkg_xplan x;
    diag dg = {0};
    if (pkg_xplan_build(p, "t", &x, &dg)) fail_msg("%s", dg.text);
    uint64_t k = 0;
    for (uint32_t ph = 0; ph < x.nphases; ph++) k += x.phase[ph].nrecv;
    delivery *d = calloc(k + 1, sizeof(delivery));
    k = 0;
    for (uint32_t ph = 0; ph < x.nphases; ph++) {
        const pkg_xphase *P = &x.phase[ph];
        for (uint32_t t = 0; t < P->nreceivers; t++) {
            const pkg_xtile *rt = &x.tiles[P->receivers + t];
            for (uint64_t i = rt->first; i < rt->first + rt->n; i++) {
                const pkg_xrecv *r = &x.recv[i];
                const pkg_xsend *s = &x.send[r->send];
                delivery *e = &d[k++];
                memset(e, 0, sizeof *e);
                *e = (delivery){s->tile, s->addr, s->stride, s->bytes, rt->tile, r->addr, r->stride, ph};
            }
        }
    }
    pkg_xplan_free(&x);
    qsort(d, k, sizeof(delivery), cmp_delivery);
    *n = k;
    return d;
}

/* Encodes p's fragments; the tables must deliver what they did, in the
 * bytes place_table_bytes counted, and survive the file format. */
static void encode_and_compare(package *p) {
    uint64_t na, nb;
    delivery *want = from_frags(p, &na);
    uint32_t *counted = calloc(p->machine.tiles, sizeof(uint32_t));
    place_table_bytes(&p->prog, &p->machine, counted);
    diag d = {0};
    if (place_package_tables(p, &d)) fail_msg("%s", d.text);
    for (uint32_t t = 0; t < p->machine.tiles; t++) assert_int_equal(p->tables.at[t + 1] - p->tables.at[t], counted[t]);
    delivery *got = from_tables(p, &nb);
    assert_int_equal(na, nb);
    if (na) assert_memory_equal(want, got, sizeof(delivery) * na);
    size_t len, len2;
    uint8_t *img = package_image(p, &len, "test", NULL);
    package q;
    if (package_parse(img, len, "t.tpk", &q, &d)) fail_msg("%s", d.text);
    uint8_t *img2 = package_image(&q, &len2, "test", NULL);
    assert_int_equal(len, len2);
    assert_memory_equal(img, img2, len);
    package_free(&q);
    free(img);
    free(img2);
    free(want);
    free(got);
    free(counted);
}

static void new_package(package *p) {
    package_init(p);
    assert_int_equal(machine_preset("tiny", &p->machine), 0);
    p->fingerprint = machine_fingerprint(&p->machine);
    vec_push(&p->arena, &p->prog.strings, 0);
}

/* The rows of tile's block for phase ph. */
static pkg_xt_header header_of(const package *p, uint32_t tile, uint32_t ph) {
    kernel_xt_format f;
    kernel_xt_format_init(&f, &p->machine, p->tables.ngroups);
    for (uint64_t a = p->tables.at[tile]; a < p->tables.at[tile + 1];) {
        pkg_xt_header h;
        pkg_xt_get_header(p->tables.bytes + a, &h);
        if (h.phase == ph) return h;
        a += kernel_xt_block_bytes(&f, h.nsend, h.nrecv, h.npatch);
    }
    return (pkg_xt_header){UINT32_MAX, 0, 0, 0};
}

static void multicast_ranges_and_strides(void **state) {
    (void)state;
    package p;
    new_package(&p);
    static const uint32_t three[] = {1, 2, 3}, five[] = {5}, eight[] = {8}, ten[] = {10}, pair[] = {12, 13};
    /* phase 0: a multicast; three fragments from two senders back to back on
     * tile 5; two apart on tile 8 */
    add_frag(&p, 0, at(BASE, 0), at(BASE + 0x4000, 0), 64, three, 3);
    add_frag(&p, 4, at(BASE, 0), at(BASE + 0x4000, 0), 32, five, 1);
    add_frag(&p, 6, at(BASE, 0), at(BASE + 0x4020, 0), 32, five, 1);
    add_frag(&p, 4, at(BASE + 0x20, 0), at(BASE + 0x4040, 0), 32, five, 1);
    add_frag(&p, 7, at(BASE, 0), at(BASE + 0x4000, 0), 16, eight, 1);
    add_frag(&p, 7, at(BASE + 0x10, 0), at(BASE + 0x4100, 0), 16, eight, 1);
    /* phase 1, three times: strided sources and destinations, a strided multicast */
    add_frag(&p, 9, at(BASE, 16), at(BASE + 0x4000, 32), 16, ten, 1);
    add_frag(&p, 11, at(BASE, 0), at(BASE + 0x4000, 64), 64, pair, 2);
    add_step(&p, LOW_STEP_EXCHANGE, 0, 6, 0);
    add_step(&p, LOW_STEP_REPEAT, 0, 0, 3);
    add_step(&p, LOW_STEP_EXCHANGE, 6, 2, 0);
    add_step(&p, LOW_STEP_END, 0, 0, 0);
    encode_and_compare(&p);
    /* The rows docs/placement.md prices: one send row for the multicast, a
     * receive row on each destination; one row for the three on tile 5
     * (from tiles 4 and 6); two on tile 8; patch rows for strided addresses. */
    assert_int_equal(p.tables.ngroups, 2);
    pkg_xt_header h = header_of(&p, 0, 0);
    assert_true(h.nsend == 1 && h.nrecv == 0 && h.npatch == 0);
    for (uint32_t t = 1; t <= 3; t++) {
        h = header_of(&p, t, 0);
        assert_true(h.nsend == 0 && h.nrecv == 1 && h.npatch == 0);
    }
    h = header_of(&p, 4, 0);
    assert_true(h.nsend == 2 && h.nrecv == 0);
    h = header_of(&p, 5, 0);
    assert_true(h.nsend == 0 && h.nrecv == 1);
    h = header_of(&p, 8, 0);
    assert_true(h.nsend == 0 && h.nrecv == 2);
    h = header_of(&p, 9, 1);
    assert_true(h.nsend == 1 && h.npatch == 1);
    h = header_of(&p, 10, 1);
    assert_true(h.nrecv == 1 && h.npatch == 1);
    h = header_of(&p, 13, 1);
    assert_true(h.nrecv == 1 && h.npatch == 1);
    assert_int_equal(header_of(&p, 5, 1).phase, UINT32_MAX);
    /* Tile 5: a header and one 4-byte receive row; tile 4: a header and two 8-byte send rows. */
    assert_int_equal(p.tables.at[6] - p.tables.at[5], 8 + 4);
    assert_int_equal(p.tables.at[5] - p.tables.at[4], 8 + 2 * 8);
    /* The steps name their phases now; the program has no fragments. */
    assert_int_equal(p.prog.frags.n, 0);
    assert_int_equal(p.prog.steps.v[2].first, 1);
    package_free(&p);
}

/* Before placement, contiguity is a matter of buffer and offset: fragments
 * into two buffers that placement then puts back to back take two rows. */
static void buffers_back_to_back_take_two_rows(void **state) {
    (void)state;
    machine m;
    assert_int_equal(machine_preset("tiny", &m), 0);
    arena a;
    arena_init(&a);
    low_program lp;
    memset(&lp, 0, sizeof lp);
    static const uint32_t one[] = {1};
    low_frag f0 = {.src_tile = 0, .src = {0, 0, 0}, .dst = {1, 0, 0}, .bytes = 64, .dst0 = 0, .ndst = 1};
    low_frag f1 = {.src_tile = 0, .src = {0, 64, 0}, .dst = {2, 0, 0}, .bytes = 64, .dst0 = 0, .ndst = 1};
    vec_push(&a, &lp.dst_tiles, one[0]);
    vec_push(&a, &lp.frags, f0);
    vec_push(&a, &lp.frags, f1);
    low_step st = {.kind = LOW_STEP_EXCHANGE, .first = 0, .count = 2};
    vec_push(&a, &lp.steps, st);
    uint32_t bytes[16];
    place_table_bytes(&lp, &m, bytes);
    assert_int_equal(bytes[1], 8 + 2 * 4);
    package p;
    package_init(&p);
    p.machine = m;
    vec_push(&p.arena, &p.prog.steps, st);
    vec_push(&p.arena, &p.prog.strings, 0);
    uint32_t addr[3] = {BASE, BASE + 0x1000, BASE + 0x1040}; /* buffers 1 and 2 adjacent */
    place_xt *x = place_tables_plan(&lp, &m);
    diag d = {0};
    if (place_tables_encode(x, addr, &p, &d)) fail_msg("%s", d.text);
    place_tables_free(x);
    assert_int_equal(p.tables.at[2] - p.tables.at[1], 8 + 2 * 4);
    uint64_t n;
    delivery *got = from_tables(&p, &n);
    assert_int_equal(n, 2);
    assert_int_equal(got[0].dst, BASE + 0x1000);
    assert_int_equal(got[1].dst, BASE + 0x1040);
    assert_int_equal(got[1].src, BASE + 64);
    free(got);
    package_free(&p);
    arena_free(&a);
}

/* ---- random programs ------------------------------------------------------- */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void random_program(package *p, uint64_t *seed) {
    new_package(p);
    uint32_t tiles = p->machine.tiles, phases = 1 + (uint32_t)(rnd(seed) % 4);
    bool in_repeat = rnd(seed) % 2;
    if (in_repeat) add_step(p, LOW_STEP_REPEAT, 0, 0, 1 + (uint32_t)(rnd(seed) % 4));
    for (uint32_t ph = 0; ph < phases; ph++) {
        uint32_t first = (uint32_t)p->prog.frags.n, n = (uint32_t)(rnd(seed) % 40);
        /* Destinations never overlap: one bump address for the whole phase,
         * sometimes with a gap (a new receive row), sometimes not (the same row). */
        uint32_t dst = BASE + 0x8000;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t bytes = 1 + (uint32_t)(rnd(seed) % 256), nd = 1 + (uint32_t)(rnd(seed) % 3), d[3];
            for (uint32_t k = 0; k < nd; k++) {
                bool again;
                do {
                    d[k] = (uint32_t)(rnd(seed) % tiles);
                    again = false;
                    for (uint32_t j = 0; j < k; j++) again |= d[j] == d[k];
                } while (again);
            }
            if (rnd(seed) % 3 == 0) dst += (uint32_t)(rnd(seed) % 64);
            int32_t ss = in_repeat && rnd(seed) % 4 == 0 ? 256 : 0, ds = in_repeat && rnd(seed) % 4 == 0 ? 0x1000 : 0;
            add_frag(p, (uint32_t)(rnd(seed) % tiles), at(BASE + (uint32_t)(rnd(seed) % 0x4000), ss), at(dst, ds), bytes, d, nd);
            dst += bytes;
        }
        add_step(p, LOW_STEP_EXCHANGE, first, n, 0);
    }
    if (in_repeat) add_step(p, LOW_STEP_END, 0, 0, 0);
}

static void random_programs_round_trip(void **state) {
    (void)state;
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (int k = 0; k < 300; k++) {
        package p;
        random_program(&p, &seed);
        encode_and_compare(&p);
        package_free(&p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(row_layouts),
        cmocka_unit_test(multicast_ranges_and_strides),
        cmocka_unit_test(buffers_back_to_back_take_two_rows),
        cmocka_unit_test(random_programs_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

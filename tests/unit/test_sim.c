/* test_sim.c: the executor's semantics on hand-built packages: exchanges
 * read a snapshot (a swap swaps), repeats advance strided addresses and
 * multiply cycles, inputs and outputs go through their layouts. Exchanges
 * are written as fragments and encoded into tables as placement would. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "place/place.h"
#include "sim/sim.h"

enum { BASE = 0x4c000 };

static kernel_addr at(uint32_t a, int32_t stride) { return (kernel_addr){.buf = KERNEL_ABSOLUTE, .off = a, .iter_stride = stride}; }

/* The package's fragments as tables (what a placed package carries), then the run. */
static int run_sim(package *p, const sim_options *o, float *const *in, float **out, sim_stats *st, diag *d) {
    if (place_package_tables(p, d)) return -1;
    return sim_run(p, o, in, out, st, d);
}

static void step(package *p, low_step_kind k, uint32_t first, uint32_t count, uint32_t it) {
    low_step s = {.kind = (uint8_t)k, .first = first, .count = count, .iterations = it};
    vec_push(&p->arena, &p->prog.steps, s);
}

/* A package on tiny with one f32 input x [2] split over tiles 0 and 1 and
 * one f32 output y [2] likewise, at the same addresses. */
static void base_package(package *p, uint32_t xaddr, uint32_t yaddr) {
    package_init(p);
    machine_preset("tiny", &p->machine);
    p->fingerprint = machine_fingerprint(&p->machine);
    vec_push(&p->arena, &p->prog.strings, 0);
    int64_t dim[1] = {2};
    layout l = layout_single(1, dim, 4);
    layout_split(&l, 0, 2, 1);
    pkg_binding in = {.name = "x", .role = PKG_INPUT, .dtype = DT_F32, .layout = l, .addr = xaddr, .step = -1};
    pkg_binding out = {.name = "y", .role = PKG_OUTPUT, .dtype = DT_F32, .layout = l, .addr = yaddr, .step = -1};
    vec_push(&p->arena, &p->bindings, in);
    vec_push(&p->arena, &p->bindings, out);
}

/* out = a + b, one f32 element on tile t. */
static void add_f32(package *p, uint32_t t, kernel_addr out, kernel_addr a, kernel_addr b) {
    kernel_run r;
    memset(&r, 0, sizeof r);
    r.tile = t;
    r.kernel = KERNEL_K_EWISE;
    r.ew = KERNEL_EW_ADD;
    r.dt[0] = r.dt[1] = r.dt[2] = DT_F32;
    r.ptr[0] = out, r.ptr[1] = a, r.ptr[2] = b;
    for (int k = 0; k < KERNEL_MAX_BOX; k++) r.n[k] = 1;
    vec_push(&p->arena, &p->prog.runs, r);
}

static void frag(package *p, uint32_t src_tile, uint32_t src, uint32_t dst_tile, uint32_t dst, uint32_t bytes) {
    low_frag f = {.src_tile = src_tile, .src = at(src, 0), .dst = at(dst, 0), .bytes = bytes,
                  .dst0 = (uint32_t)p->prog.dst_tiles.n, .ndst = 1};
    vec_push(&p->arena, &p->prog.frags, f);
    vec_push(&p->arena, &p->prog.dst_tiles, dst_tile);
}

/* x lives at BASE, y at BASE: tile 0 sends its x to tile 1 and tile 1 its x to
 * tile 0 in one phase, in place. With snapshot semantics they swap. */
static void exchange_reads_a_snapshot(void **state) {
    (void)state;
    package p;
    base_package(&p, BASE, BASE);
    frag(&p, 0, BASE, 1, BASE, 4);
    frag(&p, 1, BASE, 0, BASE, 4);
    step(&p, LOW_STEP_EXCHANGE, 0, 2, 0);
    float x[2] = {1.5f, -2.0f}, *in[1] = {x}, *out[1] = {NULL};
    sim_stats st;
    sim_options so = {.quiet = true};
    diag d = {0};
    assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
    assert_true(out[0][0] == -2.0f && out[0][1] == 1.5f);
    /* One phase: the sync, the latency, then the busiest tile's 4 bytes (1 cycle at 4
     * bytes/cycle, 2 with the element conflict: each tile sends from and receives into the same
     * element) or its controls, one send and one receive (3 cycles each), whichever is more. */
    assert_int_equal(st.cycles, p.machine.sync_cycles + p.machine.exchange_latency_cycles + 2 * p.machine.fragment_cycles);
    assert_int_equal(st.sync_cycles, p.machine.sync_cycles);
    assert_int_equal(st.tiles_used, 2);
    assert_int_equal(st.fragments, 2);
    free(out[0]);
    package_free(&p);
}

/* y = sum over 3 iterations of w[i] (stacked, 8 bytes per layer per tile)
 * added to x: an EWISE add inside a repeat with a strided operand. */
static void repeat_advances_strides(void **state) {
    (void)state;
    package p;
    uint32_t x = BASE, w = BASE + 0x100;
    base_package(&p, x, x);
    /* The weights: tile t holds w[i][t] for i = 0..2 at w + 4*i... per layer 4
     * bytes on each tile: stride 4. */
    float wv[2][3] = {{10, 20, 30}, {100, 200, 300}};
    p.blob = arena_alloc(&p.arena, sizeof wv);
    memcpy(p.blob, wv, sizeof wv);
    p.blob_bytes = sizeof wv;
    for (uint32_t t = 0; t < 2; t++) {
        pkg_segment s = {.tile = t, .addr = w, .bytes = 12, .blob_off = t * 12};
        vec_push(&p.arena, &p.segments, s);
    }
    step(&p, LOW_STEP_REPEAT, 0, 0, 3);
    for (uint32_t t = 0; t < 2; t++) add_f32(&p, t, at(x, 0), at(x, 0), at(w, 4));
    step(&p, LOW_STEP_COMPUTE, 0, 2, 0);
    step(&p, LOW_STEP_END, 0, 0, 0);
    float xv[2] = {1, 2}, *in[1] = {xv}, *out[1] = {NULL};
    sim_stats st;
    sim_options so = {.quiet = true, .trace = true};
    diag d = {0};
    assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
    assert_true(out[0][0] == 1 + 10 + 20 + 30 && out[0][1] == 2 + 100 + 200 + 300);
    /* Three executions of the compute set, each costing the same. */
    assert_int_equal(st.nevents, 3);
    assert_int_equal(st.runs, 6);
    assert_int_equal(st.cycles, 3 * st.events[0].cycles);
    assert_int_equal(st.events[2].start, 2 * st.events[0].cycles);
    sim_stats_free(&st);
    free(out[0]);
    package_free(&p);
}

/* Nested repeats: the inner body runs outer x inner times. */
static void nested_repeats_multiply(void **state) {
    (void)state;
    package p;
    base_package(&p, BASE, BASE);
    step(&p, LOW_STEP_REPEAT, 0, 0, 2);
    step(&p, LOW_STEP_REPEAT, 0, 0, 3);
    for (uint32_t t = 0; t < 2; t++) add_f32(&p, t, at(BASE, 0), at(BASE, 0), at(BASE, 0)); /* x = x + x */
    step(&p, LOW_STEP_COMPUTE, 0, 2, 0);
    step(&p, LOW_STEP_END, 0, 0, 0);
    step(&p, LOW_STEP_END, 0, 0, 0);
    float xv[2] = {1, -3}, *in[1] = {xv}, *out[1] = {NULL};
    sim_stats st;
    sim_options so = {.quiet = true};
    diag d = {0};
    assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
    assert_true(out[0][0] == 64 && out[0][1] == -192); /* doubled six times */
    assert_int_equal(st.runs, 12);
    free(out[0]);
    package_free(&p);
}

/* Inside a repeat every strided fragment address is repatched per iteration: tile 0 sends five
 * words with a strided source, so each of the two phases pays five patch words on top of the
 * sync (the overhead part, in sync_cycles), then the latency and the transfers. */
static void repeat_patches_strided_fragments(void **state) {
    (void)state;
    package p;
    base_package(&p, BASE, BASE);
    step(&p, LOW_STEP_REPEAT, 0, 0, 2);
    for (uint32_t w = 0; w < 5; w++) {
        low_frag f = {.src_tile = 0, .src = at(BASE + 0x100 + 4 * w, 20), .dst = at(BASE + 0x4000 + 4 * w, 0),
                      .bytes = 4, .dst0 = (uint32_t)p.prog.dst_tiles.n, .ndst = 1};
        vec_push(&p.arena, &p.prog.frags, f);
        vec_push(&p.arena, &p.prog.dst_tiles, 1u);
    }
    step(&p, LOW_STEP_EXCHANGE, 0, 5, 0);
    step(&p, LOW_STEP_END, 0, 0, 0);
    float x[2] = {0, 0}, *in[1] = {x}, *out[1] = {NULL};
    sim_stats st;
    sim_options so = {.quiet = true};
    diag d = {0};
    assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
    const machine *m = &p.machine;
    uint64_t overhead = m->sync_cycles + 5 * m->exchange_patch_cycles;
    assert_int_equal(st.sync_cycles, 2 * overhead);
    /* 20 bytes at 4 per cycle against five sends (tile 0) or five receives (tile 1) of 3. */
    assert_int_equal(st.cycles, 2 * (overhead + m->exchange_latency_cycles + 5 * m->fragment_cycles));
    free(out[0]);
    package_free(&p);
}

/* A tile that sends from and receives into one memory element pays the conflict on its payload;
 * the same traffic to another element does not. */
static void exchange_element_conflict(void **state) {
    (void)state;
    uint64_t cyc[2];
    for (int conflict = 0; conflict < 2; conflict++) {
        package p;
        base_package(&p, BASE, BASE);
        uint32_t back = conflict ? BASE + 0x2000 : BASE + p.machine.memory_element_bytes;
        frag(&p, 0, BASE + 0x1000, 1, BASE + p.machine.memory_element_bytes + 0x1000, 256);
        frag(&p, 1, BASE + 0x1000, 0, back, 256);
        step(&p, LOW_STEP_EXCHANGE, 0, 2, 0);
        float x[2] = {0, 0}, *in[1] = {x}, *out[1] = {NULL};
        sim_stats st;
        sim_options so = {.quiet = true};
        diag d = {0};
        assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
        cyc[conflict] = st.cycles;
        free(out[0]);
        package_free(&p);
    }
    machine m;
    machine_preset("tiny", &m);
    assert_int_equal(cyc[1] - cyc[0], (64 * m.exchange_conflict_percent + 99) / 100);
    /* Any shared element counts, whatever else the tile touches first: tile 0 sends from elements
     * 2 then 0 and receives into elements 3 then 0. */
    package p;
    base_package(&p, BASE, BASE);
    uint32_t e = p.machine.memory_element_bytes;
    frag(&p, 0, BASE + 2 * e, 1, BASE + 0x100, 256);
    frag(&p, 1, BASE + 2 * e, 0, BASE + 3 * e, 256);
    frag(&p, 0, BASE + 0x1000, 1, BASE + 0x200, 256);
    frag(&p, 1, BASE + 2 * e + 0x400, 0, BASE + 0x2000, 256);
    step(&p, LOW_STEP_EXCHANGE, 0, 4, 0);
    float x[2] = {0, 0}, *in[1] = {x}, *out[1] = {NULL};
    sim_stats st;
    sim_options so = {.quiet = true};
    diag d = {0};
    assert_int_equal(run_sim(&p, &so, in, out, &st, &d), 0);
    /* Only tile 0 conflicts (tile 1 receives into element 0 but sends from element 2): 128 payload
     * cycles each way, exchange_conflict_percent more on tile 0. */
    assert_int_equal(st.cycles, m.sync_cycles + m.exchange_latency_cycles + 128 + (128 * m.exchange_conflict_percent + 99) / 100);
    free(out[0]);
    package_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exchange_reads_a_snapshot),
        cmocka_unit_test(repeat_patches_strided_fragments),
        cmocka_unit_test(exchange_element_conflict),
        cmocka_unit_test(repeat_advances_strides),
        cmocka_unit_test(nested_repeats_multiply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_e2e.c: the compiled program end to end: a check that can fail (one
 * corrupted weight byte or exchange-table row makes it fail), byte-identical
 * packages, and simulator results independent of the thread count. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "models/models.h"

static const char *MODEL = "zoo:mlp:tokens=24,width=64,hidden=96";

typedef struct built {
    graph *g;
    machine m;
    uint8_t *img;  /* the package file image */
    size_t len;
} built;

static built build(const char *model, const char *mach) {
    built b = {0};
    diag d = {0};
    b.g = models_load(model, &d);
    if (!b.g) fail_msg("%s", d.text);
    assert_int_equal(machine_preset(mach, &b.m), 0);
    package p;
    compile_info ci;
    compile_options co = {.model = model, .search_steps = 8, .quiet = true};
    if (driver_compile(b.g, &b.m, &co, &p, &ci, &d)) fail_msg("%s", d.text);
    /* est_result.resident_bytes bounds what placement needs: the parameters
     * and inputs, all live at the first step, lie above the data base. */
    if (ci.finalist == 0) assert_true(ci.search.est.resident_bytes <= (double)ci.place.tile_bytes);
    compile_info_free(&ci);
    b.img = package_image(&p, &b.len);
    package_free(&p);
    return b;
}

static void built_free(built *b) {
    graph_free(b->g);
    free(b->img);
}

/* Parses img and checks it against the references. */
static bool check_image(const built *b, const uint8_t *img, check_result *r) {
    package p;
    diag d = {0};
    if (package_parse(img, b->len, "mutant.tpk", &p, &d)) fail_msg("%s", d.text);
    check_options co = {.package = "mutant.tpk", .sim = {.quiet = true}};
    if (driver_check(b->g, &p, &co, r, &d)) fail_msg("%s", d.text);
    package_free(&p);
    return r->pass;
}

static void unmodified_package_passes(void **state) {
    (void)state;
    built b = build(MODEL, "tiny");
    check_result r;
    assert_true(check_image(&b, b.img, &r));
    assert_true(r.cosine > 0.9999);
    check_result_free(&r);
    built_free(&b);
}

/* The parsed package tells where weights and fragments sit in the image:
 * find the byte offset of a needle from the parsed structures. */
static size_t find(const uint8_t *hay, size_t n, const void *needle, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0) return i;
    return (size_t)-1;
}

static void corrupted_weight_fails(void **state) {
    (void)state;
    built b = build(MODEL, "tiny");
    package p;
    diag d = {0};
    assert_int_equal(package_parse(b.img, b.len, "x", &p, &d), 0);
    /* The blob is stored verbatim: flip the top exponent bit of one f16
     * weight (byte 1 of the first segment's first element). */
    assert_true(p.segments.n > 0 && p.blob_bytes > 64);
    size_t at = find(b.img, b.len, p.blob, 64);
    assert_true(at != (size_t)-1);
    uint8_t *img = malloc(b.len);
    memcpy(img, b.img, b.len);
    img[at + p.segments.v[0].blob_off + 1] ^= 0x40;
    package_free(&p);
    /* The loader refuses it: the blob's checksum no longer matches. */
    diag e = {0};
    package q;
    assert_int_equal(package_parse(img, b.len, "x.tpk", &q, &e), -1);
    assert_non_null(strstr(e.text, "section BLOB at byte"));
    assert_non_null(strstr(e.text, "is damaged"));
    /* With the checksums forged, the check itself catches it. */
    package_fix_checksums(img, b.len);
    check_result r;
    assert_false(check_image(&b, img, &r));
    check_result_free(&r);
    free(img);
    built_free(&b);
}

/* Moves one receive row's pointer (in the middle tile's first block that
 * receives) by 2 bytes: valid as a program, wrong as a computation. */
static void corrupted_receive_row_fails(void **state) {
    (void)state;
    built b = build(MODEL, "tiny");
    package p;
    diag d = {0};
    assert_int_equal(package_parse(b.img, b.len, "x", &p, &d), 0);
    pkg_xt_format f;
    pkg_xt_format_init(&f, &p.machine, p.tables.ngroups);
    bool moved = false;
    for (uint32_t t = p.machine.tiles / 2; t < p.machine.tiles && !moved; t++)
        for (uint64_t at = p.tables.at[t]; at < p.tables.at[t + 1] && !moved;) {
            pkg_xt_header h;
            pkg_xt_get_header(p.tables.bytes + at, &h);
            if (h.nrecv) {
                uint8_t *row = p.tables.bytes + at + PKG_XT_HEADER_BYTES + h.nsend * f.send_bytes;
                pkg_xt_recv r;
                assert_true(pkg_xt_get_recv(&f, row, &r));
                r.addr += 2;
                pkg_xt_put_recv(&f, row, &r);
                moved = true;
            }
            at += pkg_xt_block_bytes(&f, h.nsend, h.nrecv, h.npatch);
        }
    assert_true(moved);
    size_t n;
    uint8_t *img = package_image(&p, &n);
    assert_int_equal(n, b.len);
    package_free(&p);
    check_result r;
    bool pass = check_image(&b, img, &r);
    assert_false(pass);
    check_result_free(&r);
    free(img);
    built_free(&b);
}

static void packages_are_byte_identical(void **state) {
    (void)state;
    const char *models[] = {MODEL, "zoo:qk:heads=4,queries=17,keys=19,channels=72,qk=fp8,pv=fp8",
                            "zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        built a = build(models[i], "c600"), b = build(models[i], "c600");
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.img, b.img, a.len);
        built_free(&a);
        built_free(&b);
    }
}

/* Outputs and cycles do not depend on the host thread count. */
static void thread_count_does_not_matter(void **state) {
    (void)state;
    built b = build("zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4,precision=fp8", "c600");
    uint64_t cycles[2];
    float *out[2];
    for (int t = 0; t < 2; t++) {
        setenv("TESSEL_THREADS", t ? "2" : "1", 1);
        package p;
        diag d = {0};
        assert_int_equal(package_parse(b.img, b.len, "x", &p, &d), 0);
        int32_t ids[4];
        graph_inputs(b.g, ids, 4);
        float *in = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(b.g, ids[0])->type));
        graph_input_default(b.g, ids[0], 0, in);
        sim_stats st;
        sim_options so = {.quiet = true};
        assert_int_equal(sim_run(&p, &so, &in, &out[t], &st, &d), 0);
        cycles[t] = st.cycles;
        free(in);
        package_free(&p);
    }
    unsetenv("TESSEL_THREADS");
    assert_int_equal(cycles[0], cycles[1]);
    int64_t n = graph_type_numel(&graph_val(b.g, graph_lookup(b.g, "post_ln"))->type);
    assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)n);
    free(out[0]);
    free(out[1]);
    built_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unmodified_package_passes),
        cmocka_unit_test(corrupted_weight_fails),
        cmocka_unit_test(corrupted_receive_row_fails),
        cmocka_unit_test(packages_are_byte_identical),
        cmocka_unit_test(thread_count_does_not_matter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

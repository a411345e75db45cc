/* test_calib.c: measured points are built as one-kernel or one-phase programs and simulated
 * by the simulator's own accounting; skipped points say why; the summary is the median and
 * worst absolute error per kind; a bad file is located. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/calib.h"
#include "sim/sim_kernels.h"

static int run(const char *text, const char *preset, calib_result *r, diag *d) {
    machine m;
    assert_int_equal(machine_preset(preset, &m), 0);
    memset(d, 0, sizeof *d);
    return calib_run_text(text, strlen(text), "points.json", &m, r, d);
}

static const calib_point *find(const calib_result *r, const char *id) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->pts[i].id, id) == 0) return &r->pts[i];
    fail_msg("no point %s", id);
    return NULL;
}

#define POINT(id, kind, shape, dtypes, cycles)                                                           \
    "{\"id\": \"" id "\", \"kind\": \"" kind "\", \"shape\": " shape ", \"dtypes\": " dtypes              \
    ", \"measured_cycles\": " cycles ", \"what_it_includes\": \"-\", \"source\": \"-\", \"confidence\": \"direct\"}"

/* A reduction point costs exactly what the kernel's cycle function and one launch say for the
 * same run: the command uses the simulator, not a formula of its own. */
static void reduce_point_is_the_kernel_cost(void **state) {
    (void)state;
    const char *text = "[" POINT("r", "reduce", "{\"partials\": 6, \"elements\": 2624}", "{\"data\": \"f16\"}", "7218") "]";
    calib_result r;
    diag d;
    assert_int_equal(run(text, "c600", &r, &d), 0);
    machine m;
    machine_preset("c600", &m);
    kernel_run k = {.kernel = KERNEL_K_REDUCE, .acc = DT_F16, .dt = {DT_F16, DT_F16}, .n = {6, 2624, 0, 1}};
    k.stride[1][0] = 2624 * 2;
    bool il[KERNEL_MAX_OPERANDS] = {false, true}; /* out ordinary, partials interleaved, as built */
    assert_true(r.pts[0].built);
    assert_true(r.pts[0].simulated == (double)(m.launch_cycles + kernel_run_cycles(&k, &m, il)));
    assert_int_equal(r.nkinds, 1);
    assert_int_equal(r.kinds[0].points, 1);
    assert_true(fabs(r.kinds[0].median_abs_error - fabs(r.pts[0].simulated / 7218.0 - 1)) < 1e-12);
    calib_result_free(&r);
}

/* An empty phase measures the per-phase overhead; patch words add to it inside a repeat. */
static void sync_points_are_the_phase_overhead(void **state) {
    (void)state;
    const char *text = "[" POINT("s0", "sync", "{\"phase\": 3}", "{\"data\": \"none\"}", "229") ",\n" POINT(
        "s1", "sync", "{\"phase\": 27, \"repeat_patch_max_words\": 82}", "{\"data\": \"none\"}", "2049") "]";
    calib_result r;
    diag d;
    assert_int_equal(run(text, "c600", &r, &d), 0);
    machine m;
    machine_preset("c600", &m);
    assert_true(r.pts[0].built && r.pts[1].built);
    assert_true(r.pts[0].simulated == (double)m.sync_cycles);
    assert_true(r.pts[1].simulated == (double)(m.sync_cycles + 82 * m.exchange_patch_cycles));
    calib_result_free(&r);
}

/* Native GEMM output (the AMP's panel order) is never dearer than row-major output. */
static void gemm_native_and_packed(void **state) {
    (void)state;
    const char *text = "[" POINT("n", "gemm", "{\"rows\": 128, \"k\": 64, \"cols\": 64}",
                                 "{\"a\": \"f16\", \"b\": \"f16\", \"acc\": \"f16\", \"out\": \"f16\"}", "11000") ",\n"
                        POINT("p", "gemm", "{\"rows\": 128, \"k\": 64, \"cols\": 64, \"output\": \"packed\"}",
                              "{\"a\": \"f16\", \"b\": \"f16\", \"acc\": \"f16\", \"out\": \"f16\"}", "19872") "]";
    calib_result r;
    diag d;
    assert_int_equal(run(text, "c600", &r, &d), 0);
    assert_true(r.pts[0].built && r.pts[1].built);
    assert_true(r.pts[0].simulated <= r.pts[1].simulated);
    assert_int_equal(r.kinds[0].points, 2);
    double e0 = fabs(r.pts[0].simulated / 11000 - 1), e1 = fabs(r.pts[1].simulated / 19872 - 1);
    assert_true(fabs(r.kinds[0].median_abs_error - 0.5 * (e0 + e1)) < 1e-12);
    assert_true(r.kinds[0].worst_abs_error == (e0 > e1 ? e0 : e1));
    calib_result_free(&r);
    /* mk2 has no 8-bit AMP path: an FP8 point is skipped with the reason, not summarised. */
    const char *f8 = "[" POINT("q", "gemm", "{\"rows\": 244, \"k\": 128, \"cols\": 64}",
                               "{\"a\": \"f143\", \"b\": \"f143\", \"acc\": \"f16\", \"out\": \"f16\"}", "18576") "]";
    assert_int_equal(run(f8, "mk2", &r, &d), 0);
    assert_false(r.pts[0].built);
    assert_non_null(strstr(r.pts[0].why, "cannot take"));
    assert_int_equal(r.kinds[0].points, 0);
    calib_result_free(&r);
}

/* Points tessel cannot build are kept with the reason; older kernels are simulated but not
 * summarised. */
static void skipped_and_superseded(void **state) {
    (void)state;
    const char *text = "[" POINT("w", "workload", "{\"model\": \"m\"}", "{\"weights\": \"f143\"}", "151998") ",\n"
                        POINT("b", "ewise", "{\"op\": \"bias_gelu\", \"elements\": 98}", "{\"data\": \"f16\"}", "1170") ",\n"
                        POINT("ln-old", "layer_norm", "{\"rows\": 1, \"cols\": 1728}", "{\"data\": \"f16\"}", "13338") ",\n"
                        POINT("x", "exchange", "{\"phase\": 6}", "{\"data\": \"f16\"}", "33780") "]";
    calib_result r;
    diag d;
    assert_int_equal(run(text, "c600", &r, &d), 0);
    assert_false(find(&r, "w")->built);
    assert_non_null(strstr(find(&r, "w")->why, "whole program"));
    assert_false(find(&r, "b")->built);
    assert_non_null(strstr(find(&r, "b")->why, "bias_gelu"));
    assert_false(find(&r, "x")->built);
    assert_non_null(strstr(find(&r, "x")->why, "per-tile traffic"));
    const calib_point *ln = find(&r, "ln-old");
    assert_true(ln->built && ln->superseded && ln->simulated > 0);
    for (int k = 0; k < r.nkinds; k++) assert_int_equal(r.kinds[k].points, 0);
    calib_result_free(&r);
}

/* Errors name the file and the line of the fault. */
static void errors_are_located(void **state) {
    (void)state;
    calib_result r;
    diag d;
    assert_int_equal(run("[\n{\"id\": \"a\",\n \"kind\": }\n]", "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "points.json:3:"));
    assert_int_equal(run("{\"id\": 1}", "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "points.json:1:1: error: a points file is a JSON array"));
    const char *typo = "[\n{\"id\": \"a\", \"kind\": \"reduce\",\n \"shape\": {\"partials\": 2, \"elements\": 8},\n"
                       " \"measured_cycles\": 10,\n \"mesured\": 3}\n]";
    assert_int_equal(run(typo, "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "points.json:5:2: error: unknown field 'mesured' in point 'a'"));
    /* A shape field it does not know (a newer file's, or a typo) skips that
     * point with the reason; the others are simulated. */
    const char *shape = "[{\"id\": \"a\", \"kind\": \"reduce\", \"shape\": {\"partials\": 2, \"elemnts\": 8}, "
                        "\"measured_cycles\": 10},\n"
                        " {\"id\": \"b\", \"kind\": \"sync\", \"shape\": {}, \"dtypes\": {\"colour\": \"f16\"}, \"measured_cycles\": 10},\n"
                        " {\"id\": \"c\", \"kind\": \"reduce\", \"shape\": {\"partials\": 2, \"elements\": 8}, "
                        "\"dtypes\": {\"data\": \"f16\"}, \"measured_cycles\": 10}]";
    assert_int_equal(run(shape, "c600", &r, &d), 0);
    assert_int_equal(r.n, 3);
    assert_false(r.pts[0].built);
    assert_string_equal(r.pts[0].why, "unknown shape field 'elemnts' (did you mean 'elements'?): skipped");
    assert_false(r.pts[1].built);
    assert_string_equal(r.pts[1].why, "unknown dtypes field 'colour': skipped");
    assert_true(r.pts[2].built);
    calib_result_free(&r);
    const char *neg = "[{\"id\": \"a\", \"kind\": \"sync\", \"shape\": {}, \"measured_cycles\": -4}]";
    assert_int_equal(run(neg, "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "'measured_cycles' must be a positive number"));
    assert_int_equal(run("[{\"id\": \"a\", \"kind\": \"sync\", \"shape\": {}, \"measured_cycles\": 1}, 7]", "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "point 2 is not an object"));
    assert_int_equal(run("[{\"kind\": \"sync\"}]", "c600", &r, &d), -1);
    assert_non_null(strstr(d.text, "needs a string 'id' and 'kind'"));
    memset(&d, 0, sizeof d);
    assert_int_equal(calib_run_file("/nonexistent/points.json", NULL, &r, &d), -1);
    assert_non_null(strstr(d.text, "/nonexistent/points.json"));
}

/* The shared file runs end to end when it is there (the source tree's copy otherwise). */
static void shared_file_runs(void **state) {
    (void)state;
    const char *root = getenv("TESSEL_SOURCE_DIR");
    if (!root) skip();
    char path[4096];
    snprintf(path, sizeof path, "%s/bench/calibrate.d/hardware-points.json", root);
    machine m;
    machine_preset("c600", &m);
    calib_result r;
    diag d = {0};
    assert_int_equal(calib_run_file(path, &m, &r, &d), 0);
    assert_true(r.n >= 100);
    int built = 0;
    for (int i = 0; i < r.n; i++) {
        built += r.pts[i].built;
        assert_true(r.pts[i].built ? r.pts[i].simulated > 0 : r.pts[i].why[0] != 0);
    }
    assert_true(built >= 60);
    calib_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reduce_point_is_the_kernel_cost),
        cmocka_unit_test(sync_points_are_the_phase_overhead),
        cmocka_unit_test(gemm_native_and_packed),
        cmocka_unit_test(skipped_and_superseded),
        cmocka_unit_test(errors_are_located),
        cmocka_unit_test(shared_file_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

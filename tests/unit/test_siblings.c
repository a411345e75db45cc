/* Sibling matmuls joined (src/graph/siblings.c): the joined parameter's data
 * is its pieces side by side, and the joined graph computes what the model
 * does in the FP32 reference (to its last bits: BLAS may sum a wider
 * product in another order; the plan-exact checks in tests/lit/fuse/siblings*
 * hold the compiled programs to the bit). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "mid/mid.h"

/* A [rows, 6] parameter of normal x3 (seed 9), zeros x2, ones x1: every
 * window of it is the pieces' own values, row by row. */
static void concat_init_values(void **state) {
    (void)state;
    enum { ROWS = 5, W = 6 };
    graph *g = graph_new("t", "t.tsl");
    graph_init cat[3] = {{.kind = INIT_NORMAL, .mean = 0.5, .std = 2.0, .seed = 9}, {.kind = INIT_ZEROS}, {.kind = INIT_ONES}};
    int64_t width[3] = {3, 2, 1};
    graph_type t = {.dtype = DT_F32, .rank = 2, .dim = {ROWS, W}};
    int32_t p = graph_add_param(g, "p", t, (graph_init){.kind = INIT_CONCAT, .cat = cat, .width = width, .ncat = 3});
    float normal[ROWS * 3], all[ROWS * W], win[ROWS * W];
    graph_normal_fill(9, 0.5, 2.0, normal, ROWS * 3);
    diag d = {0};
    assert_int_equal(graph_param_values(g, p, false, all, &d), 0);
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < 3; c++) assert_true(all[r * W + c] == normal[r * 3 + c]);
        assert_true(all[r * W + 3] == 0.0f && all[r * W + 4] == 0.0f && all[r * W + 5] == 1.0f);
    }
    for (int first = 0; first < ROWS * W; first += 5)
        for (int n = 0; first + n <= ROWS * W; n += 7) {
            assert_int_equal(graph_param_values_at(g, p, false, first, n, win, &d), 0);
            assert_memory_equal(win, all + first, sizeof(float) * (size_t)n);
        }
    graph_free(g);
}

/* The same at a size past a million values: every window, across any row
 * boundary, is still the pieces' rows. */
static void concat_init_values_blocks(void **state) {
    (void)state;
    enum { ROWS = 1100, W = 1000, W0 = 601 };
    graph *g = graph_new("t", "t.tsl");
    graph_init cat[2] = {{.kind = INIT_NORMAL, .mean = 0.0, .std = 1.0, .seed = 11},
                         {.kind = INIT_NORMAL, .mean = 1.0, .std = 0.5, .seed = 12}};
    int64_t width[2] = {W0, W - W0};
    graph_type t = {.dtype = DT_F32, .rank = 2, .dim = {ROWS, W}};
    int32_t p = graph_add_param(g, "p", t, (graph_init){.kind = INIT_CONCAT, .cat = cat, .width = width, .ncat = 2});
    float *a = malloc(sizeof(float) * ROWS * W0), *b = malloc(sizeof(float) * ROWS * (W - W0));
    float *all = malloc(sizeof(float) * ROWS * W), *win = malloc(sizeof(float) * ROWS * W);
    graph_normal_fill(11, 0.0, 1.0, a, ROWS * W0);
    graph_normal_fill(12, 1.0, 0.5, b, ROWS * (W - W0));
    diag d = {0};
    assert_int_equal(graph_param_values(g, p, false, all, &d), 0);
    int64_t differ = 0;
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < W; c++) differ += all[r * W + c] != (c < W0 ? a[r * W0 + c] : b[r * (W - W0) + c - W0]);
    assert_int_equal(differ, 0);
    const int64_t windows[][2] = {{0, ROWS * W}, {1048 * W - 3, 7}, {1000 * W + 17, 90 * W}, {5, 1047 * W}, {ROWS * W - 1, 1}};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        assert_int_equal(graph_param_values_at(g, p, false, windows[i][0], windows[i][1], win, &d), 0);
        assert_memory_equal(win, all + windows[i][0], sizeof(float) * (size_t)windows[i][1]);
    }
    free(a);
    free(b);
    free(all);
    free(win);
    graph_free(g);
}

static const char *MODEL = "graph sib\n"
                           "input %x : f32[5, 8]\n"
                           "param %wa : f32[8, 3] = normal(0.0, 1.0, seed = 1)\n"
                           "param %wb : f32[8, 4] = normal(0.0, 1.0, seed = 2)\n"
                           "param %ba : f32[3] = normal(0.0, 1.0, seed = 3)\n"
                           "param %bb : f32[4] = ones\n"
                           "param %wc : f32[8, 2] = normal(0.0, 1.0, seed = 4)\n"
                           "%a = matmul(%x, %wa) : f32[5, 3]\n"
                           "%ab = add(%a, %ba) : f32[5, 3]\n"
                           "%b = matmul(%x, %wb) : f32[5, 4]\n"
                           "%bbias = add(%b, %bb) : f32[5, 4]\n"
                           "%c = matmul(%x, %wc) : f32[5, 2]\n"
                           "%s = concat(%ab, %bbias, %c) {axis = 1} : f32[5, 9]\n"
                           "output %s\n";

static void assert_close(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])));
}

static float *run(const graph *g, const float *x) {
    float *in[1] = {(float *)x}, *out[1] = {NULL};
    ref_options o = {.quiet = true};
    diag d = {0};
    assert_int_equal(ref_run(g, &o, in, out, &d), 0);
    return out[0];
}

/* Three matmuls of x: one group, biases apart (c has none); the joined
 * graph's output is the model's, bit for bit. */
static void joined_graph_computes_the_model(void **state) {
    (void)state;
    diag d = {0};
    graph *g = graph_parse("sib.tsl", MODEL, strlen(MODEL), &d);
    assert_non_null(g);
    sib_plan p;
    graph_siblings_analyze(g, &p);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.v[0].n, 3);
    assert_null(p.v[0].add);
    graph *j = graph_siblings_apply(g, &p, &d);
    assert_non_null(j);
    assert_string_equal(p.v[0].name, "a.b.c");
    assert_true(graph_lookup(j, "wa") < 0 && graph_lookup(j, "wa.wb.wc") >= 0);
    float x[40];
    graph_normal_fill(7, 0.0, 1.0, x, 40);
    float *want = run(g, x), *got = run(j, x);
    assert_close(got, want, 45);
    free(want), free(got);
    graph_free(j);
    graph_siblings_free(&p);
    graph_free(g);
}

/* Without c, a and b join with their biases. A weight read twice stays. */
static void biases_join_and_shared_weights_stay(void **state) {
    (void)state;
    const char *text = "graph sib\n"
                       "input %x : f32[5, 8]\n"
                       "param %wa : f32[8, 3] = normal(0.0, 1.0, seed = 1)\n"
                       "param %wb : f32[8, 4] = normal(0.0, 1.0, seed = 2)\n"
                       "param %ba : f32[3] = normal(0.0, 1.0, seed = 3)\n"
                       "param %bb : f32[4] = ones\n"
                       "param %wc : f32[8, 8] = normal(0.0, 1.0, seed = 4)\n"
                       "%a = matmul(%x, %wa) : f32[5, 3]\n"
                       "%ab = add(%a, %ba) : f32[5, 3]\n"
                       "%b = matmul(%x, %wb) : f32[5, 4]\n"
                       "%bbias = add(%b, %bb) : f32[5, 4]\n"
                       "%c = matmul(%x, %wc) : f32[5, 8]\n"
                       "%c2 = matmul(%c, %wc) : f32[5, 8]\n"
                       "%s = concat(%ab, %bbias, %c2) {axis = 1} : f32[5, 15]\n"
                       "output %s\n";
    diag d = {0};
    graph *g = graph_parse("sib.tsl", text, strlen(text), &d);
    assert_non_null(g);
    sib_plan p;
    graph_siblings_analyze(g, &p);
    assert_int_equal(p.n, 1);
    assert_int_equal(p.v[0].n, 2);
    assert_non_null(p.v[0].add);
    graph *j = graph_siblings_apply(g, &p, &d);
    assert_non_null(j);
    assert_true(graph_lookup(j, "ba.bb") >= 0 && graph_lookup(j, "wc") >= 0);
    float x[40];
    graph_normal_fill(8, 0.0, 1.0, x, 40);
    float *want = run(g, x), *got = run(j, x);
    assert_close(got, want, 75);
    free(want), free(got);
    graph_free(j);
    graph_siblings_free(&p);
    graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(concat_init_values),
        cmocka_unit_test(concat_init_values_blocks),
        cmocka_unit_test(joined_graph_computes_the_model),
        cmocka_unit_test(biases_join_and_shared_weights_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_ref.c: the FP32 reference interpreter against computations written
 * out independently here (naive loops, hand-evaluated formulas). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"

/* Runs text with the given input data (NULL: seeded defaults) and returns
 * its outputs; the graph is kept in *gp for shapes. */
static float **run(const char *text, float **inputs_given, bool strip, graph **gp) {
    diag d = {0};
    graph *g = graph_parse("t.tsl", text, strlen(text), &d);
    if (!g) fail_msg("%s", d.text);
    int32_t ids[64], nin = graph_inputs(g, ids, 64), nout = graph_outputs(g, NULL, 0);
    float **in = calloc(64, sizeof(float *));
    for (int32_t k = 0; k < nin; k++) {
        int64_t n = graph_type_numel(&graph_val(g, ids[k])->type);
        in[k] = malloc(sizeof(float) * (size_t)n);
        if (inputs_given && inputs_given[k]) memcpy(in[k], inputs_given[k], sizeof(float) * (size_t)n);
        else graph_input_default(g, ids[k], k, in[k]);
    }
    float **out = calloc((size_t)nout + 1, sizeof(float *));
    ref_options o = {.strip_precision = strip, .quiet = true};
    if (ref_run(g, &o, in, out, &d)) fail_msg("%s", d.text);
    if (inputs_given)
        for (int32_t k = 0; k < nin; k++)
            if (!inputs_given[k]) inputs_given[k] = in[k], in[k] = NULL;
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    free(in);
    *gp = g;
    return out;
}

static void free_out(graph *g, float **out) {
    int32_t n = graph_outputs(g, NULL, 0);
    for (int32_t i = 0; i < n; i++) free(out[i]);
    free(out);
    graph_free(g);
}

static void near(float got, double want, double tol, const char *what, int i) {
    if (!(fabs(got - want) <= tol * (1 + fabs(want)))) fail_msg("%s[%d]: got %.9g want %.9g", what, i, got, want);
}

static void matmul_broadcast_and_transposes(void **state) {
    (void)state;
    graph *g;
    float *in[2] = {NULL, NULL};
    float **out = run("graph g\ninput %a : f32[2, 1, 3, 4]\ninput %b : f32[3, 5, 4]\n"
                      "%c = matmul(%a, %b) {transpose_b = true} : f32[2, 3, 3, 5]\n"
                      "%d = matmul(%a, %a) {transpose_a = true} : f32[2, 1, 4, 4]\noutput %c, %d\n",
                      in, false, &g);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 5; n++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++) s += (double)in[0][(i * 3 + m) * 4 + k] * in[1][(j * 5 + n) * 4 + k];
                    near(out[0][((i * 3 + j) * 3 + m) * 5 + n], s, 1e-5, "c", n);
                }
    for (int i = 0; i < 2; i++)
        for (int m = 0; m < 4; m++)
            for (int n = 0; n < 4; n++) {
                double s = 0;
                for (int k = 0; k < 3; k++) s += (double)in[0][(i * 3 + k) * 4 + m] * in[0][(i * 3 + k) * 4 + n];
                near(out[1][(i * 4 + m) * 4 + n], s, 1e-5, "d", n);
            }
    free(in[0]);
    free(in[1]);
    free_out(g, out);
}

static void elementwise_broadcasting(void **state) {
    (void)state;
    graph *g;
    float *in[2] = {NULL, NULL};
    float **out = run("graph g\ninput %a : f32[2, 3, 4]\ninput %b : f32[3, 1]\n%s = add(%a, %b) : f32[2, 3, 4]\n"
                      "%d = sub(%b, %a) : f32[2, 3, 4]\n%m = mul(%a, %a) : f32[2, 3, 4]\noutput %s, %d, %m\n",
                      in, false, &g);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                int e = (i * 3 + j) * 4 + k;
                float a = in[0][e], b = in[1][j];
                assert_true(out[0][e] == a + b);
                assert_true(out[1][e] == b - a);
                assert_true(out[2][e] == a * a);
            }
    free(in[0]);
    free(in[1]);
    free_out(g, out);
}

static void softmax_layer_norm_gelu(void **state) {
    (void)state;
    graph *g;
    float *in[3] = {NULL, NULL, NULL};
    float **out = run("graph g\ninput %x : f32[2, 3, 5]\ninput %ga : f32[5]\ninput %be : f32[5]\n"
                      "%s = softmax(%x) {axis = 1} : f32[2, 3, 5]\n"
                      "%n = layer_norm(%x, %ga, %be) {eps = 0.001} : f32[2, 3, 5]\n"
                      "%e = gelu(%x) : f32[2, 3, 5]\n%gg = gelu_grad(%x, %x) : f32[2, 3, 5]\noutput %s, %n, %e, %gg\n",
                      in, false, &g);
    const float *x = in[0];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 5; k++) {
            double mx = -1e30, sum = 0;
            for (int j = 0; j < 3; j++) mx = fmax(mx, x[(i * 3 + j) * 5 + k]);
            for (int j = 0; j < 3; j++) sum += exp(x[(i * 3 + j) * 5 + k] - mx);
            for (int j = 0; j < 3; j++) near(out[0][(i * 3 + j) * 5 + k], exp(x[(i * 3 + j) * 5 + k] - mx) / sum, 1e-6, "softmax", j);
        }
    for (int r = 0; r < 6; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < 5; c++) mean += x[r * 5 + c] / 5.0;
        for (int c = 0; c < 5; c++) var += (x[r * 5 + c] - mean) * (x[r * 5 + c] - mean) / 5.0;
        for (int c = 0; c < 5; c++)
            near(out[1][r * 5 + c], (x[r * 5 + c] - mean) / sqrt(var + 0.001) * in[1][c] + in[2][c], 1e-5, "layer_norm", c);
    }
    for (int e = 0; e < 30; e++) {
        double v = x[e], t = tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v));
        near(out[2][e], 0.5 * v * (1 + t), 1e-6, "gelu", e);
        /* The derivative by central differences of the same formula. */
        double h = 1e-5, vp = v + h, vm = v - h;
        double gp = 0.5 * vp * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (vp + 0.044715 * vp * vp * vp)));
        double gm = 0.5 * vm * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (vm + 0.044715 * vm * vm * vm)));
        near(out[3][e], (gp - gm) / (2 * h) * v, 1e-4, "gelu_grad", e);
    }
    free(in[0]);
    free(in[1]);
    free(in[2]);
    free_out(g, out);
    /* Two values worth knowing by heart. */
    float one[1] = {1.0f}, minus[1] = {-1.0f};
    float *in1[1] = {one};
    out = run("graph g\ninput %x : f32[1]\n%e = gelu(%x) : f32[1]\noutput %e\n", in1, false, &g);
    near(out[0][0], 0.8411919906082768, 1e-6, "gelu(1)", 0);
    free_out(g, out);
    in1[0] = minus;
    out = run("graph g\ninput %x : f32[1]\n%e = gelu(%x) : f32[1]\noutput %e\n", in1, false, &g);
    near(out[0][0], -0.15880800939172324, 1e-6, "gelu(-1)", 0);
    free_out(g, out);
}

/* Layout ops against explicit index arithmetic. */
static void layout_ops(void **state) {
    (void)state;
    graph *g;
    float a[24];
    for (int i = 0; i < 24; i++) a[i] = (float)i;
    float *in[1] = {a};
    float **out = run("graph g\ninput %a : f32[2, 3, 4]\n"
                      "%t = transpose(%a) {perm = [2, 0, 1]} : f32[4, 2, 3]\n"
                      "%s = slice(%a) {start = [1, 0, 1], end = [2, 3, 3]} : f32[1, 3, 2]\n"
                      "%p = pad(%a) {low = [0, 1, 0], high = [1, 0, 2], value = -1.5} : f32[3, 4, 6]\n"
                      "%c = concat(%a, %a) {axis = 1} : f32[2, 6, 4]\n"
                      "%r = reduce_sum(%a) {axes = [0, 2], keepdims = true} : f32[1, 3, 1]\n"
                      "%q = reduce_sum(%a) {axes = [1]} : f32[2, 4]\n"
                      "%sc = scale(%a) {by = 0.5} : f32[2, 3, 4]\n"
                      "output %t, %s, %p, %c, %r, %q, %sc\n",
                      in, false, &g);
#define A(i, j, k) a[((i) * 3 + (j)) * 4 + (k)]
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) assert_true(out[0][(k * 2 + i) * 3 + j] == A(i, j, k));
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 2; k++) assert_true(out[1][j * 2 + k] == A(1, j, k + 1));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 6; k++) {
                bool inside = i < 2 && j >= 1 && k < 4;
                assert_true(out[2][(i * 4 + j) * 6 + k] == (inside ? A(i, j - 1, k) : -1.5f));
            }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            for (int k = 0; k < 4; k++) assert_true(out[3][(i * 6 + j) * 4 + k] == A(i, j % 3, k));
    for (int j = 0; j < 3; j++) {
        float s = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) s += A(i, j, k);
        assert_true(out[4][j] == s);
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) assert_true(out[5][i * 4 + k] == A(i, 0, k) + A(i, 1, k) + A(i, 2, k));
    for (int e = 0; e < 24; e++) assert_true(out[6][e] == a[e] * 0.5f);
#undef A
    free_out(g, out);
}

static void casts_round_and_strip(void **state) {
    (void)state;
    graph *g;
    float x[5] = {1.0f / 3, 300.0f, -0.001f, 0.1f, 500.0f};
    float *in[1] = {x};
    const char *text = "graph g\ninput %x : f32[5]\n%h = cast(%x) {to = f16} : f16[5]\n"
                       "%q = cast(%x) {to = f143, scale = -2} : f143[5]\n"
                       "%u = cast(%x) {to = f8e4m3, saturate = false} : f8e4m3[5]\noutput %h, %q, %u\n";
    float **out = run(text, in, false, &g);
    /* Hand-rounded: 1/3 in f16 is 0x3555. */
    assert_true(out[0][0] == 0.333251953125f && out[0][1] == 300.0f);
    /* f143 at scale -2 stores x * 4: 1.333 -> 1.375, 1.6 -> 1.625 (3 mantissa
     * bits), -0.004 -> -4 * 2^-10 (subnormal), and saturates at 240 / 4 = 60. */
    float want_q[5] = {0.34375f, 60.0f, -0.0009765625f, 0.1015625f, 60.0f};
    /* f8e4m3 unsaturated: 300 -> 288, -0.001 -> -2^-9, 500 overflows to NaN. */
    float want_u[4] = {0.34375f, 288.0f, -0.001953125f, 0.1015625f};
    for (int i = 0; i < 5; i++) assert_true(out[1][i] == want_q[i]);
    for (int i = 0; i < 4; i++) assert_true(out[2][i] == want_u[i]);
    assert_true(isnan(out[2][4]));
    free_out(g, out);
    out = run(text, in, true, &g);
    for (int i = 0; i < 5; i++) {
        assert_true(out[0][i] == x[i]);
        assert_true(out[1][i] == x[i]);
        assert_true(out[2][i] == x[i]);
    }
    free_out(g, out);
}

/* An 8-bit tensor holds codes, so padding one holds the code nearest the pad
 * value (at the tensor's scale), not the raw attribute value. */
static void pad_of_8bit_rounds_its_value(void **state) {
    (void)state;
    graph *g;
    float x[2] = {1.0f, -2.0f};
    float *in[1] = {x};
    const char *text = "graph g\ninput %x : f143[2] {scale = -2}\n"
                       "%p = pad(%x) {low = [1], high = [1], value = 0.3} : f143[4]\n"
                       "%s = pad(%x) {low = [0], high = [1], value = 100.0} : f143[3]\noutput %p, %s\n";
    float **out = run(text, in, false, &g);
    /* 0.3 * 4 = 1.2 -> 1.25 (3 mantissa bits) -> 0.3125; 100 saturates at 240 / 4. */
    float want_p[4] = {0.3125f, 1.0f, -2.0f, 0.3125f}, want_s[3] = {1.0f, -2.0f, 60.0f};
    for (int i = 0; i < 4; i++) near(out[0][i], want_p[i], 0, "p", i);
    for (int i = 0; i < 3; i++) near(out[1][i], want_s[i], 0, "s", i);
    free_out(g, out);
    out = run(text, in, true, &g);  /* stripped: no rounding anywhere */
    near(out[0][0], 0.3f, 1e-7, "p", 0);
    near(out[1][2], 100.0f, 0, "s", 2);
    free_out(g, out);
}

static void optimizer_ops_follow_pytorch(void **state) {
    (void)state;
    graph *g;
    float w[3] = {0.5f, -1.0f, 2.0f}, gr[3] = {0.1f, 0.2f, -0.3f}, m[3] = {0.01f, 0.0f, -0.02f}, v[3] = {0.001f, 0.0f, 0.004f};
    float *in[4] = {w, gr, m, v};
    float **out = run("graph g\ninput %w : f32[3]\ninput %g : f32[3]\ninput %m : f32[3]\ninput %v : f32[3]\n"
                      "%w1, %m1, %v1 = adamw(%w, %g, %m, %v) {lr = 0.01, beta1 = 0.8, beta2 = 0.95, eps = 0.001, "
                      "weight_decay = 0.1, step = 3} : f32[3], f32[3], f32[3]\n"
                      "%w2, %b2 = sgd(%w, %g, %m) {lr = 0.1, momentum = 0.9, weight_decay = 0.01} : f32[3], f32[3]\n"
                      "%w3 = sgd(%w, %g) {lr = 0.1} : f32[3]\n"
                      "%c1, %c2 = global_norm_clip(%g, %w) {max_norm = 1.0} : f32[3], f32[3]\n"
                      "output %w1, %m1, %v1, %w2, %b2, %w3, %c1, %c2\n",
                      in, false, &g);
    double norm = 0;
    for (int i = 0; i < 3; i++) norm += (double)gr[i] * gr[i] + (double)w[i] * w[i];
    norm = sqrt(norm);
    for (int i = 0; i < 3; i++) {
        /* torch.optim.AdamW, one step at t = 3. */
        double mm = 0.8 * m[i] + 0.2 * gr[i], vv = 0.95 * v[i] + 0.05 * gr[i] * gr[i];
        double ww = w[i] * (1 - 0.01 * 0.1) - (0.01 / (1 - pow(0.8, 3))) * mm / (sqrt(vv) / sqrt(1 - pow(0.95, 3)) + 0.001);
        near(out[0][i], ww, 1e-6, "adamw w", i);
        near(out[1][i], mm, 1e-6, "adamw m", i);
        near(out[2][i], vv, 1e-6, "adamw v", i);
        /* torch.optim.SGD with momentum and weight decay. */
        double gg = gr[i] + 0.01 * w[i], buf = 0.9 * m[i] + gg;
        near(out[3][i], w[i] - 0.1 * buf, 1e-6, "sgd w", i);
        near(out[4][i], buf, 1e-6, "sgd buf", i);
        near(out[5][i], w[i] - 0.1 * gr[i], 1e-6, "sgd plain", i);
        double c = fmin(1.0, 1.0 / (norm + 1e-6));
        near(out[6][i], gr[i] * c, 1e-6, "clip g", i);
        near(out[7][i], w[i] * c, 1e-6, "clip w", i);
    }
    free_out(g, out);
}

/* A repeat adds slice i of a stack to its carried value in iteration i,
 * and reads an outer value; nested repeats multiply iterations. */
static void repeat_semantics(void **state) {
    (void)state;
    graph *g;
    float x[2] = {1.0f, 2.0f}, s[6] = {10, 20, 30, 40, 50, 60}, c[2] = {0.5f, 0.25f};
    float *in[3] = {x, s, c};
    float **out = run("graph g\ninput %x : f32[2]\ninput %s : f32[3, 2]\ninput %c : f32[2]\n"
                      "%y, %z = repeat 3 carry(%h = %x, %k = %c) slice(%sl = %s) {\n"
                      "  %h1 = add(%h, %sl) : f32[2]\n"
                      "  %h2 = add(%h1, %c) : f32[2]\n"
                      "  %in = repeat 2 carry(%j = %k) {\n"
                      "    %j2 = add(%j, %j) : f32[2]\n"
                      "    yield %j2\n"
                      "  }\n"
                      "  yield %h2, %in\n"
                      "}\n"
                      "output %y, %z, %x\n",
                      in, false, &g);
    for (int i = 0; i < 2; i++) {
        assert_true(out[0][i] == x[i] + s[i] + s[2 + i] + s[4 + i] + 3 * c[i]);
        assert_true(out[1][i] == c[i] * 64); /* doubled 2 x 3 times */
        assert_true(out[2][i] == x[i]);      /* the input is untouched */
    }
    free_out(g, out);
}

/* Values large enough for ref.c to keep their buffers as spares (256 KiB
 * and up): every iteration's layers, sums and products take the buffers the
 * one before gave up, and the result is still each iteration's arithmetic. */
static void spares_reused(void **state) {
    (void)state;
    enum { N = 70000, L = 4 };
    char text[1024];
    snprintf(text, sizeof text,
             "graph g\ninput %%x : f32[%d]\n"
             "param %%w : f32[%d, %d] = normal(0.0, 1.0, seed = 7)\n"
             "param %%u : f32[%d, %d] = normal(1.0, 0.25, seed = 8)\n"
             "%%y = repeat %d carry(%%h = %%x) slice(%%wl = %%w, %%ul = %%u) {\n"
             "  %%h1 = add(%%h, %%wl) : f32[%d]\n"
             "  %%h2 = mul(%%h1, %%ul) : f32[%d]\n"
             "  yield %%h2\n"
             "}\n"
             "%%z = add(%%y, %%x) : f32[%d]\n"
             "output %%y, %%z\n",
             N, L, N, L, N, L, N, N, N);
    graph *g;
    float *x = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * L * N), *u = malloc(sizeof(float) * L * N);
    graph_normal_fill(3, 0.0, 1.0, x, N);
    float *in[1] = {x};
    float **out = run(text, in, false, &g);
    diag d = {0};
    assert_int_equal(graph_param_values(g, graph_val(g, graph_lookup(g, "w"))->def, false, w, &d), 0);
    assert_int_equal(graph_param_values(g, graph_val(g, graph_lookup(g, "u"))->def, false, u, &d), 0);
    int64_t differ = 0;
    for (int64_t i = 0; i < N; i++) {
        float h = x[i];
        for (int l = 0; l < L; l++) h = (h + w[l * N + i]) * u[l * N + i];
        differ += out[0][i] != h || out[1][i] != h + x[i];
    }
    assert_int_equal(differ, 0);
    free_out(g, out);
    free(x);
    free(w);
    free(u);
}

/* A stacked parameter only repeats slice is made one iteration's layer at a
 * time (never whole): each iteration reads its own layer, as when the whole
 * stack is made first (here it is, being an output too). */
static void stacked_params_streamed(void **state) {
    (void)state;
    const char *body = "graph g\ninput %x : f32[5]\n"
                       "param %w : f32[3, 5] = normal(0.0, 1.0, seed = 7)\n"
                       "param %u : f32[3, 5] = normal(0.0, 1.0, seed = 8)\n"
                       "%y = repeat 3 carry(%h = %x) slice(%wl = %w, %ul = %u) {\n"
                       "  %h1 = add(%h, %wl) : f32[5]\n"
                       "  yield %h1\n"
                       "}\n";
    char streamed[1024], whole[1024];
    snprintf(streamed, sizeof streamed, "%soutput %%y\n", body);
    snprintf(whole, sizeof whole, "%soutput %%y, %%w\n", body);
    graph *g1, *g2;
    float x[5] = {1, 2, 3, 4, 5};
    float *in1[1] = {x}, *in2[1] = {x};
    float **a = run(streamed, in1, false, &g1), **b = run(whole, in2, false, &g2);
    float w[15];
    diag d = {0};
    assert_int_equal(graph_param_values(g1, graph_val(g1, graph_lookup(g1, "w"))->def, false, w, &d), 0);
    for (int i = 0; i < 5; i++) {
        float want = x[i];
        for (int l = 0; l < 3; l++) want = want + w[l * 5 + i];
        assert_true(a[0][i] == want);
        assert_true(b[0][i] == want);
    }
    assert_memory_equal(b[1], w, sizeof w);
    free_out(g1, a);
    free_out(g2, b);
}

/* The splitmix64 finaliser (docs/ir.md's mix). */
static uint64_t splitmix_finish(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void param_initializers(void **state) {
    (void)state;
    /* normal(): the stream is counter-based; any window equals the whole. */
    enum { N = 1 << 20 };
    float *all = malloc(sizeof(float) * N), *part = malloc(sizeof(float) * 100);
    graph_normal_fill(42, 0.0, 1.0, all, N);
    graph_normal_fill_at(42, 0.0, 1.0, 777, part, 100);
    assert_memory_equal(all + 777, part, sizeof(float) * 100);
    double mean = 0, sq = 0;
    for (int i = 0; i < N; i++) mean += all[i] / N;
    for (int i = 0; i < N; i++) sq += (all[i] - mean) * (all[i] - mean) / N;
    assert_true(fabs(mean) < 0.005 && fabs(sqrt(sq) - 1) < 0.005);
    graph_normal_fill(43, 0.0, 1.0, part, 100);
    assert_true(memcmp(all, part, sizeof(float) * 100) != 0);
    /* The stream is docs/ir.md's definition with libm's log, sin and cos:
     * the sampler's own series give the same f32 values (none of 2^26
     * differed when it was written), here every one of the first 2^20 with
     * an offset and a scale. */
    graph_normal_fill(42, 0.5, 0.02, all, N);
    uint64_t key = splitmix_finish(42 + 0x9e3779b97f4a7c15ull);
    int64_t differ = 0;
    for (int64_t k = 0; k < N / 2; k++) {
        uint64_t a = splitmix_finish(key + (uint64_t)(2 * k + 1) * 0x9e3779b97f4a7c15ull);
        uint64_t b = splitmix_finish(key + (uint64_t)(2 * k + 2) * 0x9e3779b97f4a7c15ull);
        double u1 = (double)((a >> 11) + 1) * 0x1p-53, u2 = (double)(b >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586476925 * u2;
        differ += all[2 * k] != (float)(0.5 + 0.02 * r * cos(t));
        differ += all[2 * k + 1] != (float)(0.5 + 0.02 * r * sin(t));
    }
    assert_int_equal(differ, 0);
    /* graph_normal_maxabs (an fp8 weight's scale) is the largest |value| of
     * the same stream: odd and even lengths, inside one chunk and across
     * several, with an offset that moves the maximum to a negative value. */
    const int64_t lens[] = {1, 2, 3, 255, 256, 257, 131071, 131072, 131073, 400001, N};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (int m = 0; m < 2; m++) {
            double mu = m ? -0.25 : 0.0, sd = m ? 0.5 : 1.0;
            graph_normal_fill(7 + i, mu, sd, all, lens[i]);
            float want = 0;
            for (int64_t k = 0; k < lens[i]; k++) want = fabsf(all[k]) > want ? fabsf(all[k]) : want;
            assert_true(graph_normal_maxabs(7 + i, mu, sd, lens[i]) == want);
        }
    assert_true(graph_normal_maxabs(7, 0.0, 1.0, 0) == 0);
    free(all);
    free(part);

    /* npy(): relative to the .tsl file, converted to the parameter's dtype. */
    char dir[] = "/tmp/tessel_refXXXXXX";
    assert_non_null(mkdtemp(dir));
    char npy[300], tsl[300];
    snprintf(npy, sizeof npy, "%s/w.npy", dir);
    snprintf(tsl, sizeof tsl, "%s/m.tsl", dir);
    float vals[3] = {1.0f / 3, 2.0f, -7.0f};
    npy_array a = {.dtype = DT_F32, .rank = 1, .dim = {3}, .numel = 3, .data = vals};
    FILE *f = fopen(npy, "wb");
    assert_int_equal(npy_write(f, &a), 0);
    fclose(f);
    f = fopen(tsl, "w");
    fputs("graph g\nparam %w : f16[3] = npy(\"w.npy\")\nparam %z : f32[2, 2] = ones\noutput %w, %z\n", f);
    fclose(f);
    diag d = {0};
    graph *g = graph_parse_file(tsl, &d);
    assert_non_null(g);
    float **out = calloc(2, sizeof(float *));
    ref_options o = {.quiet = true};
    assert_int_equal(ref_run(g, &o, NULL, out, &d), 0);
    assert_true(out[0][0] == 0.333251953125f && out[0][1] == 2.0f && out[0][2] == -7.0f);
    for (int i = 0; i < 4; i++) assert_true(out[1][i] == 1.0f);
    free(out[0]);
    free(out[1]);
    graph_free(g);
    /* A wrong shape names the parameter and the file. */
    f = fopen(tsl, "w");
    fputs("graph g\nparam %w : f16[4] = npy(\"w.npy\")\noutput %w\n", f);
    fclose(f);
    g = graph_parse_file(tsl, &d);
    assert_non_null(g);
    assert_int_equal(ref_run(g, &o, NULL, out, &d), -1);
    assert_non_null(strstr(d.text, "m.tsl:2:1: error:"));
    assert_non_null(strstr(d.text, "w.npy has shape [3] but parameter '%w' is f16[4]"));
    graph_free(g);
    free(out);
    remove(npy);
    remove(tsl);
    rmdir(dir);
}

static void compare_figures(void **state) {
    (void)state;
    float want[4] = {1, 2, 3, 4}, same[4] = {1, 2, 3, 4}, off[4] = {1, 2, 3, 5}, neg[4] = {-1, -2, -3, -4};
    num_diff d = num_compare(same, want, 4);
    assert_true(d.cosine == 1.0 && d.max_abs_err == 0 && d.rms_err == 0);
    d = num_compare(off, want, 4);
    assert_true(fabs(d.cosine - 34.0 / sqrt(39.0 * 30.0)) < 1e-12);
    assert_true(d.max_abs_err == 1.0 && fabs(d.rms_err - 0.5) < 1e-12 && fabs(d.want_rms - sqrt(7.5)) < 1e-12);
    d = num_compare(neg, want, 4);
    assert_true(d.cosine == -1.0 && d.max_abs_err == 8.0);
    off[2] = NAN;
    d = num_compare(off, want, 4);
    assert_true(d.nonfinite == 1 && isnan(d.cosine) && isinf(d.max_abs_err));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_broadcast_and_transposes),
        cmocka_unit_test(elementwise_broadcasting),
        cmocka_unit_test(softmax_layer_norm_gelu),
        cmocka_unit_test(layout_ops),
        cmocka_unit_test(casts_round_and_strip),
        cmocka_unit_test(pad_of_8bit_rounds_its_value),
        cmocka_unit_test(optimizer_ops_follow_pytorch),
        cmocka_unit_test(repeat_semantics),
        cmocka_unit_test(spares_reused),
        cmocka_unit_test(stacked_params_streamed),
        cmocka_unit_test(param_initializers),
        cmocka_unit_test(compare_figures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

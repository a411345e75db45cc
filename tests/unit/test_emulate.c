/* test_emulate.c: the plan-exact reference's kernels against scalar loops
 * written here from the documented semantics (graph.h, "numerics.c"), and
 * the numeric plan's JSON reader on good and hostile input. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static graph *parse(const char *text) {
    diag d = {0};
    graph *g = graph_parse("t.tsl", text, strlen(text), &d);
    if (!g) fail_msg("%s", d.text);
    return g;
}

/* Runs g under the plan in meta (JSON text) on seeded inputs. */
static float **emulate(const graph *g, const char *meta, float ***inputs) {
    diag d = {0};
    graph_numerics plan;
    if (graph_numerics_parse(g, meta, "t.tpk", &plan, &d)) fail_msg("%s", d.text);
    int32_t ids[16], nin = graph_inputs(g, ids, 16), nout = graph_outputs(g, NULL, 0);
    float **in = calloc(16, sizeof(float *)), **out = calloc((size_t)nout + 1, sizeof(float *));
    for (int32_t k = 0; k < nin; k++) {
        in[k] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ids[k])->type));
        graph_input_default(g, ids[k], k, in[k]);
    }
    ref_options o = {.plan = &plan, .quiet = true};
    if (ref_run(g, &o, in, out, &d)) fail_msg("%s", d.text);
    graph_numerics_free(&plan);
    *inputs = in;
    return out;
}

static float f16r(float x) { return f16_to_f32(f32_to_f16(x)); }

static void same_bits(const float *got, const float *want, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0 && !(isnan(got[i]) && isnan(want[i])))
            fail_msg("%s[%lld]: got %.9g want %.9g", what, (long long)i, got[i], want[i]);
}

/* A K-split matmul with f16 chains: per partition a chain rounded to f16
 * every step, partials stored in f16, chained in f16, the result rounded. */
static void matmul_k_partitions(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %a : f16[5, 37]\ninput %b : f16[37, 21]\n"
                     "%c = matmul(%a, %b) {acc = f16} : f32[5, 21]\n"
                     "%t = matmul(%b, %a) {transpose_a = true, transpose_b = true} : f16[21, 5]\noutput %c, %t\n");
    const char *meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
                       "{\"op\": \"c\", \"kind\": \"matmul\", \"acc\": \"f16\", \"partials\": \"f16\", \"k_bounds\": [0, 16, 17, 37]},"
                       "{\"op\": \"t\", \"kind\": \"matmul\", \"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 37]}]}}";
    float **in, **out = emulate(g, meta, &in);
    const int64_t kb[] = {0, 16, 17, 37};
    float want[5 * 21], want_t[21 * 5];
    for (int m = 0; m < 5; m++)
        for (int n = 0; n < 21; n++) {
            float tot = 0.0f, plain = 0.0f;
            for (int p = 0; p < 3; p++) {
                float acc = 0.0f;
                for (int64_t k = kb[p]; k < kb[p + 1]; k++) acc = f16r(acc + in[0][m * 37 + k] * in[1][k * 21 + n]);
                tot = f16r(tot + f16r(acc));
            }
            for (int k = 0; k < 37; k++) plain = plain + in[1][k * 21 + n] * in[0][m * 37 + k];
            want[m * 21 + n] = tot;
            want_t[n * 5 + m] = f16r(plain);
        }
    same_bits(out[0], want, 5 * 21, "c");
    same_bits(out[1], want_t, 21 * 5, "t");
    for (int i = 0; i < 2; i++) free(in[i]), free(out[i]);
    free(in);
    free(out);
    graph_free(g);
}

/* 8-bit operands chain unscaled, the sum is scaled by 2^(sa+sb) after. */
static void matmul_8bit_scales_after(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %a : f143[3, 8] {scale = -3}\ninput %b : f143[8, 4] {scale = 2}\n"
                     "%c = matmul(%a, %b) {acc = f16} : f32[3, 4]\noutput %c\n");
    const char *meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
                       "{\"op\": \"c\", \"kind\": \"matmul\", \"acc\": \"f16\", \"partials\": \"f16\", \"k_bounds\": [0, 8]}]}}";
    float **in, **out = emulate(g, meta, &in);
    for (int m = 0; m < 3; m++)
        for (int n = 0; n < 4; n++) {
            float acc = 0.0f;
            for (int k = 0; k < 8; k++) acc = f16r(acc + ldexpf(in[0][m * 8 + k], 3) * ldexpf(in[1][k * 4 + n], -2));
            float want = acc * ldexpf(1.0f, -1);
            same_bits(&out[0][m * 4 + n], &want, 1, "c");
        }
    for (int i = 0; i < 2; i++) free(in[i]);
    free(out[0]);
    free(in);
    free(out);
    graph_free(g);
}

/* reduce_sum in blocks of the reduced axes, the block sums chained after. */
static void reduce_sum_blocks(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %x : f32[7, 3, 10]\n%s = reduce_sum(%x) {axes = [0, 2]} : f32[3]\noutput %s\n");
    const char *meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
                       "{\"op\": \"s\", \"kind\": \"reduce_sum\", \"blocks\": [3, 3, 4]}]}}";
    float **in, **out = emulate(g, meta, &in);
    for (int j = 0; j < 3; j++) {
        float tot = 0.0f;
        for (int b0 = 0; b0 < 3; b0++)     /* blocks of axis 0: rows 0-2, 3-5, 6 */
            for (int b2 = 0; b2 < 3; b2++) { /* blocks of axis 2: 0-3, 4-7, 8-9 */
                float part = 0.0f;
                for (int i = b0 * 3; i < b0 * 3 + 3 && i < 7; i++)
                    for (int k = b2 * 4; k < b2 * 4 + 4 && k < 10; k++) part = part + in[0][(i * 3 + j) * 10 + k];
                tot = tot + part;
            }
        same_bits(&out[0][j], &tot, 1, "s");
    }
    free(in[0]);
    free(out[0]);
    free(in);
    free(out);
    graph_free(g);
}

/* global_norm_clip: rows ascending, each row its blocks in gradient order. */
static void clip_rows(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %a : f32[6]\ninput %b : f32[4, 2]\n"
                     "%c, %d = global_norm_clip(%a, %b) {max_norm = 0.5} : f32[6], f32[4, 2]\noutput %c, %d\n");
    /* a in blocks of 4 (rows 1, 0); b in blocks of [2, 2] (rows 0, 1) */
    const char *meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
                       "{\"op\": \"c\", \"kind\": \"global_norm_clip\", \"grads\": ["
                       "{\"blocks\": [4], \"row_base\": 1, \"row_stride\": [-1]},"
                       "{\"blocks\": [2, 2], \"row_base\": 0, \"row_stride\": [1, 0]}]}]}}";
    diag d = {0};
    graph_numerics plan;
    /* A negative row stride is refused: rows are tiles. */
    assert_int_equal(graph_numerics_parse(g, meta, "t.tpk", &plan, &d), -1);
    assert_non_null(strstr(d.text, "'row_stride'[0] = -1 is out of range"));
    meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
           "{\"op\": \"c\", \"kind\": \"global_norm_clip\", \"grads\": ["
           "{\"blocks\": [4], \"row_base\": 1, \"row_stride\": [0]},"
           "{\"blocks\": [2, 2], \"row_base\": 0, \"row_stride\": [1, 0]}]}]}}";
    float **in, **out = emulate(g, meta, &in);
    float *a = in[0], *b = in[1];
    float sa = 0, sb0 = 0, sb1 = 0;
    for (int i = 0; i < 6; i++) sa = sa + a[i] * a[i]; /* a's two blocks share row 1: one chain */
    for (int i = 0; i < 4; i++) sb0 = sb0 + b[i] * b[i];
    for (int i = 4; i < 8; i++) sb1 = sb1 + b[i] * b[i];
    /* row 0: b's block 0; row 1: a's blocks 0 and 1 (stride 0), then b's block 1 */
    float r0 = 0.0f + sb0, r1 = (0.0f + sa) + sb1, total = (0.0f + r0) + r1;
    float c = 0.5f / (sqrtf(total) + 1e-6f);
    if (c > 1.0f) c = 1.0f;
    for (int i = 0; i < 6; i++) {
        float w = a[i] * c;
        same_bits(&out[0][i], &w, 1, "c");
    }
    for (int i = 0; i < 8; i++) {
        float w = b[i] * c;
        same_bits(&out[1][i], &w, 1, "d");
    }
    for (int i = 0; i < 2; i++) free(in[i]), free(out[i]);
    free(in);
    free(out);
    graph_free(g);
}

/* A scale folded into the softmax reading it: the scale passes its operand
 * on, and the softmax takes exp(s * (x - max)) over the unscaled row, which
 * is not what scaling first (rounding to f16) and then a softmax gives. The
 * reader refuses a prescale that is not its scale's factor, or whose scale is
 * not folded. */
static void softmax_prescale(void **state) {
    (void)state;
    const char *text = "graph g\ninput %x : f16[3, 50]\n%s = scale(%x) {by = 0.3} : f16[3, 50]\n"
                       "%p = softmax(%s) : f16[3, 50]\noutput %p\n";
    graph *g = parse(text);
    const char *meta = "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": ["
                       "{\"op\": \"s\", \"kind\": \"scale\", \"folded\": true},"
                       "{\"op\": \"p\", \"kind\": \"softmax\", \"prescale\": 0.3}]}}";
    float **in, **out = emulate(g, meta, &in);
    float want[150], s = 0.3f;
    int differs = 0;
    for (int r = 0; r < 3; r++) {
        const float *x = in[0] + r * 50;
        float mx = -INFINITY, sum = 0.0f, e[50];
        for (int k = 0; k < 50; k++) mx = x[k] > mx ? x[k] : mx;
        for (int k = 0; k < 50; k++) sum = sum + (e[k] = expf(s * (x[k] - mx)));
        for (int k = 0; k < 50; k++) want[r * 50 + k] = f16r(e[k] / sum);
        /* Scaling first rounds each x * s to f16: not the same bits everywhere. */
        float m2 = -INFINITY, sum2 = 0.0f, e2[50];
        for (int k = 0; k < 50; k++) m2 = f16r(x[k] * s) > m2 ? f16r(x[k] * s) : m2;
        for (int k = 0; k < 50; k++) sum2 = sum2 + (e2[k] = expf(f16r(x[k] * s) - m2));
        for (int k = 0; k < 50; k++) differs += f16r(e2[k] / sum2) != want[r * 50 + k];
    }
    same_bits(out[0], want, 150, "p");
    assert_true(differs > 0);
    free(in[0]);
    free(in);
    free(out[0]);
    free(out);
    static const struct {
        const char *ops, *error;
    } bad[] = {
        {"{\"op\": \"p\", \"kind\": \"softmax\", \"prescale\": 0.3}",
         "op 'p' has a prescale, but the scale 's' making its operand is not folded"},
        {"{\"op\": \"s\", \"kind\": \"scale\", \"folded\": true}, {\"op\": \"p\", \"kind\": \"softmax\", \"prescale\": 0.5}",
         "op 'p': 'prescale' must be the positive factor of the scale making its operand"},
        {"{\"op\": \"s\", \"kind\": \"scale\"}", "op 's': a scale's entry must say \"folded\": true"},
    };
    for (size_t i = 0; i < TS_COUNT(bad); i++) {
        char m[1024];
        snprintf(m, sizeof m, "{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [%s]}}", bad[i].ops);
        diag d = {0};
        graph_numerics x;
        assert_int_equal(graph_numerics_parse(g, m, "t.tpk", &x, &d), -1);
        if (!strstr(d.text, bad[i].error)) fail_msg("case %zu: want '%s', got '%s'", i, bad[i].error, d.text);
    }
    graph_free(g);
}

/* The JSON form round-trips, and the reader refuses what does not fit. */
static void numerics_reader(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %a : f16[4, 8]\ninput %b : f16[8, 4]\n%c = matmul(%a, %b) : f16[4, 4]\n"
                     "%s = reduce_sum(%c) {axes = [1]} : f32[4]\noutput %s\n");
    graph_numerics n;
    graph_numerics_init(&n, g);
    int32_t mm = graph_val(g, graph_lookup(g, "c"))->def, rs = graph_val(g, graph_lookup(g, "s"))->def;
    int64_t kb[] = {0, 3, 8};
    n.op[mm] = (graph_op_plan){.kind = OP_MATMUL, .gemm = {DT_F32, DT_F16, 2, kb}};
    n.op[rs] = (graph_op_plan){.kind = OP_REDUCE_SUM, .block = {4, 2}};
    char *j = graph_numerics_json(g, &n);
    char meta[2048];
    snprintf(meta, sizeof meta, "{\"numerics\": %s}", j);
    graph_numerics back;
    diag d = {0};
    if (graph_numerics_parse(g, meta, "t.tpk", &back, &d)) fail_msg("%s", d.text);
    assert_int_equal(back.op[mm].kind, OP_MATMUL);
    assert_int_equal(back.op[mm].gemm.nk, 2);
    assert_int_equal(back.op[mm].gemm.k_bounds[1], 3);
    assert_int_equal(back.op[mm].gemm.partials, DT_F16);
    assert_int_equal(back.op[rs].block[1], 2);
    char *again = graph_numerics_json(g, &back);
    assert_string_equal(j, again);
    free(again);
    free(j);
    graph_numerics_free(&back);
    graph_numerics_free(&n);

    static const struct {
        const char *meta, *error;
    } bad[] = {
        {"{}", "t.tpk: error: numeric plan: the metadata has no 'numerics' object"},
        {"not json", "the metadata has no 'numerics' object"},
        {"{\"numerics\": {\"format\": \"x\"}}", "'numerics' is not a tessel-numerics object"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 7, \"ops\": []}}", "version 7, but this tessel reads only version 1"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": 3}}", "'ops' is not an array"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": []}}", "no entry for matmul 'c'"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"zz\", \"kind\": \"matmul\"}]}}",
         "entry 0: the graph has no op 'zz'"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"a\", \"kind\": \"matmul\"}]}}",
         "entry 0: the graph has no op 'a'"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"s\", \"kind\": \"matmul\"}]}}",
         "op 's' is a reduce_sum in the graph, not a matmul"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"bf16\", \"partials\": \"f32\", \"k_bounds\": [0, 8]}]}}",
         "op 'c': 'acc' must be \"f32\" or \"f16\""},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 5, 4, 8]}]}}",
         "op 'c': 'k_bounds' must ascend from 0 to the matmul's K = 8"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 9]}]}}",
         "op 'c': 'k_bounds' must ascend from 0 to the matmul's K = 8"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}]}}",
         "op 'c': 'k_bounds' must list 2 to 9 bounds"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 8]}, {\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 8]}]}}",
         "op 'c' has two entries"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 8]}, {\"op\": \"s\", \"kind\": \"reduce_sum\", "
         "\"blocks\": [4, 5]}]}}",
         "op 's': 'blocks'[1] = 5 is out of range"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [{\"op\": \"c\", \"kind\": \"matmul\", "
         "\"acc\": \"f32\", \"partials\": \"f32\", \"k_bounds\": [0, 8]}, {\"op\": \"s\", \"kind\": \"reduce_sum\", "
         "\"blocks\": [0, 4]}]}}",
         "op 's': 'blocks'[0] = 0 is out of range"},
        {"{\"numerics\": {\"format\": \"tessel-numerics\", \"version\": 1, \"ops\": [7]}}",
         "entry 0 needs string members 'op' and 'kind'"},
    };
    for (size_t i = 0; i < TS_COUNT(bad); i++) {
        memset(&d, 0, sizeof d);
        graph_numerics x;
        assert_int_equal(graph_numerics_parse(g, bad[i].meta, "t.tpk", &x, &d), -1);
        if (!strstr(d.text, bad[i].error)) fail_msg("case %zu: want '%s', got '%s'", i, bad[i].error, d.text);
    }
    graph_free(g);
}

/* on_value sees every op result in program order, with the iteration of
 * each enclosing repeat, and stopping it anywhere (inside a body too)
 * returns 1 and frees everything (ASan checks the second half). */
typedef struct seen_values {
    int calls, stop_at;
    int64_t last_iter;
} seen_values;

static int count_values(void *ctx, int32_t value, const int64_t *iters, int depth, const float *data, int64_t n) {
    (void)value, (void)data, (void)n;
    seen_values *s = ctx;
    s->last_iter = depth ? iters[depth - 1] : -1;
    return ++s->calls == s->stop_at;
}

static void observe_and_stop(void **state) {
    (void)state;
    graph *g = parse("graph g\ninput %x : f32[4]\n%y = repeat 3 carry(%h = %x) {\n  %a = scale(%h) {by = 2.0} : f32[4]\n"
                     "  %b = add(%a, %h) : f32[4]\n  yield %b\n}\n%z = scale(%y) {by = 0.5} : f32[4]\noutput %z\n");
    float x[4] = {1, 2, 3, 4}, *in[1] = {x}, *out[1] = {NULL};
    diag d = {0};
    seen_values all = {0, -1, 0};
    ref_options o = {.quiet = true, .on_value = count_values, .on_value_ctx = &all};
    assert_int_equal(ref_run(g, &o, in, out, &d), 0);
    assert_int_equal(all.calls, 3 * 2 + 1 + 1); /* a, b per iteration; the repeat's result; z */
    free(out[0]);
    for (int stop = 1; stop <= 8; stop++) {
        seen_values s = {0, stop, 0};
        o.on_value_ctx = &s;
        out[0] = NULL;
        assert_int_equal(ref_run(g, &o, in, out, &d), 1);
        assert_int_equal(s.calls, stop);
        assert_null(out[0]);
        if (stop == 3) assert_int_equal(s.last_iter, 1); /* a of the second iteration */
    }
    graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_k_partitions), cmocka_unit_test(matmul_8bit_scales_after), cmocka_unit_test(reduce_sum_blocks),
        cmocka_unit_test(clip_rows),           cmocka_unit_test(numerics_reader),   cmocka_unit_test(softmax_prescale),   cmocka_unit_test(observe_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

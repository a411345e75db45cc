/* test_onnx.c: the ONNX reader on the committed exports: weights stay in
 * the caller's buffer, raising and folding give the expected ops, the FP32
 * reference of the import matches PyTorch, and every truncation of a model
 * fails cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

static char *path_in_tree(const char *rel) {
    const char *root = getenv("TESSEL_SOURCE_DIR");
    return path_join(root ? root : ".", rel);
}

static int count_kind(const graph *g, graph_op_kind k) {
    int n = 0;
    for (int32_t i = 0; i < g->ops.n; i++) n += graph_opr(g, i)->kind == k;
    return n;
}

/* Imports from a buffer we own: every data() piece must point into it. */
static void weights_are_not_copied(void **state) {
    (void)state;
    char *path = path_in_tree("tests/onnx/hand_tanh_op13.onnx");
    char *buf;
    size_t len;
    diag d = {0};
    assert_int_equal(file_read_all(path, &buf, &len, &d), 0);
    models_keep *keep = models_keep_new();
    graph *g = models_onnx_import_buffer(path, (const uint8_t *)buf, len, keep, NULL, &d);
    assert_non_null(g);
    int inside = 0, weights = 0;
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *o = graph_opr(g, i);
        const char *name = o->nout ? graph_val(g, o->out[0])->name : "";
        if (o->kind != OP_PARAM || o->init.kind != INIT_DATA) continue;
        int64_t bytes = graph_type_numel(&graph_val(g, o->out[0])->type) * 4;
        size_t nl = strlen(name);
        /* Small constants are decoded; transposed ones (".T": the patch embedding) are folded copies. */
        if (bytes <= 4096 || (nl > 2 && strcmp(name + nl - 2, ".T") == 0)) continue;
        weights++;
        const char *p = o->init.parts[0];
        inside += p >= buf && p + bytes <= buf + len;
    }
    assert_int_equal(weights, 9); /* qkv, fc1, fc2 of three blocks */
    assert_int_equal(inside, weights);
    graph_free(g);
    models_keep_free(keep);
    free(buf);
    free(path);
}

/* Raised and rerolled: layer norms, erf GeLU, one repeat of two blocks. */
static void torchvision_raises_and_folds(void **state) {
    (void)state;
    char *path = path_in_tree("tests/onnx/tv_vit_op13.onnx");
    diag d = {0};
    models_options o = {.precision = MODELS_F16, .reroll = true};
    graph *g = models_load_opts(path, &o, &d);
    assert_non_null(g);
    assert_int_equal(count_kind(g, OP_REPEAT), 1);
    assert_int_equal(count_kind(g, OP_GELU_ERF), 1); /* once, in the body */
    assert_int_equal(count_kind(g, OP_GELU), 0);
    assert_int_equal(count_kind(g, OP_LAYER_NORM), 3); /* two in the body, the final one */
    for (int32_t i = 0; i < g->ops.n; i++)
        if (graph_opr(g, i)->kind == OP_REPEAT) assert_int_equal(graph_opr(g, i)->count, 2);
    graph_free(g);
    /* Without folding: no repeat, every layer's ops. */
    o.reroll = false;
    g = models_load_opts(path, &o, &d);
    assert_non_null(g);
    assert_int_equal(count_kind(g, OP_REPEAT), 0);
    assert_int_equal(count_kind(g, OP_LAYER_NORM), 5);
    graph_free(g);
    free(path);
}

/* The FP32 reference of the imported graph gives PyTorch's answer. */
static void reference_matches_pytorch(void **state) {
    (void)state;
    static const char *const models[] = {"hand_tanh_op13", "hand_erf_op17", "tv_vit_op13", "tv_vit_op17"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/onnx/%s.onnx", models[m]);
        char *path = path_in_tree(rel);
        diag d = {0};
        models_options o = {.precision = MODELS_F32, .reroll = true};
        graph *g = models_load_opts(path, &o, &d);
        assert_non_null(g);
        snprintf(rel, sizeof rel, "tests/onnx/%s.in.npy", models[m]);
        char *in_path = path_in_tree(rel);
        snprintf(rel, sizeof rel, "tests/onnx/%s.out.npy", models[m]);
        char *out_path = path_in_tree(rel);
        npy_array in, want;
        assert_int_equal(npy_read(in_path, &in, &d), 0);
        assert_int_equal(npy_read(out_path, &want, &d), 0);
        float *x = malloc(sizeof(float) * (size_t)in.numel), *w = malloc(sizeof(float) * (size_t)want.numel);
        num_decode_buf(in.dtype, 0, in.data, x, (size_t)in.numel);
        num_decode_buf(want.dtype, 0, want.data, w, (size_t)want.numel);
        float *inputs[1] = {x}, *outputs[1] = {NULL};
        ref_options ro = {.quiet = true};
        assert_int_equal(ref_run(g, &ro, inputs, outputs, &d), 0);
        num_diff diff = num_compare(outputs[0], w, (size_t)want.numel);
        if (diff.cosine < 0.99999 || diff.max_abs_err > 1e-3)
            fail_msg("%s: cosine %.8f, max abs err %g against PyTorch", models[m], diff.cosine, diff.max_abs_err);
        free(outputs[0]);
        free(x);
        free(w);
        npy_free(&in);
        npy_free(&want);
        free(in_path);
        free(out_path);
        free(path);
        graph_free(g);
    }
}

/* Every prefix of a small model is refused with a message (or, for the
 * whole file, imported): never a crash or a leak. */
static void every_truncation_fails_cleanly(void **state) {
    (void)state;
    char *path = path_in_tree("fuzz/corpus/onnx/mlp_ln_gelu.onnx");
    char *buf;
    size_t len;
    diag d = {0};
    assert_int_equal(file_read_all(path, &buf, &len, &d), 0);
    for (size_t n = 0; n <= len; n++) {
        diag e = {0};
        models_keep *keep = models_keep_new();
        graph *g = models_onnx_import_buffer("cut.onnx", (const uint8_t *)buf, n, keep, NULL, &e);
        if (n == len) assert_non_null(g);
        if (!g) assert_true(e.set && strncmp(e.text, "cut.onnx: error: ", 17) == 0);
        graph_free(g);
        models_keep_free(keep);
    }
    free(buf);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weights_are_not_copied),
        cmocka_unit_test(torchvision_raises_and_folds),
        cmocka_unit_test(reference_matches_pytorch),
        cmocka_unit_test(every_truncation_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* zoo.c: the built-in models, built with the graph builder from a
 * "zoo:NAME:k=v,..." spec. Weights are seeded normals scaled 1/sqrt(fan_in)
 * so activations stay near unit variance; FP8 weights get the scale their
 * largest magnitude asks for, activation casts a fixed scale sized for
 * unit-variance data. */
#define _POSIX_C_SOURCE 200809L
#include "models.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ----------------------------------------------------------- */

enum { MAX_PARAMS = 10 };

typedef struct zoo_param {
    const char *name;
    const char *def;      /* default, as text */
    const char *choices;  /* "a|b": one of these; NULL: a positive integer */
    const char *help;
} zoo_param;

typedef struct zoo_args {
    const char *spec;
    const char *val[MAX_PARAMS];  /* chosen text per parameter */
    int64_t num[MAX_PARAMS];      /* parsed integers */
    bool shapes_only;             /* models_options.shapes_only */
} zoo_args;

typedef struct zoo_model {
    const char *name, *help;
    zoo_param params[MAX_PARAMS];
    graph *(*build)(const struct zoo_model *m, const zoo_args *a, diag *d);
} zoo_model;

static int param_index(const zoo_model *m, const char *name) {
    for (int i = 0; i < MAX_PARAMS && m->params[i].name; i++)
        if (strcmp(m->params[i].name, name) == 0) return i;
    TS_UNREACHABLE();
}

static int64_t arg_int(const zoo_model *m, const zoo_args *a, const char *name) { return a->num[param_index(m, name)]; }

static bool arg_is(const zoo_model *m, const zoo_args *a, const char *name, const char *choice) {
    return strcmp(a->val[param_index(m, name)], choice) == 0;
}

/* ---- a small builder on top of graph_* ---------------------------------------- */

typedef struct zb {
    graph *g;
    diag *d;
    int err;  /* first builder failure: every later call is a no-op */
    bool shapes_only; /* FP8 weights keep scale 0: no values generated to choose one */
} zb;

static graph_type ty(dtype t, int rank, const int64_t *dims) { return graph_type_make(t, rank, dims); }
#define TY(t, ...) ty(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static int32_t op_result(zb *b, int32_t op, const char *name, const graph_type *declared) {
    if (b->err) return 0;
    const char *names[1] = {name};
    if (graph_finish_op(b->g, op, names, declared, b->d)) {
        b->err = 1;
        return 0;
    }
    return graph_result(b->g, op, 0);
}

static int32_t unary(zb *b, graph_op_kind k, const char *name, int32_t x) {
    if (b->err) return 0;
    return op_result(b, graph_begin_op(b->g, k, &x, 1), name, NULL);
}

static int32_t binary(zb *b, graph_op_kind k, const char *name, int32_t x, int32_t y) {
    if (b->err) return 0;
    int32_t in[2] = {x, y};
    return op_result(b, graph_begin_op(b->g, k, in, 2), name, NULL);
}

static int32_t matmul(zb *b, const char *name, int32_t x, int32_t w, dtype out, dtype acc, bool ta, bool tb) {
    if (b->err) return 0;
    int32_t in[2] = {x, w};
    int32_t op = graph_begin_op(b->g, OP_MATMUL, in, 2);
    if (ta) graph_set_bool(b->g, op, ATTR_TRANSPOSE_A, true);
    if (tb) graph_set_bool(b->g, op, ATTR_TRANSPOSE_B, true);
    graph_set_dtype(b->g, op, ATTR_ACC, acc);
    graph_type decl = {.dtype = out};
    return op_result(b, op, name, &decl);
}

static int32_t cast(zb *b, const char *name, int32_t x, dtype to, int scale) {
    if (b->err) return 0;
    int32_t op = graph_begin_op(b->g, OP_CAST, &x, 1);
    graph_set_dtype(b->g, op, ATTR_TO, to);
    if (dtype_is_f8(to)) graph_set_int(b->g, op, ATTR_SCALE, scale);
    return op_result(b, op, name, NULL);
}

static int32_t scale(zb *b, const char *name, int32_t x, double by) {
    if (b->err) return 0;
    int32_t op = graph_begin_op(b->g, OP_SCALE, &x, 1);
    graph_set_float(b->g, op, ATTR_BY, by);
    return op_result(b, op, name, NULL);
}

static int32_t layer_norm(zb *b, const char *name, int32_t x, int32_t gamma, int32_t beta, double eps) {
    if (b->err) return 0;
    int32_t in[3] = {x, gamma, beta};
    int32_t op = graph_begin_op(b->g, OP_LAYER_NORM, in, 3);
    graph_set_float(b->g, op, ATTR_EPS, eps);
    return op_result(b, op, name, NULL);
}

static int32_t reshape(zb *b, const char *name, int32_t x, graph_type shape) {
    if (b->err) return 0;
    return op_result(b, graph_begin_op(b->g, OP_RESHAPE, &x, 1), name, &shape);
}

static int32_t transpose(zb *b, const char *name, int32_t x, const int64_t *perm, int rank) {
    if (b->err) return 0;
    int32_t op = graph_begin_op(b->g, OP_TRANSPOSE, &x, 1);
    graph_set_ints(b->g, op, ATTR_PERM, perm, rank);
    return op_result(b, op, name, NULL);
}

static int32_t reduce_sum(zb *b, const char *name, int32_t x, const int64_t *axes, int n) {
    if (b->err) return 0;
    int32_t op = graph_begin_op(b->g, OP_REDUCE_SUM, &x, 1);
    graph_set_ints(b->g, op, ATTR_AXES, axes, n);
    return op_result(b, op, name, NULL);
}

static int32_t input(zb *b, const char *name, graph_type t) {
    if (b->err) return 0;
    return graph_result(b->g, graph_add_input(b->g, name, t), 0);
}

static int32_t param(zb *b, const char *name, graph_type t, graph_init init) {
    if (b->err) return 0;
    return graph_result(b->g, graph_add_param(b->g, name, t, init), 0);
}

static graph_init normal(double mean, double std, uint64_t seed) {
    return (graph_init){.kind = INIT_NORMAL, .mean = mean, .std = std, .seed = seed};
}

/* A weight in the model's GEMM precision: f16, or f143 scaled to its maximum. */
static int32_t weight(zb *b, const char *name, bool fp8, graph_type t, graph_init init) {
    if (b->err) return 0;
    if (fp8) {
        /* The scale needs every value generated: refuse sizes that would take
         * hours rather than hang (the reference stops at 2^32 elements too). */
        int64_t n = graph_type_numel(&t);
        if (n > (1ll << 32)) {
            diag_fail(b->d, "%s: error: fp8 weight '%s' has %lld elements; the zoo generates at most 2^32", b->g->path,
                      name, (long long)n);
            b->err = 1;
            return 0;
        }
        t.dtype = DT_F143;
        if (!b->shapes_only) {
            char what[160];
            snprintf(what, sizeof what, "choosing the fp8 scale of '%s' (%lld values)", name, (long long)n);
            progress_stage(b->g->path, what);
            t.scale = (int8_t)f8_scale_for_max(DT_F143, graph_normal_maxabs(init.seed, init.mean, init.std, n));
        }
    } else {
        t.dtype = DT_F16;
    }
    return param(b, name, t, init);
}

/* Activation casts see unit-variance data: |x| < 7.5 fits f143 at scale -5. */
enum { ACT_SCALE = -5, PROB_SCALE = -7 /* softmax output in [0, 1] */ };

static int32_t gemm_operand(zb *b, const char *name, int32_t x, bool fp8, int s) {
    return fp8 ? cast(b, name, x, DT_F143, s) : x;
}

static graph *finish(zb *b, graph *g) {
    if (b->err) {
        graph_free(g);
        return NULL;
    }
    if (graph_verify(g, b->d)) {
        graph_free(g);
        return NULL;
    }
    return g;
}

/* ---- the models --------------------------------------------------------------- */

/* The chain dtype of the weight GEMMs (the `acc` option): by default f16 for
 * 8-bit operands, the AMP's half partials the measured hardware ran (docs/zoo.md),
 * f32 for f16 operands, whose rate f16 chains would not raise. */
static dtype gemm_acc(const zoo_model *m, const zoo_args *a, bool fp8) {
    if (arg_is(m, a, "acc", "f32")) return DT_F32;
    if (arg_is(m, a, "acc", "f16")) return DT_F16;
    return fp8 ? DT_F16 : DT_F32;
}

static graph *build_mlp(const zoo_model *m, const zoo_args *a, diag *d) {
    int64_t T = arg_int(m, a, "tokens"), W = arg_int(m, a, "width"), H = arg_int(m, a, "hidden");
    bool fp8 = arg_is(m, a, "precision", "fp8");
    dtype acc = gemm_acc(m, a, fp8);
    graph *g = graph_new("mlp", a->spec);
    zb b = {g, d, 0, a->shapes_only};
    int32_t x = input(&b, "x", TY(DT_F16, T, W));
    int32_t w1 = weight(&b, "w1", fp8, TY(DT_F16, W, H), normal(0, 1 / sqrt((double)W), 1));
    int32_t b1 = param(&b, "b1", TY(DT_F16, H), normal(0, 0.02, 2));
    int32_t w2 = weight(&b, "w2", fp8, TY(DT_F16, H, W), normal(0, 1 / sqrt((double)H), 3));
    int32_t b2 = param(&b, "b2", TY(DT_F16, W), normal(0, 0.02, 4));
    int32_t h = matmul(&b, "h", gemm_operand(&b, "x8", x, fp8, ACT_SCALE), w1, DT_F16, acc, false, false);
    int32_t gl = unary(&b, OP_GELU, "g", binary(&b, OP_ADD, "hb", h, b1));
    int32_t y = matmul(&b, "y", gemm_operand(&b, "g8", gl, fp8, ACT_SCALE), w2, DT_F16, acc, false, false);
    int32_t out = binary(&b, OP_ADD, "yb", y, b2);
    if (!b.err) graph_add_output(g, &out, 1);
    return finish(&b, g);
}

static graph *build_qk(const zoo_model *m, const zoo_args *a, diag *d) {
    int64_t H = arg_int(m, a, "heads"), Q = arg_int(m, a, "queries"), K = arg_int(m, a, "keys"),
            C = arg_int(m, a, "channels");
    bool qk8 = arg_is(m, a, "qk", "fp8"), pv8 = arg_is(m, a, "pv", "fp8");
    graph *g = graph_new("qk", a->spec);
    zb b = {g, d, 0, a->shapes_only};
    int32_t q = input(&b, "q", TY(DT_F16, H, Q, C));
    int32_t k = input(&b, "k", TY(DT_F16, H, K, C));
    int32_t v = input(&b, "v", TY(DT_F16, H, K, C));
    int32_t s = matmul(&b, "scores", gemm_operand(&b, "q8", q, qk8, ACT_SCALE), gemm_operand(&b, "k8", k, qk8, ACT_SCALE),
                       DT_F16, DT_F32, false, true);
    int32_t p = unary(&b, OP_SOFTMAX, "probs", scale(&b, "scaled", s, 1 / sqrt((double)C)));
    int32_t o = matmul(&b, "out", gemm_operand(&b, "probs8", p, pv8, PROB_SCALE), gemm_operand(&b, "v8", v, pv8, ACT_SCALE),
                       DT_F16, DT_F32, false, false);
    if (!b.err) graph_add_output(g, &o, 1);
    return finish(&b, g);
}

/* The per-layer weights of the vit encoder, stacked over layers. */
enum { VW_LN1_G, VW_LN1_B, VW_WQ, VW_BQ, VW_WK, VW_BK, VW_WV, VW_BV, VW_WO, VW_BO,
       VW_LN2_G, VW_LN2_B, VW_W1, VW_B1, VW_W2, VW_B2, VW_COUNT };
static const char *const vit_weight_names[VW_COUNT] = {
    "ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2"};

static graph *build_vit(const zoo_model *m, const zoo_args *a, diag *d) {
    int64_t img = arg_int(m, a, "image"), P = arg_int(m, a, "patch"), W = arg_int(m, a, "width"),
            NH = arg_int(m, a, "heads"), M = arg_int(m, a, "mlp"), L = arg_int(m, a, "layers"), B = arg_int(m, a, "batch");
    dtype acc = gemm_acc(m, a, arg_is(m, a, "precision", "fp8"));
    bool fp8 = arg_is(m, a, "precision", "fp8");
    if (P > img) return diag_fail(d, "%s: error: patch %lld is larger than the image %lld", a->spec, (long long)P, (long long)img), NULL;
    if (W % NH) return diag_fail(d, "%s: error: width %lld is not a multiple of heads %lld", a->spec, (long long)W, (long long)NH), NULL;
    int64_t side = img / P, T = side * side, C = W / NH, PD = 3 * P * P;
    graph *g = graph_new("vit", a->spec);
    zb b = {g, d, 0, a->shapes_only};
    uint64_t seed = 1;
    int32_t pix = input(&b, "patches", TY(DT_F16, B, T, PD));
    int32_t pw = weight(&b, "patch_w", fp8, TY(DT_F16, PD, W), normal(0, 1 / sqrt((double)PD), seed++));
    int32_t pb = param(&b, "patch_b", TY(DT_F16, W), normal(0, 0.02, seed++));
    int32_t pos = param(&b, "pos", TY(DT_F16, T, W), normal(0, 0.02, seed++));
    /* Stacked per-layer weights: the repeat slices layer i in iteration i. */
    int32_t stack[VW_COUNT];
    for (int i = 0; i < VW_COUNT; i++) {
        bool is_ln = i == VW_LN1_G || i == VW_LN1_B || i == VW_LN2_G || i == VW_LN2_B;
        bool is_gain = i == VW_LN1_G || i == VW_LN2_G;
        int64_t fan_in = i == VW_W2 ? M : W, fan_out = i == VW_W1 ? M : W;
        bool is_bias = !is_ln && (i == VW_BQ || i == VW_BK || i == VW_BV || i == VW_BO || i == VW_B1 || i == VW_B2);
        char name[32];
        snprintf(name, sizeof name, "layers.%s", vit_weight_names[i]);
        if (is_ln || is_bias) {
            int64_t n = i == VW_B1 ? M : W;
            stack[i] = param(&b, name, TY(DT_F16, L, n), normal(is_gain ? 1.0 : 0.0, 0.02, seed++));
        } else {
            stack[i] = weight(&b, name, fp8, TY(DT_F16, L, fan_in, fan_out), normal(0, 1 / sqrt((double)fan_in), seed++));
        }
    }
    int32_t post_g = param(&b, "post_ln_g", TY(DT_F16, W), normal(1.0, 0.02, seed++));
    int32_t post_b = param(&b, "post_ln_b", TY(DT_F16, W), normal(0.0, 0.02, seed++));

    int32_t emb = matmul(&b, "embed", gemm_operand(&b, "patches8", pix, fp8, ACT_SCALE), pw, DT_F16, acc, false, false);
    int32_t x0 = binary(&b, OP_ADD, "embed_pos", binary(&b, OP_ADD, "embed_b", emb, pb), pos);
    if (b.err) return finish(&b, g);

    const char *arg_names[1 + VW_COUNT];
    char arg_buf[VW_COUNT][32];
    arg_names[0] = "h";
    for (int i = 0; i < VW_COUNT; i++) {
        snprintf(arg_buf[i], sizeof arg_buf[i], "l.%s", vit_weight_names[i]);
        arg_names[1 + i] = arg_buf[i];
    }
    graph_begin_repeat(g, L, &x0, 1, stack, VW_COUNT, arg_names);
    int32_t h = graph_lookup(g, "h"), lw[VW_COUNT];
    for (int i = 0; i < VW_COUNT; i++) lw[i] = graph_lookup(g, arg_names[1 + i]);
    const double eps = 1e-6;
    int64_t perm[4] = {0, 2, 1, 3};
    /* Attention: pre-norm, per-head scaled dot products, output projection. */
    int32_t ln1 = layer_norm(&b, "l.ln1", h, lw[VW_LN1_G], lw[VW_LN1_B], eps);
    int32_t ln1x = gemm_operand(&b, "l.ln1_8", ln1, fp8, ACT_SCALE);
    int32_t heads[3];
    static const char *const qkv[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        char n1[32], n2[32], n3[32], n4[32];
        snprintf(n1, sizeof n1, "l.%s_proj", qkv[i]);
        snprintf(n2, sizeof n2, "l.%s_bias", qkv[i]);
        snprintf(n3, sizeof n3, "l.%s_split", qkv[i]);
        snprintf(n4, sizeof n4, "l.%s_heads", qkv[i]);
        int32_t pr = matmul(&b, n1, ln1x, lw[VW_WQ + 2 * i], DT_F16, acc, false, false);
        int32_t pb2 = binary(&b, OP_ADD, n2, pr, lw[VW_BQ + 2 * i]);
        heads[i] = transpose(&b, n4, reshape(&b, n3, pb2, TY(DT_F16, B, T, NH, C)), perm, 4);
    }
    int32_t sc = matmul(&b, "l.scores", heads[0], heads[1], DT_F16, DT_F32, false, true);
    int32_t pr = unary(&b, OP_SOFTMAX, "l.probs", scale(&b, "l.scaled", sc, 1 / sqrt((double)C)));
    int32_t at = matmul(&b, "l.attn", pr, heads[2], DT_F16, DT_F32, false, false);
    int32_t merged = reshape(&b, "l.attn_merged", transpose(&b, "l.attn_t", at, perm, 4), TY(DT_F16, B, T, W));
    int32_t op = matmul(&b, "l.o_proj", gemm_operand(&b, "l.attn8", merged, fp8, ACT_SCALE), lw[VW_WO], DT_F16, acc, false, false);
    int32_t h1 = binary(&b, OP_ADD, "l.h1", h, binary(&b, OP_ADD, "l.o_bias", op, lw[VW_BO]));
    /* MLP: pre-norm, up projection, tanh GELU, down projection. */
    int32_t ln2 = layer_norm(&b, "l.ln2", h1, lw[VW_LN2_G], lw[VW_LN2_B], eps);
    int32_t up = matmul(&b, "l.fc1", gemm_operand(&b, "l.ln2_8", ln2, fp8, ACT_SCALE), lw[VW_W1], DT_F16, acc, false, false);
    int32_t act = unary(&b, OP_GELU, "l.gelu", binary(&b, OP_ADD, "l.fc1_bias", up, lw[VW_B1]));
    int32_t dn = matmul(&b, "l.fc2", gemm_operand(&b, "l.gelu8", act, fp8, ACT_SCALE), lw[VW_W2], DT_F16, acc, false, false);
    int32_t h2 = binary(&b, OP_ADD, "l.h2", h1, binary(&b, OP_ADD, "l.fc2_bias", dn, lw[VW_B2]));
    if (b.err) return finish(&b, g);
    const char *res_name = "encoded";
    graph_end_repeat(g, &h2, &res_name, d);
    int32_t out = layer_norm(&b, "post_ln", graph_lookup(g, "encoded"), post_g, post_b, eps);
    if (!b.err) graph_add_output(g, &out, 1);
    return finish(&b, g);
}

/* Names of step t's values: step 1 keeps the plain names, later steps add ".sT". */
static const char *step_name(char *buf, size_t cap, const char *name, int64_t t) {
    /* Names here are short literals and steps at most 64: nothing is cut. */
    size_t n = strlen(name);
    TS_ASSERT(n + 8 < cap);
    memcpy(buf, name, n + 1);
    if (t > 1) snprintf(buf + n, cap - n, ".s%d", (int)t);
    return buf;
}

static dtype dtype_arg(const zoo_model *m, const zoo_args *a, const char *name) {
    return arg_is(m, a, name, "bf16") ? DT_BF16 : arg_is(m, a, name, "f16") ? DT_F16 : DT_F32;
}

/* The optimizer op of weight *w (called wname) at step t: *w becomes its
 * new value and st its new states (made as zero parameters at step 1). */
static int optimizer_step(zb *b, const char *wname, int64_t t, bool adamw, bool momentum, dtype sdt, int32_t *w, int32_t grad,
                          int32_t st[2]) {
    graph *g = b->g;
    graph_type ty_s = graph_val(g, *w)->type;
    ty_s.dtype = sdt;
    char n0[48], n1[48], n2[48], s1[48], s2[48], base[48];
    snprintf(base, sizeof base, "%s_new", wname);
    step_name(n0, sizeof n0, base, t);
    int32_t in[4] = {*w, grad, 0, 0}, nin = 2;
    const char *names[3] = {n0, n1, n2};
    if (adamw) {
        snprintf(base, sizeof base, "%s_m_new", wname);
        step_name(n1, sizeof n1, base, t);
        snprintf(base, sizeof base, "%s_v_new", wname);
        step_name(n2, sizeof n2, base, t);
        if (t == 1) {
            snprintf(s1, sizeof s1, "%s_m", wname);
            snprintf(s2, sizeof s2, "%s_v", wname);
            st[0] = param(b, s1, ty_s, (graph_init){.kind = INIT_ZEROS});
            st[1] = param(b, s2, ty_s, (graph_init){.kind = INIT_ZEROS});
        }
        in[2] = st[0], in[3] = st[1];
        nin = 4;
    } else if (momentum) {
        snprintf(base, sizeof base, "%s_buf_new", wname);
        step_name(n1, sizeof n1, base, t);
        if (t == 1) {
            snprintf(s1, sizeof s1, "%s_buf", wname);
            st[0] = param(b, s1, ty_s, (graph_init){.kind = INIT_ZEROS});
        }
        in[2] = st[0];
        nin = 3;
    }
    int32_t op = graph_begin_op(g, adamw ? OP_ADAMW : OP_SGD, in, nin);
    graph_set_float(g, op, ATTR_LR, adamw ? 1e-3 : 1e-2);
    if (!adamw && momentum) graph_set_float(g, op, ATTR_MOMENTUM, 0.9);
    if (adamw && t > 1) graph_set_int(g, op, ATTR_STEP, t);
    if (graph_finish_op(g, op, names, NULL, b->d)) return -1;
    *w = graph_result(g, op, 0);
    for (int k = 1; k < graph_opr(g, op)->nout; k++) st[k - 1] = graph_result(g, op, k);
    return 0;
}

static graph *build_train_mlp(const zoo_model *m, const zoo_args *a, diag *d) {
    int64_t T = arg_int(m, a, "tokens"), W = arg_int(m, a, "width"), H = arg_int(m, a, "hidden"), S = arg_int(m, a, "steps");
    bool adamw = arg_is(m, a, "optimizer", "adamw"), clip = arg_is(m, a, "clip", "global_norm");
    bool momentum = !arg_is(m, a, "momentum", "0");
    dtype sdt = dtype_arg(m, a, "state"), gdt = dtype_arg(m, a, "grad");
    if (S > 64) return diag_fail(d, "%s: error: steps must be at most 64, not %lld", a->spec, (long long)S), NULL;
    /* AdamW's second moment is the squared gradient, about 1e-8 here: below
     * f16's smallest normal (6.1e-5) and mostly below its smallest subnormal
     * (6e-8), so v underflows to 0 and the update m / (sqrt(v) + eps) blows
     * up (cosine about 0 against FP32). bf16 has f32's range. */
    if (adamw && sdt == DT_F16)
        return diag_fail(d,
                         "%s: error: state=f16 with optimizer=adamw: AdamW's second moment (squared gradients, about "
                         "1e-8) underflows f16 and the update blows up; use state=bf16 or state=f32",
                         a->spec),
               NULL;
    graph *g = graph_new("train_mlp", a->spec);
    zb b = {g, d, 0, a->shapes_only};
    int32_t x = input(&b, "x", TY(DT_F16, T, W));
    int32_t target = input(&b, "target", TY(DT_F16, T, W));
    /* Master weights in f32; the GEMMs see f16 copies. */
    int32_t w[4] = {
        param(&b, "w1", TY(DT_F32, W, H), normal(0, 1 / sqrt((double)W), 1)),
        param(&b, "b1", TY(DT_F32, H), normal(0, 0.02, 2)),
        param(&b, "w2", TY(DT_F32, H, W), normal(0, 1 / sqrt((double)H), 3)),
        param(&b, "b2", TY(DT_F32, W), normal(0, 0.02, 4)),
    };
    static const char *const wn[4] = {"w1", "b1", "w2", "b2"};
    int32_t st[4][2] = {{0}}; /* optimizer states per weight */
    int32_t outs[64 + 3 * 4], nouts = 0;
    char n[16][48];
    for (int64_t t = 1; t <= S && !b.err; t++) {
        int32_t w1h = cast(&b, step_name(n[0], 48, "w1h", t), w[0], DT_F16, 0);
        int32_t w2h = cast(&b, step_name(n[1], 48, "w2h", t), w[2], DT_F16, 0);
        /* Forward. */
        int32_t hb = binary(&b, OP_ADD, step_name(n[2], 48, "hb", t),
                            matmul(&b, step_name(n[3], 48, "h", t), x, w1h, DT_F32, DT_F32, false, false), w[1]);
        int32_t act = unary(&b, OP_GELU, step_name(n[4], 48, "a", t), hb);
        int32_t ah = cast(&b, step_name(n[5], 48, "ah", t), act, DT_F16, 0);
        int32_t yb = binary(&b, OP_ADD, step_name(n[6], 48, "yb", t),
                            matmul(&b, step_name(n[7], 48, "y", t), ah, w2h, DT_F32, DT_F32, false, false), w[3]);
        /* Loss 0.5 * sum((y - t)^2) / T and its gradient (y - t) / T. */
        int32_t diff = binary(&b, OP_SUB, step_name(n[8], 48, "diff", t), yb,
                              cast(&b, step_name(n[9], 48, "t32", t), target, DT_F32, 0));
        int64_t all[2] = {0, 1}, rows[1] = {0};
        int32_t loss = scale(&b, step_name(n[10], 48, "loss", t),
                             reduce_sum(&b, step_name(n[11], 48, "sq_sum", t),
                                        binary(&b, OP_MUL, step_name(n[12], 48, "sq", t), diff, diff), all, 2),
                             0.5 / (double)T);
        int32_t dy = scale(&b, step_name(n[13], 48, "dy", t), diff, 1.0 / (double)T);
        int32_t dyh = cast(&b, step_name(n[14], 48, "dyh", t), dy, DT_F16, 0);
        /* Backward: weight gradients are matmuls with a transposed operand. */
        int32_t grad[4];
        grad[2] = matmul(&b, step_name(n[15], 48, "g_w2", t), ah, dyh, gdt, DT_F32, true, false);
        grad[3] = reduce_sum(&b, step_name(n[0], 48, "g_b2", t), dy, rows, 1);
        int32_t da = matmul(&b, step_name(n[1], 48, "da", t), dyh, w2h, DT_F32, DT_F32, false, true);
        int32_t dh = binary(&b, OP_GELU_GRAD, step_name(n[2], 48, "dh", t), hb, da);
        grad[0] = matmul(&b, step_name(n[3], 48, "g_w1", t), x, cast(&b, step_name(n[4], 48, "dhh", t), dh, DT_F16, 0), gdt,
                         DT_F32, true, false);
        grad[1] = reduce_sum(&b, step_name(n[5], 48, "g_b1", t), dh, rows, 1);
        if (b.err) return finish(&b, g);
        outs[nouts++] = loss;
        if (clip) {
            int32_t op = graph_begin_op(g, OP_GLOBAL_NORM_CLIP, grad, 4);
            graph_set_float(g, op, ATTR_MAX_NORM, 1.0);
            char c[4][48];
            const char *names[4] = {step_name(c[0], 48, "g_w1c", t), step_name(c[1], 48, "g_b1c", t),
                                    step_name(c[2], 48, "g_w2c", t), step_name(c[3], 48, "g_b2c", t)};
            if (graph_finish_op(g, op, names, NULL, d)) return finish(&b, g);
            for (int i = 0; i < 4; i++) grad[i] = graph_result(g, op, i);
        }
        /* Optimizer: one op per weight; results are the new weights and states. */
        for (int i = 0; i < 4 && !b.err; i++)
            if (optimizer_step(&b, wn[i], t, adamw, momentum, sdt, &w[i], grad[i], st[i])) return finish(&b, g);
    }
    /* The losses of every step, then the last step's weights and states. */
    for (int i = 0; i < 4 && !b.err; i++) {
        outs[nouts++] = w[i];
        for (int k = 0; k < (adamw ? 2 : momentum ? 1 : 0); k++) outs[nouts++] = st[i][k];
    }
    if (!b.err) graph_add_output(g, outs, nouts);
    return finish(&b, g);
}

static const zoo_model zoo_models[] = {
    {"mlp", "two-layer GELU MLP block: x W1 + b1, gelu, W2 + b2",
     {{"tokens", "128", NULL, "rows of x"},
      {"width", "768", NULL, "model width"},
      {"hidden", "3072", NULL, "hidden width"},
      {"precision", "f16", "f16|fp8", "GEMM operands: f16, or f143 with scales"},
      {"acc", "auto", "auto|f32|f16", "GEMM accumulation: auto is f16 for fp8 operands, f32 for f16"}},
     build_mlp},
    {"qk", "attention core: softmax(Q K^T / sqrt(channels)) V per head",
     {{"heads", "4", NULL, "attention heads"},
      {"queries", "17", NULL, "query rows"},
      {"keys", "19", NULL, "key rows"},
      {"channels", "72", NULL, "channels per head"},
      {"qk", "f16", "f16|fp8", "Q and K operands of the score GEMM"},
      {"pv", "f16", "f16|fp8", "probabilities and V operands of the output GEMM"}},
     build_qk},
    {"vit", "SigLIP-style pre-LayerNorm vision encoder (defaults: So400m/14 at 384 px)",
     {{"image", "384", NULL, "image side in pixels"},
      {"patch", "14", NULL, "patch side in pixels"},
      {"width", "1152", NULL, "model width"},
      {"heads", "16", NULL, "attention heads (width / heads channels each)"},
      {"mlp", "4304", NULL, "MLP hidden width"},
      {"layers", "27", NULL, "encoder blocks (one repeat)"},
      {"batch", "1", NULL, "images"},
      {"precision", "f16", "f16|fp8", "projection and MLP GEMM operands"},
      {"acc", "auto", "auto|f32|f16", "their accumulation: auto is f16 for fp8 operands, f32 for f16 (attention products: f32)"}},
     build_vit},
    {"train-mlp", "one training step of a GELU MLP: forward, backward, optimizer",
     {{"tokens", "128", NULL, "rows of x"},
      {"width", "256", NULL, "model width"},
      {"hidden", "1024", NULL, "hidden width"},
      {"optimizer", "sgd", "sgd|adamw", "sgd or adamw"},
      {"clip", "none", "none|global_norm", "global gradient-norm clipping to 1.0"},
      {"momentum", "0.9", "0.9|0", "sgd's momentum (0: plain sgd, no state)"},
      {"state", "f32", "f32|bf16|f16", "dtype of the optimizer state (momentum buffer, or m and v; f16: sgd only)"},
      {"grad", "f32", "f32|bf16", "dtype of the weight gradients' matmuls (what a stored gradient holds)"},
      {"steps", "1", NULL, "training steps, unrolled (the same batch; adamw's step counts 1, 2, ...)"}},
     build_train_mlp},
};

/* ---- spec parsing --------------------------------------------------------- */

static bool choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        const char *e = strchr(c, '|');
        size_t k = e ? (size_t)(e - c) : strlen(c);
        if (k == n && memcmp(c, v, n) == 0) return true;
        if (!e) break;
        c = e + 1;
    }
    return false;
}

static graph *zoo_build(const char *spec, bool shapes_only, diag *d) {
    TS_ASSERT(strncmp(spec, "zoo:", 4) == 0);
    char buf[512];
    if (strlen(spec) >= sizeof buf) return diag_fail(d, "%.40s...: error: zoo spec is too long", spec), NULL;
    strcpy(buf, spec + 4);
    char *params = strchr(buf, ':');
    if (params) *params++ = 0;
    if (params && !*params) params = NULL; /* "zoo:mlp:" has no parameters */
    const zoo_model *m = NULL;
    for (size_t i = 0; i < TS_COUNT(zoo_models); i++)
        if (strcmp(zoo_models[i].name, buf) == 0) m = &zoo_models[i];
    if (!m) return diag_fail(d, "%s: error: unknown zoo model '%s' (mlp, qk, vit, train-mlp; see tessel zoo)", spec, buf), NULL;
    zoo_args a = {.spec = spec, .shapes_only = shapes_only};
    int np = 0;
    for (; np < MAX_PARAMS && m->params[np].name; np++) a.val[np] = m->params[np].def;
    bool given[MAX_PARAMS] = {0};
    /* Items are split by hand: strtok would skip empty items ("a=1,,b=2"). */
    for (char *kv = params, *next; kv; kv = next) {
        next = strchr(kv, ',');
        if (next) *next++ = 0;
        char *eq = strchr(kv, '=');
        if (!eq) return diag_fail(d, "%s: error: expected key=value, found '%s'", spec, kv), NULL;
        *eq = 0;
        int k = -1;
        for (int i = 0; i < np; i++)
            if (strcmp(m->params[i].name, kv) == 0) k = i;
        if (k < 0) {
            char known[256] = "";
            for (int i = 0; i < np; i++) {
                strcat(known, i ? ", " : "");
                strcat(known, m->params[i].name);
            }
            return diag_fail(d, "%s: error: model '%s' has no parameter '%s' (%s)", spec, m->name, kv, known), NULL;
        }
        if (given[k]) return diag_fail(d, "%s: error: parameter '%s' given twice", spec, kv), NULL;
        given[k] = true;
        a.val[k] = eq + 1;
    }
    for (int i = 0; i < np; i++) {
        const zoo_param *p = &m->params[i];
        if (p->choices) {
            if (!choice_ok(p->choices, a.val[i]))
                return diag_fail(d, "%s: error: %s must be one of %s, not '%s'", spec, p->name, p->choices, a.val[i]), NULL;
            continue;
        }
        char *e;
        errno = 0;
        long long v = strtoll(a.val[i], &e, 10);
        if (a.val[i][0] < '0' || a.val[i][0] > '9' || *e || errno || v < 1 || v > (1ll << 24))
            return diag_fail(d, "%s: error: %s must be an integer between 1 and 2^24, not '%s'", spec, p->name, a.val[i]), NULL;
        a.num[i] = v;
    }
    return m->build(m, &a, d);
}

graph *models_zoo_build(const char *spec, diag *d) { return zoo_build(spec, false, d); }

void models_zoo_list(FILE *f) {
    for (size_t i = 0; i < TS_COUNT(zoo_models); i++) {
        const zoo_model *m = &zoo_models[i];
        fprintf(f, "zoo:%s  %s\n", m->name, m->help);
        for (int k = 0; k < MAX_PARAMS && m->params[k].name; k++) {
            const zoo_param *p = &m->params[k];
            char def[64];
            snprintf(def, sizeof def, "%s=%s", p->name, p->def);
            fprintf(f, "    %-22s %s%s%s%s\n", def, p->help, p->choices ? " (" : "", p->choices ? p->choices : "",
                    p->choices ? ")" : "");
        }
        fprintf(f, "\n");
    }
}

graph *models_load_opts(const char *spec, const models_options *o, diag *d) {
    size_t n = strlen(spec);
    bool onnx = n >= 5 && strcmp(spec + n - 5, ".onnx") == 0;
    if (o->precision != MODELS_F16 && !onnx)
        return diag_fail(d, "%s: error: --precision applies to .onnx models (zoo models take precision= in their spec)", spec),
               NULL;
    if (strncmp(spec, "zoo:", 4) == 0) return zoo_build(spec, o->shapes_only, d);
    if (n >= 4 && strcmp(spec + n - 4, ".tsl") == 0) return graph_parse_file(spec, d);
    if (onnx) {
        graph *g = models_onnx_import(spec, o->report, d);
        return g ? models_raise(g, o, d) : NULL;
    }
    return diag_fail(d, "%s: error: a model is a .tsl or .onnx file, or zoo:NAME[:key=value,...]", spec), NULL;
}

graph *models_load(const char *spec, diag *d) {
    models_options o = {.precision = MODELS_F16, .reroll = true, .report = stderr};
    return models_load_opts(spec, &o, d);
}

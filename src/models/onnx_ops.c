/* onnx_ops.c: the op table and one importer per ONNX op: each turns a node
 * (whose inputs are not all constant) into f32 graph ops named after it.
 * The table (OX_OPS in onnx_impl.h) is the one place an op type is named;
 * ops that import alike (binary arithmetic, reshapes, reductions) share one
 * importer, which switches on the row id. */
#include "onnx_impl.h"

#include <ctype.h>
#include <stdlib.h>

/* ---- raised patterns ---------------------------------------------------------------- */

/* A pointwise op of one operand on a value that waits as a shared-weight
 * GEMM's flattened rows (import_matmul): it runs on the rows, which stay
 * flat (a reshape commutes with it), so the GeLU after an MLP's first GEMM
 * meets the GEMM's reduction (absorb.c) in a sequence-first block as in a
 * batch-first one. -2: done, `out` waits as rows; -3: x is no such value. */
static int32_t unary_on_rows(imp *im, graph_op_kind kind, const char *x, const char *out, const char *name) {
    oval *o = x ? ox_val_get(im, x) : NULL;
    if (!ox_waits_as_rows(o)) return -3;
    char rows_name[600];
    snprintf(rows_name, sizeof rows_name, "%s.rows", name);
    int32_t v = ox_emit1(im, kind, o->rows, rows_name);
    if (v < 0) return -1;
    ox_set_rows(im, out, v, o->back_rank, o->back_dim, name);
    return -2;
}

int32_t ox_import_raised(imp *im, const raised *rz) {
    char scope[600];
    snprintf(scope, sizeof scope, "%s/%s", rz->scope, rz->kind == RZ_LAYER_NORM ? "LayerNormalization" : "Gelu");
    const char *name = ox_gname(im, scope, NULL);
    int32_t oi;
    if (strmap_get(&im->outputs, im->cur->output[0], &oi)) name = ox_gname(im, im->cur->output[0], NULL);
    graph_op_kind gelu = rz->kind == RZ_GELU_ERF ? OP_GELU_ERF : OP_GELU;
    if (rz->kind != RZ_LAYER_NORM) {
        int32_t r = unary_on_rows(im, gelu, rz->x, im->cur->output[0], name);
        if (r != -3) return r;
    }
    int32_t x = ox_gval(im, rz->x);
    if (x < 0) return -1;
    const graph_type *t = ox_gtype(im, x);
    if (rz->kind != RZ_LAYER_NORM) return ox_emit1(im, gelu, x, name);
    /* The mean must run over the last axis. */
    const Onnx__NodeProto *mean = NULL;
    for (size_t i = 0; i < im->gp->n_node && !mean; i++)
        if (im->gp->node[i]->name && rz->mean_node && strcmp(im->gp->node[i]->name, rz->mean_node) == 0) mean = im->gp->node[i];
    int na;
    const int64_t *axes = mean ? attr_ints(mean, "axes", &na) : NULL;
    int64_t ax;
    if (!axes || ox_norm_axis(im, axes[0], t->rank, &ax) || ax != t->rank - 1)
        return ox_fail(im, "a layer norm over an axis other than the last is not supported"), -1;
    int64_t w = t->dim[t->rank - 1];
    int32_t gb[2];
    for (int k = 0; k < 2; k++) {
        const char *src = k ? rz->beta : rz->gamma;
        oval *o = src ? ox_cval(im, src) : NULL;
        if (o && o->c.n != w) return ox_fail(im, "layer norm %s has %lld values for width %lld", k ? "bias" : "scale", (long long)o->c.n, (long long)w), -1;
        if (o) {
            gb[k] = ox_const_value(im, o);
        } else {
            char nm[600];
            snprintf(nm, sizeof nm, "%s.%s", name, k ? "beta" : "gamma");
            gb[k] = ox_emit_fill(im, ox_gname(im, nm, NULL), w, k ? 0.0f : 1.0f);
        }
    }
    if (im->err) return -1;
    int32_t in[3] = {x, gb[0], gb[1]};
    int32_t op = graph_begin_op(im->g, OP_LAYER_NORM, in, 3);
    graph_set_float(im->g, op, ATTR_EPS, (float)rz->eps);
    return ox_finish(im, op, name, NULL);
}

/* ---- arithmetic ----------------------------------------------------------------------- */

/* Whether o waits as flattened rows and c, a constant of at most one axis,
 * broadcasts onto the rows as onto the value they stand for. */
static bool rows_and_vector(const oval *o, const oval *c) {
    return ox_waits_as_rows(o) && c && c->is_const && c->c.rank <= 1 &&
           (c->c.rank == 0 || c->c.dim[0] == 1 || c->c.dim[0] == o->back_dim[o->back_rank - 1]);
}

/* Add, Sub, Mul; a multiply by a scalar constant is a scale. */
static int32_t import_binary(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    graph_op_kind k = op == OX_Add ? OP_ADD : op == OX_Sub ? OP_SUB : OP_MUL;
    oval *ca = ox_cval(im, in_name(n, 0)), *cb = ox_cval(im, in_name(n, 1));
    double s;
    /* A bias on a shared-weight GEMM's flattened rows: added to the rows,
     * which stay flat (import_matmul). */
    oval *va = ox_val_get(im, in_name(n, 0)), *vb = ox_val_get(im, in_name(n, 1));
    if (k == OP_ADD && (rows_and_vector(va, vb) || rows_and_vector(vb, va))) {
        const oval *r = rows_and_vector(va, vb) ? va : vb;
        int32_t x = r == va ? r->rows : ox_gval(im, in_name(n, 0)), y = r == vb ? r->rows : ox_gval(im, in_name(n, 1));
        const char *name = ox_node_name(im, NULL);
        char rows_name[600];
        snprintf(rows_name, sizeof rows_name, "%s.rows", name);
        int32_t v = ox_emit2(im, OP_ADD, x, y, rows_name);
        if (v < 0) return -1;
        ox_set_rows(im, n->output[0], v, r->back_rank, r->back_dim, name);
        return -2;
    }
    /* x * c and x / c with a scalar c are scales. */
    if (k == OP_MUL && ((cb && cb->c.n == 1) || (ca && ca->c.n == 1))) {
        oval *c = cb && cb->c.n == 1 ? cb : ca;
        s = ct_at(&c->c, 0);
        return ox_emit_scale(im, ox_gval(im, in_name(n, c == cb ? 0 : 1)), s, ox_node_name(im, NULL));
    }
    return ox_emit2(im, k, ox_gval(im, in_name(n, 0)), ox_gval(im, in_name(n, 1)), ox_node_name(im, NULL));
}

/* Max and Min of any number of operands: one binary op per operand after
 * the first, broadcasting as Add does. */
static int32_t import_max_min(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    if (n->n_input < 1 || !in_name(n, 0)) return ox_fail(im, "needs at least one input"), -1;
    int32_t v = ox_gval(im, in_name(n, 0));
    for (size_t k = 1; k < n->n_input && v >= 0; k++) {
        if (!in_name(n, k)) return ox_fail(im, "input %zu is empty", k), -1;
        char part[32];
        snprintf(part, sizeof part, "part%zu", k);
        v = ox_emit2(im, op == OX_Max ? OP_MAX : OP_MIN, v, ox_gval(im, in_name(n, k)),
                     ox_node_name(im, k + 1 < n->n_input ? part : NULL));
    }
    return v;
}

/* A one-element f32 constant as a graph value, named after the node. */
static int32_t scalar_value(imp *im, const char *suffix, double v) {
    int64_t one = 1;
    ct c = ct_new(im, false, 1, &one);
    c.v[0] = (float)v;
    const char *name = ox_node_name(im, suffix);
    ox_set_const(im, name, c);
    return ox_gval(im, name);
}

/* Clip(x, min, max): max with the lower bound, then min with the upper,
 * each present as an input (opset 11 on, a constant or run-time value) or
 * an attribute (before 11); an absent bound clips nothing. */
static int32_t import_clip(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t v = ox_gval(im, in_name(n, 0)), bound[2] = {-1, -1};
    const char *attrs[2] = {"min", "max"};
    for (int k = 0; k < 2; k++) {
        if (in_name(n, (size_t)k + 1)) bound[k] = ox_gval(im, in_name(n, (size_t)k + 1));
        else if (attr(n, attrs[k])) bound[k] = scalar_value(im, attrs[k], attr_float(n, attrs[k], 0));
        else continue;
        if (bound[k] < 0) return -1;
    }
    if (bound[0] >= 0 && v >= 0) v = ox_emit2(im, OP_MAX, v, bound[0], ox_node_name(im, bound[1] >= 0 ? "lower" : NULL));
    if (bound[1] >= 0 && v >= 0) v = ox_emit2(im, OP_MIN, v, bound[1], ox_node_name(im, NULL));
    return v;
}

/* HardSigmoid(x) = min(max(alpha x + beta, 0), 1) (ONNX's alpha 0.2 and
 * beta 0.5 unless given); HardSwish(x) = x HardSigmoid(x) with alpha 1/6,
 * beta 1/2, as PyTorch's hardswish. Each step is a graph op. */
static int32_t import_hard_sigmoid(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    bool swish = op == OX_HardSwish;
    double alpha = swish ? 1.0 / 6 : attr_float(n, "alpha", 0.2), beta = swish ? 0.5 : attr_float(n, "beta", 0.5);
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    int32_t v = ox_emit_scale(im, x, alpha, ox_node_name(im, "scaled"));
    if (v >= 0) v = ox_emit2(im, OP_ADD, v, scalar_value(im, "beta", beta), ox_node_name(im, "shifted"));
    if (v >= 0) v = ox_emit2(im, OP_MAX, v, scalar_value(im, "zero", 0), ox_node_name(im, "above0"));
    if (v >= 0) v = ox_emit2(im, OP_MIN, v, scalar_value(im, "one", 1), ox_node_name(im, swish ? "gate" : NULL));
    if (swish && v >= 0) v = ox_emit2(im, OP_MUL, x, v, ox_node_name(im, NULL));
    return v;
}

/* A scale by 1/c for a scalar constant c, a multiply by reciprocals for a constant tensor. */
static int32_t import_div(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    oval *cb = ox_cval(im, in_name(n, 1));
    if (!cb) return ox_fail(im, "division by a value computed at run time is not supported"), -1;
    if (cb->c.n == 1) return ox_emit_scale(im, ox_gval(im, in_name(n, 0)), 1.0 / ct_at(&cb->c, 0), ox_node_name(im, NULL));
    ct r = ct_new(im, false, cb->c.rank, cb->c.dim);
    for (int64_t i = 0; i < r.n; i++) r.v[i] = (float)(1.0 / ct_at(&cb->c, i));
    char nm[600];
    snprintf(nm, sizeof nm, "%s.reciprocal", cb->name);
    ox_set_const(im, nm, r);
    return ox_emit2(im, OP_MUL, ox_gval(im, in_name(n, 0)), ox_gval(im, nm), ox_node_name(im, NULL));
}

static int32_t import_pow(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    double e;
    if (ox_scalar_const(im, in_name(n, 1), &e) && e == 2.0) {
        int32_t x = ox_gval(im, in_name(n, 0));
        return ox_emit2(im, OP_MUL, x, x, ox_node_name(im, NULL));
    }
    if (ox_scalar_const(im, in_name(n, 1), &e) && e == 1.0) return ox_gval(im, in_name(n, 0));
    return ox_fail(im, "Pow is supported with exponent 2 (and inside GeLU and layer-norm patterns)"), -1;
}

/* The graph's plain unary ops (num.h's NUM_UNARY_OPS), each imported from
 * the ONNX op of the same name in any case (Relu: relu). */
static const ox_unary unary_ops[] = {
#define X(id, name, ...) {#name, OP_##id, num_##name##_f64},
    NUM_UNARY_OPS(X, )
#undef X
};

static bool same_name_any_case(const char *a, const char *b) {
    for (; *a && tolower((unsigned char)*a) == tolower((unsigned char)*b); a++, b++) {}
    return *a == *b;
}

const ox_unary *ox_unary_of(ox_op_id op) {
    for (size_t i = 0; i < TS_COUNT(unary_ops); i++)
        if (same_name_any_case(unary_ops[i].name, ox_ops[op].name)) return &unary_ops[i];
    TS_UNREACHABLE(); /* a row with import_unary or const_fold_unary names a unary op */
}

/* A plain unary op of run-time data: the graph's op of the same name. */
static int32_t import_unary(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    const char *name = ox_node_name(im, NULL);
    int32_t r = unary_on_rows(im, ox_unary_of(op)->kind, in_name(n, 0), n->output[0], name);
    if (r != -3) return r;
    return ox_emit1(im, ox_unary_of(op)->kind, ox_gval(im, in_name(n, 0)), name);
}

/* Identity, Dropout (inference: nothing); a float Cast (precision comes later). */
static int32_t import_identity(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    return ox_gval(im, in_name(n, 0));
}

static int32_t import_cast(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int64_t to = attr_int(n, "to", 1);
    int32_t x = ox_gval(im, in_name(n, 0));
    bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
                    to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE || to == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    if (x < 0) return -1;
    bool from_int = ox_gtype(im, x)->dtype == DT_I32;
    if (to_float && !from_int) return x; /* precision comes from --precision */
    if (!to_float) return from_int ? x : (ox_fail(im, "a cast of run-time floats to an integer type is not supported"), -1);
    /* Integers (a mask from an int64 input) to floats: a graph cast, to the
     * compiled precision's float type once the precision pass has run. */
    int32_t c = graph_begin_op(im->g, OP_CAST, &x, 1);
    graph_set_dtype(im->g, c, ATTR_TO, DT_F32);
    return ox_finish(im, c, ox_node_name(im, NULL), NULL);
}

/* ---- matmuls -------------------------------------------------------------------------- */

static int32_t import_matmul(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    /* Rows that wait flat (a GeLU after the first GEMM of an MLP) times a
     * shared weight: the next GEMM on the same rows, with no reshape back and
     * forth between them. */
    oval *ra = ox_val_get(im, in_name(n, 0));
    bool flat = ox_waits_as_rows(ra);
    int32_t w = flat ? ox_gval(im, in_name(n, 1)) : -1;
    if (w >= 0 && ox_gtype(im, w)->rank == 2 && ox_gtype(im, w)->dim[0] == ra->back_dim[ra->back_rank - 1]) {
        const char *name = ox_node_name(im, NULL);
        char rows_name[600];
        snprintf(rows_name, sizeof rows_name, "%s.rows", name);
        int64_t back[GRAPH_MAX_RANK];
        memcpy(back, ra->back_dim, sizeof(int64_t) * (size_t)ra->back_rank);
        back[ra->back_rank - 1] = ox_gtype(im, w)->dim[1];
        int32_t v = ox_emit_matmul(im, ra->rows, w, false, rows_name);
        if (v < 0) return -1;
        ox_set_rows(im, n->output[0], v, ra->back_rank, back, name);
        return -2;
    }
    int32_t a = ox_gval(im, in_name(n, 0)), b = flat ? w : ox_gval(im, in_name(n, 1));
    if (a < 0 || b < 0) return -1;
    if (ox_gtype(im, a)->rank < 2 || ox_gtype(im, b)->rank < 2) return ox_fail(im, "MatMul of a vector is not supported"), -1;
    /* A shared weight's flattened rows stay flat until an op needs them as
     * they are: the bias add that usually follows works on the rows, where
     * the GEMM can take it (import_binary). */
    int rank;
    int64_t back[GRAPH_MAX_RANK];
    const char *name = ox_node_name(im, NULL);
    int32_t v = ox_emit_matmul_rows(im, a, b, false, name, &rank, back);
    if (v < 0 || !rank) return v;
    ox_set_rows(im, n->output[0], v, rank, back, name);
    return -2;
}

/* A constant transposed on its last two axes (a Gemm weight with transB). */
static oval *const_transposed(imp *im, oval *o) {
    if (o->c.rank != 2) return NULL;
    int64_t perm[2] = {1, 0};
    ct c;
    if (ct_transpose(im, &o->c, perm, &c)) return NULL;
    char nm[600];
    snprintf(nm, sizeof nm, "%s.T", o->name);
    ox_set_const(im, nm, c);
    return ox_val_get(im, nm);
}

/* matmul, with a constant B under transB transposed at import; scale for
 * alpha and beta, add for C. */
static int32_t import_gemm(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    if (attr_int(n, "transA", 0)) return ox_fail(im, "Gemm with transA is not supported"), -1;
    oval *cb = ox_cval(im, in_name(n, 1));
    bool tb = attr_int(n, "transB", 0) != 0;
    int32_t a = ox_gval(im, in_name(n, 0)), b;
    if (cb && tb) {
        oval *t = const_transposed(im, cb);
        if (!t) return ox_fail(im, "Gemm weight must be 2-D"), -1;
        b = ox_const_value(im, t);
        tb = false;
    } else {
        b = ox_gval(im, in_name(n, 1));
    }
    double alpha = attr_float(n, "alpha", 1.0), beta = attr_float(n, "beta", 1.0);
    bool more = alpha != 1.0 || in_name(n, 2);
    int32_t m = ox_emit_matmul(im, a, b, tb, more ? ox_node_name(im, "matmul") : ox_node_name(im, NULL));
    if (alpha != 1.0) m = ox_emit_scale(im, m, alpha, in_name(n, 2) ? ox_node_name(im, "alpha") : ox_node_name(im, NULL));
    if (in_name(n, 2)) {
        int32_t c = ox_gval(im, in_name(n, 2));
        if (beta != 1.0) c = ox_emit_scale(im, c, beta, ox_node_name(im, "beta"));
        m = ox_emit2(im, OP_ADD, m, c, ox_node_name(im, NULL));
    }
    return m;
}

/* ---- normalizations and reductions -------------------------------------------------- */

/* softmax on the node's axis (opset 13 semantics). */
static int32_t import_softmax(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", -1), ox_gtype(im, x)->rank, &ax)) return -1;
    if (im->opset < 13 && ax != ox_gtype(im, x)->rank - 1)
        return ox_fail(im, "Softmax before opset 13 over an inner axis is not supported"), -1;
    int32_t o = graph_begin_op(im->g, OP_SOFTMAX, &x, 1);
    graph_set_int(im->g, o, ATTR_AXIS, ax);
    return ox_finish(im, o, ox_node_name(im, NULL), NULL);
}

/* layer_norm over the last axis; ones and zeros for an absent scale and bias. */
static int32_t import_layer_norm(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", -1), ox_gtype(im, x)->rank, &ax)) return -1;
    if (ax != ox_gtype(im, x)->rank - 1) return ox_fail(im, "LayerNormalization over more than the last axis is not supported"), -1;
    if (n->n_output > 1 && ((n->output[1] && n->output[1][0]) || (n->n_output > 2 && n->output[2] && n->output[2][0])))
        return ox_fail(im, "LayerNormalization's mean and inverse-deviation outputs are not supported"), -1;
    for (int k = 1; k < 3; k++)
        if (in_name(n, (size_t)k) && !ox_cval(im, in_name(n, (size_t)k)))
            return ox_fail(im, "LayerNormalization with a run-time scale or bias is not supported"), -1;
    int64_t w = ox_gtype(im, x)->dim[ax];
    int32_t gb[2];
    for (int k = 0; k < 2; k++) {
        oval *o = ox_cval(im, in_name(n, (size_t)(k + 1)));
        if (o && o->c.n != w) return ox_fail(im, "scale and bias must have the width's %lld values", (long long)w), -1;
        gb[k] = o ? ox_const_value(im, o) : ox_emit_fill(im, ox_node_name(im, k ? "beta" : "gamma"), w, k ? 0.0f : 1.0f);
    }
    int32_t in[3] = {x, gb[0], gb[1]};
    int32_t o = graph_begin_op(im->g, OP_LAYER_NORM, in, 3);
    graph_set_float(im->g, o, ATTR_EPS, (float)attr_float(n, "epsilon", 1e-5));
    return ox_finish(im, o, ox_node_name(im, NULL), NULL);
}

/* ReduceSum, ReduceMean: reduce_sum (keepdims as given), then a scale by
 * 1/n for the mean; GlobalAveragePool the mean over every axis after the
 * first two, kept. */
static int32_t import_reduce(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    const graph_type *t = ox_gtype(im, x);
    int64_t axes[CT_MAX_RANK];
    int na;
    const int64_t *aa = attr_ints(n, "axes", &na);
    bool global = op == OX_GlobalAveragePool;
    if (global && t->rank < 3) return ox_fail(im, "GlobalAveragePool of a rank-%d input (it needs N, C and spatial axes)", t->rank), -1;
    if (global)
        for (na = 0; na + 2 < t->rank; na++) axes[na] = na + 2;
    else if (na >= 0) memcpy(axes, aa, sizeof(int64_t) * (size_t)na);
    else if (in_name(n, 1) && ox_const_ints(im, in_name(n, 1), axes, CT_MAX_RANK, &na)) return -1;
    if (na < 0) {
        na = t->rank;
        for (int i = 0; i < na; i++) axes[i] = i;
    }
    int64_t count = 1;
    for (int i = 0; i < na; i++) {
        if (ox_norm_axis(im, axes[i], t->rank, &axes[i])) return -1;
        count *= t->dim[axes[i]];
    }
    bool mean = op == OX_ReduceMean || global;
    int32_t o = graph_begin_op(im->g, OP_REDUCE_SUM, &x, 1);
    graph_set_ints(im->g, o, ATTR_AXES, axes, na);
    if (global || attr_int(n, "keepdims", 1)) graph_set_bool(im->g, o, ATTR_KEEPDIMS, true);
    graph_type decl = {.dtype = DT_F32};
    int32_t s = ox_finish(im, o, ox_node_name(im, mean ? "sum" : NULL), &decl);
    return mean ? ox_emit_scale(im, s, 1.0 / (double)count, ox_node_name(im, NULL)) : s;
}

/* ---- data movement ---------------------------------------------------------------------- */

/* Pad in constant mode: pads and the value as constant inputs (opset 11 on;
 * axes from 18) or attributes (before); negative pads (crops) refused. */
static int32_t import_pad(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    const Onnx__AttributeProto *mode = attr(n, "mode");
    if (mode && mode->s.len && !(mode->s.len == 8 && memcmp(mode->s.data, "constant", 8) == 0))
        return ox_fail(im, "only mode 'constant' is supported, not '%.*s'", (int)mode->s.len, (const char *)mode->s.data), -1;
    int r = ox_gtype(im, x)->rank, np, na = -1;
    int64_t pads[2 * GRAPH_MAX_RANK], axes[GRAPH_MAX_RANK], lo[GRAPH_MAX_RANK] = {0}, hi[GRAPH_MAX_RANK] = {0};
    const int64_t *ap = attr_ints(n, "pads", &np);
    if (np >= 0 && np <= 2 * GRAPH_MAX_RANK) memcpy(pads, ap, sizeof(int64_t) * (size_t)np);
    else if (!in_name(n, 1) || ox_const_ints(im, in_name(n, 1), pads, 2 * GRAPH_MAX_RANK, &np))
        return im->err ? -1 : (ox_fail(im, "pads must be a constant"), -1);
    if (in_name(n, 3) && ox_const_ints(im, in_name(n, 3), axes, GRAPH_MAX_RANK, &na)) return -1;
    if (na < 0)
        for (na = 0; na < r; na++) axes[na] = na;
    if (np != 2 * na) return ox_fail(im, "%d pads for %d axes", np, na), -1;
    for (int i = 0; i < na; i++) {
        if (ox_norm_axis(im, axes[i], r, &axes[i])) return -1;
        if (pads[i] < 0 || pads[na + i] < 0) return ox_fail(im, "negative pads (a crop) are not supported"), -1;
        lo[axes[i]] = pads[i], hi[axes[i]] = pads[na + i];
    }
    double value = attr_float(n, "value", 0);
    if (in_name(n, 2) && !ox_scalar_const(im, in_name(n, 2), &value)) return ox_fail(im, "constant_value must be a constant scalar"), -1;
    return ox_emit_pad(im, x, lo, hi, value, ox_node_name(im, NULL));
}

static int32_t import_transpose(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    int r = ox_gtype(im, x)->rank, np;
    const int64_t *p = attr_ints(n, "perm", &np);
    int64_t perm[GRAPH_MAX_RANK];
    if (np >= 0 && np != r) return ox_fail(im, "perm has %d entries for rank %d", np, r), -1;
    for (int i = 0; i < r; i++) perm[i] = np < 0 ? r - 1 - i : p[i];
    return ox_emit_transpose(im, x, perm, r, ox_node_name(im, NULL));
}

/* Reshape, Flatten, Squeeze, Unsqueeze: one reshape. */
static int32_t import_reshape(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    int rank, orank;
    int64_t dim[CT_MAX_RANK], od[CT_MAX_RANK];
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0 || ox_shape_of(im, in_name(n, 0), &rank, dim)) return -1;
    if (ox_reshape_target(im, n, op, rank, dim, &orank, od)) return -1;
    if (orank > GRAPH_MAX_RANK) return ox_fail(im, "result rank %d is above %d", orank, GRAPH_MAX_RANK), -1;
    return ox_emit_reshape(im, x, orank, od, ox_node_name(im, NULL));
}

/* A slice with step 1. */
/* Axis a of v (shape cur) cut into rows of step, column col kept: cur[a]
 * becomes cur[a] / step. The last one is named after the node. */
static int32_t keep_column(imp *im, int32_t v, int rank, int64_t *cur, int a, int64_t step, int64_t col, bool last) {
    int64_t split[GRAPH_MAX_RANK], lo[GRAPH_MAX_RANK], hi[GRAPH_MAX_RANK];
    for (int i = 0, k = 0; i < rank; i++) {
        split[k] = i == a ? cur[i] / step : cur[i], lo[k] = 0, hi[k] = split[k], k++;
        if (i == a) split[k] = step, lo[k] = col, hi[k] = col + 1, k++;
    }
    char what[32];
    snprintf(what, sizeof what, "rows%d", a);
    v = ox_emit_reshape(im, v, rank + 1, split, ox_node_name(im, what));
    snprintf(what, sizeof what, "every%d", a);
    if (v >= 0) v = ox_emit_slice(im, v, lo, hi, ox_node_name(im, what));
    cur[a] /= step;
    return v < 0 ? -1 : ox_emit_reshape(im, v, rank, cur, ox_node_name(im, last ? NULL : "strided"));
}

static int32_t import_slice(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int rank;
    int64_t dim[CT_MAX_RANK], b[CT_MAX_RANK], e[CT_MAX_RANK], s[CT_MAX_RANK];
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0 || ox_shape_of(im, in_name(n, 0), &rank, dim)) return -1;
    if (ox_slice_bounds(im, n, rank, dim, b, e, s)) return -1;
    bool strided = false, padded = false;
    int64_t keep[CT_MAX_RANK] = {0}, pad_hi[GRAPH_MAX_RANK] = {0}; /* per strided axis: the column kept, the padding */
    for (int i = 0; i < rank; i++) {
        if (s[i] < 1) return ox_fail(im, "Slice with a step below 1 is not supported"), -1;
        if (e[i] <= b[i]) return ox_fail(im, "Slice is empty"), -1;
        if (s[i] == 1) continue;
        /* Every s-th element from b: a window of count s elements cut into
         * count rows of s, of which one column is kept: the first, or (a
         * window that would run past the end moved back by r <= b) the r-th. */
        int64_t count = (e[i] - b[i] + s[i] - 1) / s[i];
        if (count == 1) { /* one element: a plain slice */
            e[i] = b[i] + 1, s[i] = 1;
            continue;
        }
        int64_t r = b[i] + count * s[i] - dim[i];
        r = r < 0 ? 0 : r;
        if (r > b[i]) /* nor can it move back: the axis is padded at its end instead, with what is never kept */
            pad_hi[i] = r, r = 0, padded = true;
        if (rank + 1 > GRAPH_MAX_RANK) return ox_fail(im, "Slice with a step on a rank-%d value is not supported", rank), -1;
        b[i] -= r;
        e[i] = b[i] + count * s[i];
        keep[i] = r;
        strided = true;
    }
    if (!strided) return ox_emit_slice(im, x, b, e, ox_node_name(im, NULL));
    if (padded) x = ox_emit_pad(im, x, NULL, pad_hi, 0, ox_node_name(im, "padded"));
    int32_t v = x < 0 ? -1 : ox_emit_slice(im, x, b, e, ox_node_name(im, "window"));
    int64_t cur[GRAPH_MAX_RANK];
    for (int i = 0; i < rank; i++) cur[i] = e[i] - b[i];
    int last = rank - 1;
    while (s[last] == 1) last--;
    for (int a = 0; a <= last && v >= 0; a++)
        if (s[a] != 1) v = keep_column(im, v, rank, cur, a, s[a], keep[a], a == last);
    return v;
}

/* Gather along axis 0 with run-time indices (an embedding lookup): the
 * graph's gather of rows of the data seen as [rows, the rest], its result
 * shaped back to indices' shape + the rest. */
static int32_t runtime_gather(imp *im, const Onnx__NodeProto *n, int32_t x, int rank, const int64_t *dim, int64_t ax) {
    int32_t ids = ox_gval(im, in_name(n, 1));
    if (ids < 0) return -1;
    const graph_type *it = ox_gtype(im, ids);
    if (it->dtype != DT_I32) return ox_fail(im, "Gather's run-time indices are %s, not integers", dtype_name(it->dtype)), -1;
    if (ax != 0) return ox_fail(im, "Gather with run-time indices along axis %lld is not supported (only 0, a lookup of rows)", (long long)ax), -1;
    if (rank < 1 || it->rank + rank - 1 > GRAPH_MAX_RANK) return ox_fail(im, "Gather of a rank-%d table by rank-%d indices is not supported", rank, it->rank), -1;
    int64_t width = 1, td[2], od[GRAPH_MAX_RANK];
    for (int i = 1; i < rank; i++) width *= dim[i];
    td[0] = dim[0], td[1] = width;
    int32_t t = rank == 2 ? x : ox_emit_reshape(im, x, 2, td, ox_node_name(im, "table"));
    if (t < 0) return -1;
    bool back = rank != 2;
    int32_t v = ox_emit2(im, OP_GATHER, t, ids, back ? ox_node_name(im, "rows") : ox_node_name(im, NULL));
    if (v < 0 || !back) return v;
    int k = 0;
    for (int i = 0; i < it->rank; i++) od[k++] = it->dim[i];
    for (int i = 1; i < rank; i++) od[k++] = dim[i];
    return ox_emit_reshape(im, v, k, od, ox_node_name(im, NULL));
}

/* Gather: with run-time indices a lookup of rows (runtime_gather); with
 * constant ones, one slice per index, joined; a scalar index drops its axis. */
static int32_t import_gather(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int rank;
    int64_t dim[CT_MAX_RANK], b[CT_MAX_RANK], e[CT_MAX_RANK];
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0 || ox_shape_of(im, in_name(n, 0), &rank, dim)) return -1;
    oval *ind = ox_cval(im, in_name(n, 1));
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", 0), rank, &ax)) return -1;
    if (!ind) return runtime_gather(im, n, x, rank, dim, ax);
    if (ind->c.n > 64 || ind->c.n < 1 || ind->c.rank > 1) return ox_fail(im, "Gather of more than 64 or of 2-D indices is not supported"), -1;
    int32_t parts[64];
    for (int64_t j = 0; j < ind->c.n; j++) {
        int64_t q = to_i64(ct_at(&ind->c, j));
        if (q < 0) q += dim[ax];
        if (q < 0 || q >= dim[ax]) return ox_fail(im, "Gather index %lld is out of range", (long long)q), -1;
        for (int i = 0; i < rank; i++) {
            b[i] = 0;
            e[i] = dim[i];
        }
        b[ax] = q;
        e[ax] = q + 1;
        parts[j] = ox_emit_slice(im, x, b, e, ox_node_name(im, "slice"));
    }
    int32_t v = ox_emit_concat(im, parts, (int)ind->c.n, ax, ind->c.n > 1 ? ox_node_name(im, "join") : NULL);
    if (ind->c.rank == 1) return ox_emit_reshape(im, v, rank, ox_gtype(im, v)->dim, ox_node_name(im, NULL));
    int64_t od[CT_MAX_RANK];
    int k = 0;
    for (int i = 0; i < rank; i++)
        if (i != ax) od[k++] = dim[i];
    return ox_emit_reshape(im, v, k, od, ox_node_name(im, NULL));
}

static int32_t import_concat(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int32_t xs[64];
    if (n->n_input > 64 || n->n_input < 1) return ox_fail(im, "Concat of %zu values is not supported", n->n_input), -1;
    for (size_t i = 0; i < n->n_input; i++) xs[i] = ox_gval(im, in_name(n, i));
    if (im->err) return -1;
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", 0), ox_gtype(im, xs[0])->rank, &ax)) return -1;
    return ox_emit_concat(im, xs, (int)n->n_input, ax, ox_node_name(im, NULL));
}

/* The split sizes: the attribute (opset < 13), input 1, or equal parts. */
static int split_sizes(imp *im, const Onnx__NodeProto *n, int64_t len, int64_t *sizes, int *ns) {
    const int64_t *sa = attr_ints(n, "split", ns);
    if (*ns >= 0) {
        if (*ns > 64) return ox_fail(im, "too many splits");
        memcpy(sizes, sa, sizeof(int64_t) * (size_t)*ns);
    } else if (in_name(n, 1)) {
        if (ox_const_ints(im, in_name(n, 1), sizes, 64, ns)) return -1;
    } else {
        *ns = (int)n->n_output;
        if (*ns < 1 || *ns > 64 || len % *ns) return ox_fail(im, "Split into %d equal parts of %lld", *ns, (long long)len);
        for (int i = 0; i < *ns; i++) sizes[i] = len / *ns;
    }
    return 0;
}

/* One slice per output; sets the outputs itself. */
static int32_t import_split(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int rank;
    int64_t dim[CT_MAX_RANK];
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0 || ox_shape_of(im, in_name(n, 0), &rank, dim)) return -1;
    int64_t ax, sizes[64];
    int ns;
    if (ox_norm_axis(im, attr_int(n, "axis", 0), rank, &ax)) return -1;
    if (split_sizes(im, n, dim[ax], sizes, &ns)) return -1;
    if ((size_t)ns != n->n_output) return ox_fail(im, "Split sizes do not match its %zu outputs", n->n_output), -1;
    int64_t at = 0, b[CT_MAX_RANK], e[CT_MAX_RANK];
    for (int i = 0; i < ns; i++) {
        for (int k = 0; k < rank; k++) {
            b[k] = 0;
            e[k] = dim[k];
        }
        if (sizes[i] <= 0 || sizes[i] > dim[ax] - at) return ox_fail(im, "Split sizes exceed the axis"), -1;
        b[ax] = at;
        e[ax] = at + sizes[i];
        at += sizes[i];
        const char *nm = ox_gname(im, n->output[i], NULL);
        ox_set_graph(im, n->output[i], ox_emit_slice(im, x, b, e, nm));
    }
    return -2;
}

/* reshape to the result rank, then concat along every stretched axis. */
static int32_t import_expand(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int rank;
    int64_t dim[CT_MAX_RANK];
    int32_t x = ox_gval(im, in_name(n, 0));
    int64_t want[CT_MAX_RANK], od[CT_MAX_RANK];
    int nw, r;
    if (x < 0 || ox_shape_of(im, in_name(n, 0), &rank, dim) || ox_const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &nw) ||
        ox_bcast_shape(im, rank, dim, nw, want, &r, od))
        return -1;
    if (r > GRAPH_MAX_RANK) return ox_fail(im, "Expand to rank %d (at most %d)", r, GRAPH_MAX_RANK), -1;
    int64_t lifted[CT_MAX_RANK];
    for (int i = 0; i < r; i++) lifted[i] = i < r - rank ? 1 : dim[i - (r - rank)];
    x = ox_emit_reshape(im, x, r, lifted, r != rank ? ox_node_name(im, "lift") : NULL);
    for (int i = 0; i < r && !im->err; i++) {
        if (lifted[i] == od[i]) continue;
        if (od[i] > 64) return ox_fail(im, "Expand of run-time data by more than 64 is not supported"), -1;
        TS_ASSERT(lifted[i] == 1 && od[i] >= 0); /* bcast_shape: only size-1 axes stretch, nothing negative */
        if (od[i] == 0) return ox_fail(im, "Expand of run-time data to an empty axis is not supported"), -1;
        int32_t xs[64];
        for (int k = 0; k < od[i]; k++) xs[k] = x;
        x = ox_emit_concat(im, xs, (int)od[i], i, ox_node_name(im, "repeat"));
    }
    return x;
}

/* ---- the table ------------------------------------------------------------------------- */

const ox_op ox_ops[OX_COUNT] = {
#define X(name, when, fold, import, outs) {OX_##name, #name, when, fold, import, outs},
    OX_OPS(X)
#undef X
};
_Static_assert(TS_COUNT(ox_ops) == OX_COUNT, "one row per op id");

const ox_op *ox_op_find(const char *op_type) {
    for (size_t i = 0; i < TS_COUNT(ox_ops); i++)
        if (strcmp(ox_ops[i].name, op_type) == 0) return &ox_ops[i];
    return NULL;
}

int32_t ox_import_node(imp *im, const ox_op *row, const Onnx__NodeProto *n) {
    if (!n->n_output || !n->output[0]) return ox_fail(im, "node has no output"), -1;
    if (!row || !row->import) return ox_fail(im, "op is not supported"), -1;
    return row->import(im, n, row->id);
}

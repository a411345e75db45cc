/* onnx_emit.c: graph building for the importers: f32 graph ops named after
 * the node that makes them (stable names, the recipe keys), constants as
 * data() parameters. Every emitter passes -1 through once an error is set. */
#include "onnx_impl.h"

#include <stdlib.h>

/* A .tsl value name from an ONNX name: '/' becomes '.', other characters
 * outside [A-Za-z0-9_.] become '_', unique in the graph. */
const char *ox_gname(imp *im, const char *onnx_name, const char *suffix) {
    char buf[512];
    size_t k = 0;
    const char *s = onnx_name && onnx_name[0] ? onnx_name : "v";
    while (*s == '/') s++;
    for (; *s && k < 400; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        buf[k++] = c == '/' ? '.' : ok ? c : '_';
    }
    if (k == 0) buf[k++] = 'v';
    buf[k] = 0;
    if (suffix) snprintf(buf + k, sizeof buf - k, ".%s", suffix);
    if (graph_lookup(im->g, buf) < 0) return arena_strdup(&im->a, buf);
    size_t base = strlen(buf);
    for (int i = 2;; i++) {
        snprintf(buf + base, sizeof buf - base, "_%d", i);
        if (graph_lookup(im->g, buf) < 0) return arena_strdup(&im->a, buf);
    }
}

/* The name of an op the current node makes: the node name for its
 * final result, the node name plus a suffix for helpers. */
const char *ox_node_name(imp *im, const char *suffix) {
    int32_t k;
    /* A graph output names its value after itself (the files NAME.npy). */
    if (!suffix && im->cur && im->cur->n_output && im->cur->output[0] && strmap_get(&im->outputs, im->cur->output[0], &k))
        return ox_gname(im, im->cur->output[0], NULL);
    const char *n = im->cur && im->cur->name && im->cur->name[0] ? im->cur->name
                    : im->cur && im->cur->n_output ? im->cur->output[0] : "v";
    return ox_gname(im, n, suffix);
}

const graph_type *ox_gtype(imp *im, int32_t v) { return &graph_val(im->g, v)->type; }

int32_t ox_finish(imp *im, int32_t op, const char *name, const graph_type *declared) {
    if (im->err) return -1;
    const char *names[1] = {name};
    diag gd = {0};
    if (graph_finish_op(im->g, op, names, declared, &gd)) {
        /* Shape rule failures name the graph op; say which node made it. */
        char *m = strstr(gd.text, "error: ");
        gd.text[strcspn(gd.text, "\n")] = 0;
        ox_fail(im, "%s", m ? m + 7 : gd.text);
        return -1;
    }
    return graph_result(im->g, op, 0);
}

int32_t ox_emit1(imp *im, graph_op_kind k, int32_t x, const char *name) {
    if (im->err) return -1;
    return ox_finish(im, graph_begin_op(im->g, k, &x, 1), name, NULL);
}

int32_t ox_emit2(imp *im, graph_op_kind k, int32_t x, int32_t y, const char *name) {
    if (im->err) return -1;
    int32_t in[2] = {x, y};
    return ox_finish(im, graph_begin_op(im->g, k, in, 2), name, NULL);
}

/* a @ b, or a @ b^T (tb). A weight b of rank 2 is shared by every batch of
 * a: more than one batch is one GEMM over a's rows flattened (a reshape in
 * and out), not one small GEMM per batch (PyTorch's [T, 1, E]
 * in-projections). */
int32_t ox_emit_matmul(imp *im, int32_t a, int32_t b, bool tb, const char *name) {
    int rank;
    int64_t back[GRAPH_MAX_RANK];
    int32_t v = ox_emit_matmul_rows(im, a, b, tb, name, &rank, back);
    return v < 0 || !rank ? v : ox_emit_reshape(im, v, rank, back, name);
}

int32_t ox_emit_matmul_rows(imp *im, int32_t a, int32_t b, bool tb, const char *name, int *rank, int64_t *back) {
    *rank = 0;
    if (im->err) return -1;
    const graph_type ta = *ox_gtype(im, a), tbt = *ox_gtype(im, b);
    int64_t batches = 1;
    for (int i = 0; i + 2 < ta.rank; i++) batches *= ta.dim[i];
    if (ta.rank > 2 && tbt.rank == 2 && batches > 1) {
        int64_t rows = 1, flat[2];
        for (int i = 0; i + 1 < ta.rank; i++) rows *= back[i] = ta.dim[i];
        flat[0] = rows, flat[1] = ta.dim[ta.rank - 1];
        back[ta.rank - 1] = tb ? tbt.dim[0] : tbt.dim[1];
        char rows_name[600];
        snprintf(rows_name, sizeof rows_name, "%s.rows", name);
        int32_t x = ox_emit_reshape(im, a, 2, flat, ox_node_name(im, "flat"));
        *rank = ta.rank;
        return x < 0 ? -1 : ox_emit_matmul(im, x, b, tb, rows_name);
    }
    int32_t in[2] = {a, b};
    int32_t op = graph_begin_op(im->g, OP_MATMUL, in, 2);
    if (tb) graph_set_bool(im->g, op, ATTR_TRANSPOSE_B, true);
    graph_set_dtype(im->g, op, ATTR_ACC, DT_F32);
    graph_type decl = {.dtype = DT_F32};
    return ox_finish(im, op, name, &decl);
}

int32_t ox_emit_pad(imp *im, int32_t x, const int64_t *lo, const int64_t *hi, double value, const char *name) {
    if (im->err) return -1;
    int rank = ox_gtype(im, x)->rank;
    const int64_t zero[GRAPH_MAX_RANK] = {0};
    int32_t op = graph_begin_op(im->g, OP_PAD, &x, 1);
    graph_set_ints(im->g, op, ATTR_LOW, lo ? lo : zero, rank);
    graph_set_ints(im->g, op, ATTR_HIGH, hi, rank);
    if (value != 0) graph_set_float(im->g, op, ATTR_VALUE, value);
    return ox_finish(im, op, name, NULL);
}

int32_t ox_emit_scale(imp *im, int32_t x, double by, const char *name) {
    if (im->err) return -1;
    int32_t op = graph_begin_op(im->g, OP_SCALE, &x, 1);
    graph_set_float(im->g, op, ATTR_BY, by);
    return ox_finish(im, op, name, NULL);
}

int32_t ox_emit_reshape(imp *im, int32_t x, int rank, const int64_t *dim, const char *name) {
    if (im->err) return -1;
    const graph_type *t = ox_gtype(im, x);
    if (t->rank == rank && memcmp(t->dim, dim, sizeof(int64_t) * (size_t)rank) == 0 && !name) return x;
    graph_type decl = graph_type_make(t->dtype, rank, dim);
    return ox_finish(im, graph_begin_op(im->g, OP_RESHAPE, &x, 1), name ? name : ox_node_name(im, "reshape"), &decl);
}

int32_t ox_emit_transpose(imp *im, int32_t x, const int64_t *perm, int rank, const char *name) {
    if (im->err) return -1;
    int32_t op = graph_begin_op(im->g, OP_TRANSPOSE, &x, 1);
    graph_set_ints(im->g, op, ATTR_PERM, perm, rank);
    return ox_finish(im, op, name, NULL);
}

int32_t ox_emit_slice(imp *im, int32_t x, const int64_t *start, const int64_t *end, const char *name) {
    if (im->err) return -1;
    int rank = ox_gtype(im, x)->rank;
    int32_t op = graph_begin_op(im->g, OP_SLICE, &x, 1);
    graph_set_ints(im->g, op, ATTR_START, start, rank);
    graph_set_ints(im->g, op, ATTR_END, end, rank);
    return ox_finish(im, op, name, NULL);
}

int32_t ox_emit_concat(imp *im, const int32_t *xs, int n, int64_t axis, const char *name) {
    if (im->err) return -1;
    if (n == 1 && !name) return xs[0];
    int32_t op = graph_begin_op(im->g, OP_CONCAT, xs, n);
    graph_set_int(im->g, op, ATTR_AXIS, axis);
    return ox_finish(im, op, name, NULL);
}

int32_t ox_const_value(imp *im, oval *o) {
    if (o->gv >= 0) return o->gv;
    ct *c = &o->c;
    if (c->n == 0) return ox_fail(im, "value '%s' is empty", o->name), -1;
    if (c->rank > GRAPH_MAX_RANK) return ox_fail(im, "constant '%s' has rank %d (at most %d)", o->name, c->rank, GRAPH_MAX_RANK), -1;
    const void *data = c->raw;
    if (!data) {
        float *f = ox_keep_add(im->keep, xmalloc(sizeof(float) * (size_t)c->n), 0, false);
        for (int64_t i = 0; i < c->n; i++) f[i] = (float)c->v[i];
        data = f;
    }
    int64_t dim[GRAPH_MAX_RANK];
    int rank = c->rank;
    for (int i = 0; i < rank; i++) dim[i] = c->dim[i];
    if (rank == 0) dim[rank++] = 1; /* scalars broadcast as [1] */
    graph_init init = {.kind = INIT_DATA, .parts = &data, .nparts = 1};
    int32_t op = graph_add_param(im->g, ox_gname(im, o->name, NULL), graph_type_make(DT_F32, rank, dim), init);
    o->gv = graph_result(im->g, op, 0);
    return o->gv;
}

/* A w-long f32 parameter filled with v (a layer norm's default scale or bias). */
int32_t ox_emit_fill(imp *im, const char *name, int64_t w, float v) {
    if (w > CT_MAX_FOLD) return ox_fail(im, "a layer norm over %lld values is too wide", (long long)w), -1;
    float *f = ox_keep_add(im->keep, xmalloc(sizeof(float) * (size_t)w), 0, false);
    for (int64_t i = 0; i < w; i++) f[i] = v;
    const void *data = f;
    graph_init init = {.kind = INIT_DATA, .parts = &data, .nparts = 1};
    return graph_result(im->g, graph_add_param(im->g, name, graph_type_make(DT_F32, 1, &w), init), 0);
}

int32_t ox_gval(imp *im, const char *name) {
    if (im->err) return -1;
    oval *o = name ? ox_val_get(im, name) : NULL;
    if (!o) return ox_fail(im, "input '%s' is not defined before its use", name ? name : "(missing)"), -1;
    if (o->is_const) return ox_const_value(im, o);
    if (ox_waits_as_rows(o)) o->gv = ox_emit_reshape(im, o->rows, o->back_rank, o->back_dim, o->back_name);
    return o->gv;
}

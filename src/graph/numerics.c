/* numerics.c: a plan's numeric decisions (graph.h) and their JSON form, the
 * one the package's metadata carries. The reader treats its input as
 * untrusted: every entry must name an op of the graph of the right kind and
 * fit that op's shapes, so the emulated reference never indexes out of range. */
#include "graph.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void graph_numerics_init(graph_numerics *n, const graph *g) {
    memset(n, 0, sizeof *n);
    arena_init(&n->arena);
    n->nops = g->ops.n;
    n->op = arena_alloc(&n->arena, sizeof(graph_op_plan) * (size_t)(g->ops.n + 1));
}

void graph_numerics_free(graph_numerics *n) {
    arena_free(&n->arena);
    memset(n, 0, sizeof *n);
}

/* ---- writing ------------------------------------------------------------- */

static json_t *ints(const int64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *ints32(const int32_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

char *graph_numerics_json(const graph *g, const graph_numerics *n) {
    json_t *ops = json_array();
    for (int32_t i = 0; i < n->nops; i++) {
        const graph_op_plan *pl = &n->op[i];
        const graph_op *op = graph_opr(g, i);
        if (pl->kind == OP_INPUT || pl->kind == OP_SUM_SGD || pl->kind == OP_SUM_ADAMW) continue; /* a fixed order */
        json_t *e = json_pack("{s:s, s:s}", "op", graph_op_name(g, i), "kind", graph_op_infos[pl->kind].name);
        if (graph_kind_has_gemm(pl->kind)) {
            json_object_set_new(e, "acc", json_string(dtype_name(pl->gemm.acc)));
            json_object_set_new(e, "partials", json_string(dtype_name(pl->gemm.partials)));
            json_object_set_new(e, "k_bounds", ints(pl->gemm.k_bounds, pl->gemm.nk + 1));
        } else if (pl->kind == OP_REDUCE_SUM) {
            json_object_set_new(e, "blocks", ints(pl->block, graph_val(g, op->in[0])->type.rank));
        } else if (pl->kind == OP_SCALE) {
            json_object_set_new(e, "folded", json_true());
        } else if (pl->kind == OP_SOFTMAX) {
            json_object_set_new(e, "prescale", json_real(pl->prescale));
        } else if (pl->kind == OP_LAYER_NORM) {
            json_object_set_new(e, "part", json_integer(pl->part));
        } else {
            json_t *gs = json_array();
            for (int32_t k = 0; k < op->nin; k++) {
                const graph_norm_grad *gr = &pl->grads[k];
                int rank = graph_val(g, op->in[k])->type.rank;
                json_array_append_new(gs, json_pack("{s:o, s:i, s:o}", "blocks", ints(gr->block, rank), "row_base",
                                                    (int)gr->row_base, "row_stride", ints32(gr->row_stride, rank)));
            }
            json_object_set_new(e, "grads", gs);
        }
        json_array_append_new(ops, e);
    }
    json_t *j = json_pack("{s:s, s:i, s:o}", "format", "tessel-numerics", "version", 1, "ops", ops);
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return s;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct rd {
    const graph *g;
    const char *what;
    diag *d;
    graph_numerics *n;
} rd;

#define BAD(r, ...) bad(r, __VA_ARGS__)
static int bad(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(rd *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail_in(r->d, r->what, "numeric plan: ", fmt, ap);
    va_end(ap);
    return rc;
}

/* n integers of member key of e, each in [lo, hi[i]] (hi NULL: no bound). */
static int read_ints(rd *r, const char *op, json_t *e, const char *key, int n, int64_t lo, const int64_t *hi, int64_t *out) {
    json_t *a = json_object_get(e, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        return BAD(r, "op '%s': '%s' must be an array of %d integers", op, key, n);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_integer(v)) return BAD(r, "op '%s': '%s'[%d] is not an integer", op, key, i);
        int64_t x = json_integer_value(v);
        if (x < lo || (hi && x > hi[i]))
            return BAD(r, "op '%s': '%s'[%d] = %lld is out of range", op, key, i, (long long)x);
        out[i] = x;
    }
    return 0;
}

static int read_dtype(rd *r, const char *op, json_t *e, const char *key, dtype *out) {
    const char *s = json_string_value(json_object_get(e, key));
    if (!s || !dtype_parse(s, strlen(s), out) || (*out != DT_F32 && *out != DT_F16))
        return BAD(r, "op '%s': '%s' must be \"f32\" or \"f16\"", op, key);
    return 0;
}

static int read_matmul(rd *r, const char *name, json_t *e, const graph_op *op, graph_op_plan *pl) {
    const graph_type *ta = &graph_val(r->g, op->in[0])->type;
    int64_t K = ta->dim[ta->rank - (graph_attr_bool(op, ATTR_TRANSPOSE_A) ? 2 : 1)];
    if (read_dtype(r, name, e, "acc", &pl->gemm.acc) || read_dtype(r, name, e, "partials", &pl->gemm.partials)) return -1;
    json_t *a = json_object_get(e, "k_bounds");
    size_t nb = json_is_array(a) ? json_array_size(a) : 0;
    if (nb < 2 || (int64_t)nb > K + 1)
        return BAD(r, "op '%s': 'k_bounds' must list 2 to %lld bounds, the matmul's K = %lld being split at most K ways", name,
                   (long long)K + 1, (long long)K);
    pl->gemm.nk = (int32_t)nb - 1;
    pl->gemm.k_bounds = arena_alloc(&r->n->arena, sizeof(int64_t) * nb);
    if (read_ints(r, name, e, "k_bounds", (int)nb, 0, NULL, pl->gemm.k_bounds)) return -1;
    bool ascending = pl->gemm.k_bounds[0] == 0 && pl->gemm.k_bounds[nb - 1] == K;
    for (size_t i = 1; i < nb; i++) ascending &= pl->gemm.k_bounds[i] > pl->gemm.k_bounds[i - 1];
    if (!ascending)
        return BAD(r, "op '%s': 'k_bounds' must ascend from 0 to the matmul's K = %lld (was the package compiled from this model?)",
                   name, (long long)K);
    return 0;
}

static int read_clip(rd *r, const char *name, json_t *e, const graph_op *op, graph_op_plan *pl) {
    json_t *gs = json_object_get(e, "grads");
    if (!json_is_array(gs) || (int32_t)json_array_size(gs) != op->nin)
        return BAD(r, "op '%s': 'grads' must be an array of %d entries", name, (int)op->nin);
    pl->grads = arena_alloc(&r->n->arena, sizeof(graph_norm_grad) * (size_t)op->nin);
    for (int32_t k = 0; k < op->nin; k++) {
        const graph_type *t = &graph_val(r->g, op->in[k])->type;
        json_t *ge = json_array_get(gs, (size_t)k);
        graph_norm_grad *gr = &pl->grads[k];
        int64_t st[GRAPH_MAX_RANK], big[GRAPH_MAX_RANK];
        for (int a = 0; a < GRAPH_MAX_RANK; a++) big[a] = 1 << 24;
        if (!json_is_object(ge)) return BAD(r, "op '%s': grads[%d] is not an object", name, (int)k);
        if (read_ints(r, name, ge, "blocks", t->rank, 1, t->dim, gr->block) ||
            read_ints(r, name, ge, "row_stride", t->rank, 0, big, st))
            return -1;
        json_t *rb = json_object_get(ge, "row_base");
        if (!json_is_integer(rb) || json_integer_value(rb) < 0 || json_integer_value(rb) > (1 << 24))
            return BAD(r, "op '%s': grads[%d].row_base must be an integer in 0..2^24", name, (int)k);
        gr->row_base = (int32_t)json_integer_value(rb);
        for (int a = 0; a < t->rank; a++) gr->row_stride[a] = (int32_t)st[a];
    }
    return 0;
}

/* A softmax's prescale is the factor of the scale making its operand, which
 * passes its operand on (its entry says folded; checked once all are read). */
static int read_prescale(rd *r, const char *name, json_t *e, const graph_op *op, graph_op_plan *pl) {
    json_t *s = json_object_get(e, "prescale");
    const graph_value *x = graph_val(r->g, op->in[0]);
    const graph_op *sc = x->is_arg ? NULL : graph_opr(r->g, x->def);
    if (!json_is_number(s) || !sc || sc->kind != OP_SCALE || (float)json_number_value(s) != (float)graph_attr_float(sc, ATTR_BY) ||
        !(json_number_value(s) > 0))
        return BAD(r, "op '%s': 'prescale' must be the positive factor of the scale making its operand", name);
    pl->prescale = (float)json_number_value(s);
    return 0;
}

static int read_entry(rd *r, json_t *e, size_t index) {
    const char *name = json_string_value(json_object_get(e, "op"));
    const char *kind = json_string_value(json_object_get(e, "kind"));
    if (!json_is_object(e) || !name || !kind) return BAD(r, "entry %zu needs string members 'op' and 'kind'", index);
    int32_t v = graph_lookup(r->g, name);
    const graph_value *gv = v >= 0 ? graph_val(r->g, v) : NULL;
    if (!gv || gv->is_arg || gv->def_index != 0 || graph_opr(r->g, gv->def)->kind == OP_INPUT ||
        graph_opr(r->g, gv->def)->kind == OP_PARAM)
        return BAD(r, "entry %zu: the graph has no op '%s' (was the package compiled from this model?)", index, name);
    int32_t id = gv->def;
    const graph_op *op = graph_opr(r->g, id);
    if (strcmp(kind, graph_op_infos[op->kind].name) != 0)
        return BAD(r, "op '%s' is a %s in the graph, not a %s", name, graph_op_infos[op->kind].name, kind);
    graph_op_plan *pl = &r->n->op[id];
    if (pl->kind != OP_INPUT) return BAD(r, "op '%s' has two entries", name);
    pl->kind = op->kind;
    switch (op->kind) {
    case OP_MATMUL:
    case OP_MATMUL_SGD:
    case OP_MATMUL_ADAMW: return read_matmul(r, name, e, op, pl);
    case OP_REDUCE_SUM: {
        const graph_type *t = &graph_val(r->g, op->in[0])->type;
        return read_ints(r, name, e, "blocks", t->rank, 1, t->dim, pl->block);
    }
    case OP_GLOBAL_NORM_CLIP: return read_clip(r, name, e, op, pl);
    case OP_SCALE:
        if (!json_is_true(json_object_get(e, "folded"))) return BAD(r, "op '%s': a scale's entry must say \"folded\": true", name);
        pl->folded = true;
        return 0;
    case OP_SOFTMAX: return read_prescale(r, name, e, op, pl);
    case OP_LAYER_NORM: {
        const graph_type *t = &graph_val(r->g, op->in[0])->type;
        int64_t c = t->rank ? t->dim[t->rank - 1] : 1;
        json_t *pv = json_object_get(e, "part");
        if (!json_is_integer(pv) || json_integer_value(pv) < 1 || json_integer_value(pv) > c)
            return BAD(r, "op '%s': 'part' must be an integer in 1..%lld (its row's length)", name, (long long)c);
        pl->part = json_integer_value(pv);
        return 0;
    }
    default: return BAD(r, "op '%s': a %s takes no numeric plan", name, kind);
    }
}

int graph_numerics_parse(const graph *g, const char *meta_json, const char *what, graph_numerics *out, diag *d) {
    graph_numerics_init(out, g);
    rd r = {g, what, d, out};
    json_error_t err;
    json_t *root = json_loads(meta_json ? meta_json : "", 0, &err);
    json_t *nu = root ? json_object_get(root, "numerics") : NULL;
    int rc = 0;
    if (!nu) {
        rc = BAD(&r, "the metadata has no 'numerics' object (a package from an older tessel?)");
    } else if (!json_is_object(nu) || json_object_get(nu, "format") == NULL ||
               strcmp(json_string_value(json_object_get(nu, "format")) ? json_string_value(json_object_get(nu, "format")) : "",
                      "tessel-numerics") != 0) {
        rc = BAD(&r, "'numerics' is not a tessel-numerics object");
    } else if (json_integer_value(json_object_get(nu, "version")) != 1) {
        rc = BAD(&r, "version %lld, but this tessel reads only version 1",
                 (long long)json_integer_value(json_object_get(nu, "version")));
    } else {
        json_t *ops = json_object_get(nu, "ops");
        if (!json_is_array(ops)) rc = BAD(&r, "'ops' is not an array");
        for (size_t i = 0; rc == 0 && json_is_array(ops) && i < json_array_size(ops); i++)
            rc = read_entry(&r, json_array_get(ops, i), i);
    }
    for (int32_t i = 0; rc == 0 && i < g->ops.n; i++) {
        graph_op_kind k = graph_opr(g, i)->kind;
        if ((graph_kind_has_gemm(k) || k == OP_REDUCE_SUM || k == OP_GLOBAL_NORM_CLIP) && out->op[i].kind == OP_INPUT)
            rc = BAD(&r, "no entry for %s '%s' (was the package compiled from this model?)", graph_op_infos[k].name,
                     graph_op_name(g, i));
        const graph_value *x = k == OP_SOFTMAX && out->op[i].prescale != 0 ? graph_val(g, graph_opr(g, i)->in[0]) : NULL;
        if (rc == 0 && x && !out->op[x->def].folded)
            rc = BAD(&r, "op '%s' has a prescale, but the scale '%s' making its operand is not folded", graph_op_name(g, i),
                     graph_op_name(g, x->def));
    }
    json_decref(root);
    if (rc) graph_numerics_free(out);
    return rc;
}

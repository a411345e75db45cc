/* graph.c: graph construction (used by the parser and the model zoo). */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

graph *graph_new(const char *name, const char *path) {
    graph *g = xcalloc(1, sizeof *g);
    arena_init(&g->arena);
    g->name = arena_strdup(&g->arena, name);
    g->path = arena_strdup(&g->arena, path ? path : name);
    g->cur_repeat = -1;
    return g;
}

void graph_free(graph *g) {
    if (!g) return;
    strmap_free(&g->names);
    if (g->keep_free) g->keep_free(g->keep);
    arena_free(&g->arena);
    free(g);
}

const char *graph_op_name(const graph *g, int32_t op) {
    const graph_op *o = graph_opr(g, op);
    if (o->nout > 0) return graph_val(g, o->out[0])->name;
    return graph_op_infos[o->kind].name;
}

int64_t graph_type_numel(const graph_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        if (__builtin_mul_overflow(n, t->dim[i], &n)) return INT64_MAX; /* the verifier rejects such types */
    return n;
}

bool graph_type_equal(const graph_type *a, const graph_type *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    if (dtype_is_f8(a->dtype) && a->scale != b->scale) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

void graph_type_str(const graph_type *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "%s", dtype_name(t->dtype));
    if (k < cap) fmt_dims(buf + k, cap - k, t->rank, t->dim);
}

graph_type graph_type_make(dtype t, int rank, const int64_t *dim) {
    graph_type ty = {.dtype = t, .rank = rank};
    TS_ASSERT(rank >= 0 && rank <= GRAPH_MAX_RANK);
    for (int i = 0; i < rank; i++) ty.dim[i] = dim[i];
    return ty;
}

int32_t graph_value_scope(const graph *g, int32_t v) {
    const graph_value *x = graph_val(g, v);
    return x->is_arg ? x->def : graph_opr(g, x->def)->parent;
}

bool graph_value_visible(const graph *g, int32_t v, int32_t block) {
    int32_t s = graph_value_scope(g, v);
    for (int32_t b = block;; b = graph_opr(g, b)->parent) {
        if (b == s) return true;
        if (b < 0) return false;
    }
}

int32_t graph_lookup(const graph *g, const char *name) {
    int32_t id;
    return strmap_get(&g->names, name, &id) ? id : -1;
}

/* A new value named name (or a fresh "tN"); the caller guarantees uniqueness
 * of given names (the parser reports duplicates itself). */
static int32_t new_value(graph *g, const char *name, graph_type t, int32_t def, int32_t idx, bool arg) {
    int32_t id = g->values.n;
    char fresh[32];
    if (!name) {
        int k = id;
        do snprintf(fresh, sizeof fresh, "t%d", k++);
        while (graph_lookup(g, fresh) >= 0);
        name = fresh;
    }
    graph_value v = {.name = arena_strdup(&g->arena, name), .type = t, .def = def, .def_index = idx, .is_arg = arg};
    vec_push(&g->arena, &g->values, v);
    strmap_put(&g->names, g->values.v[id].name, id);
    return id;
}

static graph_block *current_block(graph *g) {
    return g->cur_repeat < 0 ? &g->body : &graph_opr(g, g->cur_repeat)->body;
}

static int32_t new_op(graph *g, graph_op_kind kind, const int32_t *in, int32_t nin) {
    int32_t id = g->ops.n;
    graph_op op = {.kind = kind, .nin = nin, .parent = g->cur_repeat};
    op.in = arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(nin ? nin : 1));
    if (nin) memcpy(op.in, in, sizeof(int32_t) * (size_t)nin);
    vec_push(&g->arena, &g->ops, op);
    vec_push(&g->arena, current_block(g), id);
    return id;
}

static void set_results(graph *g, int32_t op, int32_t n) {
    graph_op *o = graph_opr(g, op);
    o->nout = n;
    o->out = arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(n ? n : 1));
}

int32_t graph_add_input(graph *g, const char *name, graph_type t) {
    int32_t op = new_op(g, OP_INPUT, NULL, 0);
    set_results(g, op, 1);
    graph_opr(g, op)->out[0] = new_value(g, name, t, op, 0, false);
    return op;
}

int32_t graph_add_param(graph *g, const char *name, graph_type t, graph_init init) {
    int32_t op = new_op(g, OP_PARAM, NULL, 0);
    if (init.path) init.path = arena_strdup(&g->arena, init.path);
    if (init.nparts && init.parts) { /* no parts: a mid file's graph, values absent */
        const void **parts = arena_alloc(&g->arena, sizeof(void *) * (size_t)init.nparts);
        memcpy(parts, init.parts, sizeof(void *) * (size_t)init.nparts);
        init.parts = parts;
    }
    if (init.ncat) { /* the pieces' own strings and arrays are copied too */
        graph_init *cat = arena_alloc(&g->arena, sizeof(graph_init) * (size_t)init.ncat);
        int64_t *width = arena_alloc(&g->arena, sizeof(int64_t) * (size_t)init.ncat);
        for (int32_t k = 0; k < init.ncat; k++) {
            TS_ASSERT(init.cat[k].kind != INIT_CONCAT);
            cat[k] = init.cat[k];
            if (cat[k].path) cat[k].path = arena_strdup(&g->arena, cat[k].path);
            if (cat[k].nparts && cat[k].parts) {
                const void **parts = arena_alloc(&g->arena, sizeof(void *) * (size_t)cat[k].nparts);
                memcpy(parts, cat[k].parts, sizeof(void *) * (size_t)cat[k].nparts);
                cat[k].parts = parts;
            }
            width[k] = init.width[k];
        }
        init.cat = cat, init.width = width;
    }
    graph_opr(g, op)->init = init;
    set_results(g, op, 1);
    graph_opr(g, op)->out[0] = new_value(g, name, t, op, 0, false);
    return op;
}

int32_t graph_add_output(graph *g, const int32_t *vals, int32_t n) {
    int32_t op = new_op(g, OP_OUTPUT, vals, n);
    set_results(g, op, 0);
    return op;
}

int32_t graph_begin_op(graph *g, graph_op_kind kind, const int32_t *in, int32_t nin) {
    TS_ASSERT(!graph_op_infos[kind].structural);
    return new_op(g, kind, in, nin);
}

static graph_attr *attr_slot(graph *g, int32_t op, graph_attr_id a) {
    graph_op *o = graph_opr(g, op);
    o->attr_set |= 1ull << a;
    return &o->attr[a];
}

void graph_set_bool(graph *g, int32_t op, graph_attr_id a, bool v) { attr_slot(g, op, a)->b = v; }
void graph_set_int(graph *g, int32_t op, graph_attr_id a, int64_t v) { attr_slot(g, op, a)->i = v; }
void graph_set_float(graph *g, int32_t op, graph_attr_id a, double v) { attr_slot(g, op, a)->f = v; }
void graph_set_dtype(graph *g, int32_t op, graph_attr_id a, dtype v) { attr_slot(g, op, a)->t = v; }
void graph_set_ints(graph *g, int32_t op, graph_attr_id a, const int64_t *v, int32_t n) {
    int64_t *copy = arena_alloc(&g->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (n) memcpy(copy, v, sizeof(int64_t) * (size_t)n);
    graph_attr *s = attr_slot(g, op, a);
    s->ints.v = copy;
    s->ints.n = n;
}

void graph_copy_attrs(graph *g, int32_t op, const graph *src, int32_t from, uint64_t mask) {
    const graph_op *a = graph_opr(src, from);
    for (int k = 0; k < ATTR_COUNT; k++) {
        if (!(a->attr_set & mask & (1ull << k))) continue;
        switch (graph_attr_kinds[k]) {
        case ATTR_KIND_BOOL: graph_set_bool(g, op, (graph_attr_id)k, a->attr[k].b); break;
        case ATTR_KIND_INT: graph_set_int(g, op, (graph_attr_id)k, a->attr[k].i); break;
        case ATTR_KIND_FLOAT: graph_set_float(g, op, (graph_attr_id)k, a->attr[k].f); break;
        case ATTR_KIND_DTYPE: graph_set_dtype(g, op, (graph_attr_id)k, a->attr[k].t); break;
        case ATTR_KIND_INTS: graph_set_ints(g, op, (graph_attr_id)k, a->attr[k].ints.v, a->attr[k].ints.n); break;
        }
    }
}

int graph_finish_op(graph *g, int32_t op, const char *const *names, const graph_type *declared, diag *d) {
    int32_t nout = graph_result_count(graph_opr(g, op)->kind, graph_opr(g, op)->nin);
    graph_type *out = xmalloc(sizeof(graph_type) * (size_t)(nout ? nout : 1));
    int rc = graph_infer(g, op, declared, out, d);
    if (rc == 0) {
        set_results(g, op, nout);
        for (int32_t i = 0; i < nout; i++)
            graph_opr(g, op)->out[i] = new_value(g, names ? names[i] : NULL, out[i], op, i, false);
    }
    free(out);
    return rc;
}

int32_t graph_begin_repeat(graph *g, int64_t count, const int32_t *carried, int32_t ncarry,
                           const int32_t *stacked, int32_t nstacked, const char *const *arg_names) {
    int32_t *in = arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(ncarry + nstacked + 1));
    if (ncarry) memcpy(in, carried, sizeof(int32_t) * (size_t)ncarry);
    if (nstacked) memcpy(in + ncarry, stacked, sizeof(int32_t) * (size_t)nstacked); /* stacked may be NULL */
    int32_t op = new_op(g, OP_REPEAT, in, ncarry + nstacked);
    graph_op *o = graph_opr(g, op);
    o->count = count;
    o->ncarry = ncarry;
    o->nargs = ncarry + nstacked;
    o->args = arena_alloc(&g->arena, sizeof(int32_t) * (size_t)(o->nargs ? o->nargs : 1));
    for (int32_t i = 0; i < o->nargs; i++) {
        graph_type t = graph_val(g, in[i])->type;
        if (i >= ncarry) { /* a slice drops the stacking axis */
            if (t.rank > 0) {
                memmove(t.dim, t.dim + 1, sizeof(int64_t) * (size_t)(t.rank - 1));
                t.rank--;
            }
        }
        int32_t v = new_value(g, arg_names ? arg_names[i] : NULL, t, op, i, true);
        graph_opr(g, op)->args[i] = v;
    }
    g->cur_repeat = op;
    return op;
}

int graph_end_repeat(graph *g, const int32_t *yields, const char *const *result_names, diag *d) {
    int32_t op = g->cur_repeat;
    TS_ASSERT(op >= 0);
    int32_t ncarry = graph_opr(g, op)->ncarry;
    int32_t y = new_op(g, OP_YIELD, yields, ncarry);
    set_results(g, y, 0);
    g->cur_repeat = graph_opr(g, op)->parent;
    set_results(g, op, ncarry);
    for (int32_t i = 0; i < ncarry; i++) {
        graph_type t = graph_val(g, graph_opr(g, op)->in[i])->type;
        int32_t v = new_value(g, result_names ? result_names[i] : NULL, t, op, i, false);
        graph_opr(g, op)->out[i] = v;
    }
    (void)d;
    return 0;
}

int32_t graph_inputs(const graph *g, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *o = graph_opr(g, g->body.v[i]);
        if (o->kind == OP_INPUT) {
            if (n < cap) ids[n] = o->out[0];
            n++;
        }
    }
    return n;
}

int32_t graph_outputs(const graph *g, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *o = graph_opr(g, g->body.v[i]);
        if (o->kind != OP_OUTPUT) continue;
        for (int32_t k = 0; k < o->nin; k++) {
            if (n < cap) ids[n] = o->in[k];
            n++;
        }
    }
    return n;
}

int graph_fail_op(const graph *g, int32_t op, diag *d, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const graph_op *o = graph_opr(g, op);
    if (o->line > 0 && g->src.text) return diag_fail_at(d, &g->src, o->line, o->col, "%s", msg);
    return diag_fail(d, "%s: error: %s '%s': %s", g->path, graph_op_infos[o->kind].name, graph_op_name(g, op), msg);
}

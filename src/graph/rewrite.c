/* rewrite.c: the one graph rewriter the graph passes share. A pass rebuilds
 * its graph op by op into a new one: every op is copied as it is (its
 * attributes, result names, comments and source place) unless the pass's
 * hook emits something else in its stead, and a pass may emit more after
 * any op. The new graph keeps the values' names, so later ops, recipes and
 * outputs read as before. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

static const char *keep(graph_rw *rw, const char *s) { return s ? arena_strdup(&rw->out->arena, s) : NULL; }

void graph_rw_init(graph_rw *rw, const graph *g, const graph_rw_hooks *hooks, void *ctx, diag *d) {
    memset(rw, 0, sizeof *rw);
    rw->g = g;
    rw->out = graph_new(g->name, g->path);
    rw->out->src = g->src; /* g outlives out: messages quote g's text */
    rw->out->lead = keep(rw, g->lead);
    rw->out->tail = keep(rw, g->tail);
    rw->out->end_lead = keep(rw, g->end_lead);
    rw->d = d;
    rw->vmap = xmalloc(sizeof(int32_t) * ((size_t)g->values.n + 1));
    for (int32_t v = 0; v < g->values.n; v++) rw->vmap[v] = -1;
    rw->hooks = *hooks;
    rw->ctx = ctx;
}

void graph_rw_trivia(graph_rw *rw, int32_t from, int32_t to) {
    const graph_op *a = graph_opr(rw->g, from);
    graph_op *b = graph_opr(rw->out, to);
    b->lead = keep(rw, a->lead);
    b->tail = keep(rw, a->tail);
    b->end_lead = keep(rw, a->end_lead);
    b->end_tail = keep(rw, a->end_tail);
    b->line = a->line;
    b->col = a->col;
}

int32_t graph_rw_finish(graph_rw *rw, int32_t op, int32_t like) {
    const graph_op *l = graph_opr(rw->g, like);
    const char **names = xmalloc(sizeof(char *) * ((size_t)l->nout + 1));
    graph_type *types = xcalloc((size_t)l->nout + 1, sizeof(graph_type));
    for (int32_t i = 0; i < l->nout; i++) {
        names[i] = graph_val(rw->g, l->out[i])->name;
        types[i] = graph_val(rw->g, l->out[i])->type;
    }
    int32_t first = -1;
    if (graph_finish_op(rw->out, op, names, types, rw->d)) rw->err = -1;
    else
        for (int32_t i = 0; i < l->nout; i++) rw->vmap[l->out[i]] = graph_result(rw->out, op, i);
    if (!rw->err && l->nout) first = graph_result(rw->out, op, 0);
    free(names);
    free(types);
    return first;
}

int32_t graph_rw_finish_as(graph_rw *rw, int32_t op, const char *name, const graph_type *t) {
    if (graph_finish_op(rw->out, op, &name, t, rw->d)) {
        rw->err = -1;
        return -1;
    }
    return graph_result(rw->out, op, 0);
}

void graph_rw_end_repeat(graph_rw *rw, int32_t id, int32_t op) {
    const graph_op *o = graph_opr(rw->g, id), *y = graph_opr(rw->g, o->body.v[o->body.n - 1]);
    int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)y->nin + 1));
    const char **names = xmalloc(sizeof(char *) * ((size_t)o->ncarry + 1));
    for (int32_t k = 0; k < y->nin; k++) in[k] = rw->vmap[y->in[k]];
    for (int32_t k = 0; k < o->ncarry; k++) names[k] = graph_val(rw->g, o->out[k])->name;
    if (!rw->err && graph_end_repeat(rw->out, in, names, rw->d)) rw->err = -1;
    if (!rw->err) {
        graph_rw_trivia(rw, id, op);
        const graph_op *r = graph_opr(rw->out, op);
        graph_op *ny = graph_opr(rw->out, r->body.v[r->body.n - 1]);
        ny->lead = keep(rw, y->lead);
        ny->tail = keep(rw, y->tail);
        ny->line = y->line, ny->col = y->col;
        for (int32_t k = 0; k < o->ncarry; k++) rw->vmap[o->out[k]] = graph_result(rw->out, op, k);
    }
    free(in);
    free(names);
}

static void copy_repeat(graph_rw *rw, int32_t id) {
    const graph_op *o = graph_opr(rw->g, id);
    int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)o->nin + 1));
    const char **names = xmalloc(sizeof(char *) * ((size_t)o->nargs + 1));
    for (int32_t k = 0; k < o->nin; k++) in[k] = rw->vmap[o->in[k]];
    for (int32_t k = 0; k < o->nargs; k++) names[k] = graph_val(rw->g, o->args[k])->name;
    int32_t op = graph_begin_repeat(rw->out, o->count, in, o->ncarry, in + o->ncarry, o->nin - o->ncarry, names);
    for (int32_t k = 0; k < o->nargs; k++) rw->vmap[o->args[k]] = graph_opr(rw->out, op)->args[k];
    graph_rw_block(rw, &o->body);
    graph_rw_end_repeat(rw, id, op);
    free(in);
    free(names);
}

void graph_rw_copy(graph_rw *rw, int32_t id) {
    const graph_op *o = graph_opr(rw->g, id);
    int32_t op = -1;
    switch (o->kind) {
    case OP_INPUT: {
        const graph_value *v = graph_val(rw->g, o->out[0]);
        op = graph_add_input(rw->out, v->name, v->type);
        rw->vmap[o->out[0]] = graph_result(rw->out, op, 0);
        break;
    }
    case OP_PARAM: {
        const graph_value *v = graph_val(rw->g, o->out[0]);
        op = graph_add_param(rw->out, v->name, v->type, o->init);
        rw->vmap[o->out[0]] = graph_result(rw->out, op, 0);
        break;
    }
    case OP_OUTPUT: {
        int32_t *vals = xmalloc(sizeof(int32_t) * ((size_t)o->nin + 1));
        for (int32_t k = 0; k < o->nin; k++) vals[k] = rw->vmap[o->in[k]];
        op = graph_add_output(rw->out, vals, o->nin);
        free(vals);
        break;
    }
    case OP_YIELD: return; /* the repeat's end takes its values */
    case OP_REPEAT: copy_repeat(rw, id); return;
    default: {
        int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)o->nin + 1));
        for (int32_t k = 0; k < o->nin; k++) in[k] = rw->vmap[o->in[k]], TS_ASSERT(in[k] >= 0);
        op = graph_begin_op(rw->out, o->kind, in, o->nin);
        graph_copy_attrs(rw->out, op, rw->g, id, ~0ull);
        free(in);
        graph_rw_finish(rw, op, id);
        if (rw->err) return;
        break;
    }
    }
    graph_rw_trivia(rw, id, op);
}

void graph_rw_block(graph_rw *rw, const graph_block *b) {
    for (int32_t i = 0; i < b->n && !rw->err; i++) {
        if (!(rw->hooks.op && rw->hooks.op(rw, b->v[i]))) graph_rw_copy(rw, b->v[i]);
        if (!rw->err && rw->hooks.after) rw->hooks.after(rw, b, i);
    }
}

graph *graph_rw_finish_graph(graph_rw *rw) {
    if (!rw->err && graph_verify(rw->out, rw->d)) rw->err = -1;
    free(rw->vmap);
    rw->vmap = NULL;
    if (rw->err) {
        graph_free(rw->out);
        return NULL;
    }
    return rw->out;
}

/* stages.c: a model cut into pipeline stages, one per chip.
 *
 * The cut goes through the model's repeat (its layers): stage s runs
 * iterations [first[s], first[s] + count[s]) of it. Stage 0 also runs what
 * comes before the repeat, the last stage what comes after; every stage but
 * the last outputs the carried values, which the next stage takes as inputs
 * named "<result>.after<k>" (k iterations done). A stacked parameter becomes
 * the window of its layers that the stage runs, with the same values
 * (normal(): the stream skipped to the window; imported data: the window's
 * bytes), so the stages together compute what the model computes, value for
 * value. Each stage is copied with the shared rewriter (rewrite.c), so names,
 * attributes and comments are the model's. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

typedef struct cut {
    const graph *g;
    int32_t rep;             /* the model's repeat op */
    int32_t stage, nstages;
    int64_t first, count;    /* this stage's iterations */
    bool *stage_op;          /* top-level op of g -> runs in this stage */
    bool *used;              /* value of g -> read by this stage */
    bool *stacked;           /* value of g -> a stacked operand of the repeat */
} cut;

static bool is_last(const cut *c) { return c->stage == c->nstages - 1; }

/* Marks every value read by op id and, for a repeat, by its body. */
static void mark_used(const graph *g, int32_t id, bool *used) {
    const graph_op *o = graph_opr(g, id);
    for (int32_t k = 0; k < o->nin; k++) used[o->in[k]] = true;
    for (int32_t k = 0; o->kind == OP_REPEAT && k < o->body.n; k++) mark_used(g, o->body.v[k], used);
}

/* The window [first, first + count) of stacked parameter op p's layers, as
 * an init of the window's type; -1 with d when its values cannot be windowed. */
static int window_init(const cut *c, int32_t p, graph_init *out, const void **one, diag *d) {
    const graph_op *o = graph_opr(c->g, p);
    const graph_type *t = &graph_val(c->g, o->out[0])->type;
    int64_t layer = graph_type_numel(t) / t->dim[0], start = c->first * layer, n = c->count * layer;
    *out = o->init;
    switch (o->init.kind) {
    case INIT_ZEROS:
    case INIT_ONES: return 0;
    case INIT_NORMAL: out->skip = o->init.skip + start; return 0;
    case INIT_DATA: {
        int64_t per = graph_type_numel(t) / o->init.nparts;
        if (per && start % per == 0 && n % per == 0) { /* whole pieces */
            out->parts = o->init.parts ? o->init.parts + start / per : NULL;
            out->nparts = (int32_t)(n / per);
            return 0;
        }
        if (per && start / per == (start + n - 1) / per && o->init.parts) { /* inside one piece (f32 values) */
            one[0] = (const uint8_t *)o->init.parts[start / per] + (start % per) * 4;
            out->parts = one;  /* graph_add_param copies the pointers; the bytes stay g's */
            out->nparts = 1;
            return 0;
        }
        break;
    }
    case INIT_NPY:
    case INIT_CONCAT: break;
    }
    return graph_fail_op(c->g, p, d,
                         "parameter '%s' cannot be cut between chips: its values (%s) are not read a layer at a time",
                         graph_val(c->g, o->out[0])->name, o->init.kind == INIT_NPY ? "an .npy file" : "joined pieces");
}

static const char *carry_name(const cut *c, int32_t k, int64_t done, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.after%lld", graph_val(c->g, graph_opr(c->g, c->rep)->out[k])->name, (long long)done);
    return buf;
}

/* The stage's repeat: its inputs (carried values from the previous stage),
 * its windowed parameters, the body as it is, and (but in the last stage)
 * its results as the stage's outputs. */
static void emit_repeat(graph_rw *rw, cut *c) {
    const graph *g = c->g;
    const graph_op *r = graph_opr(g, c->rep);
    int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)r->nin + 1));
    const char **names = xmalloc(sizeof(char *) * ((size_t)r->nargs + 1));
    char buf[512];
    for (int32_t k = 0; k < r->ncarry; k++) {
        if (c->stage == 0) {
            in[k] = rw->vmap[r->in[k]];
            continue;
        }
        int32_t op = graph_add_input(rw->out, carry_name(c, k, c->first, buf, sizeof buf), graph_val(g, r->out[k])->type);
        in[k] = graph_result(rw->out, op, 0);
    }
    for (int32_t k = r->ncarry; k < r->nin && !rw->err; k++) {
        const graph_value *v = graph_val(g, r->in[k]);
        graph_init init;
        const void *one[1];
        if (window_init(c, v->def, &init, one, rw->d)) {
            rw->err = -1;
            break;
        }
        graph_type t = v->type;
        t.dim[0] = c->count;
        int32_t op = graph_add_param(rw->out, v->name, t, init);
        graph_rw_trivia(rw, v->def, op);
        in[k] = graph_result(rw->out, op, 0);
    }
    if (!rw->err) {
        for (int32_t k = 0; k < r->nargs; k++) names[k] = graph_val(g, r->args[k])->name;
        int32_t op = graph_begin_repeat(rw->out, c->count, in, r->ncarry, in + r->ncarry, r->nin - r->ncarry, names);
        for (int32_t k = 0; k < r->nargs; k++) rw->vmap[r->args[k]] = graph_opr(rw->out, op)->args[k];
        graph_rw_block(rw, &r->body);
        if (!rw->err && is_last(c)) {
            graph_rw_end_repeat(rw, c->rep, op);
        } else if (!rw->err) {
            const graph_op *y = graph_opr(g, r->body.v[r->body.n - 1]);
            int32_t *ys = xmalloc(sizeof(int32_t) * ((size_t)y->nin + 1));
            char **rn = xcalloc((size_t)r->ncarry + 1, sizeof(char *));
            for (int32_t k = 0; k < y->nin; k++) ys[k] = rw->vmap[y->in[k]];
            for (int32_t k = 0; k < r->ncarry; k++) rn[k] = xstrdup(carry_name(c, k, c->first + c->count, buf, sizeof buf));
            if (graph_end_repeat(rw->out, ys, (const char *const *)rn, rw->d)) rw->err = -1;
            if (!rw->err) {
                graph_rw_trivia(rw, c->rep, op);
                for (int32_t k = 0; k < r->ncarry; k++) ys[k] = graph_result(rw->out, op, k);
                graph_add_output(rw->out, ys, r->ncarry);
            }
            for (int32_t k = 0; k < r->ncarry; k++) free(rn[k]);
            free(rn);
            free(ys);
        }
    }
    free(in);
    free(names);
}

static bool stage_hook(graph_rw *rw, int32_t id) {
    cut *c = rw->ctx;
    const graph_op *o = graph_opr(c->g, id);
    if (id == c->rep) {
        emit_repeat(rw, c);
        return true;
    }
    if (o->parent >= 0) return false;  /* inside the body: as it is */
    if (o->kind == OP_PARAM) return !c->used[o->out[0]] || c->stacked[o->out[0]];
    if (o->kind == OP_OUTPUT) return !is_last(c);
    return !c->stage_op[id];
}

int graph_split_stages(const graph *g, int32_t nstages, graph_stages *out, diag *d) {
    memset(out, 0, sizeof *out);
    int32_t rep = -1, nrep = 0, at = -1;
    for (int32_t i = 0; i < g->body.n; i++)
        if (graph_opr(g, g->body.v[i])->kind == OP_REPEAT) rep = g->body.v[i], at = i, nrep++;
    if (nrep != 1)
        return diag_fail(d, "%s: error: a model is cut between chips through its repeat (its layers); it has %s",
                         g->path, nrep ? "several at the top level" : "none");
    const graph_op *r = graph_opr(g, rep);
    if (r->count < nstages)
        return diag_fail(d, "%s: error: %d chips need at least %d layers; the repeat '%s' has %lld", g->path, nstages,
                         nstages, graph_op_name(g, rep), (long long)r->count);
    for (int32_t k = r->ncarry; k < r->nin; k++)
        if (graph_opr(g, graph_val(g, r->in[k])->def)->kind != OP_PARAM)
            return graph_fail_op(g, rep, d, "the repeat's stacked operand '%s' is computed, not a parameter: "
                                            "it cannot be cut between chips",
                                 graph_val(g, r->in[k])->name);

    /* Which top-level ops run where: before the repeat stage 0, after it the last. */
    size_t nv = (size_t)g->values.n + 1, no = (size_t)g->ops.n + 1;
    bool *before = xcalloc(no, 1), *after = xcalloc(no, 1), *stacked = xcalloc(nv, 1);
    bool *used_body = xcalloc(nv, 1), *used_after = xcalloc(nv, 1), *used_before = xcalloc(nv, 1);
    for (int32_t k = r->ncarry; k < r->nin; k++) stacked[r->in[k]] = true;
    for (int32_t i = 0; i < g->body.n; i++) {
        int32_t id = g->body.v[i];
        const graph_op *o = graph_opr(g, id);
        if (o->kind == OP_PARAM) continue;
        if (i < at) before[id] = true, mark_used(g, id, used_before);
        if (i > at) after[id] = true, mark_used(g, id, used_after);
    }
    for (int32_t k = 0; k < r->body.n; k++) mark_used(g, r->body.v[k], used_body);
    for (int32_t k = 0; k < r->ncarry; k++) used_before[r->in[k]] = true;

    /* What the body or the ops after it read from before the repeat must be a
     * parameter (each stage has its own copy) or the repeat's own results. */
    int rc = 0;
    for (int32_t v = 0; v < g->values.n && rc == 0; v++) {
        if (!used_body[v] && !used_after[v]) continue;
        const graph_value *val = graph_val(g, v);
        if (val->is_arg || graph_value_scope(g, v) >= 0) continue;
        const graph_op *def = graph_opr(g, val->def);
        if (def->kind == OP_PARAM || val->def == rep || after[val->def]) continue;
        rc = diag_fail(d, "%s: error: '%s' is made before the layers and read %s: a cut between chips cannot pass it on yet",
                       g->path, val->name, used_body[v] ? "inside them" : "after them");
    }

    if (rc == 0) {
        out->n = nstages;
        out->g = xcalloc((size_t)nstages, sizeof(graph *));
        out->first = xcalloc((size_t)nstages, sizeof(int64_t));
        out->count = xcalloc((size_t)nstages, sizeof(int64_t));
    }
    int64_t first = 0;
    for (int32_t s = 0; s < nstages && rc == 0; s++) {
        int64_t count = r->count / nstages + (s < r->count % nstages);
        bool *used = xcalloc(nv, 1);
        for (size_t v = 0; v < nv; v++)
            used[v] = used_body[v] || (s == 0 && used_before[v]) || (s == nstages - 1 && used_after[v]);
        for (int32_t k = r->ncarry; k < r->nin; k++) used[r->in[k]] = true;
        cut c = {g, rep, s, nstages, first, count, s == 0 ? before : after, used, stacked};
        if (s > 0 && s < nstages - 1) c.stage_op = xcalloc(no, 1);  /* a middle stage runs the layers only */
        else if (s == 0 && nstages == 1) {
            c.stage_op = xcalloc(no, 1);
            for (size_t i = 0; i < no; i++) c.stage_op[i] = before[i] || after[i];
        }
        graph_rw rw;
        graph_rw_hooks hooks = {.op = stage_hook};
        graph_rw_init(&rw, g, &hooks, &c, d);
        graph_rw_block(&rw, &g->body);
        out->g[s] = graph_rw_finish_graph(&rw);
        out->first[s] = first, out->count[s] = count;
        if (!out->g[s]) rc = -1;
        if (c.stage_op != before && c.stage_op != after) free(c.stage_op);
        free(used);
        first += count;
    }
    free(before), free(after), free(stacked), free(used_body), free(used_after), free(used_before);
    if (rc) graph_stages_free(out);
    return rc;
}

void graph_stages_free(graph_stages *s) {
    for (int32_t i = 0; s->g && i < s->n; i++) graph_free(s->g[i]);
    free(s->g);
    free(s->first);
    free(s->count);
    memset(s, 0, sizeof *s);
}

/* ---- micro-batches --------------------------------------------------------- */

typedef struct rebatch {
    const graph *g;
    int64_t from, to;        /* the batch, the micro-batch */
} rebatch;

static graph_type rebatched(const rebatch *rb, graph_type t) {
    if (t.rank >= 1 && t.dim[0] == rb->from) t.dim[0] = rb->to;
    return t;
}

/* Whether op keeps the batch elements apart along axis 0. */
static const char *mixes_batch(const rebatch *rb, const graph_op *o) {
    const graph *g = rb->g;
    bool batched_in = false;
    for (int32_t k = 0; k < o->nin; k++) {
        const graph_type *t = &graph_val(g, o->in[k])->type;
        batched_in |= graph_opr(g, graph_val(g, o->in[k])->def)->kind != OP_PARAM && t->rank >= 1 && t->dim[0] == rb->from;
    }
    if (!batched_in) return NULL;
    const graph_type *t0 = &graph_val(g, o->in[0])->type;
    switch (o->kind) {
    case OP_TRANSPOSE:
        return o->attr[ATTR_PERM].ints.n && o->attr[ATTR_PERM].ints.v[0] != 0 ? "moves the batch axis" : NULL;
    case OP_CONCAT: return graph_attr_int(o, ATTR_AXIS) == 0 ? "joins along the batch axis" : NULL;
    case OP_SOFTMAX: return graph_attr_int(o, ATTR_AXIS) == 0 || (t0->rank == 1) ? "normalises over the batch" : NULL;
    case OP_REDUCE_SUM:
        for (int32_t k = 0; k < o->attr[ATTR_AXES].ints.n; k++)
            if (o->attr[ATTR_AXES].ints.v[k] == 0) return "sums over the batch";
        return NULL;
    case OP_MATMUL:
        return graph_attr_bool(o, ATTR_TRANSPOSE_A) && t0->rank == 2 ? "contracts over the batch" : NULL;
    case OP_SGD:
    case OP_ADAMW:
    case OP_GLOBAL_NORM_CLIP:
    case OP_MATMUL_SGD:
    case OP_MATMUL_ADAMW: return "is a training step (micro-batches there need gradient accumulation)";
    default: return NULL;
    }
}

static bool rebatch_hook(graph_rw *rw, int32_t id) {
    rebatch *rb = rw->ctx;
    const graph_op *o = graph_opr(rb->g, id);
    if (o->kind == OP_INPUT) {
        const graph_value *v = graph_val(rb->g, o->out[0]);
        int32_t op = graph_add_input(rw->out, v->name, rebatched(rb, v->type));
        rw->vmap[o->out[0]] = graph_result(rw->out, op, 0);
        graph_rw_trivia(rw, id, op);
        return true;
    }
    if (o->kind == OP_SLICE || o->kind == OP_PAD) { /* bounds on the batch axis would need rewriting */
        const graph_type *t = &graph_val(rb->g, o->in[0])->type;
        const graph_attr *a = &o->attr[o->kind == OP_SLICE ? ATTR_START : ATTR_LOW];
        const graph_attr *b = &o->attr[o->kind == OP_SLICE ? ATTR_END : ATTR_HIGH];
        bool whole = o->kind == OP_SLICE ? a->ints.v[0] == 0 && b->ints.v[0] >= t->dim[0] : a->ints.v[0] == 0 && b->ints.v[0] == 0;
        if (t->rank >= 1 && t->dim[0] == rb->from && !whole) {
            rw->err = graph_fail_op(rb->g, id, rw->d, "'%s' cuts the batch axis: the batch cannot be split into micro-batches",
                                    graph_op_name(rb->g, id));
            return true;
        }
    }
    if (graph_op_infos[o->kind].structural) return false;
    const char *why = mixes_batch(rb, o);
    if (why) {
        rw->err = graph_fail_op(rb->g, id, rw->d, "'%s' %s: the batch cannot be split into micro-batches",
                                graph_op_name(rb->g, id), why);
        return true;
    }
    int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)o->nin + 1));
    const char **names = xmalloc(sizeof(char *) * ((size_t)o->nout + 1));
    graph_type *types = xcalloc((size_t)o->nout + 1, sizeof(graph_type));
    for (int32_t k = 0; k < o->nin; k++) in[k] = rw->vmap[o->in[k]];
    for (int32_t k = 0; k < o->nout; k++) {
        names[k] = graph_val(rb->g, o->out[k])->name;
        types[k] = rebatched(rb, graph_val(rb->g, o->out[k])->type);
    }
    int32_t op = graph_begin_op(rw->out, o->kind, in, o->nin);
    graph_copy_attrs(rw->out, op, rb->g, id, ~0ull);
    if (o->kind == OP_SLICE) { /* a whole batch axis: its end follows the micro-batch */
        graph_op *no = graph_opr(rw->out, op);
        int64_t *end = no->attr[ATTR_END].ints.v;
        if (end[0] >= rb->from) end[0] = rb->to;
    }
    if (graph_finish_op(rw->out, op, names, types, rw->d)) rw->err = -1;
    else
        for (int32_t k = 0; k < o->nout; k++) rw->vmap[o->out[k]] = graph_result(rw->out, op, k);
    if (!rw->err) graph_rw_trivia(rw, id, op);
    free(in);
    free(names);
    free(types);
    return true;
}

graph *graph_micro_batch(const graph *g, int64_t micro, int64_t *batch, diag *d) {
    int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(g, NULL, 0);
    int32_t *ids = xcalloc((size_t)(nin + nout) + 1, sizeof(int32_t));
    graph_inputs(g, ids, nin);
    graph_outputs(g, ids + nin, nout);
    int64_t b = -1;
    int rc = 0;
    for (int32_t k = 0; k < nin + nout && rc == 0; k++) {
        const graph_value *v = graph_val(g, ids[k]);
        int64_t lead = v->type.rank >= 1 ? v->type.dim[0] : -1;
        if (b < 0) b = lead;
        if (lead != b || lead < 1)
            rc = diag_fail(d, "%s: error: micro-batches split every input and output along its first axis; '%s' is %s, "
                              "not %lld long there", g->path, v->name, lead < 1 ? "a scalar" : "another size", (long long)b);
    }
    free(ids);
    if (rc) return NULL;
    *batch = b;
    if (micro < 1 || b % micro)
        return diag_fail(d, "%s: error: a batch of %lld does not split into micro-batches of %lld", g->path, (long long)b,
                         (long long)micro), NULL;
    rebatch rb = {g, b, micro};
    graph_rw rw;
    graph_rw_hooks hooks = {.op = rebatch_hook};
    graph_rw_init(&rw, g, &hooks, &rb, d);
    graph_rw_block(&rw, &g->body);
    graph *out = graph_rw_finish_graph(&rw);
    if (!out && d->set && !strstr(d->text, "micro-batch")) {
        /* A shape that does not follow the batch (a reshape folding it into rows, say). */
        char why[sizeof d->text];
        snprintf(why, sizeof why, "%s", d->text);
        *d = (diag){0};
        diag_fail(d, "%s: error: the batch of %lld cannot be split into micro-batches of %lld:\n%s", g->path, (long long)b,
                  (long long)micro, why);
    }
    return out;
}

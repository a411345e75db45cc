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

/* Rows [first, first + count) of parameter op p (a stacked parameter's
 * layers, or a weight's rows an owner updates), as an init of the window's
 * type; -1 with d when its values cannot be windowed. `what` says where the
 * cut goes ("between chips"). */
static int window_init(const graph *g, int32_t p, int64_t first, int64_t count, graph_init *out, const void **one,
                       const char *what, diag *d) {
    const graph_op *o = graph_opr(g, p);
    const graph_type *t = &graph_val(g, o->out[0])->type;
    int64_t layer = t->rank ? graph_type_numel(t) / t->dim[0] : 1, start = first * layer, n = count * layer;
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
    return graph_fail_op(g, p, d, "parameter '%s' cannot be cut %s: its values (%s) are not read a part at a time",
                         graph_val(g, o->out[0])->name, what, o->init.kind == INIT_NPY ? "an .npy file" : "joined pieces");
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
        if (window_init(g, v->def, c->first, c->count, &init, one, "between chips", rw->d)) {
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

int graph_split_stages(const graph *g, int32_t nstages, const int64_t *counts, graph_stages *out, diag *d) {
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
    int64_t given = 0;
    for (int32_t s = 0; counts && s < nstages; s++) {
        if (counts[s] < 1) given = -1 - r->count; /* refused below */
        given += counts[s];
    }
    if (counts && given != r->count)
        return diag_fail(d, "%s: error: the stages' layers must be at least one each and %lld in all (the repeat '%s')",
                         g->path, (long long)r->count, graph_op_name(g, rep));
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
        int64_t count = counts ? counts[s] : r->count / nstages + (s < r->count % nstages);
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
    /* A replica of a training step (graph_split_replicas), else all NULL: */
    bool *partial;           /* value of g -> a sum over the batch: this replica's part of it */
    const bool *opt_only;    /* value of g -> a parameter only optimizers read (a state): not in the replica */
    const int32_t *grads;    /* the optimizers' gradients, the replica's outputs after the model's */
    int32_t ngrads;
    bool accumulate;         /* micro-batches: each partial sum is added to the earlier ones' */
    bool outputs_done;
} rebatch;

static bool is_optimizer(graph_op_kind k) { return k == OP_SGD || k == OP_ADAMW; }

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
    case OP_MATMUL_ADAMW:
    case OP_SUM_SGD:
    case OP_SUM_ADAMW: return "is a training step (micro-batches there need gradient accumulation)";
    default: return NULL;
    }
}

/* With micro-batches, partial sum v of the replica (a value of g) added to
 * the input "<v>.acc_in", the sum over the earlier micro-batches (zeros
 * before the first), as "<v>.acc"; without, v. */
static int32_t accumulated(graph_rw *rw, rebatch *rb, int32_t v) {
    if (!rb->accumulate) return rw->vmap[v];
    const graph_value *gv = graph_val(rb->g, v);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s.acc_in", gv->name);
    snprintf(out, sizeof out, "%s.acc", gv->name);
    int32_t have = graph_lookup(rw->out, out);
    if (have >= 0) return have;
    int32_t ops[2] = {graph_result(rw->out, graph_add_input(rw->out, in, graph_val(rw->out, rw->vmap[v])->type), 0),
                      rw->vmap[v]};
    int32_t op = graph_begin_op(rw->out, OP_ADD, ops, 2);
    const char *name = out;
    if (graph_finish_op(rw->out, op, &name, NULL, rw->d)) return rw->err = -1, -1;
    return graph_result(rw->out, op, 0);
}

/* A replica's outputs: the model's own that are one row per sample or a sum
 * over the batch (not the optimizers' results: the owners make those), then
 * every gradient; with micro-batches, the sums accumulated. */
static void replica_outputs(graph_rw *rw, rebatch *rb, int32_t id) {
    const graph *g = rb->g;
    const graph_op *o = graph_opr(g, id);
    int32_t *vals = xmalloc(sizeof(int32_t) * ((size_t)o->nin + (size_t)rb->ngrads + 1)), n = 0;
    for (int32_t k = 0; k < o->nin && !rw->err; k++) {
        const graph_value *v = graph_val(g, o->in[k]);
        if (!v->is_arg && is_optimizer(graph_opr(g, v->def)->kind)) continue;
        if (!rb->partial[o->in[k]] && !(v->type.rank >= 1 && v->type.dim[0] == rb->from))
            rw->err = graph_fail_op(g, id, rw->d, "output '%s' is neither one row per sample nor a sum over the batch: "
                                                  "data-parallel replicas cannot put it together", v->name);
        vals[n++] = rb->partial[o->in[k]] ? accumulated(rw, rb, o->in[k]) : rw->vmap[o->in[k]];
    }
    for (int32_t k = 0; k < rb->ngrads && !rb->outputs_done && !rw->err; k++) {
        int32_t a = accumulated(rw, rb, rb->grads[k]);
        bool dup = false;
        for (int32_t j = 0; j < n; j++) dup |= vals[j] == a;
        if (!dup) vals[n++] = a;
    }
    rb->outputs_done = true;
    if (!rw->err) graph_rw_trivia(rw, id, graph_add_output(rw->out, vals, n));
    free(vals);
}

/* A replica's own rules for op id; true when it took the op (emitted it,
 * dropped it or failed), else *why is what mixes batch elements in it. */
static bool replica_op(graph_rw *rw, rebatch *rb, int32_t id, const char **why) {
    const graph *g = rb->g;
    const graph_op *o = graph_opr(g, id);
    if (is_optimizer(o->kind)) { /* the owners run it */
        if (!rb->partial[o->in[1]])
            rw->err = graph_fail_op(g, id, rw->d, "the gradient '%s' is not a sum over the batch: data-parallel replicas "
                                                  "cannot add theirs up", graph_val(g, o->in[1])->name);
        return true;
    }
    if (o->kind == OP_PARAM) return rb->opt_only[o->out[0]];
    if (o->kind == OP_OUTPUT) {
        replica_outputs(rw, rb, id);
        return true;
    }
    if (graph_op_infos[o->kind].structural) return false;
    int32_t read = -1;
    for (int32_t k = 0; k < o->nin && read < 0; k++)
        if (rb->partial[o->in[k]]) read = o->in[k];
    if (read >= 0 && o->kind != OP_SCALE) {
        rw->err = graph_fail_op(g, id, rw->d, "'%s' reads '%s', a sum over the batch, of which each data-parallel replica "
                                              "holds only its samples' part", graph_op_name(g, id), graph_val(g, read)->name);
        return true;
    }
    bool sums = *why && (o->kind == OP_REDUCE_SUM || o->kind == OP_MATMUL); /* over the batch: partial */
    if (sums) *why = NULL;
    if (sums || read >= 0)
        for (int32_t k = 0; k < o->nout; k++) rb->partial[o->out[k]] = true;
    return false;
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
    const char *why = graph_op_infos[o->kind].structural ? NULL : mixes_batch(rb, o);
    if (rb->partial && replica_op(rw, rb, id, &why)) return true;
    if (graph_op_infos[o->kind].structural) return false;
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
    rebatch rb = {.g = g, .from = b, .to = micro};
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

/* ---- data-parallel training ------------------------------------------------ */

void graph_owner_rows(int64_t rows, int32_t n, int32_t o, int64_t *first, int64_t *count) {
    *first = rows * o / n;
    *count = rows * (o + 1) / n - *first;
}

/* Marks the values op id reads (a repeat's body too) as read by an optimizer or by anything else. */
static void mark_readers(const graph *g, int32_t id, bool *by_opt, bool *by_other) {
    const graph_op *o = graph_opr(g, id);
    for (int32_t k = 0; k < o->nin; k++) (is_optimizer(o->kind) ? by_opt : by_other)[o->in[k]] = true;
    for (int32_t k = 0; o->kind == OP_REPEAT && k < o->body.n; k++) mark_readers(g, o->body.v[k], by_opt, by_other);
}

bool graph_is_training(const graph *g) {
    for (int32_t i = 0; i < g->ops.n; i++)
        switch (graph_opr(g, i)->kind) {
        case OP_SGD: case OP_ADAMW: case OP_MATMUL_SGD: case OP_MATMUL_ADAMW: case OP_SUM_SGD: case OP_SUM_ADAMW: return true;
        default: break;
        }
    return false;
}

/* The optimizers of g, checked for a split over replicas: at the top level,
 * updating parameters, their results read by outputs only. */
static int find_optimizers(const graph *g, const bool *by_other, int32_t *opt, int32_t *nopt, diag *d) {
    *nopt = 0;
    for (int32_t id = 0; id < g->ops.n; id++) {
        const graph_op *o = graph_opr(g, id);
        if (o->kind == OP_MATMUL_SGD || o->kind == OP_MATMUL_ADAMW || o->kind == OP_SUM_SGD || o->kind == OP_SUM_ADAMW ||
            o->kind == OP_GLOBAL_NORM_CLIP)
            return graph_fail_op(g, id, d, "'%s' is not split over data-parallel replicas yet (%s)", graph_op_name(g, id),
                                 o->kind == OP_GLOBAL_NORM_CLIP ? "the norm needs every replica's whole gradients"
                                                                : "a fused update: write the matmul and its optimizer");
        if (!is_optimizer(o->kind)) continue;
        if (o->parent >= 0)
            return graph_fail_op(g, id, d, "'%s' updates inside a repeat: data-parallel replicas split a step whose "
                                           "optimizers are at the top level", graph_op_name(g, id));
        for (int32_t k = 0; k < o->nin; k++) {
            const graph_value *v = graph_val(g, o->in[k]);
            if (k != 1 && (v->is_arg || graph_opr(g, v->def)->kind != OP_PARAM || graph_value_scope(g, o->in[k]) >= 0))
                return graph_fail_op(g, id, d, "'%s' updates '%s', which is computed, not a parameter: its owner could "
                                               "not hold its rows", graph_op_name(g, id), v->name);
        }
        for (int32_t k = 0; k < o->nout; k++)
            if (by_other[o->out[k]]) {
                bool output_only = true;
                for (int32_t j = 0; j < g->ops.n; j++) {
                    const graph_op *r = graph_opr(g, j);
                    for (int32_t i = 0; i < r->nin; i++)
                        if (r->in[i] == o->out[k] && r->kind != OP_OUTPUT) output_only = false;
                }
                if (!output_only)
                    return graph_fail_op(g, id, d, "the updated '%s' is read again: data-parallel replicas run one "
                                                   "training step (the new weights are gathered after it)",
                                         graph_val(g, o->out[k])->name);
            }
        opt[(*nopt)++] = id;
    }
    if (*nopt == 0) return diag_fail(d, "%s: error: no optimizer (sgd, adamw): not a training step", g->path);
    return 0;
}

static void add_feed(graph_replicas *r, int32_t o, const char *input, const char *from, const char *updates,
                     int64_t first, int64_t rows) {
    r->feed[o] = xrealloc(r->feed[o], sizeof(graph_feed) * (size_t)(r->nfeed[o] + 1));
    r->feed[o][r->nfeed[o]++] = (graph_feed){xstrdup(input), xstrdup(from), updates ? xstrdup(updates) : NULL, first, rows};
}

/* The owner's input "<from>.partials": every replica's copy of rows
 * [first, first + count) of value v (rank 0: all of it) stacked, and their
 * sum in replica order (reduce_sum over the stacking axis) named as v. */
static int32_t owner_sum(graph *og, graph_replicas *r, int32_t o, const graph_value *v, const char *updates, int64_t first,
                         int64_t count, diag *d) {
    graph_type t = v->type;
    char name[512];
    snprintf(name, sizeof name, "%s.partials", v->name);
    if (t.rank >= 1) t.dim[0] = count;
    memmove(t.dim + 1, t.dim, sizeof(int64_t) * (size_t)t.rank);
    t.dim[0] = r->n, t.rank++;
    int32_t in = graph_result(og, graph_add_input(og, name, t), 0);
    char from[512];
    snprintf(from, sizeof from, r->micro > 1 ? "%s.acc" : "%s", v->name); /* the replica's output */
    add_feed(r, o, name, from, updates, first, v->type.rank >= 1 ? count : -1);
    int32_t op = graph_begin_op(og, OP_REDUCE_SUM, &in, 1);
    int64_t axis0 = 0;
    graph_set_ints(og, op, ATTR_AXES, &axis0, 1);
    graph_type dt = {.dtype = v->type.dtype};
    return graph_finish_op(og, op, &v->name, &dt, d) ? -1 : graph_result(og, op, 0);
}

/* Owner o's program: its rows of every optimizer's weight and states, the
 * gradients' rows summed over the replicas, the optimizers; owner 0 also
 * sums the model's outputs that are sums over the batch (partial). */
static graph *owner_graph(const graph *g, graph_replicas *r, int32_t o, const int32_t *opt, int32_t nopt,
                          const bool *partial, diag *d) {
    char name[256];
    snprintf(name, sizeof name, "%s.owner%d", g->name, (int)o);
    graph *og = graph_new(name, g->path);
    int rc = 0;
    for (int32_t i = 0; i < nopt && rc == 0; i++) {
        const graph_op *op = graph_opr(g, opt[i]);
        const graph_type *wt = &graph_val(g, op->in[0])->type;
        int64_t first = 0, count = 1;
        if (wt->rank >= 1) graph_owner_rows(wt->dim[0], r->n, o, &first, &count);
        else if (o != 0) continue; /* a scalar weight: owner 0's */
        if (count == 0) continue;
        int32_t in[8];
        for (int32_t k = 0; k < op->nin && rc == 0; k++) {
            const graph_value *v = graph_val(g, op->in[k]);
            if (k == 1) {
                if ((in[k] = owner_sum(og, r, o, v, graph_val(g, op->in[0])->name, first, count, d)) < 0) rc = -1;
                continue;
            }
            int32_t have = graph_lookup(og, v->name); /* a weight two optimizers read */
            if (have >= 0) {
                in[k] = have;
                continue;
            }
            graph_init init;
            const void *one[1];
            graph_type t = v->type;
            if (t.rank >= 1) t.dim[0] = count;
            if (window_init(g, v->def, first, count, &init, one, "between owners", d)) rc = -1;
            else in[k] = graph_result(og, graph_add_param(og, v->name, t, init), 0);
        }
        if (rc) break;
        r->gather_bytes[o] += graph_type_numel(wt) / (wt->rank ? wt->dim[0] : 1) * count * dtype_bytes(wt->dtype);
        int32_t u = graph_begin_op(og, op->kind, in, op->nin);
        graph_copy_attrs(og, u, g, opt[i], ~0ull);
        const char *names[8];
        for (int32_t k = 0; k < op->nout; k++) names[k] = graph_val(g, op->out[k])->name;
        if (graph_finish_op(og, u, names, NULL, d)) rc = -1;
    }
    int32_t nout = graph_outputs(g, NULL, 0), *ov = xcalloc((size_t)nout + 1, sizeof(int32_t)), *vals = xcalloc((size_t)nout + 1, sizeof(int32_t)), n = 0;
    graph_outputs(g, ov, nout);
    for (int32_t j = 0; j < nout && rc == 0; j++) {
        const graph_value *v = graph_val(g, ov[j]);
        int32_t have = graph_lookup(og, v->name);
        if (have < 0 && o == 0 && partial[ov[j]] && (have = owner_sum(og, r, o, v, NULL, 0, v->type.rank ? v->type.dim[0] : 1, d)) < 0)
            rc = -1;
        bool dup = false;
        for (int32_t k = 0; k < n; k++) dup |= vals[k] == have;
        if (have >= 0 && !dup && !graph_val(og, have)->is_arg && graph_opr(og, graph_val(og, have)->def)->kind != OP_INPUT)
            vals[n++] = have;
    }
    if (rc == 0 && n == 0)
        rc = diag_fail(d, "%s: error: over %d replicas, replica %d would own no rows of any weight: fewer replicas",
                       g->path, (int)r->n, (int)o);
    if (rc == 0) graph_add_output(og, vals, n);
    free(ov), free(vals);
    if (rc == 0) rc = graph_verify(og, d);
    if (rc) graph_free(og), og = NULL;
    return og;
}

int graph_split_replicas(const graph *g, int32_t n, int64_t micro, graph_replicas *out, diag *d) {
    memset(out, 0, sizeof *out);
    size_t nv = (size_t)g->values.n + 1;
    bool *by_opt = xcalloc(nv, 1), *by_other = xcalloc(nv, 1), *opt_only = xcalloc(nv, 1), *partial = xcalloc(nv, 1);
    int32_t *opt = xcalloc((size_t)g->ops.n + 1, sizeof(int32_t)), *grads = xcalloc((size_t)g->ops.n + 1, sizeof(int32_t));
    int32_t nopt = 0, ngrads = 0;
    for (int32_t i = 0; i < g->body.n; i++) mark_readers(g, g->body.v[i], by_opt, by_other);
    int rc = find_optimizers(g, by_other, opt, &nopt, d);
    for (int32_t i = 0; i < nopt && rc == 0; i++) {
        const graph_op *o = graph_opr(g, opt[i]);
        for (int32_t k = 0; k < o->nin; k++)
            if (k != 1 && !by_other[o->in[k]]) opt_only[o->in[k]] = true;
        bool dup = false;
        for (int32_t k = 0; k < ngrads; k++) dup |= grads[k] == o->in[1];
        if (!dup) grads[ngrads++] = o->in[1];
    }
    int64_t batch = 0;
    if (rc == 0) {
        int32_t in0;
        if (graph_inputs(g, &in0, 1) < 1 || graph_val(g, in0)->type.rank < 1)
            rc = diag_fail(d, "%s: error: data-parallel replicas split the inputs' first axis (the batch); the model has none",
                           g->path);
        else batch = graph_val(g, in0)->type.dim[0];
    }
    if (rc == 0 && (n < 2 || batch % n))
        rc = diag_fail(d, "%s: error: a batch of %lld does not split over %d data-parallel replicas", g->path,
                       (long long)batch, (int)n);
    else if (rc == 0 && (micro < 1 || (batch / n) % micro))
        rc = diag_fail(d, "%s: error: each replica's %lld samples do not split into %lld micro-batches", g->path,
                       (long long)(batch / n), (long long)micro);
    if (rc == 0) {
        rebatch rb = {g, batch, batch / n / micro, partial, opt_only, grads, ngrads, micro > 1, false};
        graph_rw rw;
        graph_rw_hooks hooks = {.op = rebatch_hook};
        graph_rw_init(&rw, g, &hooks, &rb, d);
        graph_rw_block(&rw, &g->body);
        if (!(out->replica = graph_rw_finish_graph(&rw))) rc = -1;
    }
    if (rc == 0) {
        out->n = n, out->batch = batch, out->micro = micro;
        out->owner = xcalloc((size_t)n, sizeof(graph *));
        out->feed = xcalloc((size_t)n, sizeof(graph_feed *));
        out->nfeed = xcalloc((size_t)n, sizeof(int32_t));
        out->gather_bytes = xcalloc((size_t)n, sizeof(int64_t));
        for (int32_t o = 0; o < n && rc == 0; o++)
            if (!(out->owner[o] = owner_graph(g, out, o, opt, nopt, partial, d))) rc = -1;
    }
    free(by_opt), free(by_other), free(opt_only), free(partial), free(opt), free(grads);
    if (rc) graph_replicas_free(out);
    return rc;
}

void graph_replicas_free(graph_replicas *r) {
    graph_free(r->replica);
    for (int32_t o = 0; r->owner && o < r->n; o++) {
        graph_free(r->owner[o]);
        for (int32_t k = 0; k < r->nfeed[o]; k++) free(r->feed[o][k].input), free(r->feed[o][k].from), free(r->feed[o][k].updates);
        free(r->feed[o]);
    }
    free(r->owner), free(r->feed), free(r->nfeed), free(r->gather_bytes);
    memset(r, 0, sizeof *r);
}

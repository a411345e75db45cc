/* siblings.c: matmuls that read one operand become one, a pass from graph
 * to graph (docs/lowering.md, "Sibling matmuls").
 *
 *   q = x · Wq (+ bq)                  y = x · [Wq Wk Wv] (+ [bq bk bv])
 *   k = x · Wk (+ bk)         ──►      q = y[..., 0 : nq]
 *   v = x · Wv (+ bv)                  k = y[..., nq : nq + nk], ...
 *
 * One wider GEMM gathers x once, fills its tiles' panels further and
 * exchanges its partials in one phase where three did each. The rule: the
 * matmuls are in one block and read the same x; each W is a parameter (or
 * a repeat's slice of a stacked one) that nothing else reads, untransposed,
 * all of one dtype, scale and K; the matmuls agree in their attributes and
 * result dtype. The biases join when every member's only use is an add of
 * such a parameter [n_i] of one dtype; otherwise each add stays, on its
 * slice. Each element of y is computed exactly as the member's own (its K
 * sum is the same products), so the plan's numerics of y are every
 * member's. The new parameter's data is its pieces' side by side
 * (INIT_CONCAT); the pieces' own parameters and slices leave the graph.
 *
 * The slices keep the members' result names, so every later op, recipe key
 * and output reads as before; the fused matmul is named after its members
 * (`l.q_proj.k_proj.v_proj`). */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

typedef struct sctx {
    const graph *g;
    int32_t *nuse; /* per value: operand slots that read it (outputs and yields count) */
    int32_t *user; /* per value: the op that reads it, the last seen */
} sctx;

static void count_uses(sctx *c, const graph_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        const graph_op *o = graph_opr(c->g, b->v[i]);
        for (int32_t k = 0; k < o->nin; k++) c->nuse[o->in[k]]++, c->user[o->in[k]] = b->v[i];
        if (o->kind == OP_REPEAT) count_uses(c, &o->body);
    }
}

/* The parameter behind a weight operand v read only by its op: a top-level
 * parameter, or a repeat's slice of one. The parameter op, or -1; *stacked
 * gets the repeat (or -1 at the top level). */
static int32_t origin(const sctx *c, int32_t v, int32_t *stacked) {
    const graph_value *x = graph_val(c->g, v);
    *stacked = -1;
    if (c->nuse[v] != 1) return -1;
    if (!x->is_arg) return graph_opr(c->g, x->def)->kind == OP_PARAM ? x->def : -1;
    const graph_op *r = graph_opr(c->g, x->def);
    if (x->def_index < r->ncarry) return -1;
    int32_t src = r->in[x->def_index], d = graph_val(c->g, src)->def;
    if (graph_val(c->g, src)->is_arg || graph_opr(c->g, d)->kind != OP_PARAM || c->nuse[src] != 1) return -1;
    *stacked = x->def;
    return d;
}

static const graph_type *vtype(const graph *g, int32_t v) { return &graph_val(g, v)->type; }

/* Two types alike but for the last axis. */
static bool alike(const graph_type *a, const graph_type *b) {
    if (a->dtype != b->dtype || a->scale != b->scale || a->rank != b->rank || a->rank < 1) return false;
    for (int i = 0; i < a->rank - 1; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

static bool same_gemm_attrs(const graph_op *a, const graph_op *b) {
    return graph_attr_bool(a, ATTR_TRANSPOSE_A) == graph_attr_bool(b, ATTR_TRANSPOSE_A) &&
           ((a->attr_set >> ATTR_ACC & 1) == (b->attr_set >> ATTR_ACC & 1)) &&
           (!(a->attr_set >> ATTR_ACC & 1) || a->attr[ATTR_ACC].t == b->attr[ATTR_ACC].t);
}

/* Matmul op m may join a group: untransposed B from a parameter. */
static bool eligible(const sctx *c, int32_t m, int32_t *param, int32_t *stacked) {
    const graph_op *o = graph_opr(c->g, m);
    if (o->kind != OP_MATMUL || graph_attr_bool(o, ATTR_TRANSPOSE_B)) return false;
    if (vtype(c->g, o->in[1])->rank != 2) return false;
    return (*param = origin(c, o->in[1], stacked)) >= 0;
}

/* The bias add of matmul m in its block, add(m, b) with b [n] from a
 * parameter, or -1. */
static int32_t bias_add(const sctx *c, int32_t m, int32_t *param, int32_t *stacked) {
    int32_t y = graph_opr(c->g, m)->out[0];
    if (c->nuse[y] != 1) return -1;
    int32_t a = c->user[y];
    const graph_op *o = graph_opr(c->g, a);
    if (o->kind != OP_ADD || o->in[0] != y || o->in[1] == y || o->parent != graph_opr(c->g, m)->parent) return -1;
    const graph_type *b = vtype(c->g, o->in[1]), *t = vtype(c->g, y);
    if (b->rank != 1 || b->dim[0] != t->dim[t->rank - 1] || !graph_type_equal(vtype(c->g, o->out[0]), t)) return -1;
    return (*param = origin(c, o->in[1], stacked)) >= 0 ? a : -1;
}

static void collect(sctx *c, const graph_block *b, sib_plan *out) {
    int32_t *taken = xcalloc((size_t)b->n + 1, sizeof(int32_t));
    for (int32_t i = 0; i < b->n; i++) {
        int32_t m = b->v[i], pm, sm;
        if (graph_opr(c->g, m)->kind == OP_REPEAT) collect(c, &graph_opr(c->g, m)->body, out);
        if (taken[i] || !eligible(c, m, &pm, &sm)) continue;
        const graph_op *om = graph_opr(c->g, m);
        int32_t *mm = xmalloc(sizeof(int32_t) * ((size_t)b->n + 1)), n = 0;
        mm[n++] = m;
        for (int32_t j = i + 1; j < b->n; j++) {
            int32_t x = b->v[j], px, sx;
            if (taken[j] || !eligible(c, x, &px, &sx) || sx != sm) continue;
            const graph_op *ox = graph_opr(c->g, x);
            if (ox->in[0] != om->in[0] || !same_gemm_attrs(om, ox) || !alike(vtype(c->g, om->in[1]), vtype(c->g, ox->in[1])) ||
                vtype(c->g, om->out[0])->dtype != vtype(c->g, ox->out[0])->dtype)
                continue;
            mm[n++] = x;
            taken[j] = 1;
        }
        if (n < 2) {
            free(mm);
            continue;
        }
        /* The biases join when every member has one, alike and stacked alike. */
        int32_t *add = xmalloc(sizeof(int32_t) * (size_t)n), sb0 = -1;
        for (int32_t k = 0; k < n && add; k++) {
            int32_t pb, sb;
            add[k] = bias_add(c, mm[k], &pb, &sb);
            if (k == 0) sb0 = sb;
            if (add[k] < 0 || sb != sb0 ||
                !alike(vtype(c->g, graph_opr(c->g, add[k])->in[1]), vtype(c->g, graph_opr(c->g, add[0])->in[1])))
                free(add), add = NULL;
        }
        out->v = xrealloc(out->v, sizeof(sib_group) * (size_t)(out->n + 1));
        out->v[out->n++] = (sib_group){.n = n, .mm = mm, .add = add};
    }
    free(taken);
}

void graph_siblings_analyze(const graph *g, sib_plan *out) {
    memset(out, 0, sizeof *out);
    sctx c = {g, xcalloc((size_t)g->values.n + 1, sizeof(int32_t)), xcalloc((size_t)g->values.n + 1, sizeof(int32_t))};
    count_uses(&c, &g->body);
    collect(&c, &g->body, out);
    free(c.nuse);
    free(c.user);
}

void graph_siblings_free(sib_plan *p) {
    for (int32_t k = 0; k < p->n; k++) {
        free(p->v[k].mm);
        free(p->v[k].add);
        free(p->v[k].name);
    }
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* ---- the rewrite ------------------------------------------------------------------- */

typedef struct srw {
    const sib_plan *p;
    int32_t *group;  /* op of g -> 1 + the group whose member matmul or bias add it is, else 0 */
    int32_t *first;  /* op of g: 1 + the group whose fused ops are emitted at it, else 0 */
    /* parameter ops of g: 1 + the group whose weights (bias: negative) it is
     * the first piece of, or a piece that goes; see piece_role */
    int32_t *wpiece, *bpiece;
    int32_t *wparam, *bparam; /* per group: the new parameter's value in out, -1 until made */
    int32_t *warg, *barg;     /* per group: the repeat's argument for it in out, or -1 */
    const char **name;        /* per group: the fused matmul's name */
} srw;

/* The name of the fused value: the members' names with their common
 * prefix (to its last '.') once, the rest joined by '.', made unique. */
static const char *joined_name(graph_rw *rw, const int32_t *vals, int32_t n) {
    const char *a = graph_val(rw->g, vals[0])->name;
    size_t pre = 0;
    for (size_t i = 0; a[i]; i++)
        if (a[i] == '.') {
            bool all = true;
            for (int32_t k = 1; k < n && all; k++) all = strncmp(graph_val(rw->g, vals[k])->name, a, i + 1) == 0;
            if (all) pre = i + 1;
        }
    arena *ar = &rw->out->arena;
    char *s = arena_strndup(ar, a, pre);
    for (int32_t k = 0; k < n; k++) s = arena_printf(ar, "%s%s%s", s, k ? "." : "", graph_val(rw->g, vals[k])->name + pre);
    const char *base = s;
    for (int u = 2; graph_lookup(rw->g, s) >= 0 || graph_lookup(rw->out, s) >= 0; u++) s = arena_printf(ar, "%s_%d", base, u);
    return s;
}

/* The parameter op behind operand v of g (a top-level parameter or the
 * stacked one a repeat slices). */
static int32_t param_of(const graph *g, int32_t v) {
    const graph_value *x = graph_val(g, v);
    if (!x->is_arg) return x->def;
    return graph_val(g, graph_opr(g, x->def)->in[x->def_index])->def;
}

/* The new parameter of group k (bias: its biases): the pieces side by side. */
static int32_t emit_concat(graph_rw *rw, int32_t k, bool bias) {
    const srw *x = rw->ctx;
    const sib_group *s = &x->p->v[k];
    int32_t *ops = xmalloc(sizeof(int32_t) * (size_t)s->n), *vals = xmalloc(sizeof(int32_t) * (size_t)s->n);
    graph_init *cat = xmalloc(sizeof(graph_init) * (size_t)s->n);
    int64_t *width = xmalloc(sizeof(int64_t) * (size_t)s->n), w = 0;
    for (int32_t i = 0; i < s->n; i++) {
        int32_t operand = bias ? graph_opr(rw->g, s->add[i])->in[1] : graph_opr(rw->g, s->mm[i])->in[1];
        ops[i] = param_of(rw->g, operand);
        vals[i] = graph_opr(rw->g, ops[i])->out[0];
        cat[i] = graph_opr(rw->g, ops[i])->init;
        const graph_type *t = vtype(rw->g, vals[i]);
        width[i] = t->dim[t->rank - 1];
        w += width[i];
    }
    graph_type t = *vtype(rw->g, vals[0]);
    t.dim[t.rank - 1] = w;
    graph_init in = {.kind = INIT_CONCAT, .cat = cat, .width = width, .ncat = s->n};
    int32_t op = graph_add_param(rw->out, joined_name(rw, vals, s->n), t, in);
    free(ops), free(vals), free(cat), free(width);
    return graph_result(rw->out, op, 0);
}

static void copy_place(graph_rw *rw, int32_t from, int32_t to) {
    graph_opr(rw->out, to)->line = graph_opr(rw->g, from)->line;
    graph_opr(rw->out, to)->col = graph_opr(rw->g, from)->col;
}

/* Group k's fused matmul, its bias add and the members' slices. */
static void emit_group(graph_rw *rw, int32_t k) {
    srw *x = rw->ctx;
    const sib_group *s = &x->p->v[k];
    const graph_op *m0 = graph_opr(rw->g, s->mm[0]);
    int32_t *ys = xmalloc(sizeof(int32_t) * (size_t)s->n);
    graph_type t = *vtype(rw->g, m0->out[0]);
    int64_t w = 0;
    for (int32_t i = 0; i < s->n; i++) {
        ys[i] = graph_opr(rw->g, s->mm[i])->out[0];
        w += vtype(rw->g, ys[i])->dim[t.rank - 1];
    }
    t.dim[t.rank - 1] = w;
    int32_t b = x->warg[k] >= 0 ? x->warg[k] : x->wparam[k];
    TS_ASSERT(b >= 0 && rw->vmap[m0->in[0]] >= 0);
    int32_t in[2] = {rw->vmap[m0->in[0]], b};
    int32_t op = graph_begin_op(rw->out, OP_MATMUL, in, 2);
    graph_copy_attrs(rw->out, op, rw->g, s->mm[0], ~0ull);
    copy_place(rw, s->mm[0], op);
    const char *name = joined_name(rw, ys, s->n);
    x->name[k] = name;
    int32_t y = graph_rw_finish_as(rw, op, name, &t);
    if (y >= 0 && s->add) {
        for (int32_t i = 0; i < s->n; i++) ys[i] = graph_opr(rw->g, s->add[i])->out[0];
        in[0] = y, in[1] = x->barg[k] >= 0 ? x->barg[k] : x->bparam[k];
        TS_ASSERT(in[1] >= 0);
        op = graph_begin_op(rw->out, OP_ADD, in, 2);
        copy_place(rw, s->add[0], op);
        y = graph_rw_finish_as(rw, op, joined_name(rw, ys, s->n), &t);
    }
    int64_t at = 0;
    for (int32_t i = 0; i < s->n && y >= 0; i++) {
        const graph_type *ti = vtype(rw->g, ys[i]);
        int64_t start[GRAPH_MAX_RANK] = {0}, end[GRAPH_MAX_RANK];
        for (int a = 0; a < ti->rank; a++) end[a] = ti->dim[a];
        start[ti->rank - 1] = at, end[ti->rank - 1] = at + ti->dim[ti->rank - 1];
        at = end[ti->rank - 1];
        op = graph_begin_op(rw->out, OP_SLICE, &y, 1);
        graph_set_ints(rw->out, op, ATTR_START, start, ti->rank);
        graph_set_ints(rw->out, op, ATTR_END, end, ti->rank);
        copy_place(rw, s->add ? s->add[i] : s->mm[i], op);
        int32_t r = graph_rw_finish_as(rw, op, graph_val(rw->g, ys[i])->name, ti);
        if (r >= 0) rw->vmap[ys[i]] = r;
    }
    free(ys);
}

/* A repeat whose stacked pieces join: the first piece's argument becomes
 * the new parameter's, the others go. */
static void emit_repeat(graph_rw *rw, int32_t id) {
    srw *x = rw->ctx;
    const graph_op *o = graph_opr(rw->g, id);
    int32_t *in = xmalloc(sizeof(int32_t) * ((size_t)o->nin + 1)), n = 0;
    const char **names = xmalloc(sizeof(char *) * ((size_t)o->nargs + 1));
    int32_t *slot = xmalloc(sizeof(int32_t) * ((size_t)o->nargs + 1)); /* arg of g -> arg index in out, or -1 */
    for (int32_t k = 0; k < o->nin; k++) {
        slot[k] = -1;
        int32_t p = k < o->ncarry ? -1 : graph_val(rw->g, o->in[k])->def;
        int32_t wp = p >= 0 ? x->wpiece[p] : 0, bp = p >= 0 ? x->bpiece[p] : 0;
        if (wp < 0 || bp < 0) continue; /* a piece that is not the first: it goes */
        slot[k] = n;
        if (wp > 0 || bp > 0) { /* the first piece: the new parameter in its place */
            int32_t g = (wp > 0 ? wp : bp) - 1;
            in[n] = wp > 0 ? x->wparam[g] : x->bparam[g];
            const sib_group *s = &x->p->v[g];
            int32_t *vals = xmalloc(sizeof(int32_t) * (size_t)s->n);
            for (int32_t i = 0; i < s->n; i++)
                vals[i] = wp > 0 ? graph_opr(rw->g, s->mm[i])->in[1] : graph_opr(rw->g, s->add[i])->in[1];
            names[n++] = joined_name(rw, vals, s->n);
            free(vals);
        } else {
            in[n] = rw->vmap[o->in[k]];
            names[n++] = graph_val(rw->g, o->args[k])->name;
        }
    }
    int32_t op = graph_begin_repeat(rw->out, o->count, in, o->ncarry, in + o->ncarry, n - o->ncarry, names);
    for (int32_t k = 0; k < o->nargs; k++) {
        if (slot[k] < 0) continue;
        int32_t p = k < o->ncarry ? -1 : graph_val(rw->g, o->in[k])->def;
        int32_t a = graph_opr(rw->out, op)->args[slot[k]];
        if (p >= 0 && x->wpiece[p] > 0) x->warg[x->wpiece[p] - 1] = a;
        else if (p >= 0 && x->bpiece[p] > 0) x->barg[x->bpiece[p] - 1] = a;
        else rw->vmap[o->args[k]] = a;
    }
    graph_rw_block(rw, &o->body);
    graph_rw_end_repeat(rw, id, op);
    free(in), free(names), free(slot);
}

/* Before op id: a group's fused ops at its first member; the members, the
 * pieces and repeats with pieces are this pass's, the rest is copied. */
static bool rewrite_op(graph_rw *rw, int32_t id) {
    srw *x = rw->ctx;
    const graph_op *o = graph_opr(rw->g, id);
    if (x->first[id]) emit_group(rw, x->first[id] - 1);
    if (x->group[id]) return true;
    if (o->kind == OP_REPEAT) {
        emit_repeat(rw, id);
        return true;
    }
    if (o->kind != OP_PARAM) return false;
    int32_t wp = x->wpiece[id], bp = x->bpiece[id];
    if (wp > 0) x->wparam[wp - 1] = emit_concat(rw, wp - 1, false);
    else if (bp > 0) x->bparam[bp - 1] = emit_concat(rw, bp - 1, true);
    return wp != 0 || bp != 0; /* a piece: made into the new parameter, or gone */
}

graph *graph_siblings_apply(const graph *g, sib_plan *p, diag *d) {
    size_t nops = (size_t)g->ops.n + 1, ng = (size_t)p->n + 1;
    srw x = {p, xcalloc(nops, sizeof(int32_t)), xcalloc(nops, sizeof(int32_t)), xcalloc(nops, sizeof(int32_t)),
             xcalloc(nops, sizeof(int32_t)), xmalloc(sizeof(int32_t) * ng), xmalloc(sizeof(int32_t) * ng),
             xmalloc(sizeof(int32_t) * ng), xmalloc(sizeof(int32_t) * ng), xcalloc(ng, sizeof(char *))};
    for (int32_t k = 0; k < p->n; k++) {
        const sib_group *s = &p->v[k];
        x.wparam[k] = x.bparam[k] = x.warg[k] = x.barg[k] = -1;
        x.first[s->mm[0]] = k + 1;
        /* The first piece in program order makes the new parameter; the others go. */
        int32_t wfirst = INT32_MAX, bfirst = INT32_MAX;
        for (int32_t i = 0; i < s->n; i++) {
            x.group[s->mm[i]] = k + 1;
            int32_t w = param_of(g, graph_opr(g, s->mm[i])->in[1]);
            x.wpiece[w] = -1;
            wfirst = w < wfirst ? w : wfirst;
            if (!s->add) continue;
            x.group[s->add[i]] = k + 1;
            int32_t bb = param_of(g, graph_opr(g, s->add[i])->in[1]);
            x.bpiece[bb] = -1;
            bfirst = bb < bfirst ? bb : bfirst;
        }
        x.wpiece[wfirst] = k + 1;
        if (s->add) x.bpiece[bfirst] = k + 1;
    }
    graph_rw rw;
    graph_rw_init(&rw, g, &(graph_rw_hooks){rewrite_op, NULL}, &x, d);
    graph_rw_block(&rw, &g->body);
    bool ok = !rw.err;
    graph *out = graph_rw_finish_graph(&rw);
    for (int32_t k = 0; k < p->n && ok && out; k++) p->v[k].name = xstrdup(x.name[k]);
    free(x.group), free(x.first), free(x.wpiece), free(x.bpiece);
    free(x.wparam), free(x.bparam), free(x.warg), free(x.barg);
    free(x.name);
    return out;
}

int32_t graph_siblings_group(const sib_plan *p, const char *name) {
    for (int32_t k = 0; k < p->n; k++)
        if (p->v[k].name && strcmp(p->v[k].name, name) == 0) return k;
    return -1;
}

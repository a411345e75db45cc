/* fuse.c: the optimizer epilogue fusion, a pass from graph to graph
 * (docs/epilogue.md).
 *
 *   matmul g = a x b   ──►  one op whose GEMM hands every element of g,
 *   sgd / adamw(w, g)       where a tile completes it, to the optimizer:
 *                           g never exists as a tensor
 *
 * The rule, in general: a consumer fuses into its producer's tiled epilogue
 * when the consumer's read-locality is no coarser than what one tile of the
 * producer completes (the lattice below), the product has a single use, and
 * nothing else observes it. The optimizer into the weight-gradient matmul is
 * the first row of the table; a second consumer kind (a bias-gradient
 * reduction, bias + GeLU in the forward pass) is a row there and an epilogue
 * op of the kernels, not a new pass.
 *
 * graph_fuse_analyze is the single entry point that decides: every candidate
 * (each optimizer op, with what makes its gradient) comes back legal or with
 * the rule that refuses it and why, failing closed. graph_fuse_apply rewrites
 * the chosen ones. Precondition: g verifies. Postcondition: the new graph
 * verifies, has g's inputs in g's order, g's outputs and every value name of
 * g except the fused gradients; each fused op stands where its matmul stood
 * (parameters it reads are moved up to it, which changes nothing: they are
 * live from the start). */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* ---- the locality lattice -------------------------------------------------------- */

const char *const fuse_locality_names[FUSE_LOCALITY_COUNT] = {"element", "row", "column", "block", "tensor", "global"};
const char *const fuse_rule_names[FUSE_RULE_COUNT] = {
#define X(id, name) [FUSE_##id] = #name,
    FUSE_RULES(X)
#undef X
};

/* Per axis of a 2-D product (rows, columns), how much of it: 0 one element,
 * 1 a tile's part, 2 all of it, 3 more than the tensor (other tensors). */
static const int8_t AXES[FUSE_LOCALITY_COUNT][2] = {
    [FUSE_ELEMENT] = {0, 0}, [FUSE_ROW] = {0, 2},    [FUSE_COLUMN] = {2, 0},
    [FUSE_BLOCK] = {1, 1},   [FUSE_TENSOR] = {2, 2}, [FUSE_GLOBAL] = {3, 3},
};

bool fuse_locality_fits(fuse_locality need, fuse_locality have) {
    return AXES[need][0] <= AXES[have][0] && AXES[need][1] <= AXES[have][1];
}

fuse_locality fuse_gemm_partition(int64_t R, int64_t C) {
    if (R == 1 && C == 1) return FUSE_TENSOR;
    if (C == 1) return FUSE_ROW;    /* whole rows on a tile */
    if (R == 1) return FUSE_COLUMN; /* whole columns */
    return FUSE_BLOCK;
}

/* ---- the table --------------------------------------------------------------------- */

/* Consumers with an epilogue: the op that consumes the product, which of
 * its operands the product is, the fused ops the pair becomes (with a
 * matmul, with a sum of partials) and what one element of the consumer
 * reads of the product. */
static const struct epilogue_row {
    graph_op_kind consumer;
    int operand;
    graph_op_kind fused, fused_sum;
    fuse_locality need;
} EPILOGUES[] = {
    {OP_SGD, 1, OP_MATMUL_SGD, OP_SUM_SGD, FUSE_ELEMENT},
    {OP_ADAMW, 1, OP_MATMUL_ADAMW, OP_SUM_ADAMW, FUSE_ELEMENT},
};

/* Producers with a tiled epilogue, what one tile of theirs completes (a
 * matmul before the grid is chosen: a block, the plan may make it whole
 * rows; a sum of partials over its first axis: each element where its
 * partials meet) and how many operands are the product's. */
static const struct producer_row {
    graph_op_kind kind;
    fuse_locality have;
    int operands;
} PRODUCERS[] = {
    {OP_MATMUL, FUSE_BLOCK, 2},
    {OP_REDUCE_SUM, FUSE_ELEMENT, 1},
};

static const struct epilogue_row *epilogue_of(graph_op_kind k) {
    for (size_t i = 0; i < TS_COUNT(EPILOGUES); i++)
        if (EPILOGUES[i].consumer == k) return &EPILOGUES[i];
    return NULL;
}

static const struct producer_row *producer_of(graph_op_kind k) {
    for (size_t i = 0; i < TS_COUNT(PRODUCERS); i++)
        if (PRODUCERS[i].kind == k) return &PRODUCERS[i];
    return NULL;
}

/* ---- the analysis ------------------------------------------------------------------- */

typedef struct ax {
    const graph *g;
    int32_t *nuse;      /* per value: operand slots that read it (outputs and yields count) */
    int32_t *user;      /* per value: one op that reads it, the last seen */
    bool *escapes;      /* per value: named by output or yield */
} ax;

static void count_uses(ax *a, const graph_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        const graph_op *o = graph_opr(a->g, b->v[i]);
        for (int32_t k = 0; k < o->nin; k++) {
            a->nuse[o->in[k]]++;
            a->user[o->in[k]] = b->v[i];
            if (o->kind == OP_OUTPUT || o->kind == OP_YIELD) a->escapes[o->in[k]] = true;
        }
        if (o->kind == OP_REPEAT) count_uses(a, &o->body);
    }
}

static int32_t def_of(const graph *g, int32_t v) { return graph_val(g, v)->is_arg ? -1 : graph_val(g, v)->def; }
static const char *vname(const graph *g, int32_t v) { return graph_val(g, v)->name; }
static const char *kname(const graph *g, int32_t op) { return graph_op_infos[graph_opr(g, op)->kind].name; }

/* v through the ops that only move or retype values (cast, reshape, transpose). */
static int32_t through_moves(const graph *g, int32_t v) {
    for (;;) {
        int32_t d = def_of(g, v);
        if (d < 0) return v;
        graph_op_kind k = graph_opr(g, d)->kind;
        if (k != OP_CAST && k != OP_RESHAPE && k != OP_TRANSPOSE) return v;
        v = graph_opr(g, d)->in[0];
    }
}

/* The routing gate of a product operand: v is (through moves) a mul by a
 * graph input (through moves), a per-token mask given at run time. That
 * input's value (of two inputs, the smaller: the mask broadcasts), or -1. */
static int32_t gate_of(const graph *g, int32_t v) {
    int32_t d = def_of(g, through_moves(g, v)), gate = -1;
    if (d < 0 || graph_opr(g, d)->kind != OP_MUL) return -1;
    for (int k = 0; k < 2; k++) {
        int32_t s = through_moves(g, graph_opr(g, d)->in[k]), sd = def_of(g, s);
        if (sd < 0 || graph_opr(g, sd)->kind != OP_INPUT) continue;
        if (gate < 0 || graph_type_numel(&graph_val(g, s)->type) < graph_type_numel(&graph_val(g, gate)->type)) gate = s;
    }
    return gate;
}

/* Products summed into v through add and sub (a tied weight's gradient). */
static int count_products(const graph *g, int32_t v, int32_t *first, int depth) {
    int32_t d = def_of(g, v);
    if (d < 0 || depth > 64) return 0;
    const graph_op *o = graph_opr(g, d);
    if (o->kind == OP_MATMUL) {
        if (*first < 0) *first = d;
        return 1;
    }
    if (o->kind != OP_ADD && o->kind != OP_SUB) return 0;
    return count_products(g, o->in[0], first, depth + 1) + count_products(g, o->in[1], first, depth + 1);
}

/* Why reduce_sum op d is not a sum of partials the epilogue takes, or
 * NULL: it must sum its operand's first axis alone, and that operand be
 * handed in (an owner's rows from every data-parallel replica,
 * docs/chips.md). A sum of a value computed here (a bias gradient over
 * the batch) is not fused yet: its expansion sums in stages over tiles. */
static const char *not_partials(const graph *g, int32_t d) {
    const graph_op *o = graph_opr(g, d);
    const graph_attr *axes = &o->attr[ATTR_AXES];
    if (axes->ints.n != 1 || axes->ints.v[0] != 0 || graph_attr_bool(o, ATTR_KEEPDIMS)) return "it sums other axes than the first alone";
    int32_t src = def_of(g, o->in[0]);
    if (src < 0 || graph_opr(g, src)->kind != OP_INPUT)
        return "its operand is computed, not partials handed in (only an owner's sum of the replicas' gradients fuses)";
    return NULL;
}

/* Whether the optimizer keeps state that decays every step. */
static bool decays(const graph_op *o) { return o->kind == OP_ADAMW || graph_attr_float(o, ATTR_MOMENTUM) != 0; }

#define WHY(c, ...) snprintf((c)->why, sizeof (c)->why, __VA_ARGS__)

/* Candidate c's gradient %gv comes out of global_norm_clip d: the clip's
 * coefficient needs every gradient (global locality). */
static void judge_clip(const graph *g, fuse_candidate *c, const graph_op *opt, int32_t gv, int32_t d) {
    const char *on = graph_op_name(g, c->consumer), *ok = kname(g, c->consumer);
    const graph_op *clip = graph_opr(g, d);
    int32_t under = clip->in[graph_val(g, gv)->def_index], ud = def_of(g, under);
    if (ud >= 0 && graph_opr(g, ud)->kind == OP_MATMUL) c->gemm = ud;
    c->producer = ud;
    c->need = FUSE_GLOBAL;
    if (!decays(opt)) {
        c->rule = FUSE_CLIP_SCALE;
        WHY(c,
            "global_norm_clip '%s' scales %%%s by a coefficient from the norm of every gradient before plain sgd "
            "'%s': clipping equals scaling the learning rate, so a fused step is sound in exact arithmetic, but the "
            "coefficient exists only once every gradient is complete, and applying it afterwards rounds differently "
            "from the unfused step (P1)",
            graph_op_name(g, d), vname(g, under), on);
    } else {
        c->rule = FUSE_CLIP;
        WHY(c,
            "global_norm_clip '%s' scales %%%s by a coefficient from the norm of every gradient (global locality, more "
            "than a tile completes): %s '%s' would need the whole gradient's norm before its nonlinear state update, "
            "and no scalar applied afterwards recovers the clipped state (P2)",
            graph_op_name(g, d), vname(g, under), ok, on);
    }
}

/* Whether gradient gv, made by op d (producer row p, NULL: none), has no
 * epilogue to fuse into: then c is refused as `producer`, saying why. */
static bool refuse_producer(const graph *g, fuse_candidate *c, int32_t gv, int32_t d, const struct producer_row *p) {
    const char *partials = p && p->kind == OP_REDUCE_SUM ? not_partials(g, d) : NULL;
    if (p && !partials) return false;
    c->rule = FUSE_PRODUCER;
    if (d < 0 || graph_opr(g, d)->kind == OP_INPUT || graph_opr(g, d)->kind == OP_PARAM)
        WHY(c, "%%%s is not computed by the program: there is no producer to fuse into", vname(g, gv));
    else if (partials)
        WHY(c, "%%%s is made by reduce_sum '%s', whose epilogue takes a sum of partials over the first axis: %s", vname(g, gv),
            graph_op_name(g, d), partials);
    else
        WHY(c, "%%%s is made by %s '%s', which has no tiled epilogue (only matmul and a sum of partials have one)",
            vname(g, gv), kname(g, d), graph_op_name(g, d));
    return true;
}

static void judge(ax *a, fuse_candidate *c) {
    const graph *g = a->g;
    const graph_op *opt = graph_opr(g, c->consumer);
    const struct epilogue_row *e = epilogue_of(opt->kind);
    const char *on = graph_op_name(g, c->consumer), *ok = kname(g, c->consumer);
    int32_t gv = opt->in[e->operand], d = def_of(g, gv);
    c->gradient = gv;
    c->gemm = -1;
    c->producer = d;
    c->need = e->need;
    c->have = FUSE_BLOCK;
    if (d >= 0 && graph_opr(g, d)->kind == OP_GLOBAL_NORM_CLIP) {
        judge_clip(g, c, opt, gv, d);
        return;
    }
    const struct producer_row *p = d >= 0 ? producer_of(graph_opr(g, d)->kind) : NULL;
    if (d >= 0 && (graph_opr(g, d)->kind == OP_ADD || graph_opr(g, d)->kind == OP_SUB)) {
        int32_t first = -1;
        int n = count_products(g, gv, &first, 0);
        if (n > 0) {
            c->gemm = first;
            c->rule = FUSE_TIED;
            WHY(c,
                "%%%s, the gradient %s '%s' reads, is a sum of %d product%s (matmul '%s'%s): the weight has more than one "
                "use and no single GEMM completes its gradient",
                vname(g, gv), ok, on, n, n == 1 ? "" : "s", graph_op_name(g, first), n > 1 ? ", ..." : "");
            return;
        }
    }
    if (refuse_producer(g, c, gv, d, p)) return;
    c->gemm = d;
    c->have = p->have;
    const char *gn = graph_op_name(g, d), *pk = kname(g, d);
    if (graph_opr(g, d)->parent != opt->parent) {
        c->rule = FUSE_SCOPE;
        WHY(c, "%s '%s' and %s '%s' are in different blocks (a repeat body and outside it)", pk, gn, ok, on);
        return;
    }
    if (a->escapes[gv]) {
        c->rule = FUSE_ESCAPES;
        WHY(c, "%%%s is %s: it must exist whole", vname(g, gv), graph_opr(g, d)->parent >= 0 ? "yielded by its repeat" : "a graph output");
        return;
    }
    if (a->nuse[gv] > 1) {
        int32_t other = -1;
        for (int32_t k = 0; k < opt->nin; k++)
            if (opt->in[k] == gv && k != e->operand) other = c->consumer;
        if (other >= 0) {
            c->rule = FUSE_OPERAND;
            WHY(c, "%s '%s' reads %%%s also as its weight or a state, not only as its gradient", ok, on, vname(g, gv));
            return;
        }
        int32_t u = a->user[gv] != c->consumer ? a->user[gv] : -1;
        for (int32_t i = 0; u < 0 && i < g->ops.n; i++) {
            const graph_op *o = graph_opr(g, i);
            for (int32_t k = 0; k < o->nin && u < 0; k++)
                if (o->in[k] == gv && i != c->consumer) u = i;
        }
        c->rule = FUSE_MULTI_USE;
        WHY(c, "%%%s is also read by %s '%s': it must exist whole", vname(g, gv), u >= 0 ? kname(g, u) : "another op",
            u >= 0 ? graph_op_name(g, u) : "?");
        return;
    }
    if (p->kind == OP_MATMUL && graph_val(g, gv)->type.rank != 2) {
        c->rule = FUSE_SHAPE;
        WHY(c, "%%%s has rank %d: the epilogue kernels take 2-D weight gradients", vname(g, gv), graph_val(g, gv)->type.rank);
        return;
    }
    for (int k = 0; k < p->operands && decays(opt); k++) {
        int32_t gate = gate_of(g, graph_opr(g, d)->in[k]);
        if (gate < 0) continue;
        c->rule = FUSE_ROUTED;
        WHY(c,
            "matmul '%s' reads %%%s gated by input %%%s: the weight is conditionally routed and %s '%s' decays its state "
            "every step; an epilogue that folds the decay into the accumulation decays only where something is routed "
            "(P5), so routed weights keep the unfused plan",
            gn, vname(g, graph_opr(g, d)->in[k]), vname(g, gate), ok, on);
        return;
    }
    if (!fuse_locality_fits(c->need, c->have)) {
        c->rule = FUSE_LOCALITY;
        WHY(c, "%s '%s' reads %s of %%%s, more than a tile of %s '%s' completes (%s)", ok, on,
            fuse_locality_names[c->need], vname(g, gv), pk, gn, fuse_locality_names[c->have]);
        return;
    }
    c->rule = FUSE_OK;
    WHY(c,
        "%s '%s' reads one element of %%%s per element (element locality) and a tile of %s '%s' completes a%s %s of it: "
        "the update runs in the %s's epilogue",
        ok, on, vname(g, gv), pk, gn, c->have == FUSE_ELEMENT ? "n" : "", fuse_locality_names[c->have],
        p->kind == OP_MATMUL ? "GEMM" : "sum");
}

typedef VEC(fuse_candidate) candidate_vec;

static void collect(ax *a, const graph_block *b, candidate_vec *out, arena *ar) {
    for (int32_t i = 0; i < b->n; i++) {
        const graph_op *o = graph_opr(a->g, b->v[i]);
        if (o->kind == OP_REPEAT) collect(a, &o->body, out, ar);
        if (o->kind == OP_MATMUL_SGD || o->kind == OP_MATMUL_ADAMW || o->kind == OP_SUM_SGD || o->kind == OP_SUM_ADAMW) {
            fuse_candidate c = {.consumer = b->v[i], .gradient = -1, .producer = -1, .gemm = -1, .rule = FUSE_OK,
                                .need = FUSE_ELEMENT, .have = FUSE_BLOCK, .fused = true, .given = true};
            snprintf(c.why, sizeof c.why, "%s '%s' is fused in the model itself", graph_op_infos[o->kind].name,
                     graph_op_name(a->g, b->v[i]));
            vec_push(ar, out, c);
            continue;
        }
        if (!epilogue_of(o->kind)) continue;
        fuse_candidate c = {.consumer = b->v[i]};
        judge(a, &c);
        vec_push(ar, out, c);
    }
}

void graph_fuse_analyze(const graph *g, bool enable, fuse_plan *out) {
    memset(out, 0, sizeof *out);
    size_t nv = (size_t)g->values.n + 1;
    ax a = {g, xcalloc(nv, sizeof(int32_t)), xcalloc(nv, sizeof(int32_t)), xcalloc(nv, sizeof(bool))};
    count_uses(&a, &g->body);
    arena ar;
    arena_init(&ar);
    candidate_vec v = {0};
    collect(&a, &g->body, &v, &ar);
    out->n = v.n;
    out->c = xcalloc((size_t)v.n + 1, sizeof(fuse_candidate));
    if (v.n) memcpy(out->c, v.v, sizeof(fuse_candidate) * (size_t)v.n);
    for (int32_t i = 0; i < out->n; i++) {
        fuse_candidate *c = &out->c[i];
        if (c->given) continue;
        c->fused = c->rule == FUSE_OK && enable;
        if (c->rule == FUSE_OK && !enable) c->rule = FUSE_DISABLED;
    }
    arena_free(&ar);
    free(a.nuse);
    free(a.user);
    free(a.escapes);
}

void graph_fuse_free(fuse_plan *p) {
    free(p->c);
    memset(p, 0, sizeof *p);
}

int32_t graph_fuse_count(const fuse_plan *p) {
    int32_t n = 0;
    for (int32_t i = 0; i < p->n; i++) n += p->c[i].fused && !p->c[i].given;
    return n;
}

int32_t graph_fuse_fused(const fuse_plan *p) {
    int32_t n = 0;
    for (int32_t i = 0; i < p->n; i++) n += p->c[i].fused;
    return n;
}

/* ---- the rewrite ----------------------------------------------------------------------- */

typedef struct frw {
    const fuse_plan *p;
    int32_t *role;       /* op of g -> candidate index + 1 if its matmul or optimizer is fused, else 0 */
    bool *hoisted;       /* op of g: a parameter emitted early, before a fused op */
    const graph_block *due_in; /* the block due[] is for (a repeat body's ends in between) */
    int32_t *due;        /* per candidate: the position in due_in after which its fused op goes, -1 */
} frw;

/* The fused op of candidate c: the product's operands ((a, b) of a matmul,
 * p of a sum), then (w[, states]), with the matmul's and the optimizer's
 * attributes, `grad` the product's result dtype. */
static void emit_fused(graph_rw *rw, const fuse_candidate *c) {
    frw *x = rw->ctx;
    const graph_op *mm = graph_opr(rw->g, c->gemm), *opt = graph_opr(rw->g, c->consumer);
    /* Parameters it reads that come later in the block are emitted first. */
    for (int32_t k = 0; k < opt->nin; k++) {
        int32_t d = def_of(rw->g, opt->in[k]);
        if (d >= 0 && rw->vmap[opt->in[k]] < 0 && graph_opr(rw->g, d)->kind == OP_PARAM) {
            graph_rw_copy(rw, d);
            x->hoisted[d] = true;
        }
    }
    bool sum = mm->kind == OP_REDUCE_SUM;
    int32_t in[5], n = 0;
    for (int32_t k = 0; k < producer_of(mm->kind)->operands; k++) in[n++] = rw->vmap[mm->in[k]];
    in[n++] = rw->vmap[opt->in[0]];
    for (int32_t k = 2; k < opt->nin; k++) in[n++] = rw->vmap[opt->in[k]];
    for (int32_t k = 0; k < n; k++) TS_ASSERT(in[k] >= 0);
    graph_op_kind kind = sum ? epilogue_of(opt->kind)->fused_sum : epilogue_of(opt->kind)->fused;
    int32_t op = graph_begin_op(rw->out, kind, in, n);
    if (!sum)
        graph_copy_attrs(rw->out, op, rw->g, c->gemm, (1ull << ATTR_TRANSPOSE_A) | (1ull << ATTR_TRANSPOSE_B) | (1ull << ATTR_ACC));
    graph_set_dtype(rw->out, op, ATTR_GRAD, graph_val(rw->g, mm->out[0])->type.dtype);
    graph_copy_attrs(rw->out, op, rw->g, c->consumer, ~0ull);
    graph_rw_finish(rw, op, c->consumer);
    if (!rw->err) graph_rw_trivia(rw, c->gemm, op);
}

/* The position in block b after which candidate c's fused op goes: its
 * matmul's, or later if the optimizer reads a value computed after it; -1
 * when its matmul is not in b. */
static int32_t emit_point(const graph *g, const graph_block *b, const fuse_candidate *c) {
    int32_t at = -1;
    bool here = false;
    const graph_op *opt = graph_opr(g, c->consumer);
    for (int32_t i = 0; i < b->n; i++) {
        if (b->v[i] == c->gemm) at = at > i ? at : i, here = true;
        for (int32_t k = 0; k < opt->nin; k++) {
            int32_t d = def_of(g, opt->in[k]);
            if (d == b->v[i] && graph_opr(g, d)->kind != OP_PARAM && k != 1 && i > at) at = i;
        }
    }
    return here ? at : -1;
}

/* The matmul and optimizer of a fused candidate go; parameters emitted
 * early are not emitted again. */
static bool skip(graph_rw *rw, int32_t id) {
    const frw *x = rw->ctx;
    return x->role[id] || x->hoisted[id];
}

static void emit_due(graph_rw *rw, const graph_block *b, int32_t i) {
    frw *x = rw->ctx;
    if (x->due_in != b) {
        x->due_in = b;
        for (int32_t k = 0; k < x->p->n; k++) {
            const fuse_candidate *c = &x->p->c[k];
            x->due[k] = c->fused && !c->given ? emit_point(rw->g, b, c) : -1;
        }
    }
    for (int32_t k = 0; k < x->p->n && !rw->err; k++)
        if (x->due[k] == i) emit_fused(rw, &x->p->c[k]);
}

graph *graph_fuse_apply(const graph *g, const fuse_plan *p, diag *d) {
    frw x = {p, xcalloc((size_t)g->ops.n + 1, sizeof(int32_t)), xcalloc((size_t)g->ops.n + 1, sizeof(bool)), NULL,
             xmalloc(sizeof(int32_t) * ((size_t)p->n + 1))};
    for (int32_t k = 0; k < p->n; k++)
        if (p->c[k].fused && !p->c[k].given) {
            TS_ASSERT(p->c[k].rule == FUSE_OK && p->c[k].gemm >= 0);
            x.role[p->c[k].gemm] = x.role[p->c[k].consumer] = k + 1;
        }
    graph_rw rw;
    graph_rw_init(&rw, g, &(graph_rw_hooks){skip, emit_due}, &x, d);
    graph_rw_block(&rw, &g->body);
    free(x.role);
    free(x.hoisted);
    free(x.due);
    return graph_rw_finish_graph(&rw);
}

/* numerics.c: what the plan decided about arithmetic, read off the expanded
 * program for the plan-exact reference (graph.h, "numerics.c"): the K
 * partition of every matmul's GEMM, the blocks a reduce_sum sums its reduced
 * axes in, how global_norm_clip's partial sums of squares fall into rows, and
 * the parts a layer norm's row statistics are taken in. */
#include "mid.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void gemm_plan(const mid_program *p, const mid_prim *pr, graph_numerics *n) {
    graph_op_plan *pl = &n->op[pr->origin];
    const layout *la = &mid_t(p, pr->in[0])->lay;
    int64_t K = la->dim[la->rank - 1], bk = min64(la->block[la->rank - 1], K);
    pl->kind = graph_opr(p->g, pr->origin)->kind;
    pl->gemm.acc = pr->acc;
    /* The GEMM writes the value itself (or, fused, hands it to its epilogue),
     * or partial sums a REDUCE finishes. */
    pl->gemm.partials = mid_t(p, pr->out[0])->value >= 0 ? pr->acc : mid_t(p, pr->out[0])->dtype;
    pl->gemm.nk = (int32_t)((K + bk - 1) / bk);
    pl->gemm.k_bounds = arena_alloc(&n->arena, sizeof(int64_t) * (size_t)(pl->gemm.nk + 1));
    for (int32_t k = 0; k <= pl->gemm.nk; k++) pl->gemm.k_bounds[k] = min64((int64_t)k * bk, K);
}

/* The first stage reads the op's operand (a tensor holding a graph value);
 * a second stage, if any, reads gathered partials. */
static void sum_plan(const mid_program *p, const mid_prim *pr, graph_numerics *n) {
    const mid_tensor *in = mid_t(p, pr->in[0]);
    if (in->value < 0) return;
    graph_op_plan *pl = &n->op[pr->origin];
    pl->kind = OP_REDUCE_SUM;
    for (int a = 0; a < in->lay.rank; a++) pl->block[a] = min64(in->lay.block[a], in->lay.dim[a]);
}

/* A sum of partials with the optimizer in its epilogue (sum_sgd,
 * sum_adamw): each element's partials summed on one tile, in order, as one
 * block of the unfused reduce_sum over the first axis (the blocks the
 * model's reduce_sum takes when the fusion made the op; a fused op the
 * model gives needs none). */
static void sum_epi_plan(const mid_prim *pr, const mid_program *p, graph_numerics *n) {
    const layout *l = &mid_t(p, pr->in[0])->lay;
    graph_op_plan *pl = &n->op[pr->origin];
    pl->kind = graph_opr(p->g, pr->origin)->kind;
    for (int a = 0; a < l->rank; a++) pl->block[a] = l->dim[a] > 0 ? l->dim[a] : 1;
}

static void sumsq_plan(const mid_program *p, const mid_prim *pr, graph_numerics *n) {
    graph_op_plan *pl = &n->op[pr->origin];
    const graph_op *op = graph_opr(p->g, pr->origin);
    if (!pl->grads) pl->grads = arena_alloc(&n->arena, sizeof(graph_norm_grad) * (size_t)op->nin);
    pl->kind = OP_GLOBAL_NORM_CLIP;
    const layout *l = &mid_t(p, pr->in[0])->lay;
    graph_norm_grad *gr = &pl->grads[pr->column];
    gr->row_base = l->tile_base;
    for (int a = 0; a < l->rank; a++) {
        gr->block[a] = min64(l->block[a], l->dim[a]);
        gr->row_stride[a] = l->tile_stride[a];
    }
}

/* A softmax that does the scale making its operand (absorb.c's prescale rewrite). */
static void prescale_plan(const mid_program *p, const mid_prim *pr, graph_numerics *n) {
    n->op[pr->origin].kind = OP_SOFTMAX;
    n->op[pr->origin].prescale = pr->f[0];
    int32_t scale = graph_val(p->g, graph_opr(p->g, pr->origin)->in[0])->def;
    n->op[scale].kind = OP_SCALE;
    n->op[scale].folded = true;
}

/* A layer norm whose rows are cut over tiles: each part's statistics, joined. */
static void part_plan(const mid_program *p, const mid_prim *pr, graph_numerics *n) {
    const layout *l = &mid_t(p, pr->in[0])->lay;
    n->op[pr->origin].kind = OP_LAYER_NORM;
    n->op[pr->origin].part = min64(l->block[l->rank - 1], l->dim[l->rank - 1]);
}

static void walk(const mid_program *p, const mid_block *b, graph_numerics *n) {
    for (int32_t i = 0; i < b->n; i++) {
        const mid_prim *pr = mid_p(p, b->v[i]);
        graph_op_kind origin = graph_opr(p->g, pr->origin)->kind;
        if ((pr->kind == MID_GEMM || pr->kind == MID_GEMM_EPI) && graph_kind_has_gemm(origin)) gemm_plan(p, pr, n);
        else if (pr->kind == MID_REDUCE_SUM && origin == OP_REDUCE_SUM) sum_plan(p, pr, n);
        else if (pr->kind == MID_REDUCE_EPI && (origin == OP_SUM_SGD || origin == OP_SUM_ADAMW)) sum_epi_plan(pr, p, n);
        else if (pr->kind == MID_SUMSQ && origin == OP_GLOBAL_NORM_CLIP) sumsq_plan(p, pr, n);
        else if (pr->kind == MID_SOFTMAX && pr->f[0] != 0) prescale_plan(p, pr, n);
        else if (pr->kind == MID_LN_MOMENTS) part_plan(p, pr, n);
        else if (pr->kind == MID_REPEAT) walk(p, &pr->body, n);
    }
}

void mid_numerics(const mid_program *p, graph_numerics *out) {
    graph_numerics_init(out, p->g);
    walk(p, &p->top, out);
}

/* verify.c: structural checks every graph must pass, however it was built. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

typedef struct vctx {
    const graph *g;
    diag *d;
    bool *defined;  /* per value: defined so far in program order */
    bool *output;   /* per value: named by an output so far */
} vctx;

#define FAIL(c, op, ...) graph_fail_op((c)->g, (op), (c)->d, __VA_ARGS__)

static int check_type(vctx *c, int32_t op, const graph_type *t) {
    if (t->rank < 0 || t->rank > GRAPH_MAX_RANK) return FAIL(c, op, "rank %d is outside [0, %d]", t->rank, GRAPH_MAX_RANK);
    if ((unsigned)t->dtype >= DT_COUNT) return FAIL(c, op, "invalid dtype");
    for (int i = 0; i < t->rank; i++)
        if (t->dim[i] < 1 || t->dim[i] > GRAPH_MAX_DIM)
            return FAIL(c, op, "dimension %d is %lld; dimensions are between 1 and 2^40", i, (long long)t->dim[i]);
    if (graph_type_numel(t) > GRAPH_MAX_NUMEL) return FAIL(c, op, "a tensor has more than 2^48 elements");
    if (dtype_is_f8(t->dtype) && (t->scale < NUM_SCALE_MIN || t->scale > NUM_SCALE_MAX))
        return FAIL(c, op, "scale %d is outside [%d, %d]", t->scale, NUM_SCALE_MIN, NUM_SCALE_MAX);
    return 0;
}

static int check_operands(vctx *c, int32_t op, int32_t block) {
    const graph_op *o = graph_opr(c->g, op);
    for (int32_t i = 0; i < o->nin; i++) {
        int32_t v = o->in[i];
        if (v < 0 || v >= c->g->values.n) return FAIL(c, op, "operand %d is not a value", i + 1);
        if (!c->defined[v]) return FAIL(c, op, "'%%%s' is used before it is defined", graph_val(c->g, v)->name);
        if (!graph_value_visible(c->g, v, block))
            return FAIL(c, op, "'%%%s' is defined inside a repeat body and used outside it", graph_val(c->g, v)->name);
    }
    return 0;
}

/* Value names print as %NAME and must read back (docs/ir.md: VALUE). */
static bool name_ok(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '.'))
            return false;
    return true;
}

static int define(vctx *c, int32_t op, int32_t v) {
    if (v < 0 || v >= c->g->values.n) return FAIL(c, op, "result is not a value");
    if (!name_ok(graph_val(c->g, v)->name))
        return FAIL(c, op, "'%s' is not a value name (letters, digits, '_' and '.')", graph_val(c->g, v)->name ? graph_val(c->g, v)->name : "");
    if (c->defined[v]) return FAIL(c, op, "'%%%s' is defined twice", graph_val(c->g, v)->name);
    c->defined[v] = true;
    return check_type(c, op, &graph_val(c->g, v)->type);
}

static int verify_block(vctx *c, const graph_block *blk, int32_t block);

static int verify_repeat(vctx *c, int32_t op) {
    const graph_op *o = graph_opr(c->g, op);
    if (o->count < 1) return FAIL(c, op, "repeat count must be >= 1");
    int depth = 1;
    for (int32_t up = o->parent; up >= 0; up = graph_opr(c->g, up)->parent) depth++;
    if (depth > GRAPH_MAX_REPEAT_DEPTH) return FAIL(c, op, "repeats nest deeper than %d", GRAPH_MAX_REPEAT_DEPTH);
    if (o->ncarry < 1 || o->nargs != o->nin || o->ncarry > o->nin || o->nout != o->ncarry)
        return FAIL(c, op, "repeat needs at least one carried value, and one result per carried value");
    for (int32_t i = 0; i < o->nargs; i++) {
        const graph_type *init = &graph_val(c->g, o->in[i])->type;
        graph_type want = *init;
        if (i >= o->ncarry) {
            if (init->rank < 1 || init->dim[0] != o->count)
                return FAIL(c, op, "sliced value '%%%s' needs a leading axis of %lld", graph_val(c->g, o->in[i])->name,
                            (long long)o->count);
            memmove(want.dim, want.dim + 1, sizeof(int64_t) * (size_t)(want.rank - 1));
            want.rank--;
        }
        const graph_value *arg = graph_val(c->g, o->args[i]);
        if (!arg->is_arg || arg->def != op || arg->def_index != i || !graph_type_equal(&arg->type, &want))
            return FAIL(c, op, "body argument %d ('%%%s') does not match what it is bound to", i + 1, arg->name);
        if (define(c, op, o->args[i])) return -1;
    }
    if (o->body.n == 0 || graph_opr(c->g, o->body.v[o->body.n - 1])->kind != OP_YIELD)
        return FAIL(c, op, "the repeat body must end with yield");
    if (verify_block(c, &o->body, op)) return -1;
    const graph_op *y = graph_opr(c->g, o->body.v[o->body.n - 1]);
    if (y->nin != o->ncarry) return FAIL(c, op, "yield gives %d values for %d carried", y->nin, o->ncarry);
    char a[128], b[128];
    for (int32_t i = 0; i < o->ncarry; i++) {
        const graph_type *carried = &graph_val(c->g, o->in[i])->type, *next = &graph_val(c->g, y->in[i])->type;
        if (!graph_type_equal(carried, next)) {
            graph_type_str(carried, a, sizeof a);
            graph_type_str(next, b, sizeof b);
            return FAIL(c, op, "carried value %d starts as %s but the body yields %s", i + 1, a, b);
        }
        if (!graph_type_equal(&graph_val(c->g, o->out[i])->type, carried))
            return FAIL(c, op, "result %d must have the type of carried value %d", i + 1, i + 1);
    }
    return 0;
}

static int verify_op(vctx *c, int32_t op, int32_t block, bool last) {
    const graph_op *o = graph_opr(c->g, op);
    if (o->parent != block) return FAIL(c, op, "op is recorded in the wrong block");
    if (check_operands(c, op, block)) return -1;
    switch (o->kind) {
    case OP_INPUT:
    case OP_PARAM:
        if (block >= 0) return FAIL(c, op, "%s is allowed only at the top level", graph_op_infos[o->kind].name);
        if (o->nout != 1 || o->nin != 0) return FAIL(c, op, "malformed %s", graph_op_infos[o->kind].name);
        if (o->kind == OP_PARAM && o->init.kind == INIT_NORMAL && !(o->init.std >= 0))
            return FAIL(c, op, "normal() needs a standard deviation >= 0");
        if (o->kind == OP_PARAM && o->init.kind == INIT_NPY && (!o->init.path || !o->init.path[0]))
            return FAIL(c, op, "npy() needs a file name");
        if (o->kind == OP_PARAM && o->init.kind == INIT_DATA &&
            (o->init.nparts < 1 || graph_type_numel(&graph_val(c->g, o->out[0])->type) % o->init.nparts))
            return FAIL(c, op, "data() needs pieces of equal size");
        if (o->kind == OP_PARAM && o->init.kind == INIT_CONCAT) {
            const graph_type *t = &graph_val(c->g, o->out[0])->type;
            int64_t w = 0;
            for (int32_t k = 0; k < o->init.ncat; k++) w += o->init.width[k] > 0 ? o->init.width[k] : -1;
            if (t->rank < 1 || o->init.ncat < 1 || w != t->dim[t->rank - 1])
                return FAIL(c, op, "concat() needs pieces as wide as the parameter's last axis");
        }
        return define(c, op, o->out[0]);
    case OP_OUTPUT:
        if (block >= 0) return FAIL(c, op, "output is allowed only at the top level");
        if (o->nin < 1) return FAIL(c, op, "output names no value");
        /* Outputs are known (and written to files) by their value's name. */
        for (int32_t i = 0; i < o->nin; i++) {
            if (c->output[o->in[i]]) return FAIL(c, op, "'%%%s' is an output twice", graph_val(c->g, o->in[i])->name);
            c->output[o->in[i]] = true;
        }
        return 0;
    case OP_YIELD:
        if (block < 0 || !last) return FAIL(c, op, "yield must be the last statement of a repeat body");
        return 0;
    case OP_REPEAT: {
        if (verify_repeat(c, op)) return -1;
        for (int32_t i = 0; i < o->nout; i++)
            if (define(c, op, o->out[i])) return -1;
        return 0;
    }
    default: break;
    }
    if (o->nout != graph_result_count(o->kind, o->nin))
        return FAIL(c, op, "%s gives %d results, not %d", graph_op_infos[o->kind].name,
                    graph_result_count(o->kind, o->nin), o->nout);
    graph_type *want = xmalloc(sizeof(graph_type) * (size_t)(o->nout ? o->nout : 1));
    graph_type declared = o->nout ? graph_val(c->g, o->out[0])->type : (graph_type){0};
    int rc = graph_infer(c->g, op, o->nout ? &declared : NULL, want, c->d);
    for (int32_t i = 0; rc == 0 && i < o->nout; i++) {
        if (define(c, op, o->out[i])) {
            rc = -1;
            break;
        }
        const graph_type *got = &graph_val(c->g, o->out[i])->type;
        if (!graph_type_equal(got, &want[i])) {
            char a[128], b[128];
            graph_type_str(got, a, sizeof a);
            graph_type_str(&want[i], b, sizeof b);
            rc = FAIL(c, op, "result %d has type %s but %s gives %s", i + 1, a, graph_op_infos[o->kind].name, b);
        }
    }
    free(want);
    return rc;
}

static int verify_block(vctx *c, const graph_block *blk, int32_t block) {
    for (int32_t i = 0; i < blk->n; i++) {
        int32_t op = blk->v[i];
        if (op < 0 || op >= c->g->ops.n) return diag_fail(c->d, "%s: error: block refers to a missing op", c->g->path);
        if (verify_op(c, op, block, i == blk->n - 1)) return -1;
    }
    return 0;
}

int graph_verify(const graph *g, diag *d) {
    size_t nv = (size_t)(g->values.n ? g->values.n : 1);
    vctx c = {g, d, xcalloc(nv, sizeof(bool)), xcalloc(nv, sizeof(bool))};
    int rc = verify_block(&c, &g->body, -1);
    free(c.defined);
    free(c.output);
    if (rc) return -1;
    int32_t dummy;
    if (graph_outputs(g, &dummy, 0) == 0) {
        if (!g->src.text) return diag_fail(d, "%s: error: the graph has no output", g->path);
        int line, col; /* where the missing statement belongs: the end of the file */
        src_line_col(&g->src, g->src.len, &line, &col);
        return diag_fail_at(d, &g->src, line, col, "the graph has no output (add 'output %%NAME')");
    }
    return 0;
}

/* ops.c: the op and attribute tables derived from the X-macros, and the
 * attribute defaults (docs/ir.md lists the same values). */
#include "graph.h"

#include <string.h>

const graph_op_info graph_op_infos[OP_COUNT] = {
#define X(id, nm, mi, ma, no) [OP_##id] = {#nm, mi, ma, no, 0, 0, true},
    GRAPH_STRUCT_OPS(X)
#undef X
#define A(x) (1ull << ATTR_##x)
#define R(x) (1ull << ATTR_##x)
#define X(id, nm, mi, ma, no, allow, req) [OP_##id] = {#nm, mi, ma, no, allow, req, false},
    GRAPH_COMPUTE_OPS(X)
#undef X
#undef A
#undef R
};

const char *const graph_attr_names[ATTR_COUNT] = {
#define X(id, nm, kind) [ATTR_##id] = #nm,
    GRAPH_ATTRS(X)
#undef X
};

const graph_attr_kind graph_attr_kinds[ATTR_COUNT] = {
#define X(id, nm, kind) [ATTR_##id] = ATTR_KIND_##kind,
    GRAPH_ATTRS(X)
#undef X
};

_Static_assert(ATTR_COUNT <= 64, "attribute sets are 64-bit masks");
/* Adding an op other than a plain unary one (num.h) changes this count. */
_Static_assert(OP_COUNT == 32 + NUM_UNARY_COUNT, "update docs/ir.md when adding an op");

bool graph_op_lookup(const char *s, size_t n, graph_op_kind *out) {
    for (int k = 0; k < OP_COUNT; k++)
        if (strlen(graph_op_infos[k].name) == n && memcmp(graph_op_infos[k].name, s, n) == 0) {
            *out = (graph_op_kind)k;
            return true;
        }
    return false;
}

bool graph_attr_lookup(const char *s, size_t n, graph_attr_id *out) {
    for (int k = 0; k < ATTR_COUNT; k++)
        if (strlen(graph_attr_names[k]) == n && memcmp(graph_attr_names[k], s, n) == 0) {
            *out = (graph_attr_id)k;
            return true;
        }
    return false;
}

/* Defaults of optional attributes, per op where they differ between ops.
 * PyTorch's defaults where PyTorch has the op. */
static const struct {
    graph_op_kind op;  /* OP_COUNT: any op */
    graph_attr_id attr;
    graph_attr value;
} defaults[] = {
    {OP_COUNT, ATTR_TRANSPOSE_A, {.b = false}},
    {OP_COUNT, ATTR_TRANSPOSE_B, {.b = false}},
    {OP_COUNT, ATTR_ACC, {.t = DT_F32}},
    {OP_COUNT, ATTR_SCALE, {.i = 0}},
    {OP_COUNT, ATTR_SATURATE, {.b = true}},
    {OP_COUNT, ATTR_AXIS, {.i = -1}},
    {OP_COUNT, ATTR_KEEPDIMS, {.b = false}},
    {OP_COUNT, ATTR_VALUE, {.f = 0.0}},
    {OP_LAYER_NORM, ATTR_EPS, {.f = 1e-5}},
    {OP_ADAMW, ATTR_EPS, {.f = 1e-8}},
    {OP_SGD, ATTR_MOMENTUM, {.f = 0.0}},
    {OP_SGD, ATTR_WEIGHT_DECAY, {.f = 0.0}},
    {OP_ADAMW, ATTR_WEIGHT_DECAY, {.f = 0.01}},
    {OP_ADAMW, ATTR_BETA1, {.f = 0.9}},
    {OP_ADAMW, ATTR_BETA2, {.f = 0.999}},
    {OP_ADAMW, ATTR_STEP, {.i = 1}},
    {OP_COUNT, ATTR_GRAD, {.t = DT_F32}},
    {OP_MATMUL_SGD, ATTR_MOMENTUM, {.f = 0.0}},
    {OP_MATMUL_SGD, ATTR_WEIGHT_DECAY, {.f = 0.0}},
    {OP_MATMUL_ADAMW, ATTR_EPS, {.f = 1e-8}},
    {OP_MATMUL_ADAMW, ATTR_WEIGHT_DECAY, {.f = 0.01}},
    {OP_MATMUL_ADAMW, ATTR_BETA1, {.f = 0.9}},
    {OP_MATMUL_ADAMW, ATTR_BETA2, {.f = 0.999}},
    {OP_MATMUL_ADAMW, ATTR_STEP, {.i = 1}},
    {OP_SUM_SGD, ATTR_MOMENTUM, {.f = 0.0}},
    {OP_SUM_SGD, ATTR_WEIGHT_DECAY, {.f = 0.0}},
    {OP_SUM_ADAMW, ATTR_EPS, {.f = 1e-8}},
    {OP_SUM_ADAMW, ATTR_WEIGHT_DECAY, {.f = 0.01}},
    {OP_SUM_ADAMW, ATTR_BETA1, {.f = 0.9}},
    {OP_SUM_ADAMW, ATTR_BETA2, {.f = 0.999}},
    {OP_SUM_ADAMW, ATTR_STEP, {.i = 1}},
};

static graph_attr attr_get(const graph_op *op, graph_attr_id a) {
    if (op->attr_set & (1ull << a)) return op->attr[a];
    /* An op's own default wins over the default shared by every op. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < TS_COUNT(defaults); i++)
            if (defaults[i].attr == a && defaults[i].op == (pass ? OP_COUNT : op->kind))
                return defaults[i].value;
    /* Required attributes have no default; the verifier guarantees them. */
    TS_ASSERT(!"attribute without a default read before verification");
    return (graph_attr){{0}};
}

bool graph_attr_bool(const graph_op *op, graph_attr_id a) { return attr_get(op, a).b; }
int64_t graph_attr_int(const graph_op *op, graph_attr_id a) { return attr_get(op, a).i; }
double graph_attr_float(const graph_op *op, graph_attr_id a) { return attr_get(op, a).f; }
dtype graph_attr_dtype(const graph_op *op, graph_attr_id a) { return attr_get(op, a).t; }

int32_t graph_result_count(graph_op_kind kind, int32_t nin) {
    switch (kind) {
    case OP_SGD: return nin - 1;                /* w (, momentum buffer) */
    case OP_MATMUL_SGD: return nin - 2;         /* the same, after the matmul's a and b */
    case OP_SUM_SGD: return nin - 1;            /* the same, after the partials */
    case OP_GLOBAL_NORM_CLIP: return nin;       /* one clipped tensor per operand */
    default: return graph_op_infos[kind].nout;  /* repeat: set by its carry list */
    }
}

bool graph_arity_ok(graph_op_kind kind, int32_t nin, char *msg, size_t cap) {
    const graph_op_info *f = &graph_op_infos[kind];
    if (nin >= f->min_in && (f->max_in < 0 || nin <= f->max_in)) return true;
    if (f->min_in == f->max_in)
        snprintf(msg, cap, "%s takes %d operand%s, got %d", f->name, f->min_in, f->min_in == 1 ? "" : "s", nin);
    else if (f->max_in < 0)
        snprintf(msg, cap, "%s takes at least %d operand%s, got %d", f->name, f->min_in, f->min_in == 1 ? "" : "s", nin);
    else
        snprintf(msg, cap, "%s takes %d to %d operands, got %d", f->name, f->min_in, f->max_in, nin);
    return false;
}

/* infer.c: result types of compute ops from operand types and attributes.
 * One function per op, named infer_<op> after the X-macro table. */
#include "graph.h"

#include <string.h>

typedef struct ictx {
    const graph *g;
    int32_t op;
    const graph_op *o;
    const graph_type *declared;  /* may be NULL */
    graph_type *out;
    diag *d;
} ictx;

#define FAIL(c, ...) graph_fail_op((c)->g, (c)->op, (c)->d, __VA_ARGS__)

static const graph_type *in_type(const ictx *c, int i) { return &graph_val(c->g, c->o->in[i])->type; }

static const char *tstr(const graph_type *t, char *buf) {
    graph_type_str(t, buf, 128);
    return buf;
}

/* Operand i must be a float type the vector unit computes in (not 8-bit). */
static int want_wide_float(const ictx *c, int i) {
    dtype t = in_type(c, i)->dtype;
    if (!dtype_is_float(t) || dtype_is_f8(t))
        return FAIL(c, "operand %d of %s must be f32, f16 or bf16, not %s", i + 1, graph_op_infos[c->o->kind].name,
                    dtype_name(t));
    return 0;
}

static int want_same_dtype(const ictx *c, int i, int j) {
    dtype a = in_type(c, i)->dtype, b = in_type(c, j)->dtype;
    if (a != b) return FAIL(c, "operands %d and %d have different dtypes (%s and %s)", i + 1, j + 1, dtype_name(a), dtype_name(b));
    return 0;
}

static int want_same_type(const ictx *c, int i, int j) {
    char x[128], y[128];
    if (!graph_type_equal(in_type(c, i), in_type(c, j)))
        return FAIL(c, "operands %d and %d must have the same type, got %s and %s", i + 1, j + 1,
                    tstr(in_type(c, i), x), tstr(in_type(c, j), y));
    return 0;
}

/* NumPy broadcasting of the trailing-aligned shapes a and b into out. */
static int broadcast(const ictx *c, const int64_t *a, int ra, const int64_t *b, int rb, int64_t *out, int *rout) {
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int64_t x = i < r - ra ? 1 : a[i - (r - ra)];
        int64_t y = i < r - rb ? 1 : b[i - (r - rb)];
        if (x != y && x != 1 && y != 1)
            return FAIL(c, "shapes do not broadcast: axis %d (from the end) is %lld in one operand and %lld in the other",
                        r - i, (long long)x, (long long)y);
        out[i] = x == 1 ? y : x;
    }
    *rout = r;
    return 0;
}

static int norm_axis(const ictx *c, int64_t axis, int rank, const char *what, int *out) {
    if (axis < -rank || axis >= rank)
        return FAIL(c, "%s %lld is out of range for rank %d", what, (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

static const graph_attr *ints(const ictx *c, graph_attr_id a) { return &c->o->attr[a]; }

static int want_ints_len(const ictx *c, graph_attr_id a, int n) {
    if (ints(c, a)->ints.n != n)
        return FAIL(c, "attribute '%s' needs %d values (one per axis), got %d", graph_attr_names[a], n, ints(c, a)->ints.n);
    return 0;
}

/* ---- the rules ----------------------------------------------------------- */

/* The product of operands 0 and 1 into *r, of result dtype rdt. */
static int matmul_type(ictx *c, dtype rdt, graph_type *r) {
    const graph_type *a = in_type(c, 0), *b = in_type(c, 1);
    for (int i = 0; i < 2; i++) {
        dtype t = in_type(c, i)->dtype;
        if (!dtype_is_float(t)) return FAIL(c, "matmul operand %d must be a float type, not %s", i + 1, dtype_name(t));
        if (in_type(c, i)->rank < 2)
            return FAIL(c, "matmul operand %d must have rank >= 2, got rank %d", i + 1, in_type(c, i)->rank);
    }
    if (dtype_is_f8(a->dtype) != dtype_is_f8(b->dtype))
        return FAIL(c, "matmul operands must both be 8-bit or both wider, got %s and %s", dtype_name(a->dtype),
                    dtype_name(b->dtype));
    if (!dtype_is_f8(a->dtype) && a->dtype != b->dtype)
        return FAIL(c, "matmul operands have different dtypes (%s and %s)", dtype_name(a->dtype), dtype_name(b->dtype));
    bool ta = graph_attr_bool(c->o, ATTR_TRANSPOSE_A), tb = graph_attr_bool(c->o, ATTR_TRANSPOSE_B);
    int64_t m = a->dim[a->rank - (ta ? 1 : 2)], ka = a->dim[a->rank - (ta ? 2 : 1)];
    int64_t kb = b->dim[b->rank - (tb ? 1 : 2)], n = b->dim[b->rank - (tb ? 2 : 1)];
    if (ka != kb) return FAIL(c, "matmul inner dimensions differ: %lld and %lld", (long long)ka, (long long)kb);
    dtype acc = graph_attr_dtype(c->o, ATTR_ACC);
    if (acc != DT_F32 && acc != DT_F16) return FAIL(c, "matmul accumulation must be f32 or f16, not %s", dtype_name(acc));
    memset(r, 0, sizeof *r);
    if (broadcast(c, a->dim, a->rank - 2, b->dim, b->rank - 2, r->dim, &r->rank) != 0) return -1;
    if (r->rank + 2 > GRAPH_MAX_RANK) return FAIL(c, "matmul result rank exceeds %d", GRAPH_MAX_RANK);
    r->dim[r->rank++] = m;
    r->dim[r->rank++] = n;
    r->dtype = rdt;
    if (!dtype_is_float(r->dtype) || dtype_is_f8(r->dtype))
        return FAIL(c, "matmul results are f32, f16 or bf16, not %s (cast afterwards)", dtype_name(r->dtype));
    return 0;
}

static int infer_matmul(ictx *c) { return matmul_type(c, c->declared ? c->declared->dtype : DT_F32, &c->out[0]); }

static int infer_binary(ictx *c) {
    if (want_wide_float(c, 0) || want_wide_float(c, 1) || want_same_dtype(c, 0, 1)) return -1;
    const graph_type *a = in_type(c, 0), *b = in_type(c, 1);
    graph_type *r = &c->out[0];
    memset(r, 0, sizeof *r);
    r->dtype = a->dtype;
    return broadcast(c, a->dim, a->rank, b->dim, b->rank, r->dim, &r->rank);
}
static int infer_add(ictx *c) { return infer_binary(c); }
static int infer_sub(ictx *c) { return infer_binary(c); }
static int infer_mul(ictx *c) { return infer_binary(c); }
static int infer_max(ictx *c) { return infer_binary(c); }
static int infer_min(ictx *c) { return infer_binary(c); }

static int infer_unary_same(ictx *c) {
    if (want_wide_float(c, 0)) return -1;
    c->out[0] = *in_type(c, 0);
    return 0;
}
static int infer_gelu(ictx *c) { return infer_unary_same(c); }
static int infer_gelu_erf(ictx *c) { return infer_unary_same(c); }
#define X(id, name, ...) \
    static int infer_##name(ictx *c) { return infer_unary_same(c); }
NUM_UNARY_OPS(X, )
#undef X
static int infer_scale(ictx *c) { return infer_unary_same(c); }

static int infer_gelu_grad(ictx *c) {
    if (want_wide_float(c, 0) || want_same_type(c, 0, 1)) return -1;
    c->out[0] = *in_type(c, 1);
    return 0;
}

static int infer_softmax(ictx *c) {
    int axis = 0;
    if (infer_unary_same(c)) return -1;
    return norm_axis(c, graph_attr_int(c->o, ATTR_AXIS), in_type(c, 0)->rank, "axis", &axis);
}

static int infer_layer_norm(ictx *c) {
    const graph_type *x = in_type(c, 0);
    if (want_wide_float(c, 0) || want_wide_float(c, 1) || want_wide_float(c, 2)) return -1;
    if (x->rank < 1) return FAIL(c, "layer_norm needs rank >= 1");
    for (int i = 1; i < 3; i++) {
        const graph_type *p = in_type(c, i);
        if (p->rank != 1 || p->dim[0] != x->dim[x->rank - 1])
            return FAIL(c, "layer_norm %s must be a vector of %lld (the last axis)", i == 1 ? "scale" : "bias",
                        (long long)x->dim[x->rank - 1]);
    }
    if (graph_attr_float(c->o, ATTR_EPS) < 0) return FAIL(c, "layer_norm eps must be >= 0");
    c->out[0] = *x;
    return 0;
}

/* gather(table [V, E], ids i32[...]) -> [..., E]: row ids[i] of the table
 * (an embedding lookup; docs/ir.md). */
static int infer_gather(ictx *c) {
    const graph_type *t = in_type(c, 0), *ids = in_type(c, 1);
    if (!dtype_is_float(t->dtype)) return FAIL(c, "gather's table must be a float type, not %s", dtype_name(t->dtype));
    if (t->rank != 2) return FAIL(c, "gather's table must have rank 2 ([rows, width]), got rank %d", t->rank);
    if (t->dim[0] > (1 << 24)) /* every index a float holds exactly reaches every row */
        return FAIL(c, "gather's table has %lld rows; at most 2^24 are supported", (long long)t->dim[0]);
    if (ids->dtype != DT_I32) return FAIL(c, "gather's indices must be i32, not %s", dtype_name(ids->dtype));
    if (ids->rank + 1 > GRAPH_MAX_RANK) return FAIL(c, "gather result rank exceeds %d", GRAPH_MAX_RANK);
    graph_type r = *ids;
    r.dtype = t->dtype;
    r.scale = t->scale;
    r.dim[r.rank++] = t->dim[1];
    c->out[0] = r;
    return 0;
}

static int infer_reshape(ictx *c) {
    const graph_type *x = in_type(c, 0);
    if (!c->declared) return FAIL(c, "reshape needs its result shape");
    graph_type r = *c->declared;
    r.dtype = x->dtype;
    r.scale = x->scale;
    if (graph_type_numel(&r) != graph_type_numel(x))
        return FAIL(c, "reshape from %lld elements to %lld elements", (long long)graph_type_numel(x),
                    (long long)graph_type_numel(&r));
    c->out[0] = r;
    return 0;
}

static int infer_transpose(ictx *c) {
    const graph_type *x = in_type(c, 0);
    const graph_attr *p = ints(c, ATTR_PERM);
    if (want_ints_len(c, ATTR_PERM, x->rank)) return -1;
    bool seen[GRAPH_MAX_RANK] = {0};
    graph_type r = *x;
    for (int i = 0; i < x->rank; i++) {
        int64_t k = p->ints.v[i];
        if (k < 0 || k >= x->rank || seen[k]) return FAIL(c, "perm must be a permutation of 0..%d", x->rank - 1);
        seen[k] = true;
        r.dim[i] = x->dim[k];
    }
    c->out[0] = r;
    return 0;
}

static int infer_slice(ictx *c) {
    const graph_type *x = in_type(c, 0);
    if (want_ints_len(c, ATTR_START, x->rank) || want_ints_len(c, ATTR_END, x->rank)) return -1;
    graph_type r = *x;
    for (int i = 0; i < x->rank; i++) {
        int64_t s = ints(c, ATTR_START)->ints.v[i], e = ints(c, ATTR_END)->ints.v[i];
        if (s < 0 || s > e || e > x->dim[i])
            return FAIL(c, "slice axis %d: need 0 <= start <= end <= %lld, got start %lld end %lld", i,
                        (long long)x->dim[i], (long long)s, (long long)e);
        r.dim[i] = e - s;
    }
    c->out[0] = r;
    return 0;
}

static int infer_pad(ictx *c) {
    const graph_type *x = in_type(c, 0);
    if (want_ints_len(c, ATTR_LOW, x->rank) || want_ints_len(c, ATTR_HIGH, x->rank)) return -1;
    graph_type r = *x;
    for (int i = 0; i < x->rank; i++) {
        int64_t lo = ints(c, ATTR_LOW)->ints.v[i], hi = ints(c, ATTR_HIGH)->ints.v[i];
        if (lo < 0 || hi < 0 || lo > (1ll << 40) || hi > (1ll << 40))
            return FAIL(c, "pad axis %d: low and high must be in [0, 2^40]", i);
        r.dim[i] = x->dim[i] + lo + hi;
    }
    c->out[0] = r;
    return 0;
}

static int infer_concat(ictx *c) {
    const graph_type *x = in_type(c, 0);
    int axis = 0;
    if (norm_axis(c, graph_attr_int(c->o, ATTR_AXIS), x->rank, "axis", &axis)) return -1;
    graph_type r = *x;
    for (int i = 1; i < c->o->nin; i++) {
        const graph_type *y = in_type(c, i);
        bool ok = y->dtype == x->dtype && y->rank == x->rank && (!dtype_is_f8(x->dtype) || y->scale == x->scale);
        for (int k = 0; ok && k < x->rank; k++) ok = k == axis || y->dim[k] == x->dim[k];
        char a[128], b[128];
        if (!ok) return FAIL(c, "concat operand %d (%s) does not match operand 1 (%s) off axis %d", i + 1, tstr(y, a), tstr(x, b), axis);
        r.dim[axis] += y->dim[axis];
    }
    c->out[0] = r;
    return 0;
}

static int infer_cast(ictx *c) {
    const graph_type *x = in_type(c, 0);
    dtype to = graph_attr_dtype(c->o, ATTR_TO);
    if (!dtype_is_float(to) || (!dtype_is_float(x->dtype) && x->dtype != DT_I32))
        return FAIL(c, "cast converts to a float type, from a float type or i32 (not %s to %s)", dtype_name(x->dtype), dtype_name(to));
    int64_t s = graph_attr_int(c->o, ATTR_SCALE);
    if (dtype_is_f8(to)) {
        if (s < NUM_SCALE_MIN || s > NUM_SCALE_MAX)
            return FAIL(c, "scale %lld is outside [%d, %d]", (long long)s, NUM_SCALE_MIN, NUM_SCALE_MAX);
    } else if (c->o->attr_set & ((1ull << ATTR_SCALE) | (1ull << ATTR_SATURATE))) {
        return FAIL(c, "scale and saturate apply to 8-bit targets only");
    }
    graph_type r = *x;
    r.dtype = to;
    r.scale = dtype_is_f8(to) ? (int8_t)s : 0;
    c->out[0] = r;
    return 0;
}

static int infer_reduce_sum(ictx *c) {
    const graph_type *x = in_type(c, 0);
    if (want_wide_float(c, 0)) return -1;
    const graph_attr *ax = ints(c, ATTR_AXES);
    bool drop[GRAPH_MAX_RANK] = {0};
    for (int i = 0; i < ax->ints.n; i++) {
        int a = 0;
        if (norm_axis(c, ax->ints.v[i], x->rank, "axes entry", &a)) return -1;
        if (drop[a]) return FAIL(c, "axis %d appears twice in axes", a);
        drop[a] = true;
    }
    bool keep = graph_attr_bool(c->o, ATTR_KEEPDIMS);
    graph_type r = {.dtype = c->declared ? c->declared->dtype : x->dtype};
    if (!dtype_is_float(r.dtype) || dtype_is_f8(r.dtype))
        return FAIL(c, "reduce_sum results are f32, f16 or bf16, not %s", dtype_name(r.dtype));
    for (int i = 0; i < x->rank; i++) {
        if (!drop[i]) r.dim[r.rank++] = x->dim[i];
        else if (keep) r.dim[r.rank++] = 1;
    }
    c->out[0] = r;
    return 0;
}

/* Optimizer ops: every operand has the weight's shape. */
static int want_all_shaped_like_first(ictx *c) {
    for (int i = 0; i < c->o->nin; i++) {
        if (want_wide_float(c, i)) return -1;
        const graph_type *a = in_type(c, 0), *b = in_type(c, i);
        bool same = a->rank == b->rank;
        for (int k = 0; same && k < a->rank; k++) same = a->dim[k] == b->dim[k];
        char x[128], y[128];
        if (!same) return FAIL(c, "operand %d (%s) must have the shape of operand 1 (%s)", i + 1, tstr(b, x), tstr(a, y));
    }
    return 0;
}

static int infer_sgd(ictx *c) {
    if (want_all_shaped_like_first(c)) return -1;
    bool mom = graph_attr_float(c->o, ATTR_MOMENTUM) != 0;
    if (mom != (c->o->nin == 3))
        return FAIL(c, "sgd takes (w, g) without momentum and (w, g, buf) with momentum");
    c->out[0] = *in_type(c, 0);
    if (c->o->nin == 3) c->out[1] = *in_type(c, 2);
    return 0;
}

static int infer_adamw(ictx *c) {
    if (want_all_shaped_like_first(c)) return -1;
    if (graph_attr_int(c->o, ATTR_STEP) < 1) return FAIL(c, "adamw step counts from 1");
    c->out[0] = *in_type(c, 0);
    c->out[1] = *in_type(c, 2);
    c->out[2] = *in_type(c, 3);
    return 0;
}

/* The fused ops: the matmul of operands 0 and 1 is a 2-D gradient of dtype
 * `grad` that no tensor holds; operands 2.. are the optimizer's (w and its
 * states), each of the gradient's shape. */
static int fused_gradient(ictx *c, graph_type *gt) {
    if (matmul_type(c, graph_attr_dtype(c->o, ATTR_GRAD), gt)) return -1;
    if (gt->rank != 2) return FAIL(c, "%s makes a 2-D weight gradient, not rank %d", graph_op_infos[c->o->kind].name, gt->rank);
    for (int i = 2; i < c->o->nin; i++) {
        if (want_wide_float(c, i)) return -1;
        const graph_type *t = in_type(c, i);
        char x[128], y[128];
        if (t->rank != 2 || t->dim[0] != gt->dim[0] || t->dim[1] != gt->dim[1])
            return FAIL(c, "operand %d (%s) must have the shape of the gradient (%s)", i + 1, tstr(t, x), tstr(gt, y));
    }
    return 0;
}

static int infer_matmul_sgd(ictx *c) {
    graph_type gt;
    if (fused_gradient(c, &gt)) return -1;
    bool mom = graph_attr_float(c->o, ATTR_MOMENTUM) != 0;
    if (mom != (c->o->nin == 4))
        return FAIL(c, "matmul_sgd takes (a, b, w) without momentum and (a, b, w, buf) with momentum");
    c->out[0] = *in_type(c, 2);
    if (c->o->nin == 4) c->out[1] = *in_type(c, 3);
    return 0;
}

static int infer_matmul_adamw(ictx *c) {
    graph_type gt;
    if (fused_gradient(c, &gt)) return -1;
    if (graph_attr_int(c->o, ATTR_STEP) < 1) return FAIL(c, "matmul_adamw step counts from 1");
    for (int i = 0; i < 3; i++) c->out[i] = *in_type(c, 2 + i);
    return 0;
}

/* The fused sums: operand 0 holds partials [n, w's shape...] summed over
 * its first axis into a gradient of dtype `grad`; operands 1.. are the
 * optimizer's (w and its states), each of w's shape. */
static int summed_gradient(ictx *c) {
    const graph_type *p = in_type(c, 0), *w = in_type(c, 1);
    if (want_wide_float(c, 0)) return -1;
    dtype gd = graph_attr_dtype(c->o, ATTR_GRAD);
    if (!dtype_is_float(gd) || dtype_is_f8(gd)) return FAIL(c, "grad is f32, f16 or bf16, not %s", dtype_name(gd));
    bool same = p->rank == w->rank + 1;
    for (int k = 0; same && k < w->rank; k++) same = p->dim[k + 1] == w->dim[k];
    char x[128], y[128];
    if (!same) return FAIL(c, "the partials (%s) must be the weight's shape (%s) after a first axis", tstr(p, x), tstr(w, y));
    for (int i = 1; i < c->o->nin; i++) {
        if (want_wide_float(c, i)) return -1;
        const graph_type *t = in_type(c, i);
        same = t->rank == w->rank;
        for (int k = 0; same && k < w->rank; k++) same = t->dim[k] == w->dim[k];
        if (!same) return FAIL(c, "operand %d (%s) must have the shape of the weight (%s)", i + 1, tstr(t, x), tstr(w, y));
    }
    return 0;
}

static int infer_sum_sgd(ictx *c) {
    if (summed_gradient(c)) return -1;
    bool mom = graph_attr_float(c->o, ATTR_MOMENTUM) != 0;
    if (mom != (c->o->nin == 3)) return FAIL(c, "sum_sgd takes (p, w) without momentum and (p, w, buf) with momentum");
    c->out[0] = *in_type(c, 1);
    if (c->o->nin == 3) c->out[1] = *in_type(c, 2);
    return 0;
}

static int infer_sum_adamw(ictx *c) {
    if (summed_gradient(c)) return -1;
    if (graph_attr_int(c->o, ATTR_STEP) < 1) return FAIL(c, "sum_adamw step counts from 1");
    for (int i = 0; i < 3; i++) c->out[i] = *in_type(c, 1 + i);
    return 0;
}

static int infer_global_norm_clip(ictx *c) {
    for (int i = 0; i < c->o->nin; i++) {
        if (want_wide_float(c, i)) return -1;
        c->out[i] = *in_type(c, i);
    }
    if (!(graph_attr_float(c->o, ATTR_MAX_NORM) > 0)) return FAIL(c, "max_norm must be > 0");
    return 0;
}

typedef int (*infer_fn)(ictx *);
static const infer_fn infer_fns[OP_COUNT] = {
#define X(id, nm, ...) [OP_##id] = infer_##nm,
    GRAPH_COMPUTE_OPS(X)
#undef X
};

int graph_infer(const graph *g, int32_t op, const graph_type *declared, graph_type *out, diag *d) {
    ictx c = {g, op, graph_opr(g, op), declared, out, d};
    const graph_op_info *info = &graph_op_infos[c.o->kind];
    TS_ASSERT(!info->structural);
    char msg[128];
    if (!graph_arity_ok(c.o->kind, c.o->nin, msg, sizeof msg)) return FAIL(&c, "%s", msg);
    uint64_t missing = info->required & ~c.o->attr_set;
    if (missing) return FAIL(&c, "%s needs attribute '%s'", info->name, graph_attr_names[__builtin_ctzll(missing)]);
    uint64_t extra = c.o->attr_set & ~info->allowed;
    if (extra) return FAIL(&c, "%s has no attribute '%s'", info->name, graph_attr_names[__builtin_ctzll(extra)]);
    return infer_fns[c.o->kind](&c);
}

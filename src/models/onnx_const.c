/* onnx_const.c: constant folding. A node whose inputs are all known at
 * import (initializers, Constant nodes, shapes: every shape is static) is
 * computed here in double precision, f32 results rounded to f32, so the
 * shape chains PyTorch writes (Shape, Gather, Concat, Reshape...) never reach
 * the graph. One folder per op row of the table (onnx_impl.h); ops that share
 * the arithmetic (binary, unary, reshapes) share one folder. Not to be
 * confused with reroll.c, which rerolls repeated blocks. */
#include "onnx_impl.h"

#include <math.h>
#include <stdlib.h>

/* ---- constants and shape rules ------------------------------------------------------ */

ct ct_new(imp *im, bool is_int, int rank, const int64_t *dim) {
    ct c = {.is_int = is_int, .rank = rank, .n = 1};
    for (int i = 0; i < rank; i++) {
        c.dim[i] = dim[i];
        if (dim[i] < 0 || (dim[i] && c.n > CT_MAX_FOLD / dim[i])) {
            ox_fail(im, "a constant computed at import would have more than 2^26 elements");
            c.n = 0;
            break;
        }
        c.n *= dim[i];
    }
    if (c.n > CT_MAX_FOLD) {
        ox_fail(im, "a constant computed at import would have more than 2^26 elements");
        c.n = 0;
    }
    if (c.n == 0) c.rank = rank; /* callers write nothing; im->err stops the import */
    c.v = arena_alloc(&im->a, sizeof(double) * (size_t)(c.n ? c.n : 1));
    return c;
}

static void strides_of(int rank, const int64_t *dim, int64_t *st) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= dim[i];
    }
}

int ox_bcast_shape(imp *im, int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out) {
    *r = ra > rb ? ra : rb;
    for (int i = 0; i < *r; i++) {
        int64_t x = i < *r - ra ? 1 : a[i - (*r - ra)], y = i < *r - rb ? 1 : b[i - (*r - rb)];
        if (x < 0 || y < 0) return ox_fail(im, "a shape has a negative dimension (%lld)", (long long)(x < 0 ? x : y));
        if (x != y && x != 1 && y != 1) return ox_fail(im, "shapes do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return 0;
}

/* Index of element i of a broadcast result in an operand of shape (rank, dim). */
static int64_t bcast_index(int64_t i, int r, const int64_t *odim, int rank, const int64_t *dim) {
    int64_t idx = 0, mul = 1;
    for (int k = r - 1; k >= 0; k--) {
        int64_t c = i % odim[k];
        i /= odim[k];
        int j = k - (r - rank);
        if (j >= 0) {
            if (dim[j] != 1) idx += c * mul;
            mul *= dim[j];
        }
    }
    return idx;
}

/* a op b, broadcast, for the binary rows (Add, Sub, Mul, Div, Pow, Equal). */
static int ct_binary(imp *im, ox_op_id op, ct *a, ct *b, ct *out) {
    int r;
    int64_t dim[CT_MAX_RANK];
    if (ox_bcast_shape(im, a->rank, a->dim, b->rank, b->dim, &r, dim)) return -1;
    ct c = ct_new(im, op == OX_Equal ? true : a->is_int && b->is_int, r, dim);
    for (int64_t i = 0; i < c.n; i++) {
        double x = ct_at(a, bcast_index(i, r, dim, a->rank, a->dim)), y = ct_at(b, bcast_index(i, r, dim, b->rank, b->dim));
        double z = 0;
        switch (op) {
        case OX_Add: z = x + y; break;
        case OX_Sub: z = x - y; break;
        case OX_Mul: z = x * y; break;
        case OX_Div: z = c.is_int ? (y == 0 ? 0 : trunc(x / y)) : x / y; break;
        case OX_Pow: z = pow(x, y); break;
        case OX_Mod: /* fmod = 1: the dividend's sign (C's fmod); else the divisor's (Python's %) */
            z = y == 0 ? 0 : attr_int(im->cur, "fmod", 0) ? fmod(x, y) : x - floor(x / y) * y;
            break;
        case OX_Max: z = num_max((float)x, (float)y); break;
        case OX_Min: z = num_min((float)x, (float)y); break;
        case OX_Equal: z = x == y; break;
        default: TS_ASSERT(!"a binary op row"); break;
        }
        if (!c.is_int && op != OX_Equal) z = (float)z; /* f32 tensors stay f32 */
        c.v[i] = z;
    }
    *out = c;
    return 0;
}

static int ct_gather(imp *im, ct *data, ct *ind, int64_t axis, ct *out) {
    int64_t ax;
    if (ox_norm_axis(im, axis, data->rank, &ax)) return -1;
    int r = data->rank - 1 + ind->rank;
    if (r > CT_MAX_RANK) return ox_fail(im, "gather result rank %d is too large", r);
    int64_t dim[CT_MAX_RANK];
    int k = 0;
    for (int i = 0; i < ax; i++) dim[k++] = data->dim[i];
    for (int i = 0; i < ind->rank; i++) dim[k++] = ind->dim[i];
    for (int i = (int)ax + 1; i < data->rank; i++) dim[k++] = data->dim[i];
    ct c = ct_new(im, data->is_int, r, dim);
    if (im->err) return -1;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= data->dim[i];
    for (int i = (int)ax + 1; i < data->rank; i++) inner *= data->dim[i];
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ind->n; j++) {
            int64_t q = to_i64(ct_at(ind, j));
            if (q < 0) q += data->dim[ax];
            if (q < 0 || q >= data->dim[ax]) return ox_fail(im, "gather index %lld is out of range", (long long)q);
            for (int64_t e = 0; e < inner; e++) c.v[at++] = ct_at(data, (o * data->dim[ax] + q) * inner + e);
        }
    *out = c;
    return 0;
}

/* ONNX Slice bounds, clamped, per axis of a value with shape dim. */
int ox_slice_bounds(imp *im, const Onnx__NodeProto *n, int rank, const int64_t *dim, int64_t *start, int64_t *end,
                        int64_t *step) {
    int64_t st[CT_MAX_RANK], en[CT_MAX_RANK], ax[CT_MAX_RANK], sp[CT_MAX_RANK];
    int ns, ne, na = -1, np = -1;
    if (ox_const_ints(im, in_name(n, 1), st, CT_MAX_RANK, &ns) || ox_const_ints(im, in_name(n, 2), en, CT_MAX_RANK, &ne)) return -1;
    if (in_name(n, 3) && ox_const_ints(im, in_name(n, 3), ax, CT_MAX_RANK, &na)) return -1;
    if (in_name(n, 4) && ox_const_ints(im, in_name(n, 4), sp, CT_MAX_RANK, &np)) return -1;
    if (ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns)) return ox_fail(im, "starts, ends, axes and steps differ in length");
    for (int i = 0; i < rank; i++) {
        start[i] = 0;
        end[i] = dim[i];
        step[i] = 1;
    }
    for (int i = 0; i < ns; i++) {
        int64_t a = na >= 0 ? ax[i] : i;
        if (ox_norm_axis(im, a, rank, &a)) return -1;
        int64_t s = np >= 0 ? sp[i] : 1, d = dim[a];
        if (s > GRAPH_MAX_DIM) s = GRAPH_MAX_DIM; /* any step past the axis means one element */
        if (s < -GRAPH_MAX_DIM) s = -GRAPH_MAX_DIM;
        if (s == 0) return ox_fail(im, "slice step 0");
        int64_t b = st[i], e = en[i];
        if (b < 0) b += d;
        if (e < 0) e += d;
        if (s > 0) {
            b = b < 0 ? 0 : b > d ? d : b;
            e = e < 0 ? 0 : e > d ? d : e;
        } else {
            b = b < 0 ? -1 : b > d - 1 ? d - 1 : b;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
        }
        start[a] = b;
        end[a] = e;
        step[a] = s;
    }
    return 0;
}

static int64_t slice_len(int64_t b, int64_t e, int64_t s) {
    if (s > 0) return e > b ? (e - b + s - 1) / s : 0;
    return b > e ? (b - e - s - 1) / -s : 0;
}

static int ct_slice(imp *im, const Onnx__NodeProto *n, ct *x, ct *out) {
    int64_t b[CT_MAX_RANK], e[CT_MAX_RANK], s[CT_MAX_RANK], dim[CT_MAX_RANK], ist[CT_MAX_RANK];
    if (ox_slice_bounds(im, n, x->rank, x->dim, b, e, s)) return -1;
    for (int i = 0; i < x->rank; i++) dim[i] = slice_len(b[i], e[i], s[i]);
    ct c = ct_new(im, x->is_int, x->rank, dim);
    strides_of(x->rank, x->dim, ist);
    for (int64_t i = 0; i < c.n; i++) {
        int64_t rem = i, src = 0;
        for (int k = x->rank - 1; k >= 0; k--) {
            int64_t q = rem % dim[k];
            rem /= dim[k];
            src += (b[k] + q * s[k]) * ist[k];
        }
        c.v[i] = ct_at(x, src);
    }
    *out = c;
    return 0;
}

/* Large float results (a transposed weight) are written as f32 into a buffer
 * the graph keeps, read in place like a weight: 4 bytes an element, once. */
int ct_transpose(imp *im, ct *x, const int64_t *perm, ct *out) {
    int64_t dim[CT_MAX_RANK], ist[CT_MAX_RANK];
    for (int i = 0; i < x->rank; i++) dim[i] = x->dim[perm[i]];
    ct c;
    float *f = NULL;
    if (!x->is_int && x->n > 1024) {
        c = (ct){.rank = x->rank, .n = x->n};
        memcpy(c.dim, dim, sizeof dim);
        f = ox_keep_add(im->keep, xmalloc(sizeof(float) * (size_t)x->n), 0, false);
        c.raw = (const uint8_t *)f; /* the host is little-endian (checked above) */
    } else {
        c = ct_new(im, x->is_int, x->rank, dim);
        if (im->err) return -1;
    }
    strides_of(x->rank, x->dim, ist);
    for (int64_t i = 0; i < c.n; i++) {
        int64_t rem = i, src = 0;
        for (int k = x->rank - 1; k >= 0; k--) {
            src += (rem % dim[k]) * ist[perm[k]];
            rem /= dim[k];
        }
        if (f) f[i] = (float)ct_at(x, src);
        else c.v[i] = ct_at(x, src);
    }
    *out = c;
    return 0;
}

/* Reshape target from an ONNX shape (0 copies, -1 infers). */
static int reshape_dims(imp *im, int rank, const int64_t *dim, const int64_t *want, int n, bool allowzero, int64_t *out) {
    int64_t total = 1, known = 1;
    int infer = -1;
    for (int i = 0; i < rank; i++) total *= dim[i];
    for (int i = 0; i < n; i++) {
        int64_t w = want[i];
        if (w == 0 && !allowzero) {
            if (i >= rank) return ox_fail(im, "reshape copies axis %d of a rank-%d value", i, rank);
            w = dim[i];
        }
        if (w == -1) {
            if (infer >= 0) return ox_fail(im, "reshape has two -1 entries");
            infer = i;
            continue;
        }
        if (w < 0 || w > GRAPH_MAX_DIM || (w && known > GRAPH_MAX_NUMEL / w))
            return ox_fail(im, "reshape has a bad entry %lld", (long long)w);
        out[i] = w;
        known *= w;
    }
    if (infer >= 0) {
        if (known == 0 || total % known) return ox_fail(im, "reshape cannot infer its -1 entry");
        out[infer] = total / known;
        known *= out[infer];
    }
    if (known != total) return ox_fail(im, "reshape changes the element count (%lld to %lld)", (long long)total, (long long)known);
    return 0;
}

/* Squeeze/Unsqueeze axes: the attribute (opset < 13) or input 1. */
static int node_axes(imp *im, const Onnx__NodeProto *n, int64_t *axes, int *na) {
    int k;
    const int64_t *a = attr_ints(n, "axes", &k);
    if (k >= 0) {
        if (k > CT_MAX_RANK) return ox_fail(im, "too many axes");
        memcpy(axes, a, sizeof(int64_t) * (size_t)k);
        *na = k;
        return 0;
    }
    if (!in_name(n, 1)) {
        *na = -1;
        return 0;
    }
    return ox_const_ints(im, in_name(n, 1), axes, CT_MAX_RANK, na);
}

static int squeeze_dims(imp *im, const Onnx__NodeProto *n, bool unsq, int rank, const int64_t *dim, int *orank, int64_t *odim) {
    int64_t axes[CT_MAX_RANK];
    int na;
    if (node_axes(im, n, axes, &na)) return -1;
    if (unsq) {
        int r = rank + na;
        if (na < 0 || r > CT_MAX_RANK) return ox_fail(im, "unsqueeze needs axes and a result rank of at most %d", CT_MAX_RANK);
        bool ins[CT_MAX_RANK] = {0};
        for (int i = 0; i < na; i++) {
            int64_t a;
            if (ox_norm_axis(im, axes[i], r, &a)) return -1;
            ins[a] = true;
        }
        for (int i = 0, j = 0; i < r; i++) odim[i] = ins[i] ? 1 : dim[j++];
        *orank = r;
        return 0;
    }
    bool drop[CT_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++) drop[i] = na < 0 && dim[i] == 1;
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (ox_norm_axis(im, axes[i], rank, &a)) return -1;
        if (dim[a] != 1) return ox_fail(im, "squeeze of axis %lld, which is %lld long", (long long)a, (long long)dim[a]);
        drop[a] = true;
    }
    int r = 0;
    for (int i = 0; i < rank; i++)
        if (!drop[i]) odim[r++] = dim[i];
    *orank = r;
    return 0;
}

static int flatten_dims(imp *im, const Onnx__NodeProto *n, int rank, const int64_t *dim, int64_t *odim) {
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", 1), rank + 1, &ax)) return -1;
    odim[0] = odim[1] = 1;
    for (int i = 0; i < rank; i++) odim[i < ax ? 0 : 1] *= dim[i];
    return 0;
}

/* The result shape of Reshape, Flatten, Squeeze or Unsqueeze node n. */
int ox_reshape_target(imp *im, const Onnx__NodeProto *n, ox_op_id op, int rank, const int64_t *dim, int *orank,
                      int64_t *odim) {
    int64_t want[CT_MAX_RANK];
    switch (op) {
    case OX_Reshape:
        if (ox_const_ints(im, in_name(n, 1), want, CT_MAX_RANK, orank) ||
            reshape_dims(im, rank, dim, want, *orank, attr_int(n, "allowzero", 0) != 0, odim))
            return -1;
        return 0;
    case OX_Flatten:
        *orank = 2;
        return flatten_dims(im, n, rank, dim, odim);
    default:
        return squeeze_dims(im, n, op == OX_Unsqueeze, rank, dim, orank, odim);
    }
}

/* ---- the folders ------------------------------------------------------------------------ */

int fold_const(imp *im, const ox_op *row, const Onnx__NodeProto *n) {
    if (n->n_output < 1 || !row || !row->fold) return 0;
    if (row->when != CF_ALWAYS) {
        for (size_t i = 0; i < n->n_input; i++)
            if (in_name(n, i) && !ox_cval(im, in_name(n, i))) return 0; /* computes on data at run time */
        if (row->when == CF_FIRST && !ox_cval(im, in_name(n, 0))) return 0;
    }
    return row->fold(im, n, row->id);
}

/* Sets the node's output to c: folded. */
static int folded(imp *im, const Onnx__NodeProto *n, ct c) {
    ox_set_const(im, n->output[0], c);
    return 1;
}

/* The node's first input (present for CF_FIRST rows). */
static ct *first(imp *im, const Onnx__NodeProto *n) { return &ox_cval(im, in_name(n, 0))->c; }

int const_fold_shape(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int rank;
    int64_t dim[CT_MAX_RANK];
    if (ox_shape_of(im, in_name(n, 0), &rank, dim)) return -1;
    int64_t b = attr_int(n, "start", 0), e = attr_int(n, "end", rank);
    if (b < 0) b += rank;
    if (e < 0) e += rank;
    b = b < 0 ? 0 : b > rank ? rank : b;
    e = e < b ? b : e > rank ? rank : e;
    int64_t len = e - b;
    ct c = ct_new(im, true, 1, &len);
    for (int64_t i = 0; i < len; i++) c.v[i] = (double)dim[b + i];
    return folded(im, n, c);
}

int const_fold_constant(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    const Onnx__AttributeProto *a = n->n_attribute ? n->attribute[0] : NULL;
    ct c;
    if (!a || !a->name) return ox_fail(im, "Constant without a value");
    if (strcmp(a->name, "value") == 0 && a->t) {
        if (ox_tensor_ct(im, a->t, NULL, &c)) return -1;
    } else if (strcmp(a->name, "value_float") == 0) {
        c = ct_new(im, false, 0, NULL);
        c.v[0] = a->f;
    } else if (strcmp(a->name, "value_int") == 0) {
        c = ct_new(im, true, 0, NULL);
        c.v[0] = (double)a->i;
    } else if (strcmp(a->name, "value_floats") == 0 || strcmp(a->name, "value_ints") == 0) {
        bool isf = a->name[6] == 'f';
        int64_t len = isf ? (int64_t)a->n_floats : (int64_t)a->n_ints;
        c = ct_new(im, !isf, 1, &len);
        for (int64_t i = 0; i < len; i++) c.v[i] = isf ? a->floats[i] : (double)a->ints[i];
    } else {
        return ox_fail(im, "Constant with attribute '%s' is not supported", a->name);
    }
    return folded(im, n, c);
}

int const_fold_binary(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    oval *a = ox_cval(im, in_name(n, 0)), *b = ox_cval(im, in_name(n, 1));
    ct c;
    if (!a || !b) return ox_fail(im, "needs two inputs");
    if (ct_binary(im, op, &a->c, &b->c, &c)) return -1;
    return folded(im, n, c);
}

/* Not of a boolean constant (any nonzero is true). */
int const_fold_not(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n);
    ct c = ct_new(im, true, a->rank, a->dim);
    for (int64_t i = 0; i < c.n; i++) c.v[i] = ct_at(a, i) == 0;
    return folded(im, n, c);
}

int const_fold_identity(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    return folded(im, n, *first(im, n));
}

int const_fold_cast(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n);
    int64_t to = attr_int(n, "to", 1);
    bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
                    to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    ct c = ct_new(im, !to_float, a->rank, a->dim);
    for (int64_t i = 0; i < c.n; i++) {
        double v = ct_at(a, i);
        c.v[i] = to_float ? v : to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? (v != 0) : trunc(v);
    }
    return folded(im, n, c);
}

/* Sqrt, Neg, Erf, Tanh, Reciprocal, Relu, Sigmoid, Exp, Log, Abs. */
int const_fold_unary(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    ct *a = first(im, n);
    ct c = ct_new(im, a->is_int, a->rank, a->dim);
    double (*f)(double) = ox_unary_of(op)->f64;
    for (int64_t i = 0; i < c.n; i++) c.v[i] = f(ct_at(a, i));
    return folded(im, n, c);
}

int const_fold_gather(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    oval *b = ox_cval(im, in_name(n, 1));
    ct c;
    if (!b || ct_gather(im, first(im, n), &b->c, attr_int(n, "axis", 0), &c)) return im->err ? -1 : ox_fail(im, "needs indices");
    return folded(im, n, c);
}

int const_fold_slice(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct c;
    if (ct_slice(im, n, first(im, n), &c)) return -1;
    return folded(im, n, c);
}

int const_fold_concat(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n);
    int64_t ax;
    if (ox_norm_axis(im, attr_int(n, "axis", 0), a->rank, &ax)) return -1;
    int64_t dim[CT_MAX_RANK];
    memcpy(dim, a->dim, sizeof dim);
    dim[ax] = 0;
    for (size_t i = 0; i < n->n_input; i++) {
        oval *o = ox_cval(im, in_name(n, i));
        if (!o || o->c.rank != a->rank) return ox_fail(im, "concat of values of different ranks");
        dim[ax] += o->c.dim[ax];
    }
    ct c = ct_new(im, a->is_int, a->rank, dim);
    if (im->err) return -1;
    int64_t outer = 1;
    for (int i = 0; i < ax; i++) outer *= dim[i];
    int64_t at = 0;
    for (int64_t q = 0; q < outer; q++)
        for (size_t i = 0; i < n->n_input; i++) {
            ct *s = &ox_cval(im, in_name(n, i))->c;
            int64_t blk = s->n / (outer ? outer : 1);
            for (int64_t e = 0; e < blk; e++) c.v[at++] = ct_at(s, q * blk + e);
        }
    return folded(im, n, c);
}

/* Reshape, Flatten, Squeeze, Unsqueeze: the values as they are, a new shape. */
int const_fold_reshape(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    ct *a = first(im, n);
    int r;
    int64_t dim[CT_MAX_RANK];
    if (ox_reshape_target(im, n, op, a->rank, a->dim, &r, dim)) return -1;
    return folded(im, n, ct_reshaped(*a, r, dim));
}

int const_fold_transpose(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n), c;
    int np;
    const int64_t *p = attr_ints(n, "perm", &np);
    int64_t perm[CT_MAX_RANK];
    if (np >= 0 && np != a->rank) return ox_fail(im, "perm has %d entries for rank %d", np, a->rank); /* before p[i] is read */
    for (int i = 0; i < a->rank; i++) perm[i] = np < 0 ? a->rank - 1 - i : p[i];
    bool seen[CT_MAX_RANK] = {0};
    for (int i = 0; i < a->rank; i++) {
        if (perm[i] < 0 || perm[i] >= a->rank || seen[perm[i]]) return ox_fail(im, "perm is not a permutation");
        seen[perm[i]] = true;
    }
    if (ct_transpose(im, a, perm, &c)) return -1;
    return folded(im, n, c);
}

int const_fold_expand(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n);
    int64_t want[CT_MAX_RANK], dim[CT_MAX_RANK];
    int nw, r;
    if (ox_const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &nw) || ox_bcast_shape(im, a->rank, a->dim, nw, want, &r, dim))
        return -1;
    ct c = ct_new(im, a->is_int, r, dim);
    for (int64_t i = 0; i < c.n; i++) c.v[i] = ct_at(a, bcast_index(i, r, dim, a->rank, a->dim));
    return folded(im, n, c);
}

int const_fold_constant_of_shape(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    int64_t dim[CT_MAX_RANK];
    int nd;
    if (ox_const_ints(im, in_name(n, 0), dim, CT_MAX_RANK, &nd)) return -1;
    const Onnx__AttributeProto *v = attr(n, "value");
    ct fill = {.n = 1};
    double one = 0;
    fill.v = &one;
    if (v && v->t && ox_tensor_ct(im, v->t, NULL, &fill)) return -1;
    ct c = ct_new(im, fill.is_int, nd, dim);
    for (int64_t i = 0; i < c.n; i++) c.v[i] = fill.n ? ct_at(&fill, 0) : 0;
    return folded(im, n, c);
}

int const_fold_where(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    ct *a = first(im, n);
    oval *b = ox_cval(im, in_name(n, 1)), *e = ox_cval(im, in_name(n, 2));
    if (!b || !e) return ox_fail(im, "needs three inputs");
    int r, r2;
    int64_t d1[CT_MAX_RANK], dim[CT_MAX_RANK];
    if (ox_bcast_shape(im, a->rank, a->dim, b->c.rank, b->c.dim, &r, d1) ||
        ox_bcast_shape(im, r, d1, e->c.rank, e->c.dim, &r2, dim))
        return -1;
    ct c = ct_new(im, b->c.is_int && e->c.is_int, r2, dim);
    for (int64_t i = 0; i < c.n; i++)
        c.v[i] = ct_at(a, bcast_index(i, r2, dim, a->rank, a->dim)) != 0
                     ? ct_at(&b->c, bcast_index(i, r2, dim, b->c.rank, b->c.dim))
                     : ct_at(&e->c, bcast_index(i, r2, dim, e->c.rank, e->c.dim));
    return folded(im, n, c);
}

/* ScatterND (reduction none) of constants: data with each indexed slice
 * replaced by its update, in order (swin_t's shifted-window masks). */
int const_fold_scatter_nd(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    oval *d = ox_cval(im, in_name(n, 0)), *ix = ox_cval(im, in_name(n, 1)), *u = ox_cval(im, in_name(n, 2));
    if (!d || !ix || !u) return ox_fail(im, "needs three inputs");
    const Onnx__AttributeProto *red = attr(n, "reduction");
    if (red && red->s.len && !(red->s.len == 4 && memcmp(red->s.data, "none", 4) == 0))
        return ox_fail(im, "only reduction 'none' is supported");
    const ct *data = &d->c, *ind = &ix->c, *upd = &u->c;
    int q = ind->rank;
    int64_t k = q ? ind->dim[q - 1] : 0;
    if (q < 1 || k < 1 || k > data->rank || upd->rank != q - 1 + data->rank - (int)k)
        return ox_fail(im, "indices of shape rank %d do not index data of rank %d with updates of rank %d", q, data->rank, upd->rank);
    int64_t slice = 1, count = ind->n / k;
    for (int a = (int)k; a < data->rank; a++) slice *= data->dim[a];
    if (count * slice != upd->n) return ox_fail(im, "%lld updates of %lld elements for %lld values", (long long)count, (long long)slice, (long long)upd->n);
    ct c = ct_new(im, data->is_int && upd->is_int, data->rank, data->dim);
    for (int64_t i = 0; i < c.n; i++) c.v[i] = ct_at(data, i);
    for (int64_t j = 0; j < count; j++) {
        int64_t at = 0;
        for (int a = 0; a < k; a++) {
            int64_t x = (int64_t)ct_at(ind, j * k + a);
            if (x < 0) x += data->dim[a];
            if (x < 0 || x >= data->dim[a]) return ox_fail(im, "index %lld out of range on axis %d", (long long)x, a);
            at = at * data->dim[a] + x;
        }
        for (int64_t e = 0; e < slice; e++) c.v[at * slice + e] = ct_at(upd, j * slice + e);
    }
    return folded(im, n, c);
}

int const_fold_range(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    oval *s = ox_cval(im, in_name(n, 0)), *l = ox_cval(im, in_name(n, 1)), *dl = ox_cval(im, in_name(n, 2));
    if (!s || !l || !dl) return ox_fail(im, "needs three inputs");
    double st = ct_at(&s->c, 0), lim = ct_at(&l->c, 0), de = ct_at(&dl->c, 0);
    int64_t len = de == 0 ? 0 : (int64_t)ceil((lim - st) / de);
    if (len < 0) len = 0;
    if (len > (1 << 24)) return ox_fail(im, "range of %lld values", (long long)len);
    ct c = ct_new(im, s->c.is_int, 1, &len);
    for (int64_t i = 0; i < len; i++) c.v[i] = st + (double)i * de;
    return folded(im, n, c);
}

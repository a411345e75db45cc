/* ref.c: the reference interpreter, the oracle every check compares
 * against. Plainly, it runs the graph as written: casts round to their dtype
 * (that is what a cast means), parameters and inputs hold values of their
 * dtype, and everything else computes in f32 (matmuls through BLAS sgemm;
 * reductions accumulate in double and round once). Kept simple so it is
 * obviously right. Given a plan's numeric decisions it becomes the plan-exact
 * emulated reference: the ops whose device arithmetic differs run emulate.c's
 * kernels and every result rounds to its dtype.
 *
 * Buffers are f32, one per live value, released after the value's last use
 * into a pool of spares the next value of the same size takes (a layer's
 * values come back every iteration, and memory fresh from the kernel costs
 * a page fault per 4 KiB, about what the arithmetic on it costs). */
#include "emulate.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int64_t MAX_ELEMS = 1ll << 32;  /* per value; larger is refused, not crashed on */

typedef struct spare {
    float *p;
    size_t bytes;
} spare;

typedef struct rt {
    const graph *g;
    const ref_options *o;
    diag *d;
    float **buf;         /* per value: its data while live */
    bool *owned;         /* per value: buf is ours to free (slices are views) */
    bool *streamed;      /* per value: a stacked parameter made one repeat iteration at a time */
    int32_t *last_user;  /* per value: last op of its block that uses it; -1 none */
    float **yield_to;    /* the open repeat's next carried buffers */
    float **outputs;     /* the caller's output slots */
    int32_t nout_done;
    progress prog;
    int64_t done;
    int64_t iters[GRAPH_MAX_REPEAT_DEPTH]; /* iteration of each open repeat, outermost first */
    int depth;
    bool stopped;        /* on_value asked to stop */
    arena a;                        /* the spares' list */
    VEC(spare) spares;              /* released buffers for reuse, oldest first */
    size_t spare_bytes, live_bytes, peak_bytes; /* spares; live now; live at most */
} rt;

/* Buffers smaller than this are not kept: malloc serves them from memory
 * it already has. */
static const size_t SPARE_MIN = 256 << 10;

/* ---- shapes and strides ------------------------------------------------- */

typedef struct shape {
    int rank;
    int64_t dim[GRAPH_MAX_RANK];
} shape;

static const graph_type *vtype(const rt *r, int32_t v) { return &graph_val(r->g, v)->type; }
static int64_t vnumel(const rt *r, int32_t v) { return graph_type_numel(vtype(r, v)); }

/* Bytes of value v's buffer. The verifier makes every value a buffer
 * passes through (a repeat's carried values, its arguments, yields and
 * results) the same type, so a buffer's size is that of any of them. */
static size_t buf_bytes(const rt *r, int32_t v) {
    int64_t n = vnumel(r, v);
    return sizeof(float) * (size_t)(n ? n : 1);
}

/* A buffer for value v: a spare of its size, or a new one; its size comes
 * from the input, so NULL with a diagnostic naming the value when the host
 * cannot hold it. */
static float *value_buf(rt *r, int32_t v) {
    size_t bytes = buf_bytes(r, v);
    float *p = NULL;
    for (int32_t i = r->spares.n - 1; i >= 0 && !p; i--) {
        if (r->spares.v[i].bytes != bytes) continue;
        p = r->spares.v[i].p;
        memmove(r->spares.v + i, r->spares.v + i + 1, sizeof(spare) * (size_t)(--r->spares.n - i));
        r->spare_bytes -= bytes;
    }
    if (!p) {
        const graph_value *x = graph_val(r->g, v);
        char ty[160];
        graph_type_str(&x->type, ty, sizeof ty);
        p = util_try_malloc(bytes, 1, r->d, "%s: error: the reference's value '%%%s' (%s)", r->g->path, x->name, ty);
        if (!p) return NULL;
    }
    r->live_bytes += bytes;
    if (r->live_bytes > r->peak_bytes) r->peak_bytes = r->live_bytes;
    return p;
}

/* Value v's buffer given up, kept as the newest spare when it is large
 * enough to be worth keeping. The spares hold at most twice as many bytes
 * as were ever live at once (a repeat's body gives up and takes back many
 * sizes, not all live at the same time): the oldest go first, since the
 * body takes its sizes back in the order it gave them up. */
static void put_buf(rt *r, int32_t v, float *p) {
    size_t bytes = buf_bytes(r, v), most = 2 * r->peak_bytes;
    r->live_bytes -= bytes;
    if (bytes < SPARE_MIN || bytes > most) {
        free(p);
        return;
    }
    int32_t old = 0;
    for (; r->spare_bytes + bytes > most; old++) {
        free(r->spares.v[old].p);
        r->spare_bytes -= r->spares.v[old].bytes;
    }
    if (old) memmove(r->spares.v, r->spares.v + old, sizeof(spare) * (size_t)(r->spares.n -= old));
    vec_push(&r->a, &r->spares, ((spare){p, bytes}));
    r->spare_bytes += bytes;
}

/* Visits every index of dims (rank >= 1) as (outer offsets, inner run): calls
 * fn once per run along the last axis with the start offsets of up to three
 * operands. Keeps every strided kernel to one loop. */
typedef void (*run_fn)(void *ctx, int64_t o0, int64_t o1, int64_t o2, int64_t n);
static void walk(int rank, const int64_t *dims, const int64_t *s0, const int64_t *s1, const int64_t *s2, run_fn fn,
                 void *ctx) {
    if (rank == 0) {
        fn(ctx, 0, 0, 0, 1);
        return;
    }
    int64_t idx[GRAPH_MAX_RANK] = {0}, o0 = 0, o1 = 0, o2 = 0;
    int64_t n = dims[rank - 1];
    for (;;) {
        fn(ctx, o0, o1, o2, n);
        int k = rank - 2;
        for (; k >= 0; k--) {
            idx[k]++;
            o0 += s0[k];
            o1 += s1 ? s1[k] : 0;
            o2 += s2 ? s2[k] : 0;
            if (idx[k] < dims[k]) break;
            o0 -= s0[k] * dims[k];
            o1 -= s1 ? s1[k] * dims[k] : 0;
            o2 -= s2 ? s2[k] * dims[k] : 0;
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}

static void contiguous(const graph_type *t, int64_t *st) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= t->dim[i];
    }
}

/* ---- elementwise with broadcasting -------------------------------------- */

typedef struct bin_ctx {
    graph_op_kind kind;
    const float *a, *b;
    float *out;
    int64_t sa, sb;  /* strides along the last axis */
} bin_ctx;

static void bin_run(void *p, int64_t oo, int64_t oa, int64_t ob, int64_t n) {
    bin_ctx *c = p;
    const float *a = c->a + oa, *b = c->b + ob;
    float *o = c->out + oo;
    for (int64_t i = 0; i < n; i++) {
        float x = a[i * c->sa], y = b[i * c->sb];
        o[i] = c->kind == OP_ADD   ? x + y
               : c->kind == OP_SUB ? x - y
               : c->kind == OP_MUL ? x * y
               : c->kind == OP_MAX ? num_max(x, y)
                                   : num_min(x, y);
    }
}

static int ref_binary(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *to = vtype(r, op->out[0]);
    int64_t so[GRAPH_MAX_RANK], sa[GRAPH_MAX_RANK], sb[GRAPH_MAX_RANK];
    contiguous(to, so);
    shape_bstrides(vtype(r, op->in[0]), to->rank, sa);
    shape_bstrides(vtype(r, op->in[1]), to->rank, sb);
    bin_ctx c = {op->kind, in[0], in[1], out[0], to->rank ? sa[to->rank - 1] : 0, to->rank ? sb[to->rank - 1] : 0};
    walk(to->rank, to->dim, so, sa, sb, bin_run, &c);
    return 0;
}
static int ref_add(rt *r, const graph_op *op, float **in, float **out) { return ref_binary(r, op, in, out); }
static int ref_sub(rt *r, const graph_op *op, float **in, float **out) { return ref_binary(r, op, in, out); }
static int ref_mul(rt *r, const graph_op *op, float **in, float **out) { return ref_binary(r, op, in, out); }
static int ref_max(rt *r, const graph_op *op, float **in, float **out) { return ref_binary(r, op, in, out); }
static int ref_min(rt *r, const graph_op *op, float **in, float **out) { return ref_binary(r, op, in, out); }

static int ref_gather(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *t = vtype(r, op->in[0]);
    int64_t v = t->dim[0], e = t->dim[1], n = vnumel(r, op->in[1]);
    for (int64_t i = 0; i < n; i++) {
        int64_t row = num_index_row((int64_t)in[1][i], v); /* ids are whole (i32) values */
        if (row < 0) memset(out[0] + i * e, 0, sizeof(float) * (size_t)e);
        else memcpy(out[0] + i * e, in[0] + row * e, sizeof(float) * (size_t)e);
    }
    return 0;
}

/* ---- matmul --------------------------------------------------------------- */

static int ref_matmul(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *ta = vtype(r, op->in[0]), *tb = vtype(r, op->in[1]), *tc = vtype(r, op->out[0]);
    bool tra = graph_attr_bool(op, ATTR_TRANSPOSE_A), trb = graph_attr_bool(op, ATTR_TRANSPOSE_B);
    int64_t m = tc->dim[tc->rank - 2], n = tc->dim[tc->rank - 1];
    int64_t k = ta->dim[ta->rank - (tra ? 2 : 1)];
    int64_t lda = ta->dim[ta->rank - 1], ldb = tb->dim[tb->rank - 1];
    /* Batch axes broadcast like elementwise operands, in units of matrices. */
    graph_type ba = *ta, bb = *tb, bc = *tc;
    ba.rank -= 2;
    bb.rank -= 2;
    bc.rank -= 2;
    int64_t sa[GRAPH_MAX_RANK], sb[GRAPH_MAX_RANK];
    shape_bstrides(&ba, bc.rank, sa);
    shape_bstrides(&bb, bc.rank, sb);
    int64_t batches = graph_type_numel(&bc), idx[GRAPH_MAX_RANK] = {0};
    for (int64_t t = 0; t < batches; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < bc.rank; i++) {
            oa += idx[i] * sa[i];
            ob += idx[i] * sb[i];
        }
        cblas_sgemm(CblasRowMajor, tra ? CblasTrans : CblasNoTrans, trb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, 1.0f, in[0] + oa * ta->dim[ta->rank - 1] * ta->dim[ta->rank - 2], (int)lda,
                    in[1] + ob * tb->dim[tb->rank - 1] * tb->dim[tb->rank - 2], (int)ldb, 0.0f, out[0] + t * m * n, (int)n);
        for (int i = bc.rank - 1; i >= 0; i--) {
            if (++idx[i] < bc.dim[i]) break;
            idx[i] = 0;
        }
    }
    return 0;
}

/* ---- pointwise ------------------------------------------------------------ */

static int ref_gelu(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = num_gelu(in[0][i]);
    return 0;
}

static int ref_gelu_erf(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = num_gelu_erf(in[0][i]);
    return 0;
}

#define X(id, name, ...)                                                      \
    static int ref_##name(rt *r, const graph_op *op, float **in, float **out) { \
        int64_t n = vnumel(r, op->out[0]);                                    \
        for (int64_t i = 0; i < n; i++) out[0][i] = num_##name(in[0][i]);     \
        return 0;                                                             \
    }
NUM_UNARY_OPS(X, )
#undef X

static int ref_gelu_grad(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = num_gelu_deriv(in[0][i]) * in[1][i];
    return 0;
}

static int ref_scale(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    double by = graph_attr_float(op, ATTR_BY);
    for (int64_t i = 0; i < n; i++) out[0][i] = (float)(in[0][i] * by);
    return 0;
}

static int ref_cast(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *t = vtype(r, op->out[0]);
    int64_t n = vnumel(r, op->out[0]);
    memcpy(out[0], in[0], sizeof(float) * (size_t)n);
    if (r->o->strip_precision) return 0;
    if (dtype_is_f8(t->dtype) && !graph_attr_bool(op, ATTR_SATURATE)) {
        for (int64_t i = 0; i < n; i++)
            out[0][i] = f8_decode(t->dtype, f8_encode(t->dtype, in[0][i], t->scale, false), t->scale);
        return 0;
    }
    num_round_buf(t->dtype, t->scale, out[0], (size_t)n);
    return 0;
}

/* ---- reductions along an axis ---------------------------------------------- */

static int ref_softmax(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *t = vtype(r, op->in[0]);
    int64_t ax = graph_attr_int(op, ATTR_AXIS), outer, len, inner;
    shape_around(t, (int)(ax < 0 ? ax + t->rank : ax), &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *x = in[0] + o * len * inner + i;
            float *y = out[0] + o * len * inner + i;
            float mx = -INFINITY;
            for (int64_t k = 0; k < len; k++) mx = fmaxf(mx, x[k * inner]);
            double sum = 0;
            for (int64_t k = 0; k < len; k++) {
                float e = expf(x[k * inner] - mx);
                y[k * inner] = e;
                sum += e;
            }
            for (int64_t k = 0; k < len; k++) y[k * inner] = (float)(y[k * inner] / sum);
        }
    return 0;
}

static int ref_layer_norm(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *t = vtype(r, op->in[0]);
    int64_t c = t->dim[t->rank - 1], rows = graph_type_numel(t) / c;
    double eps = graph_attr_float(op, ATTR_EPS);
    for (int64_t row = 0; row < rows; row++) {
        const float *x = in[0] + row * c;
        float *y = out[0] + row * c;
        double mean = 0, var = 0;
        for (int64_t k = 0; k < c; k++) mean += x[k];
        mean /= (double)c;
        for (int64_t k = 0; k < c; k++) var += (x[k] - mean) * (x[k] - mean);
        double inv = 1.0 / sqrt(var / (double)c + eps);
        for (int64_t k = 0; k < c; k++) y[k] = (float)((x[k] - mean) * inv * in[1][k] + in[2][k]);
    }
    return 0;
}

static int ref_reduce_sum(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *t = vtype(r, op->in[0]);
    const graph_attr *ax = &op->attr[ATTR_AXES];
    bool drop[GRAPH_MAX_RANK] = {0};
    for (int i = 0; i < ax->ints.n; i++) drop[ax->ints.v[i] < 0 ? ax->ints.v[i] + t->rank : ax->ints.v[i]] = true;
    /* Each input element adds into the output element that keeps its
     * non-reduced coordinates (the output's strides with 0 on reduced axes). */
    int64_t st[GRAPH_MAX_RANK], s = 1, n = graph_type_numel(t), nout = vnumel(r, op->out[0]);
    for (int i = t->rank - 1; i >= 0; i--) {
        st[i] = drop[i] ? 0 : s;
        if (!drop[i]) s *= t->dim[i];
    }
    double *acc = xcalloc((size_t)nout, sizeof(double));
    int64_t idx[GRAPH_MAX_RANK] = {0}, o = 0;
    for (int64_t e = 0; e < n; e++) {
        acc[o] += in[0][e];
        for (int i = t->rank - 1; i >= 0; i--) {
            o += st[i];
            if (++idx[i] < t->dim[i]) break;
            o -= st[i] * t->dim[i];
            idx[i] = 0;
        }
    }
    for (int64_t i = 0; i < nout; i++) out[0][i] = (float)acc[i];
    free(acc);
    return 0;
}

/* ---- data movement ------------------------------------------------------------ */

typedef struct copy_ctx {
    const float *src;
    float *dst;
    int64_t ss, sd;  /* last-axis strides */
} copy_ctx;

static void copy_run(void *p, int64_t od, int64_t os, int64_t unused, int64_t n) {
    (void)unused;
    copy_ctx *c = p;
    for (int64_t i = 0; i < n; i++) c->dst[od + i * c->sd] = c->src[os + i * c->ss];
}

/* Copies the box dims from src (strides ss, base offset os) to dst (strides
 * sd, base od). Every layout op below is one such box copy. */
static void box_copy(int rank, const int64_t *dims, const float *src, int64_t os, const int64_t *ss, float *dst,
                     int64_t od, const int64_t *sd) {
    copy_ctx c = {src + os, dst + od, rank ? ss[rank - 1] : 0, rank ? sd[rank - 1] : 0};
    walk(rank, dims, sd, ss, NULL, copy_run, &c);
}

static int ref_reshape(rt *r, const graph_op *op, float **in, float **out) {
    memcpy(out[0], in[0], sizeof(float) * (size_t)vnumel(r, op->out[0]));
    return 0;
}

static int ref_transpose(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *ti = vtype(r, op->in[0]), *to = vtype(r, op->out[0]);
    int64_t si[GRAPH_MAX_RANK], sp[GRAPH_MAX_RANK], so[GRAPH_MAX_RANK];
    contiguous(ti, si);
    contiguous(to, so);
    for (int i = 0; i < to->rank; i++) sp[i] = si[op->attr[ATTR_PERM].ints.v[i]];
    box_copy(to->rank, to->dim, in[0], 0, sp, out[0], 0, so);
    return 0;
}

static int ref_slice(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *ti = vtype(r, op->in[0]), *to = vtype(r, op->out[0]);
    int64_t si[GRAPH_MAX_RANK], so[GRAPH_MAX_RANK], base = 0;
    contiguous(ti, si);
    contiguous(to, so);
    for (int i = 0; i < ti->rank; i++) base += op->attr[ATTR_START].ints.v[i] * si[i];
    box_copy(to->rank, to->dim, in[0], base, si, out[0], 0, so);
    return 0;
}

static int ref_pad(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *ti = vtype(r, op->in[0]), *to = vtype(r, op->out[0]);
    int64_t si[GRAPH_MAX_RANK], so[GRAPH_MAX_RANK], base = 0, n = vnumel(r, op->out[0]);
    float v = num_clamp_finite(to->dtype, (float)graph_attr_float(op, ATTR_VALUE));
    /* An 8-bit tensor holds codes: the padding is the value as its code means. */
    if (dtype_is_f8(to->dtype) && !r->o->strip_precision) v = num_round(to->dtype, to->scale, v);
    for (int64_t i = 0; i < n; i++) out[0][i] = v;
    contiguous(ti, si);
    contiguous(to, so);
    for (int i = 0; i < ti->rank; i++) base += op->attr[ATTR_LOW].ints.v[i] * so[i];
    box_copy(ti->rank, ti->dim, in[0], 0, si, out[0], base, so);
    return 0;
}

static int ref_concat(rt *r, const graph_op *op, float **in, float **out) {
    const graph_type *to = vtype(r, op->out[0]);
    int axis = (int)graph_attr_int(op, ATTR_AXIS);
    if (axis < 0) axis += to->rank;
    int64_t so[GRAPH_MAX_RANK], at = 0;
    contiguous(to, so);
    for (int32_t k = 0; k < op->nin; k++) {
        const graph_type *ti = vtype(r, op->in[k]);
        int64_t si[GRAPH_MAX_RANK];
        contiguous(ti, si);
        box_copy(ti->rank, ti->dim, in[k], 0, si, out[0], at * so[axis], so);
        at += ti->dim[axis];
    }
    return 0;
}

/* ---- optimizer ops: PyTorch semantics (docs/ir.md gives the expressions) ---- */

/* n elements of sgd with op's attributes: w, g, buf (NULL without momentum)
 * into w' and buf'. */
static void sgd_step(const graph_op *op, int64_t n, const float *w_, const float *g_, const float *buf_, float *w_out,
                     float *buf_out) {
    double lr = graph_attr_float(op, ATTR_LR), mu = graph_attr_float(op, ATTR_MOMENTUM),
           wd = graph_attr_float(op, ATTR_WEIGHT_DECAY);
    for (int64_t i = 0; i < n; i++) {
        double w = w_[i], g = (double)g_[i] + wd * w;
        if (buf_) {
            float buf = (float)(mu * buf_[i] + g);
            buf_out[i] = buf;
            g = buf;
        }
        w_out[i] = (float)(w - lr * g);
    }
}

static int ref_sgd(rt *r, const graph_op *op, float **in, float **out) {
    sgd_step(op, vnumel(r, op->in[0]), in[0], in[1], op->nin == 3 ? in[2] : NULL, out[0], op->nin == 3 ? out[1] : NULL);
    return 0;
}

/* n elements of adamw with op's attributes: in = w, g, m, v; out = w', m', v'. */
static void adamw_step(const graph_op *op, int64_t n, const float *const *in, float **out) {
    double lr = graph_attr_float(op, ATTR_LR), b1 = graph_attr_float(op, ATTR_BETA1), b2 = graph_attr_float(op, ATTR_BETA2),
           eps = graph_attr_float(op, ATTR_EPS), wd = graph_attr_float(op, ATTR_WEIGHT_DECAY);
    double t = (double)graph_attr_int(op, ATTR_STEP);
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (int64_t i = 0; i < n; i++) {
        double g = in[1][i];
        float m = (float)(b1 * in[2][i] + (1 - b1) * g);
        float v = (float)(b2 * in[3][i] + (1 - b2) * g * g);
        double w = in[0][i] * (1 - lr * wd);
        out[0][i] = (float)(w - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps));
        out[1][i] = m;
        out[2][i] = v;
    }
}

static int ref_adamw(rt *r, const graph_op *op, float **in, float **out) {
    adamw_step(op, vnumel(r, op->in[0]), (const float *const *)in, out);
    return 0;
}

/* The fused ops are their matmul, then their optimizer: the reference keeps
 * the gradient a fused plan never stores. */
static int ref_matmul_sgd(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    float *g = value_buf(r, op->out[0]); /* the gradient: the weight's shape */
    if (!g) return -1;
    int rc = ref_matmul(r, op, in, &g);
    sgd_step(op, n, in[2], g, op->nin == 4 ? in[3] : NULL, out[0], op->nin == 4 ? out[1] : NULL);
    free(g);
    return rc;
}

static int ref_matmul_adamw(rt *r, const graph_op *op, float **in, float **out) {
    int64_t n = vnumel(r, op->out[0]);
    float *g = value_buf(r, op->out[0]);
    if (!g) return -1;
    int rc = ref_matmul(r, op, in, &g);
    const float *opt[4] = {in[2], g, in[3], in[4]};
    adamw_step(op, n, opt, out);
    free(g);
    return rc;
}

/* The fused sums: the partials summed over their first axis, then the optimizer. */
static float *sum_partials(rt *r, const graph_op *op, const float *p) {
    int64_t n = vnumel(r, op->out[0]), parts = graph_val(r->g, op->in[0])->type.dim[0];
    float *g = value_buf(r, op->out[0]);
    for (int64_t i = 0; g && i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < parts; j++) s += p[j * n + i];
        g[i] = (float)s;
    }
    return g;
}

static int ref_sum_sgd(rt *r, const graph_op *op, float **in, float **out) {
    float *g = sum_partials(r, op, in[0]);
    if (!g) return -1;
    sgd_step(op, vnumel(r, op->out[0]), in[1], g, op->nin == 3 ? in[2] : NULL, out[0], op->nin == 3 ? out[1] : NULL);
    free(g);
    return 0;
}

static int ref_sum_adamw(rt *r, const graph_op *op, float **in, float **out) {
    float *g = sum_partials(r, op, in[0]);
    if (!g) return -1;
    const float *opt[4] = {in[1], g, in[2], in[3]};
    adamw_step(op, vnumel(r, op->out[0]), opt, out);
    free(g);
    return 0;
}

static int ref_global_norm_clip(rt *r, const graph_op *op, float **in, float **out) {
    double ss = 0;
    for (int32_t k = 0; k < op->nin; k++) {
        int64_t n = vnumel(r, op->in[k]);
        for (int64_t i = 0; i < n; i++) ss += (double)in[k][i] * in[k][i];
    }
    double coef = graph_attr_float(op, ATTR_MAX_NORM) / (sqrt(ss) + 1e-6);
    if (coef > 1) coef = 1;
    for (int32_t k = 0; k < op->nin; k++) {
        int64_t n = vnumel(r, op->in[k]);
        for (int64_t i = 0; i < n; i++) out[k][i] = (float)(in[k][i] * coef);
    }
    return 0;
}

typedef int (*ref_fn)(rt *, const graph_op *, float **, float **);
static const ref_fn ref_fns[OP_COUNT] = {
#define X(id, nm, ...) [OP_##id] = ref_##nm,
    GRAPH_COMPUTE_OPS(X)
#undef X
};

/* ---- execution -------------------------------------------------------------- */

/* A copy of src as a buffer of value v (NULL with a diagnostic). */
static float *dup_buf(rt *r, int32_t v, const float *src) {
    float *p = value_buf(r, v);
    if (p) memcpy(p, src, sizeof(float) * (size_t)vnumel(r, v));
    return p;
}

static void release(rt *r, int32_t v) {
    if (r->owned[v]) put_buf(r, v, r->buf[v]);
    r->buf[v] = NULL;
    r->owned[v] = false;
}

/* Every value used by op or anything nested in it, marked as last used by
 * `user` when it belongs to block `scope`. */
static void mark_uses(rt *r, const graph_op *op, int32_t user, int32_t scope) {
    for (int32_t i = 0; i < op->nin; i++) {
        if (graph_value_scope(r->g, op->in[i]) == scope) r->last_user[op->in[i]] = user;
    }
    for (int32_t i = 0; i < op->body.n; i++) mark_uses(r, graph_opr(r->g, op->body.v[i]), user, scope);
}

static void plan_block(rt *r, const graph_block *b, int32_t scope) {
    for (int32_t i = 0; i < b->n; i++) {
        const graph_op *op = graph_opr(r->g, b->v[i]);
        mark_uses(r, op, b->v[i], scope);
        if (op->kind == OP_REPEAT) plan_block(r, &op->body, b->v[i]);
    }
}

static int exec_block(rt *r, const graph_block *b, float *const *inputs, int *input_k);

/* Frees what dies at op: operands (and, for a repeat, outer values its body
 * used) whose last user it is, and results nobody uses. */
static void release_uses(rt *r, const graph_op *op, int32_t op_id) {
    for (int32_t i = 0; i < op->nin; i++)
        if (r->last_user[op->in[i]] == op_id && r->buf[op->in[i]]) release(r, op->in[i]);
    for (int32_t i = 0; i < op->body.n; i++) release_uses(r, graph_opr(r->g, op->body.v[i]), op_id);
}

static void free_dead(rt *r, int32_t op_id) {
    const graph_op *op = graph_opr(r->g, op_id);
    release_uses(r, op, op_id);
    for (int32_t i = 0; i < op->nout; i++)
        if (r->last_user[op->out[i]] < 0) release(r, op->out[i]);
}

/* Hands op result v to the caller's on_value hook; 1 stops the run. */
static int observe(rt *r, int32_t v) {
    if (!r->o->on_value || !r->buf[v]) return 0;
    if (r->o->on_value(r->o->on_value_ctx, v, r->iters, r->depth, r->buf[v], vnumel(r, v)) == 0) return 0;
    r->stopped = true;
    return 1;
}

static int exec_repeat(rt *r, int32_t op_id, float *const *inputs, int *input_k) {
    const graph_op *op = graph_opr(r->g, op_id);
    float **carried = xcalloc((size_t)op->ncarry, sizeof(float *));
    float **next = xcalloc((size_t)op->ncarry, sizeof(float *));
    int rc = 0;
    for (int32_t k = 0; k < op->ncarry && rc == 0; k++)
        if (!(carried[k] = dup_buf(r, op->in[k], r->buf[op->in[k]]))) rc = -1;
    float **saved_yield = r->yield_to;
    TS_ASSERT(r->depth < GRAPH_MAX_REPEAT_DEPTH); /* graph_verify bounds the nesting */
    r->depth++;
    for (int64_t it = 0; it < op->count && rc == 0; it++) {
        r->iters[r->depth - 1] = it;
        for (int32_t k = 0; k < op->nargs; k++) {
            int32_t a = op->args[k];
            if (k < op->ncarry) {
                r->buf[a] = carried[k];
                r->owned[a] = true;
            } else if (r->streamed[op->in[k]]) { /* this iteration's layer, made now */
                if (r->last_user[a] < 0) continue; /* the body never reads it */
                int64_t n = vnumel(r, a);
                if (!(r->buf[a] = value_buf(r, a))) rc = -1;
                r->owned[a] = r->buf[a] != NULL;
                if (rc == 0)
                    rc = graph_param_values_at(r->g, graph_val(r->g, op->in[k])->def, r->o->strip_precision, it * n, n,
                                               r->buf[a], r->d);
            } else {
                r->buf[a] = r->buf[op->in[k]] + it * vnumel(r, a);
                r->owned[a] = false;
            }
            if (r->last_user[a] < 0) release(r, a);
        }
        for (int32_t k = 0; k < op->ncarry; k++) next[k] = NULL;
        r->yield_to = next;
        if (rc == 0) rc = exec_block(r, &op->body, inputs, input_k);
        /* The body's arguments own this iteration's carried buffers. */
        for (int32_t k = 0; k < op->nargs; k++)
            if (r->buf[op->args[k]]) release(r, op->args[k]);
        for (int32_t k = 0; k < op->ncarry; k++) {
            if (rc) { /* stopped or failed mid-body: nothing carries on */
                free(next[k]);
                next[k] = NULL;
            }
            carried[k] = next[k];
        }
    }
    r->yield_to = saved_yield;
    r->depth--;
    for (int32_t k = 0; k < op->ncarry; k++) {
        r->buf[op->out[k]] = carried[k];
        r->owned[op->out[k]] = carried[k] != NULL;
    }
    for (int32_t k = 0; k < op->ncarry && rc == 0; k++) rc = observe(r, op->out[k]);
    free(carried);
    free(next);
    return rc;
}

static int exec_op(rt *r, int32_t op_id, float *const *inputs, int *input_k) {
    const graph_op *op = graph_opr(r->g, op_id);
    switch (op->kind) {
    case OP_INPUT: {
        int32_t v = op->out[0];
        r->buf[v] = dup_buf(r, v, inputs[(*input_k)++]);
        r->owned[v] = true;
        return r->buf[v] ? 0 : -1;
    }
    case OP_PARAM: {
        int32_t v = op->out[0];
        if (r->streamed[v]) return 0; /* made by the repeats that slice it */
        if (!(r->buf[v] = value_buf(r, v))) return -1;
        r->owned[v] = true;
        return graph_param_values(r->g, op_id, r->o->strip_precision, r->buf[v], r->d);
    }
    case OP_OUTPUT:
        for (int32_t i = 0; i < op->nin; i++) {
            if (!(r->outputs[r->nout_done] = dup_buf(r, op->in[i], r->buf[op->in[i]]))) return -1;
            r->live_bytes -= buf_bytes(r, op->in[i]); /* the caller's now */
            r->nout_done++;
        }
        return 0;
    case OP_YIELD:
        for (int32_t i = 0; i < op->nin; i++)
            if (!(r->yield_to[i] = dup_buf(r, op->in[i], r->buf[op->in[i]]))) return -1;
        return 0;
    case OP_REPEAT: return exec_repeat(r, op_id, inputs, input_k);
    default: break;
    }
    float *in[1024], *out[1024];
    TS_ASSERT(op->nin <= 1024 && op->nout <= 1024);
    for (int32_t i = 0; i < op->nin; i++) in[i] = r->buf[op->in[i]];
    for (int32_t i = 0; i < op->nout; i++) {
        if (!(out[i] = value_buf(r, op->out[i]))) return -1;
        r->buf[op->out[i]] = out[i];
        r->owned[op->out[i]] = true;
    }
    const graph_numerics *plan = r->o->plan;
    emu_fn emu = plan ? emu_kernel(op->kind) : NULL;
    int rc = emu ? emu(r->g, op, &plan->op[op_id], in, out) : ref_fns[op->kind](r, op, in, out);
    if (plan)
        for (int32_t i = 0; i < op->nout; i++) {
            const graph_type *t = vtype(r, op->out[i]);
            num_round_buf(t->dtype, t->scale, out[i], (size_t)graph_type_numel(t));
        }
    for (int32_t i = 0; i < op->nout && rc == 0; i++) rc = observe(r, op->out[i]);
    progress_step(&r->prog, ++r->done, graph_op_name(r->g, op_id));
    return rc;
}

static int exec_block(rt *r, const graph_block *b, float *const *inputs, int *input_k) {
    for (int32_t i = 0; i < b->n; i++) {
        int32_t op_id = b->v[i];
        if (exec_op(r, op_id, inputs, input_k)) return r->stopped ? 1 : -1;
        free_dead(r, op_id);
    }
    return 0;
}

static int64_t count_work(const graph *g, const graph_block *b) {
    int64_t n = 0;
    for (int32_t i = 0; i < b->n; i++) {
        const graph_op *op = graph_opr(g, b->v[i]);
        if (op->kind == OP_REPEAT) n += op->count * count_work(g, &op->body);
        else if (!graph_op_infos[op->kind].structural) n++;
    }
    return n;
}

/* A stacked parameter that only repeats slice (a layer's weights) is never
 * whole: each iteration makes its own layer (graph_param_values_at), so a
 * model's parameters are not all resident at once. */
static void stream_params(rt *r) {
    const graph *g = r->g;
    bool *other = xcalloc((size_t)g->values.n + 1, sizeof(bool)), *sliced = xcalloc((size_t)g->values.n + 1, sizeof(bool));
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *op = graph_opr(g, i);
        for (int32_t k = 0; k < op->nin; k++) {
            if (op->kind == OP_REPEAT && k >= op->ncarry && k < op->nargs) sliced[op->in[k]] = true;
            else other[op->in[k]] = true;
        }
    }
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *op = graph_opr(g, i);
        if (op->kind != OP_PARAM) continue;
        int32_t v = op->out[0];
        r->streamed[v] = sliced[v] && !other[v] && graph_param_windows_cheaply(g, i);
    }
    free(other);
    free(sliced);
}

int ref_run(const graph *g, const ref_options *o, float *const *inputs, float **outputs, diag *d) {
    for (int32_t v = 0; v < g->values.n; v++) {
        const graph_type *t = &graph_val(g, v)->type;
        bool long_axis = false; /* BLAS takes int extents */
        for (int a = 0; a < t->rank; a++) long_axis |= t->dim[a] > INT32_MAX;
        if (graph_type_numel(t) > MAX_ELEMS || long_axis)
            return graph_fail_op(g, graph_val(g, v)->def, d,
                                 "'%%%s' has more than 2^32 elements or an axis over 2^31; too large to interpret",
                                 graph_val(g, v)->name);
    }
    size_t nv = (size_t)(g->values.n ? g->values.n : 1);
    rt r = {.g = g, .o = o, .d = d, .buf = xcalloc(nv, sizeof(float *)), .owned = xcalloc(nv, sizeof(bool)),
            .streamed = xcalloc(nv, sizeof(bool)), .last_user = xmalloc(nv * sizeof(int32_t)), .outputs = outputs};
    for (size_t v = 0; v < nv; v++) r.last_user[v] = -1;
    arena_init(&r.a);
    plan_block(&r, &g->body, -1);
    stream_params(&r);
    progress_begin(&r.prog, o->what ? o->what : "reference", count_work(g, &g->body), o->quiet);
    int blas_threads = openblas_get_num_threads(); /* process-wide: only the reference calls BLAS */
    if (o->blas_one_thread) openblas_set_num_threads(1);
    int input_k = 0;
    int rc = exec_block(&r, &g->body, inputs, &input_k);
    if (o->blas_one_thread) openblas_set_num_threads(blas_threads);
    progress_end(&r.prog);
    for (int32_t v = 0; v < g->values.n; v++)
        if (r.buf[v]) release(&r, v);
    if (rc) {
        for (int32_t j = 0; j < r.nout_done; j++) {
            free(outputs[j]);
            outputs[j] = NULL;
        }
    }
    for (int32_t i = 0; i < r.spares.n; i++) free(r.spares.v[i].p);
    arena_free(&r.a);
    free(r.buf);
    free(r.owned);
    free(r.streamed);
    free(r.last_user);
    return rc;
}

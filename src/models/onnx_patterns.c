/* onnx_patterns.c: decomposed GeLU and layer norms, found before import so
 * each becomes one graph op (gelu_erf, gelu, layer_norm). The node ending a
 * pattern is marked with what it raises to, its interior nodes as absorbed;
 * onnx_ops.c imports the marks (ox_import_raised). Interior values must have
 * no consumers outside the pattern. */
#include "onnx_impl.h"

#include <math.h>

/* Whether n has the inputs the pattern matchers read: binary arithmetic two,
 * the rest at least one. A node with fewer matches nothing and is refused,
 * with its name, when it is converted. */
static bool arity_ok(const Onnx__NodeProto *n) {
    static const char *const binary[] = {"Mul", "Add", "Sub", "Div", "Pow"};
    for (size_t i = 0; i < TS_COUNT(binary); i++)
        if (n->op_type && strcmp(n->op_type, binary[i]) == 0) return n->n_input == 2;
    return n->n_input >= 1;
}

static const Onnx__NodeProto *producer(imp *im, const char *name, int32_t *idx) {
    int32_t k;
    if (!name || !strmap_get(&im->producer, name, &k) || !arity_ok(im->gp->node[k])) return NULL;
    if (idx) *idx = k;
    return im->gp->node[k];
}

static int32_t use_count(imp *im, const char *name) {
    int32_t k;
    return strmap_get(&im->uses, name, &k) ? k : 0;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-5 * fabs(b); }

/* Nodes a pattern absorbs, gathered while matching. */
typedef struct pat {
    int32_t nodes[32];
    int n;
} pat;

static void pat_add(pat *p, int32_t k) {
    if (p->n < 32) p->nodes[p->n++] = k;
}

/* Interior value: produced by an op of that type, consumed only inside. */
static const Onnx__NodeProto *interior(imp *im, const char *name, const char *op, int32_t uses, pat *p) {
    int32_t k = -1;
    const Onnx__NodeProto *n = producer(im, name, &k);
    if (!n || !is_op(n, op) || n->n_output != 1 || use_count(im, name) != uses) return NULL;
    pat_add(p, k);
    return n;
}

/* Flattens a tree of single-use Mul nodes rooted at name into its factors
 * (Pow(x, 3) counts as x three times). */
static int mul_factors(imp *im, const char *name, bool root, const char **f, int cap, int n, pat *p) {
    int32_t k = -1;
    if (n >= cap || p->n >= 24) return -1; /* patterns are small: no deep trees */
    const Onnx__NodeProto *nd = producer(im, name, &k);
    bool single = root || use_count(im, name) == 1;
    double e;
    if (nd && single && is_op(nd, "Mul") && nd->n_input == 2) {
        pat_add(p, k);
        n = mul_factors(im, nd->input[0], false, f, cap, n, p);
        return n < 0 ? n : mul_factors(im, nd->input[1], false, f, cap, n, p);
    }
    if (nd && single && !root && is_op(nd, "Pow") && ox_scalar_const(im, in_name(nd, 1), &e) && e == 3.0) {
        pat_add(p, k);
        for (int i = 0; i < 3; i++) {
            if (n >= cap) return -1;
            f[n++] = nd->input[0];
        }
        return n;
    }
    if (n >= cap) return -1;
    f[n++] = name;
    return n;
}

/* Splits factors into one scalar constant product and the rest. */
static int split_consts(imp *im, const char **f, int n, double *prod, const char **rest) {
    int r = 0;
    *prod = 1;
    for (int i = 0; i < n; i++) {
        double v;
        if (ox_scalar_const(im, f[i], &v)) *prod *= v;
        else rest[r++] = f[i];
    }
    return r;
}

/* The common '/'-scope of the pattern's node names: "/blocks.0/act". */
static const char *pat_scope(imp *im, const pat *p) {
    const char *first = im->gp->node[p->nodes[0]]->name ? im->gp->node[p->nodes[0]]->name : "";
    size_t len = strlen(first);
    for (int i = 1; i < p->n; i++) {
        const char *s = im->gp->node[p->nodes[i]]->name ? im->gp->node[p->nodes[i]]->name : "";
        size_t k = 0;
        while (k < len && s[k] == first[k]) k++;
        len = k;
    }
    while (len > 0 && first[len - 1] != '/') len--;
    if (len > 0) len--;
    return arena_strndup(&im->a, first, len);
}

/* gelu: 0.5 * x * (1 + Erf(x / sqrt 2))  or  0.5 * x * (1 + Tanh(c (x + 0.044715 x^3))). */
static bool match_gelu(imp *im, int32_t root) {
    const Onnx__NodeProto *r = im->gp->node[root];
    if (!is_op(r, "Mul") || r->n_output != 1) return false;
    pat p = {0};
    const char *f[8], *rest[8];
    int n = mul_factors(im, r->output[0], true, f, 8, 0, &p);
    double half;
    if (n < 0 || split_consts(im, f, n, &half, rest) != 2 || !near(half, 0.5)) return false;
    for (int order = 0; order < 2; order++) {
        const char *x = rest[order], *one_plus = rest[1 - order];
        pat q = p;
        const Onnx__NodeProto *add = interior(im, one_plus, "Add", 1, &q);
        if (!add || add->n_input != 2) continue;
        double one;
        int ti = ox_scalar_const(im, add->input[0], &one) ? 1 : 0;
        if (!ox_scalar_const(im, add->input[1 - ti], &one) || one != 1.0) continue;
        const char *tv = add->input[ti];
        const Onnx__NodeProto *t = interior(im, tv, "Erf", 1, &q);
        raise_kind kind = RZ_GELU_ERF;
        if (t) {
            /* Erf(x / sqrt 2) or Erf(x * (1 / sqrt 2)) */
            const Onnx__NodeProto *dv = interior(im, t->input[0], "Div", 1, &q);
            double c;
            if (dv) {
                if (strcmp(dv->input[0], x) || !ox_scalar_const(im, in_name(dv, 1), &c) || !near(c, sqrt(2.0))) continue;
            } else {
                const char *g[4], *gr[4];
                int gn = mul_factors(im, t->input[0], false, g, 4, 0, &q);
                if (use_count(im, t->input[0]) != 1 || gn < 0 || split_consts(im, g, gn, &c, gr) != 1 || strcmp(gr[0], x) ||
                    !near(c, sqrt(0.5)))
                    continue;
            }
        } else {
            t = interior(im, tv, "Tanh", 1, &q);
            if (!t) continue;
            kind = RZ_GELU_TANH;
            /* Tanh(c * (x + k * x^3)) */
            const char *g[4], *gr[4];
            double c, k;
            if (use_count(im, t->input[0]) != 1) continue;
            int gn = mul_factors(im, t->input[0], false, g, 4, 0, &q);
            if (gn < 0 || split_consts(im, g, gn, &c, gr) != 1 || !near(c, 0.7978845608028654)) continue;
            const Onnx__NodeProto *in = interior(im, gr[0], "Add", 1, &q);
            if (!in || in->n_input != 2) continue;
            int xi = strcmp(in->input[0], x) == 0 ? 0 : 1;
            if (strcmp(in->input[xi], x) || use_count(im, in->input[1 - xi]) != 1) continue;
            const char *h[6], *hr[6];
            int hn = mul_factors(im, in->input[1 - xi], false, h, 6, 0, &q);
            if (hn < 0 || split_consts(im, h, hn, &k, hr) != 3 || !near(k, 0.044715)) continue;
            if (strcmp(hr[0], x) || strcmp(hr[1], x) || strcmp(hr[2], x)) continue;
        }
        for (int i = 0; i < q.n; i++) im->rz[q.nodes[i]].kind = RZ_ABSORBED;
        im->rz[root] = (raised){.kind = kind, .x = x, .scope = pat_scope(im, &q)};
        return true;
    }
    return false;
}

/* layer norm: s = x - mean(x); s / sqrt(mean(s^2) + eps) [* gamma] [+ beta]. */
static bool match_layer_norm(imp *im, int32_t root) {
    const Onnx__NodeProto *dv = im->gp->node[root];
    if (!is_op(dv, "Div") || dv->n_input != 2 || dv->n_output != 1) return false;
    pat p = {0};
    pat_add(&p, root);
    const char *s = dv->input[0];
    const Onnx__NodeProto *sub = interior(im, s, "Sub", 2, &p);
    if (!sub) return false;
    const char *x = sub->input[0];
    int32_t mk = -1;
    const Onnx__NodeProto *mean = producer(im, sub->input[1], &mk);
    if (!mean || !is_op(mean, "ReduceMean") || strcmp(mean->input[0], x) || use_count(im, sub->input[1]) != 1 ||
        attr_int(mean, "keepdims", 1) != 1)
        return false;
    pat_add(&p, mk);
    const Onnx__NodeProto *sq = interior(im, dv->input[1], "Sqrt", 1, &p);
    if (!sq) return false;
    const Onnx__NodeProto *ad = interior(im, sq->input[0], "Add", 1, &p);
    if (!ad || ad->n_input != 2) return false;
    double eps;
    int vi = ox_scalar_const(im, ad->input[1], &eps) ? 0 : 1;
    if (!ox_scalar_const(im, ad->input[1 - vi], &eps)) return false;
    const Onnx__NodeProto *var = interior(im, ad->input[vi], "ReduceMean", 1, &p);
    if (!var || attr_int(var, "keepdims", 1) != 1) return false;
    int na, nb;
    const int64_t *aa = attr_ints(mean, "axes", &na), *ab = attr_ints(var, "axes", &nb);
    if (na != 1 || nb != 1 || aa[0] != ab[0]) return false;
    double two;
    const Onnx__NodeProto *pw = interior(im, var->input[0], "Pow", 1, &p);
    if (pw) {
        if (strcmp(pw->input[0], s) || !ox_scalar_const(im, in_name(pw, 1), &two) || two != 2.0) return false;
    } else {
        pw = interior(im, var->input[0], "Mul", 1, &p);
        if (!pw || strcmp(pw->input[0], s) || strcmp(pw->input[1], s)) return false;
    }
    raised rz = {.kind = RZ_LAYER_NORM, .x = x, .eps = eps, .mean_node = mean->name};
    /* Optional affine: Mul by a constant vector, then Add of one. */
    int32_t last = root;
    const char *y = dv->output[0];
    for (int step = 0; step < 2 && use_count(im, y) == 1; step++) {
        int32_t ck = -1;
        const Onnx__NodeProto *c = NULL;
        for (size_t i = 0; i < im->gp->n_node && !c; i++) {
            const Onnx__NodeProto *n = im->gp->node[i];
            for (size_t j = 0; j < n->n_input; j++)
                if (n->input[j] && strcmp(n->input[j], y) == 0) {
                    c = n;
                    ck = (int32_t)i;
                }
        }
        if (!c || c->n_input != 2 || !is_op(c, step == 0 ? "Mul" : "Add")) break;
        const char *other = strcmp(c->input[0], y) == 0 ? c->input[1] : c->input[0];
        oval *o = ox_val_get(im, other);
        if (!o || !o->is_const || o->c.rank != 1) break;
        if (step == 0) rz.gamma = other;
        else rz.beta = other;
        pat_add(&p, ck);
        last = ck;
        y = c->output[0];
    }
    for (int i = 0; i < p.n; i++) im->rz[p.nodes[i]].kind = RZ_ABSORBED;
    rz.scope = pat_scope(im, &p);
    im->rz[last] = rz;
    return true;
}

void ox_find_patterns(imp *im) {
    for (int32_t i = 0; i < (int32_t)im->gp->n_node; i++) {
        if (im->rz[i].kind != RZ_NONE) continue;
        if (match_layer_norm(im, i)) continue;
    }
    /* GeLU roots are the last Mul: scan backwards so inner Muls are not roots. */
    for (int32_t i = (int32_t)im->gp->n_node - 1; i >= 0; i--)
        if (im->rz[i].kind == RZ_NONE) match_gelu(im, i);
}

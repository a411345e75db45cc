/* onnx_conv.c: convolutions and pools, imported as the graph ops they are
 * made of. A window op (Conv, MaxPool, AveragePool) reads, for each kernel
 * tap, the input shifted by the tap's offset and sampled at the stride: a
 * "tap" value [N, C, out...] cut from the padded input. A convolution lays
 * its taps side by side along the channels (im2col) and multiplies by its
 * weight as one GEMM (a batched one over the groups: each group's taps
 * side by side along its own channels); a depthwise one multiplies each tap by its
 * per-channel weight and sums; a pool takes the max or the mean of the taps.
 * A patch embedding (stride equal to a kernel of more than one tap, no
 * padding) keeps its own shorter form: its taps do not overlap, so it is a
 * reshape of the image.
 * BatchNormalization with constant statistics is a per-channel scale and
 * shift. Everything is 1-D or 2-D over an N, C, spatial... layout. */
#include "onnx_impl.h"

#include <float.h>
#include <math.h>

enum { WIN_AXES = 2 };
/* Kernels, strides, dilations, pads and sizes beyond this are refused, so
 * the window arithmetic below cannot overflow (a pad op's own limit). */
#define WIN_MAX ((int64_t)1 << 40)

/* Where a window op's taps lie on the spatial axes (1-D ops are 2-D ones
 * with a first spatial axis of 1). */
typedef struct window {
    int64_t k[WIN_AXES], s[WIN_AXES], d[WIN_AXES];   /* kernel, stride, dilation */
    int64_t lo[WIN_AXES], hi[WIN_AXES];              /* padding before and after */
    int64_t in[WIN_AXES], out[WIN_AXES];             /* spatial sizes */
} window;

/* Reads the window of n over spatial sizes in[] (kernel from the
 * attribute, or ks when given: a Conv's weight); ceil_mode for pools. */
static int read_window(imp *im, const Onnx__NodeProto *n, int nsp, const int64_t *in, const int64_t *ks, window *w) {
    int nk, ns, np, nd;
    const int64_t *k = attr_ints(n, "kernel_shape", &nk), *s = attr_ints(n, "strides", &ns), *p = attr_ints(n, "pads", &np),
                  *dl = attr_ints(n, "dilations", &nd);
    if (!ks && nk != nsp) return ox_fail(im, "kernel_shape must have %d entries", nsp);
    if (ks && nk >= 0 && (nk != nsp || memcmp(k, ks, sizeof(int64_t) * (size_t)nsp)))
        return ox_fail(im, "kernel_shape disagrees with the weight's shape");
    if ((ns >= 0 && ns != nsp) || (nd >= 0 && nd != nsp) || (np >= 0 && np != 2 * nsp))
        return ox_fail(im, "strides, dilations and pads must have one entry per spatial axis (pads two)");
    const Onnx__AttributeProto *ap = attr(n, "auto_pad");
    char pad_mode[16] = "NOTSET";
    if (ap && ap->s.len >= sizeof pad_mode)
        return ox_fail(im, "auto_pad '%.*s' is not one ONNX defines", (int)(ap->s.len > 64 ? 64 : ap->s.len), (const char *)ap->s.data);
    if (ap && ap->s.len) {
        memcpy(pad_mode, ap->s.data, ap->s.len);
        pad_mode[ap->s.len] = 0;
    }
    bool same = !strcmp(pad_mode, "SAME_UPPER") || !strcmp(pad_mode, "SAME_LOWER");
    if (!same && strcmp(pad_mode, "NOTSET") && strcmp(pad_mode, "VALID"))
        return ox_fail(im, "auto_pad '%s' is not one ONNX defines", pad_mode);
    bool ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
    memset(w, 0, sizeof *w);
    for (int i = 0, a = WIN_AXES - nsp; i < nsp; i++, a++) {
        w->k[a] = ks ? ks[i] : k[i];
        w->s[a] = ns >= 0 ? s[i] : 1;
        w->d[a] = nd >= 0 ? dl[i] : 1;
        w->in[a] = in[i];
        if (w->k[a] < 1 || w->s[a] < 1 || w->d[a] < 1) return ox_fail(im, "kernel, strides and dilations must be positive");
        if (w->k[a] > WIN_MAX || w->s[a] > WIN_MAX || w->d[a] > WIN_MAX || in[i] > WIN_MAX)
            return ox_fail(im, "kernel, strides, dilations and sizes above 2^40 are not supported");
        if (w->k[a] > 1 && w->d[a] > WIN_MAX / (w->k[a] - 1))
            return ox_fail(im, "a window of %lld taps dilated by %lld is too wide", (long long)w->k[a], (long long)w->d[a]);
        int64_t span = w->d[a] * (w->k[a] - 1) + 1;
        if (same) { /* out = ceil(in / s), the padding split with the odd one at the end (UPPER) or start */
            int64_t o = (in[i] + w->s[a] - 1) / w->s[a], total = (o - 1) * w->s[a] + span - in[i];
            total = total < 0 ? 0 : total;
            w->lo[a] = !strcmp(pad_mode, "SAME_UPPER") ? total / 2 : total - total / 2;
            w->hi[a] = total - w->lo[a];
        } else if (np >= 0 && strcmp(pad_mode, "VALID")) {
            w->lo[a] = p[i], w->hi[a] = p[nsp + i];
        }
        if (w->lo[a] < 0 || w->hi[a] < 0) return ox_fail(im, "negative pads are not supported");
        if (w->lo[a] > WIN_MAX || w->hi[a] > WIN_MAX) return ox_fail(im, "pads above 2^40 are not supported");
        int64_t room = w->in[a] + w->lo[a] + w->hi[a] - span;
        if (room < 0) return ox_fail(im, "the window (%lld wide) is larger than the padded input (%lld)", (long long)span,
                                     (long long)(w->in[a] + w->lo[a] + w->hi[a]));
        w->out[a] = (ceil_mode ? (room + w->s[a] - 1) / w->s[a] : room / w->s[a]) + 1;
        /* The last window starts inside the input or its leading padding. */
        if (ceil_mode && (w->out[a] - 1) * w->s[a] >= w->in[a] + w->lo[a]) w->out[a]--;
        if (w->out[a] == 1) w->s[a] = 1; /* one window: no stride to sort by */
    }
    for (int a = 0; a < WIN_AXES - nsp; a++) w->k[a] = w->s[a] = w->d[a] = w->in[a] = w->out[a] = 1;
    return 0;
}

static int64_t window_taps(const window *w) { return w->k[0] * w->k[1]; }

/* x [N, C, in0, in1] padded with value, as taps: tap t = (i, j) is
 * [N, C, out0, out1] with element (o0, o1) the padded input at
 * (o0 * s0 + i * d0, o1 * s1 + j * d1). With a stride, the padded input
 * (padded further to whole strides) is first sorted by phase, once:
 * [N, C, s0, s1, P0 / s0, P1 / s1], element (p0, p1, q0, q1) the input at
 * (q0 * s0 + p0, q1 * s1 + p1). Each tap is then one slice of that, whole
 * runs of a row, and a reshape; a slice of the strided input itself would
 * gather single elements, one exchange fragment each. */
static int make_taps(imp *im, int32_t x, const window *w, double value, int32_t *taps) {
    const graph_type *t = ox_gtype(im, x);
    int64_t N = t->dim[0], C = t->dim[1], lo[4] = {0, 0, w->lo[0], w->lo[1]}, hi[4] = {0, 0, w->hi[0], w->hi[1]};
    bool strided = w->s[0] > 1 || w->s[1] > 1;
    int64_t P[WIN_AXES];
    for (int a = 0; a < WIN_AXES; a++) {
        P[a] = w->in[a] + w->lo[a] + w->hi[a];
        /* What the taps read (ceil_mode can read past the padding), then whole strides. */
        int64_t need = w->d[a] * (w->k[a] - 1) + w->s[a] * (w->out[a] - 1) + 1;
        if (need < P[a]) need = P[a];
        if (strided) need = (need + w->s[a] - 1) / w->s[a] * w->s[a];
        hi[2 + a] += need - P[a];
        P[a] = need;
    }
    bool padded = false;
    for (int a = 2; a < 4; a++) padded |= lo[a] || hi[a];
    if (padded) x = ox_emit_pad(im, x, lo, hi, value, ox_node_name(im, "padded"));
    if (strided && x >= 0) { /* [N, C, P0 / s0, s0, P1 / s1, s1] -> [N, C, s0, s1, P0 / s0, P1 / s1] */
        int64_t g[6] = {N, C, P[0] / w->s[0], w->s[0], P[1] / w->s[1], w->s[1]}, perm[6] = {0, 1, 3, 5, 2, 4};
        x = ox_emit_reshape(im, x, 6, g, ox_node_name(im, "strides"));
        if (x >= 0) x = ox_emit_transpose(im, x, perm, 6, ox_node_name(im, "phases"));
    }
    for (int64_t i = 0, k = 0; i < w->k[0]; i++)
        for (int64_t j = 0; j < w->k[1]; j++, k++) {
            int64_t a = i * w->d[0], b = j * w->d[1];
            char nm[32];
            snprintf(nm, sizeof nm, "tap%lld", (long long)k);
            if (!strided) {
                int64_t st[4] = {0, 0, a, b}, en[4] = {N, C, a + w->out[0], b + w->out[1]};
                bool whole = a == 0 && b == 0 && w->out[0] == P[0] && w->out[1] == P[1];
                taps[k] = whole || x < 0 ? x : ox_emit_slice(im, x, st, en, ox_node_name(im, nm));
            } else {
                int64_t st[6] = {0, 0, a % w->s[0], b % w->s[1], a / w->s[0], b / w->s[1]};
                int64_t en[6] = {N, C, st[2] + 1, st[3] + 1, st[4] + w->out[0], st[5] + w->out[1]};
                int64_t od[4] = {N, C, w->out[0], w->out[1]};
                int32_t v = x < 0 ? -1 : ox_emit_slice(im, x, st, en, ox_node_name(im, nm));
                snprintf(nm, sizeof nm, "tap%lld_r", (long long)k);
                taps[k] = v < 0 ? -1 : ox_emit_reshape(im, v, 4, od, ox_node_name(im, nm));
            }
            if (taps[k] < 0) return -1;
        }
    return 0;
}

/* The input as [N, C, in0, in1] (a 1-D op's gains an axis of 1), its
 * spatial sizes in sp[] and their count in *nsp. */
static int32_t spatial_input(imp *im, const Onnx__NodeProto *n, int *nsp, int64_t *sp) {
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    const graph_type *t = ox_gtype(im, x);
    if (t->rank != 3 && t->rank != 4)
        return ox_fail(im, "only 1-D and 2-D windows ([N, C, W] or [N, C, H, W] inputs) are supported, not rank %d", t->rank), -1;
    *nsp = t->rank - 2;
    for (int i = 0; i < *nsp; i++) sp[i] = t->dim[2 + i];
    if (t->rank == 3) {
        int64_t d4[4] = {t->dim[0], t->dim[1], 1, t->dim[2]};
        x = ox_emit_reshape(im, x, 4, d4, ox_node_name(im, "2d"));
    }
    return x;
}

/* y [N, C, out0, out1] back to the node's rank (1-D: [N, C, out1]), named after the node. */
static int32_t spatial_output(imp *im, int32_t y, int nsp, const window *w) {
    if (y < 0) return -1;
    const graph_type *t = ox_gtype(im, y);
    int64_t d[4] = {t->dim[0], t->dim[1], w->out[0], w->out[1]};
    if (nsp == 1) d[2] = w->out[1];
    return ox_emit_reshape(im, y, nsp + 2, d, ox_node_name(im, NULL));
}

/* A constant of `rank` axes made at import, its values for the caller to
 * fill: its name (ox_gval makes it a graph value once filled), or NULL. */
static const char *new_const(imp *im, const char *suffix, int rank, const int64_t *dim, double **values) {
    ct c = ct_new(im, false, rank, dim);
    if (im->err) return NULL;
    const char *nm = ox_node_name(im, suffix);
    *values = c.v;
    ox_set_const(im, nm, c);
    return nm;
}

/* ---- Conv ------------------------------------------------------------------------------ */

/* A patch embedding: stride equal to the kernel, no padding, one group, 2-D. */
static int32_t patch_embedding(imp *im, const Onnx__NodeProto *n, int32_t x, oval *w) {
    const graph_type *t = ox_gtype(im, x);
    int64_t O = w->c.dim[0], C = w->c.dim[1], P = w->c.dim[2], Q = w->c.dim[3];
    int64_t B = t->dim[0], H = t->dim[2] / P, W = t->dim[3] / Q;
    if (H * P != t->dim[2] || W * Q != t->dim[3]) { /* Conv drops the remainder */
        int64_t st[4] = {0, 0, 0, 0}, en[4] = {B, C, H * P, W * Q};
        x = ox_emit_slice(im, x, st, en, ox_node_name(im, "crop"));
    }
    /* [B, C, H, P, W, Q] -> [B, H, W, C, P, Q] in two rank-4 transposes. */
    int64_t d1[4] = {B * C * H, P, W, Q}, p1[4] = {0, 2, 1, 3};
    x = ox_emit_reshape(im, x, 4, d1, ox_node_name(im, "rows"));
    x = ox_emit_transpose(im, x, p1, 4, ox_node_name(im, "rows_t"));
    int64_t d2[4] = {B, C, H * W, P * Q};
    x = ox_emit_reshape(im, x, 4, d2, ox_node_name(im, "patches_c"));
    x = ox_emit_transpose(im, x, p1, 4, ox_node_name(im, "patches_t"));
    int64_t d3[3] = {B, H * W, C * P * Q};
    x = ox_emit_reshape(im, x, 3, d3, ox_node_name(im, "patches"));
    /* Weight [O, C*P*Q] transposed into [C*P*Q, O]. */
    int64_t wd[2] = {O, C * P * Q}, perm[2] = {1, 0};
    ct flat = ct_reshaped(w->c, 2, wd), wt;
    if (ct_transpose(im, &flat, perm, &wt)) return -1;
    char nm[600];
    snprintf(nm, sizeof nm, "%s.flat.T", w->name);
    ox_set_const(im, nm, wt);
    int32_t y = ox_emit_matmul(im, x, ox_gval(im, nm), false, ox_node_name(im, "embed"));
    if (in_name(n, 2)) y = ox_emit2(im, OP_ADD, y, ox_gval(im, in_name(n, 2)), ox_node_name(im, "bias"));
    int64_t pt[3] = {0, 2, 1}, od[4] = {B, O, H, W};
    y = ox_emit_transpose(im, y, pt, 3, ox_node_name(im, "channels"));
    return ox_emit_reshape(im, y, 4, od, ox_node_name(im, NULL));
}

/* Depthwise (one input and one output channel per group): each tap times
 * its per-channel weight [C, 1, 1], summed in tap order. */
static int32_t depthwise(imp *im, const int32_t *taps, int64_t ntaps, const oval *w, int64_t C) {
    int32_t acc = -1;
    for (int64_t k = 0; k < ntaps; k++) {
        int64_t dim[3] = {C, 1, 1};
        double *v;
        char nm[32];
        snprintf(nm, sizeof nm, "w%lld", (long long)k);
        const char *wn = new_const(im, nm, 3, dim, &v);
        if (!wn) return -1;
        for (int64_t c = 0; c < C; c++) v[c] = ct_at(&w->c, c * ntaps + k);
        int32_t wk = ox_gval(im, wn);
        snprintf(nm, sizeof nm, "prod%lld", (long long)k);
        int32_t p = ox_emit2(im, OP_MUL, taps[k], wk, ox_node_name(im, nm));
        snprintf(nm, sizeof nm, "sum%lld", (long long)k);
        acc = k == 0 ? p : ox_emit2(im, OP_ADD, acc, p, ox_node_name(im, nm));
        if (acc < 0) return -1;
    }
    return acc;
}

/* A convolution of one group as one GEMM: its taps side by side
 * [N, taps * C, L] (tap-major), times the weight [O, taps * C] (reordered to
 * match), giving [N, O, L] ([O, L] for one image). */
static int32_t group_gemm(imp *im, const int32_t *taps, int64_t ntaps, const oval *w, int64_t C, int64_t O, int64_t N, int64_t L) {
    int32_t x = ox_emit_concat(im, taps, (int)ntaps, 1, ntaps > 1 ? ox_node_name(im, "cols") : NULL);
    int64_t K = ntaps * C, xd[3] = {N, K, L};
    x = N == 1 ? ox_emit_reshape(im, x, 2, xd + 1, ox_node_name(im, "im2col")) : ox_emit_reshape(im, x, 3, xd, ox_node_name(im, "im2col"));
    /* Weight [O, C, kh, kw]: columns in (tap, channel) order. */
    int64_t wd[2] = {O, K};
    double *v;
    const char *wn = new_const(im, "weight", 2, wd, &v);
    if (!wn) return -1;
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < ntaps; k++)
            for (int64_t c = 0; c < C; c++) v[o * K + k * C + c] = ct_at(&w->c, (o * C + c) * ntaps + k);
    int32_t wv = ox_gval(im, wn);
    return wv < 0 || x < 0 ? -1 : ox_emit_matmul(im, wv, x, false, ox_node_name(im, "conv"));
}

/* Every group of a grouped convolution at once, as one GEMM batched over the
 * groups: each tap's channels as [groups, Cg] ([N, G, Cg, L]), the taps side
 * by side along Cg ([N, G, taps * Cg, L], tap-major as group_gemm's), times
 * the weight [G, Og, taps * Cg], giving [N, G, Og, L] ([G, Og, L] for one
 * image), which is [N, O, L] in order. One matmul however many groups (a
 * RegNet's 55 groups of 8 channels made 55 GEMMs and their phases each). */
static int32_t grouped_gemm(imp *im, const int32_t *taps, int64_t ntaps, const oval *w, int64_t G, int64_t Cg, int64_t Og,
                            int64_t N, int64_t L) {
    int32_t *cols = arena_alloc(&im->a, sizeof(int32_t) * (size_t)ntaps);
    int64_t td[4] = {N, G, Cg, L}, K = ntaps * Cg;
    for (int64_t k = 0; k < ntaps; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "tap%lld_groups", (long long)k);
        if ((cols[k] = ox_emit_reshape(im, taps[k], 4, td, ox_node_name(im, nm))) < 0) return -1;
    }
    int32_t x = ox_emit_concat(im, cols, (int)ntaps, 2, ntaps > 1 ? ox_node_name(im, "cols") : NULL);
    int64_t xd[3] = {G, K, L};
    if (x >= 0 && N == 1) x = ox_emit_reshape(im, x, 3, xd, ox_node_name(im, "im2col"));
    int64_t wd[3] = {G, Og, K};
    double *v;
    const char *wn = new_const(im, "weight", 3, wd, &v);
    if (!wn) return -1;
    for (int64_t g = 0; g < G; g++)
        for (int64_t o = 0; o < Og; o++)
            for (int64_t k = 0; k < ntaps; k++)
                for (int64_t c = 0; c < Cg; c++)
                    v[(g * Og + o) * K + k * Cg + c] = ct_at(&w->c, ((g * Og + o) * Cg + c) * ntaps + k);
    int32_t wv = ox_gval(im, wn);
    return wv < 0 || x < 0 ? -1 : ox_emit_matmul(im, wv, x, false, ox_node_name(im, "conv"));
}

int32_t ox_import_conv(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    oval *w = ox_cval(im, in_name(n, 1));
    int nsp;
    int64_t sp[WIN_AXES];
    int32_t x0 = ox_gval(im, in_name(n, 0));
    if (x0 < 0) return -1;
    const graph_type *t0 = ox_gtype(im, x0);
    if (!w) return ox_fail(im, "only convolutions with constant weights are supported"), -1;
    if (w->c.rank != t0->rank) return ox_fail(im, "the weight's rank %d is not the input's %d", w->c.rank, t0->rank), -1;
    int64_t groups = attr_int(n, "group", 1), O = w->c.dim[0], Cg = w->c.dim[1], C = t0->dim[1];
    if (groups < 1 || C % groups || O % groups || Cg * groups != C)
        return ox_fail(im, "%lld groups do not divide %lld input channels into the weight's %lld, or %lld outputs", (long long)groups,
                       (long long)C, (long long)Cg, (long long)O), -1;
    int64_t ks[WIN_AXES];
    for (int i = 0; i + 2 < w->c.rank && i < WIN_AXES; i++) ks[i] = w->c.dim[2 + i];
    int32_t x = spatial_input(im, n, &nsp, sp);
    window win;
    if (x < 0 || read_window(im, n, nsp, sp, ks, &win)) return -1;
    /* (A 1x1 kernel is no patch: as one tap it needs neither transposes nor slices.) */
    bool patches = nsp == 2 && groups == 1 && window_taps(&win) > 1 && win.s[0] == win.k[0] && win.s[1] == win.k[1] && win.d[0] == 1 &&
                   win.d[1] == 1 && !win.lo[0] && !win.lo[1] && !win.hi[0] && !win.hi[1];
    if (patches) return patch_embedding(im, n, x, w);
    int64_t ntaps = window_taps(&win), N = t0->dim[0], L = win.out[0] * win.out[1];
    if (ntaps > 1024) return ox_fail(im, "a kernel of %lld taps is above the 1024 supported", (long long)ntaps), -1;
    int32_t *taps = arena_alloc(&im->a, sizeof(int32_t) * (size_t)ntaps);
    if (make_taps(im, x, &win, 0, taps)) return -1;
    int32_t y;
    if (groups == C && O == C && groups > 1) {
        y = depthwise(im, taps, ntaps, w, C); /* [N, C, out0, out1] */
    } else {
        y = groups > 1 ? grouped_gemm(im, taps, ntaps, w, groups, Cg, O / groups, N, L) : group_gemm(im, taps, ntaps, w, Cg, O, N, L);
        int64_t d4[4] = {N, O, win.out[0], win.out[1]};
        y = ox_emit_reshape(im, y, 4, d4, ox_node_name(im, "image"));
    }
    if (in_name(n, 2) && y >= 0) { /* the bias [O], per channel */
        int32_t b = ox_gval(im, in_name(n, 2));
        const graph_type *bt = b >= 0 ? ox_gtype(im, b) : NULL;
        if (bt && (bt->rank != 1 || bt->dim[0] != O))
            return ox_fail(im, "the bias must be a vector of the %lld output channels", (long long)O), -1;
        int64_t bd[3] = {O, 1, 1};
        if (b >= 0) b = ox_emit_reshape(im, b, 3, bd, ox_node_name(im, "bias_c"));
        y = b < 0 ? -1 : ox_emit2(im, OP_ADD, y, b, ox_node_name(im, "bias"));
    }
    return spatial_output(im, y, nsp, &win);
}

/* ---- pools ----------------------------------------------------------------------------- */

/* What a max pool pads with: the graph holds finite values only, and a pad
 * value is limited to its tensor's finite range (the lowest f16, bf16 or
 * f32), so no real element is below it. */
#define POOL_PAD_MAX (-FLT_MAX)

int32_t ox_import_pool(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    bool max = op == OX_MaxPool;
    if (max && n->n_output > 1 && n->output[1] && n->output[1][0])
        return ox_fail(im, "MaxPool's indices (its second output) are not supported"), -1;
    if (attr(n, "storage_order") && attr_int(n, "storage_order", 0)) return ox_fail(im, "storage_order 1 is not supported"), -1;
    int nsp;
    int64_t sp[WIN_AXES];
    int32_t x = spatial_input(im, n, &nsp, sp);
    window win;
    if (x < 0 || read_window(im, n, nsp, sp, NULL, &win)) return -1;
    int64_t ntaps = window_taps(&win);
    if (ntaps > 1024) return ox_fail(im, "a window of %lld taps is above the 1024 supported", (long long)ntaps), -1;
    int32_t *taps = arena_alloc(&im->a, sizeof(int32_t) * (size_t)ntaps);
    if (make_taps(im, x, &win, max ? POOL_PAD_MAX : 0, taps)) return -1;
    int32_t y = taps[0];
    for (int64_t k = 1; k < ntaps && y >= 0; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%s%lld", max ? "max" : "sum", (long long)k);
        y = ox_emit2(im, max ? OP_MAX : OP_ADD, y, taps[k], ox_node_name(im, nm));
    }
    if (!max && y >= 0) {
        /* The divisor of each output: the taps inside the input, or inside
         * the input and its padding (count_include_pad; never the extra a
         * ceil_mode window reads past the padding). */
        bool with_pad = attr_int(n, "count_include_pad", 0) != 0;
        int64_t dim[2] = {win.out[0], win.out[1]};
        double *v;
        const char *dn = new_const(im, "divisor", 2, dim, &v);
        if (!dn) return -1;
        bool uniform = true;
        for (int64_t o0 = 0; o0 < win.out[0]; o0++)
            for (int64_t o1 = 0; o1 < win.out[1]; o1++) {
                int64_t cnt = 1, o[2] = {o0, o1};
                for (int a = 0; a < WIN_AXES; a++) {
                    int64_t c = 0, lo = with_pad ? -win.lo[a] : 0, hi = win.in[a] + (with_pad ? win.hi[a] : 0);
                    for (int64_t i = 0; i < win.k[a]; i++) {
                        int64_t at = o[a] * win.s[a] + i * win.d[a] - win.lo[a];
                        c += at >= lo && at < hi;
                    }
                    cnt *= c;
                }
                v[o0 * win.out[1] + o1] = cnt ? 1.0 / (double)cnt : 0.0;
                uniform &= v[o0 * win.out[1] + o1] == v[0];
            }
        y = uniform ? ox_emit_scale(im, y, v[0], ox_node_name(im, "mean"))
                    : ox_emit2(im, OP_MUL, y, ox_gval(im, dn), ox_node_name(im, "mean"));
    }
    return spatial_output(im, y, nsp, &win);
}

/* ---- BatchNormalization ---------------------------------------------------------------- */

/* Inference form: y = x * s + t per channel (axis 1), s = scale / sqrt(var +
 * eps), t = bias - mean * s, computed at import from the constants. */
int32_t ox_import_batch_norm(imp *im, const Onnx__NodeProto *n, ox_op_id op) {
    (void)op;
    if (attr_int(n, "training_mode", 0)) return ox_fail(im, "BatchNormalization in training mode is not supported"), -1;
    int32_t x = ox_gval(im, in_name(n, 0));
    if (x < 0) return -1;
    const graph_type *t = ox_gtype(im, x);
    if (t->rank < 2) return ox_fail(im, "BatchNormalization of a rank-%d input (it needs N and C)", t->rank), -1;
    int64_t C = t->dim[1];
    const oval *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = ox_cval(im, in_name(n, 1 + (size_t)i));
        if (!p[i] || p[i]->c.n != C)
            return ox_fail(im, "BatchNormalization needs constant scale, bias, mean and variance of %lld values", (long long)C), -1;
    }
    double eps = attr_float(n, "epsilon", 1e-5);
    int64_t dim[GRAPH_MAX_RANK] = {C};
    for (int a = 2; a < t->rank; a++) dim[a - 1] = 1;
    double *s, *sh;
    const char *sn = new_const(im, "scale", t->rank - 1, dim, &s), *hn = sn ? new_const(im, "shift", t->rank - 1, dim, &sh) : NULL;
    if (!hn) return -1;
    for (int64_t c = 0; c < C; c++) {
        double var = ct_at(&p[3]->c, c) + eps;
        if (!(var > 0))
            return ox_fail(im, "BatchNormalization: channel %lld's variance plus epsilon is %g, not positive", (long long)c, var), -1;
        s[c] = ct_at(&p[0]->c, c) / sqrt(var);
        sh[c] = ct_at(&p[1]->c, c) - ct_at(&p[2]->c, c) * s[c];
    }
    int32_t y = ox_emit2(im, OP_MUL, x, ox_gval(im, sn), ox_node_name(im, "scaled"));
    return ox_emit2(im, OP_ADD, y, ox_gval(im, hn), ox_node_name(im, NULL));
}

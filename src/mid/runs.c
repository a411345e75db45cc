/* runs.c: the runs of one shard of a prim (mid.h), shared by the lowering,
 * which emits them, and the estimate, which prices them with
 * kernel_run_cycles: one definition of what a shard runs. */
#include "mid.h"

#include <string.h>

void mid_aligned_strides(const mid_program *p, int32_t t, const layout *out, int64_t *st) {
    const layout *l = &mid_t(p, t)->lay;
    int off = out->rank - l->rank;
    for (int j = 0; j < out->rank; j++) {
        int i = j - off;
        st[j] = i >= 0 && l->dim[i] == out->dim[j] ? layout_axis_stride(l, i) : 0;
    }
}

kernel_box mid_ewise_box(const mid_program *p, const mid_prim *pr, const int64_t *ext) {
    const layout *lo = &mid_t(p, pr->out[0])->lay;
    kernel_box b = {.nd = lo->rank, .nops = 1 + pr->nin};
    for (int a = 0; a < lo->rank; a++) b.n[a] = ext[a];
    /* A transposed result's storage rows are swept whole, the padding of a
     * tail shard too (no kernel reads padding as values): every operand of its
     * rank is stored as it is (expand.c's aligned), the others are broadcast. */
    if (layout_transposed(lo)) {
        int pa = layout_panel_axis(lo);
        b.n[pa] = lo->block[pa];
        for (int i = 0; i < pr->nin; i++) {
            const layout *li = &mid_t(p, pr->in[i])->lay;
            TS_ASSERT(li->rank != lo->rank || (li->enc == lo->enc && li->block[pa] == lo->block[pa]) || li->dim[pa] == 1);
        }
    }
    mid_aligned_strides(p, pr->out[0], lo, b.st[0]);
    for (int i = 0; i < pr->nin; i++) mid_aligned_strides(p, pr->in[i], lo, b.st[1 + i]);
    kernel_box_order(&b); /* a transposed result in storage order */
    kernel_box_collapse(&b);
    return b;
}

kernel_box mid_rows_box(const mid_program *p, const mid_prim *pr, const int64_t *ext) {
    bool moments = pr->kind == MID_LN_MOMENTS;
    const layout *lo = &mid_t(p, pr->out[0])->lay, *li = &mid_t(p, pr->in[0])->lay, *lr = moments ? li : lo;
    int last = lr->rank - 1;
    int64_t parts = mid_layer_norm_parts(p, pr);
    kernel_box b = {.nd = lr->rank > 1 ? lr->rank - 1 : 1, .nops = 2};
    if (lr->rank == 1) {
        b.n[0] = 1;
    } else {
        for (int a = 0; a < last; a++) b.n[a] = ext[a];
    }
    for (int a = 0; a < b.nd && lr->rank > 1; a++) {
        b.st[0][a] = layout_axis_stride(lo, a);
        b.st[1][a] = layout_axis_stride(li, a);
    }
    if (pr->kind == MID_LAYER_NORM) {
        /* gamma and beta ride along as operands 2 and 3, unstrided; the
         * parts' statistics, if any, as operand 4 (its rows contiguous). */
        b.nops = parts ? 5 : 4;
        for (int a = 0; a < b.nd; a++) b.st[2][a] = b.st[3][a] = 0;
        for (int a = 0; a < b.nd && parts && lr->rank > 1; a++) b.st[4][a] = layout_axis_stride(&mid_t(p, pr->in[3])->lay, a);
    }
    kernel_box_collapse(&b);
    return b;
}

kernel_run mid_gather_run(const mid_program *p, const mid_prim *pr, const int64_t *ext) {
    const layout *lo = &mid_t(p, pr->out[0])->lay, *lt = &mid_t(p, pr->in[0])->lay;
    kernel_run r;
    memset(&r, 0, sizeof r);
    r.kernel = KERNEL_K_GATHER;
    r.acc = DT_F32;
    for (int d = 0; d < KERNEL_MAX_BOX; d++) r.n[d] = 1;
    const int32_t ops[3] = {pr->out[0], pr->in[0], pr->in[1]};
    for (int i = 0; i < 3; i++) r.dt[i] = (uint8_t)mid_t(p, ops[i])->dtype, r.scale[i] = mid_t(p, ops[i])->scale;
    r.n[0] = (uint32_t)(layout_block_elems(lo) / lo->block[lo->rank - 1]);
    r.n[1] = (uint32_t)ext[lo->rank - 1];
    r.n[2] = (uint32_t)lt->dim[0];
    r.stride[0][0] = (int32_t)(lo->block[lo->rank - 1] * lo->elem_bytes);
    r.stride[1][0] = (int32_t)(lt->block[1] * lt->elem_bytes);
    return r;
}

/* ---- runs with their operands -------------------------------------------------------------- */

static mid_run run_of(kernel_id k) {
    mid_run m;
    memset(&m, 0, sizeof m);
    m.r.kernel = (uint8_t)k;
    m.r.acc = DT_F32;
    for (int d = 0; d < KERNEL_MAX_BOX; d++) m.r.n[d] = 1;
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++) m.t[i] = -1;
    return m;
}

static void operand(const mid_program *p, mid_run *m, int i, int32_t t, int64_t off) {
    m->t[i] = t;
    m->off[i] = off;
    m->r.dt[i] = (uint8_t)mid_t(p, t)->dtype;
    m->r.scale[i] = mid_t(p, t)->scale;
}

mid_run mid_run_over(const mid_program *p, kernel_id k, const int32_t *ops, int nops) {
    mid_run m = run_of(k);
    for (int i = 0; i < nops; i++) operand(p, &m, i, ops[i], 0);
    return m;
}

/* With B streaming (mid_prim.swap) the kernel's A is B^T (AMP_LEFT_T) and its
 * B is A^T, read through A's strides; it writes the transposed product, whose
 * rows are B's columns: kernel rows run over N, kernel columns over M. */
void mid_gemm_runs(const mid_program *p, const mid_prim *pr, const int64_t *ext, int64_t k, mid_run_fn *fn, void *ctx) {
    const layout *la = &mid_t(p, pr->in[0])->lay, *lb = &mid_t(p, pr->in[1])->lay, *lc = &mid_t(p, pr->out[0])->lay;
    bool sw = pr->swap;
    mid_gemm_kernel gk = mid_gemm_kernel_of(p, pr, ext);
    const layout *kb = &mid_t(p, gk.b)->lay, *ka = &mid_t(p, gk.a)->lay;
    kernel_box b = gk.batch;
    mid_run w = run_of(KERNEL_K_GEMM);
    w.r.acc = (uint8_t)pr->acc;
    operand(p, &w, 0, gk.a, 0);
    operand(p, &w, 1, gk.b, 0);
    operand(p, &w, 2, pr->out[0], 0);
    kernel_box_run(&b, 1, &w.r); /* the innermost batch axis is the run's; the others a run each */
    int krow = gk.row, kcol = gk.col;
    /* The kernel's B: element (k, n) k_step, n_step bytes along (0: contiguous columns). */
    int64_t k_step = sw ? layout_axis_stride(la, la->rank - 1) : layout_axis_stride(lb, lb->rank - 2);
    int64_t n_step = sw ? layout_axis_stride(la, la->rank - 2) : layout_axis_stride(lb, lb->rank - 1);
    TS_ASSERT(layout_axis_stride(lc, kcol) == lc->elem_bytes);
    uint32_t g = w.r.n[KERNEL_MAX_BOX - 1], cols = (uint32_t)ext[kcol];
    int32_t sa = w.r.stride[0][KERNEL_MAX_BOX - 1], sb = w.r.stride[1][KERNEL_MAX_BOX - 1], sc = w.r.stride[2][KERNEL_MAX_BOX - 1];
    w.r.n[0] = g;
    w.r.n[1] = (uint32_t)ext[krow];
    w.r.n[2] = cols;
    w.r.n[3] = (uint32_t)k;
    memset(w.r.stride, 0, sizeof w.r.stride);
    w.r.stride[0][0] = sa;
    w.r.stride[0][1] = (int32_t)layout_panel_stride(ka);
    w.r.stride[1][0] = sb;
    w.r.stride[1][1] = (int32_t)k_step;
    w.r.stride[1][2] = n_step == kb->elem_bytes ? 0 : (int32_t)n_step;
    w.r.stride[2][0] = sc;
    w.r.stride[2][1] = (int32_t)layout_axis_stride(lc, krow);
    uint32_t pc = LAYOUT_AMP_OUT_COLS, full = cols / pc, tail = cols % pc, strip = (uint32_t)pr->col_run;
    int64_t panel = (int64_t)pc * lc->elem_bytes;
    int outer = b.nd > 1 ? b.nd - 1 : 0;
    int64_t idx[KERNEL_BOX_AXES] = {0};
    for (;;) {
        mid_run v = w;
        for (int i = 0; i < 3; i++)
            for (int a = 0; a < outer; a++) v.off[i] += idx[a] * b.st[i][a];
        if (pr->panel_batch) {
            /* Per batch entry, one run over a batch of its whole panels,
             * sharing A (stride 0), B and C 16 columns further per entry (B's
             * columns n_step bytes apart; C stays row-major); then one run
             * for a narrower last panel. */
            for (uint32_t e = 0; e < g; e++)
                for (int part = 0; part < 2; part++) {
                    if (part == 0 ? full == 0 : tail == 0) continue;
                    mid_run q = v;
                    q.r.n[0] = part == 0 ? full : 1;
                    q.r.n[2] = part == 0 ? pc : tail;
                    q.off[0] += (int64_t)e * v.r.stride[0][0];
                    q.off[1] += (int64_t)e * v.r.stride[1][0] + (part ? (int64_t)full * pc * n_step : 0);
                    q.off[2] += (int64_t)e * v.r.stride[2][0] + (part ? (int64_t)full * panel : 0);
                    q.r.stride[0][0] = 0;
                    q.r.stride[1][0] = part == 0 ? (int32_t)(pc * n_step) : 0;
                    q.r.stride[2][0] = part == 0 ? (int32_t)panel : 0;
                    fn(ctx, &q);
                }
        } else if (!strip || strip >= cols) {
            fn(ctx, &v);
        } else {
            /* A run per strip of col_run columns (B and C: a strip starts
             * col_run columns further along each row). */
            for (uint32_t c0 = 0; c0 < cols; c0 += strip) {
                mid_run q = v;
                q.r.n[2] = cols - c0 < strip ? cols - c0 : strip;
                q.off[1] += (int64_t)c0 * n_step;
                q.off[2] += (int64_t)c0 * lc->elem_bytes;
                fn(ctx, &q);
            }
        }
        int a = outer - 1;
        for (; a >= 0; a--) {
            if (++idx[a] < b.n[a]) break;
            idx[a] = 0;
        }
        if (a < 0) return;
    }
}

/* The epilogue's operands (E0..E3: the prim's inputs after A and B, then
 * its outputs) all share the result's layout; their rows are one stride
 * apart, in elements whatever the dtype. */
void mid_gemm_epi_runs(const mid_program *p, const mid_prim *pr, const int64_t *ext, mid_run_fn *fn, void *ctx) {
    const layout *la = &mid_t(p, pr->in[0])->lay, *lb = &mid_t(p, pr->in[1])->lay, *lc = &mid_t(p, pr->out[0])->lay;
    TS_ASSERT(lc->rank == 2 && la->rank == 2 && lb->rank == 2);
    int64_t K = la->dim[1], k1 = la->block[1] < K ? la->block[1] : K;
    mid_run w = run_of(KERNEL_K_GEMM_EPI);
    w.r.acc = (uint8_t)pr->acc;
    w.r.epi = (uint8_t)pr->epi;
    operand(p, &w, 0, pr->in[0], 0);
    operand(p, &w, 1, pr->in[1], 0);
    for (int i = 2; i < pr->nin; i++) operand(p, &w, i, pr->in[i], 0);
    for (int i = 0; i < pr->nout; i++) operand(p, &w, 4 + i, pr->out[i], 0);
    w.r.grad = (uint8_t)pr->grad;
    w.r.n[0] = 1;
    w.r.n[1] = (uint32_t)ext[0];
    w.r.n[2] = (uint32_t)ext[1];
    w.r.n[3] = (uint32_t)k1;
    w.r.stride[0][1] = (int32_t)layout_panel_stride(la);
    w.r.stride[1][1] = (int32_t)layout_axis_stride(lb, 0);
    w.r.stride[2][1] = (int32_t)(layout_axis_stride(lc, 0) / lc->elem_bytes);
    memcpy(w.r.f, pr->f, sizeof w.r.f);
    /* A run per strip of col_run columns, as GEMM's: B and every epilogue
     * operand start col_run elements further along each row. */
    uint32_t cols = w.r.n[2], strip = (uint32_t)pr->col_run;
    if (!strip || strip >= cols) {
        fn(ctx, &w);
        return;
    }
    for (uint32_t c0 = 0; c0 < cols; c0 += strip) {
        mid_run q = w;
        q.r.n[2] = cols - c0 < strip ? cols - c0 : strip;
        q.off[1] += (int64_t)c0 * lb->elem_bytes;
        for (int i = 2; i < KERNEL_MAX_OPERANDS; i++)
            if (q.t[i] >= 0) q.off[i] += (int64_t)c0 * dtype_bytes((dtype)q.r.dt[i]);
        fn(ctx, &q);
    }
}

mid_run mid_flat_run(const mid_program *p, const mid_prim *pr) {
    const layout *lo = &mid_t(p, pr->out[0])->lay;
    mid_run m;
    switch (pr->kind) {
    case MID_REDUCE: {
        const layout *lq = &mid_t(p, pr->in[0])->lay;
        m = run_of(KERNEL_K_REDUCE);
        m.r.acc = (uint8_t)pr->acc;
        operand(p, &m, 0, pr->out[0], 0);
        operand(p, &m, 1, pr->in[0], 0);
        m.r.n[0] = (uint32_t)lq->dim[0];
        m.r.n[1] = (uint32_t)layout_block_elems(lo);
        m.r.stride[1][0] = (int32_t)layout_axis_stride(lq, 0);
        m.r.n[2] = 0; /* no bias */
        m.r.grad = (uint8_t)pr->grad; /* f32 (none) unless a bias or a cast was folded in (expand.c) */
        m.r.gelu = (uint8_t)pr->f[0]; /* a GeLU folded in (absorb.c's gelu rewrite, kern.h's KERNEL_REDUCE_GELU*) */
        if (lo->enc == ENC_AMP_LEFT) { /* the next GEMM's panels (absorb.c's panels rewrite) */
            m.r.stride[0][1] = (int32_t)layout_panel_stride(lo);
            m.r.stride[0][2] = (int32_t)lo->block[lo->rank - 1];
        }
        if (pr->residual) { /* a residual add done by the reduction (absorb.c's residual rewrite) */
            operand(p, &m, 4, mid_reduce_residual(pr), 0);
            m.r.residual = true;
        }
        if (mid_reduce_has_bias(pr)) { /* a bias added where the partials are summed (mid's fuse_biases) */
            operand(p, &m, 2, pr->in[1], 0);
            m.r.n[2] = (uint32_t)lo->block[lo->rank - 1];
            /* A transposed result holds each bias value's column as one run of rows. */
            if (layout_transposed(lo)) m.r.n[3] = (uint32_t)lo->block[lo->rank - 2];
        }
        return m;
    }
    case MID_SGD:
        m = run_of(KERNEL_K_SGD);
        operand(p, &m, 0, pr->out[0], 0);
        operand(p, &m, 2, pr->in[0], 0);
        operand(p, &m, 3, pr->in[1], 0);
        if (pr->nin == 3) {
            operand(p, &m, 1, pr->out[1], 0);
            operand(p, &m, 4, pr->in[2], 0);
        }
        break;
    case MID_ADAMW:
        m = run_of(KERNEL_K_ADAMW);
        for (int i = 0; i < 3; i++) operand(p, &m, i, pr->out[i], 0);
        for (int i = 0; i < 4; i++) operand(p, &m, 3 + i, pr->in[i], 0);
        m.r.n[1] = (uint32_t)pr->step;
        break;
    case MID_REDUCE_EPI: {
        /* REDUCE's partials, the epilogue's E0.. after them (inputs, then outputs). */
        const layout *lq = &mid_t(p, pr->in[0])->lay;
        m = run_of(KERNEL_K_REDUCE_EPI);
        m.r.acc = (uint8_t)pr->acc;
        m.r.epi = (uint8_t)pr->epi;
        operand(p, &m, 0, pr->in[0], 0);
        for (int i = 1; i < pr->nin; i++) operand(p, &m, i, pr->in[i], 0);
        for (int i = 0; i < pr->nout; i++) operand(p, &m, 3 + i, pr->out[i], 0);
        m.r.grad = (uint8_t)pr->grad;
        m.r.n[0] = (uint32_t)lq->dim[0];
        m.r.n[1] = (uint32_t)layout_block_elems(lo);
        m.r.stride[0][0] = (int32_t)layout_axis_stride(lq, 0);
        memcpy(m.r.f, pr->f, sizeof m.r.f);
        return m;
    }
    case MID_ADAMW_APPLY:
        m = run_of(KERNEL_K_ADAMW_APPLY);
        operand(p, &m, 0, pr->out[0], 0);
        for (int i = 0; i < 3; i++) operand(p, &m, 1 + i, pr->in[i], 0);
        m.r.n[1] = (uint32_t)pr->step;
        break;
    default: TS_UNREACHABLE();
    }
    m.r.n[0] = (uint32_t)layout_block_elems(lo);
    memcpy(m.r.f, pr->f, sizeof m.r.f);
    return m;
}

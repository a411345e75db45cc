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

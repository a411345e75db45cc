/* compose.c: copies through views composed, a mid pass (docs/lowering.md).
 *
 *   t1 = copy.view(t0) {off a}        t2 = copy.view(t0) {off a + b}
 *   t2 = copy.view(t1) {off b}  ──►   (t1 is never stored)
 *
 * A slice read only by a concat (an im2col's taps, each a window of one
 * padded input) crossed the exchange twice: into the slice's own layout,
 * then into its place in the concat. Composed, each window goes from the
 * padded input into the concat in one copy. Only views that shift axes in
 * place (slices, pads, concats; not transposes, whose two copies are the
 * on-source permute and the exchange, docs/lowering.md), between tensors of
 * one rank, dtype and scale, where the composed copy writes exactly the
 * elements the second one wrote: every element of t1 has a source in t0, and
 * along every axis the destination elements whose composed source lies in
 * t0 are those whose source lay in t1. Precondition: nothing; the pass runs
 * after the absorptions, so a copy a producer took is not seen here. */
#include "mid.h"

#include <stdlib.h>
#include <string.h>

static bool shifts_only(const mid_prim *c, int rank) {
    if (c->kind != MID_COPY || !c->has_view || c->nin != 1 || c->nout != 1 || c->own || c->remote) return false;
    for (int i = 0; i < rank; i++)
        if (c->view.axis[i] != i) return false;
    return true;
}

/* The destination indices [lo, hi) of an axis of extent n whose source
 * index i + off lies in [0, src). */
static void in_range(int64_t n, int64_t off, int64_t src, int64_t *lo, int64_t *hi) {
    *lo = off < 0 ? -off : 0;
    *hi = src - off < n ? src - off : n;
    if (*hi < *lo) *hi = *lo;
}

/* Whether copy b (reading t1, which copy a made from t0) can read t0 through
 * the composed view instead, and that view. */
static bool composable(const mid_program *p, const mid_prim *a, const mid_prim *b, layout_view *out) {
    const mid_tensor *m0 = mid_t(p, a->in[0]), *m1 = mid_t(p, a->out[0]), *m2 = mid_t(p, b->out[0]);
    int rank = m1->lay.rank;
    if (m0->lay.rank != rank || m2->lay.rank != rank || m0->dtype != m1->dtype || m1->dtype != m2->dtype ||
        m0->scale != m1->scale || m1->scale != m2->scale || m0->stack != 1 || m0->slice_of >= 0 ||
        !shifts_only(a, rank) || !shifts_only(b, rank))
        return false;
    layout_view v = layout_view_identity(rank);
    for (int i = 0; i < rank; i++) {
        int64_t d0 = m0->lay.dim[i], d1 = m1->lay.dim[i], d2 = m2->lay.dim[i], oa = a->view.off[i], ob = b->view.off[i];
        if (oa < 0 || oa + d1 > d0) return false; /* an element of t1 a had no source for */
        int64_t lo, hi, clo, chi;
        in_range(d2, ob, d1, &lo, &hi);
        in_range(d2, ob + oa, d0, &clo, &chi);
        if (lo != clo || hi != chi) return false;
        v.off[i] = ob + oa;
    }
    *out = v;
    return true;
}

static void compose_block(mid_program *p, int32_t *reads, int32_t *maker, mid_block *blk) {
    int32_t n = 0;
    for (int32_t j = 0; j < blk->n; j++) {
        int32_t c = blk->v[j];
        mid_prim *b = mid_p(p, c);
        if (b->kind == MID_REPEAT) compose_block(p, reads, maker, &b->body);
        blk->v[n++] = c;
        if (b->kind != MID_COPY || b->nin != 1) continue; /* composable() checks the rest of both copies */
        int32_t t1 = b->in[0], aid = maker[t1], at = -1;
        const mid_tensor *m1 = mid_t(p, t1);
        if (aid < 0 || reads[t1] != 1 || m1->kind != MT_TEMP || m1->alias_of >= 0 || m1->slice_of >= 0 || m1->stack != 1)
            continue;
        mid_prim *a = mid_p(p, aid);
        layout_view v;
        if (!composable(p, a, b, &v)) continue;
        for (int32_t i = 0; i < n - 1 && at < 0; i++) /* a earlier in this block */
            if (blk->v[i] == aid) at = i;
        if (at < 0 || mid_writer_after(p, blk->v, n - 1, at, mid_storage(p, a->in[0])) != -1) continue;
        b->in[0] = a->in[0];
        b->view = v;
        reads[t1] = 0;
        reads[a->in[0]]++;
        memmove(&blk->v[at], &blk->v[at + 1], sizeof(int32_t) * (size_t)(n - 1 - at)); /* a is gone */
        n--;
        mid_drop_probes(p, t1, aid, c);
    }
    blk->n = n;
}

int mid_compose_copies(mid_program *p, uint32_t rewrites, diag *d) {
    (void)rewrites, (void)d;
    int32_t *reads, *maker;
    mid_uses(p, &reads, &maker);
    compose_block(p, reads, maker, &p->top);
    free(reads);
    free(maker);
    return 0;
}

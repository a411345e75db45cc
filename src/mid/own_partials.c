/* own_partials.c: a K-partials reduce reads its own tile's partial where
 * the GEMM left it, a mid pass (docs/lowering.md). Precondition: the
 * consumer absorptions have run (a reduce's result may already carry its
 * bias, GeLU, cast or residual; the gathered partials are untouched by
 * them). */
#include "mid.h"

#include <stdlib.h>

/* A K-partials REDUCE reading partials that one copy gathered for it alone
 * (the GEMM's, moved so each tile holds every partial of a finer block):
 * the copy is marked to leave each tile's share that is one whole partial of
 * its own, and the reduce reads that partial in the GEMM's buffer, which it
 * takes as its last input (so it stays live until the reduce). Which tiles
 * qualify is a property of the two layouts (layout_own_slots); the lowering
 * and the estimate read it off the copy's runs. */
static void own_block(mid_program *p, const int32_t *reads, const int32_t *maker, const mid_block *blk) {
    for (int32_t j = 0; j < blk->n; j++) {
        mid_prim *r = mid_p(p, blk->v[j]);
        if (r->kind == MID_REPEAT) own_block(p, reads, maker, &r->body);
        if (r->kind != MID_REDUCE || r->own || r->nin >= MID_MAX_IN) continue;
        int32_t g = r->in[0], cid = maker[g];
        if (cid < 0 || reads[g] != 1) continue;
        mid_prim *c = mid_p(p, cid);
        const mid_tensor *mg = mid_t(p, g);
        if (c->kind != MID_COPY || c->has_view || c->nin != 1 || c->nout != 1 || mg->kind != MT_TEMP ||
            mg->alias_of >= 0 || mg->slice_of >= 0 || mg->stack != 1 || mg->lay.parts[0] != 1 || mg->lay.nrep ||
            mid_t(p, c->in[0])->stack != 1)
            continue;
        c->own = true;
        r->in[r->nin++] = c->in[0];
        r->own = true;
    }
}


int mid_own_partials(mid_program *p, uint32_t rewrites, diag *d) {
    (void)rewrites, (void)d;
    int32_t *reads, *maker;
    mid_uses(p, &reads, &maker);
    own_block(p, reads, maker, &p->top);
    free(reads);
    free(maker);
    return 0;
}
